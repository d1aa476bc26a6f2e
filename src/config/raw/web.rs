//! `web:`: the identity service's pages (web sign-in) and the web sessions they start.

use super::secret_from_env;
use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWeb {
    path: Option<String>,
    session_idle_secs: Option<u64>,
    max_sessions_per_user: Option<usize>,
    authorization_code_secs: Option<u64>,
    access_token_secs: Option<u64>,
    refresh_token_secs: Option<u64>,
    #[serde(default)]
    dynamic_registration: bool,
    registration_unused_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    password_checks: Option<usize>,
    #[serde(default)]
    oidc_providers: Vec<RawOidcProvider>,
    client_id_metadata_documents: Option<RawClientDocuments>,
    #[serde(default)]
    saml: Vec<RawSaml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSaml {
    organization: String,
    name: Option<String>,
    idp_entity_id: String,
    sso_url: String,
    certificate_file: String,
    default_role: Option<String>,
    #[serde(default)]
    group_roles: std::collections::BTreeMap<String, String>,
    email_attribute: Option<String>,
    name_attribute: Option<String>,
    groups_attribute: Option<String>,
}

/// Roles SSO may give: never `owner` (an IdP group must not make owners).
const SSO_ROLES: [&str; 3] = ["admin", "developer", "viewer"];

impl RawSaml {
    fn build(self, i: usize, environment: Environment, before: &[SamlIdp]) -> Result<SamlIdp, ConfigError> {
        let f = |name: &str| format!("web.saml[{i}].{name}");
        if before.iter().any(|s| s.organization == self.organization) {
            return Err(invalid(f("organization"), format!("`{}` has an IdP already", self.organization)));
        }
        if self.organization.is_empty() || self.organization.len() > 64 {
            return Err(invalid(f("organization"), "must be an organisation id"));
        }
        if self.idp_entity_id.is_empty() || self.idp_entity_id.len() > 1024 {
            return Err(invalid(f("idp_entity_id"), "must be the IdP's entity id (1-1024 characters)"));
        }
        match url::Url::parse(&self.sso_url).map(|u| u.scheme().to_string()).as_deref() {
            Ok("https") => {}
            Ok("http") if environment == Environment::Development => {}
            _ => return Err(invalid(f("sso_url"), "must be an https URL (http only in environment: development)")),
        }
        let role = |field: String, r: &str| {
            if SSO_ROLES.contains(&r) {
                Ok(r.to_string())
            } else {
                Err(invalid(field, format!("`{r}`: expected admin, developer or viewer (SSO never makes owners)")))
            }
        };
        let default_role = role(f("default_role"), self.default_role.as_deref().unwrap_or("viewer"))?;
        let mut group_roles = Vec::new();
        for (group, r) in &self.group_roles {
            group_roles.push((group.clone(), role(f(&format!("group_roles.{group}")), r)?));
        }
        let pem = std::fs::read(&self.certificate_file)
            .map_err(|e| invalid(f("certificate_file"), format!("`{}`: {e}", self.certificate_file)))?;
        let certificate_der = pem_certificate(&pem).ok_or_else(|| {
            invalid(f("certificate_file"), format!("`{}` holds no PEM certificate", self.certificate_file))
        })?;
        Ok(SamlIdp {
            name: self.name.unwrap_or_else(|| "single sign-on".into()),
            organization: self.organization,
            idp_entity_id: self.idp_entity_id,
            sso_url: self.sso_url,
            certificate_der,
            default_role,
            group_roles,
            email_attribute: self.email_attribute,
            name_attribute: self.name_attribute,
            groups_attribute: self.groups_attribute,
        })
    }
}

/// The DER bytes of the first certificate of a PEM file.
fn pem_certificate(pem: &[u8]) -> Option<Vec<u8>> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    CertificateDer::from_pem_slice(pem).ok().map(|c| c.to_vec()).filter(|der| !der.is_empty())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClientDocuments {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    ca_file: Option<String>,
    fetches_per_address: Option<u32>,
    fetches_in_all: Option<u32>,
}

impl RawClientDocuments {
    fn build(self) -> Result<Option<ClientDocumentsConfig>, ConfigError> {
        const F: &str = "web.client_id_metadata_documents";
        if !self.enabled {
            return Ok(None);
        }
        let extra_roots = self
            .ca_file
            .as_deref()
            .map(super::read_ca_pem)
            .transpose()
            .map_err(|m| invalid(format!("{F}.ca_file"), m))?;
        if let Some(bad) = self.allowed_hosts.iter().find(|h| h.is_empty() || h.contains(['/', ' ', '@', ':'])) {
            return Err(invalid(format!("{F}.allowed_hosts"), format!("`{bad}` is not a host name or address")));
        }
        let fetches_per_address = self.fetches_per_address.unwrap_or(10);
        let fetches_in_all = self.fetches_in_all.unwrap_or(100);
        if !(1..=10_000).contains(&fetches_per_address) || !(1..=100_000).contains(&fetches_in_all) {
            return Err(invalid(
                format!("{F}.fetches_per_address"),
                "fetches_per_address must be 1-10000 and fetches_in_all 1-100000 (per ten minutes)",
            ));
        }
        Ok(Some(ClientDocumentsConfig {
            allowed_hosts: self.allowed_hosts,
            extra_roots,
            fetches_per_address,
            fetches_in_all,
        }))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOidcProvider {
    id: String,
    name: String,
    issuer: String,
    client_id: String,
    client_secret_env: Option<String>,
    scopes: Option<Vec<String>>,
    /// The organisation whose users this provider signs in.
    organization: Option<String>,
}

impl RawOidcProvider {
    /// The `i`-th OpenID provider, given the ones before it (its id must be new): an https
    /// issuer (http in development), a secret from the environment, `openid` among the scopes,
    /// and a verifier of its ID tokens with the keys its discovery document names.
    fn build(self, i: usize, environment: Environment, earlier: &[OidcProvider]) -> Result<OidcProvider, ConfigError> {
        let p = self;
        let f = |name: &str| format!("web.oidc_providers[{i}].{name}");
        let id_ok =
            !p.id.is_empty() && p.id.len() <= 32 && p.id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !id_ok {
            return Err(invalid(f("id"), "must be 1-32 characters of A-Z a-z 0-9 -"));
        }
        if earlier.iter().any(|q| q.id == p.id) {
            return Err(invalid(f("id"), format!("`{}` is declared twice", p.id)));
        }
        match url::Url::parse(&p.issuer).map(|u| u.scheme().to_string()).as_deref() {
            Ok("https") => {}
            Ok("http") if environment == Environment::Development => {}
            _ => return Err(invalid(f("issuer"), "must be an https URL (http only in environment: development)")),
        }
        let client_secret = secret_from_env(|| f("client_secret_env"), p.client_secret_env.as_deref())?;
        if p.organization.as_ref().is_some_and(|o| o.is_empty() || o.len() > 64) {
            return Err(invalid(f("organization"), "must be an organisation id"));
        }
        let scopes = p.scopes.unwrap_or_else(|| vec!["openid".into(), "email".into(), "profile".into()]);
        if !scopes.iter().any(|s| s == "openid") {
            return Err(invalid(f("scopes"), "must include openid"));
        }
        let verifier = crate::base::jwt::JwtVerifier::new(JwtConfig {
            issuer: Some(p.issuer.clone()),
            audience: Some(p.client_id.clone()),
            leeway_secs: 60,
            keys: Vec::new(),
            jwks_file: None,
            jwks_url: None,
            refresh_secs: 3600,
            max_lifetime_secs: 86_400,
            discover_jwks: true,
        })
        .map_err(|e| invalid(f("issuer"), e.to_string()))?;
        Ok(OidcProvider {
            id: p.id,
            name: p.name,
            issuer: p.issuer,
            client_id: p.client_id,
            client_secret,
            scopes,
            organization: p.organization,
            verifier: std::sync::Arc::new(verifier),
        })
    }
}

/// `web.path`: where the sign-in pages and the authorization server live, a path of its own
/// (not one of the management API's or the gateways').
fn check_path(path: &str) -> Result<(), ConfigError> {
    let reserved = ["/v1", "/api", "/gateway", "/.well-known", "/healthz", "/readyz"];
    let segment_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !path.starts_with('/') || path.len() < 2 || !path[1..].split('/').all(segment_ok) {
        return Err(invalid("web.path", "must be a path like /auth (segments of A-Z a-z 0-9 - _ .)"));
    }
    if reserved.iter().any(|r| path == *r || path.starts_with(&format!("{r}/"))) {
        return Err(invalid("web.path", format!("`{path}` is a path of the management API or the gateways")));
    }
    Ok(())
}

impl RawWeb {
    pub(super) fn build(self, environment: Environment) -> Result<WebConfig, ConfigError> {
        let path = self.path.unwrap_or_else(|| "/auth".into());
        check_path(&path)?;
        let idle = self.session_idle_secs.unwrap_or(86_400);
        if !(1..=30 * 86_400).contains(&idle) {
            return Err(invalid("web.session_idle_secs", "must be between 1 and 2592000 (30 days)"));
        }
        let max = self.max_sessions_per_user.unwrap_or(5);
        if !(1..=100).contains(&max) {
            return Err(invalid("web.max_sessions_per_user", "must be between 1 and 100"));
        }
        let code = self.authorization_code_secs.unwrap_or(60);
        if !(1..=600).contains(&code) {
            return Err(invalid("web.authorization_code_secs", "must be between 1 and 600 (ten minutes)"));
        }
        let access = self.access_token_secs.unwrap_or(3600);
        if !(60..=86_400).contains(&access) {
            return Err(invalid("web.access_token_secs", "must be between 60 and 86400 (a day)"));
        }
        let refresh = self.refresh_token_secs.unwrap_or(30 * 86_400);
        if !(access..=365 * 86_400).contains(&refresh) {
            return Err(invalid(
                "web.refresh_token_secs",
                "must be at least web.access_token_secs and at most 31536000 (a year)",
            ));
        }
        let unused = self.registration_unused_secs.unwrap_or(30 * 86_400);
        if !(1..=365 * 86_400).contains(&unused) {
            return Err(invalid("web.registration_unused_secs", "must be between 1 and 31536000 (a year)"));
        }
        let body_timeout = self.body_timeout_secs.unwrap_or(10);
        if !(1..=300).contains(&body_timeout) {
            return Err(invalid("web.body_timeout_secs", "must be between 1 and 300"));
        }
        let password_checks =
            self.password_checks.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        if !(1..=256).contains(&password_checks) {
            return Err(invalid("web.password_checks", "must be between 1 and 256"));
        }
        let mut providers: Vec<OidcProvider> = Vec::new();
        for (i, p) in self.oidc_providers.into_iter().enumerate() {
            let provider = p.build(i, environment, &providers)?;
            providers.push(provider);
        }
        let client_documents = self.client_id_metadata_documents.map(RawClientDocuments::build).transpose()?.flatten();
        let mut saml: Vec<SamlIdp> = Vec::new();
        for (i, s) in self.saml.into_iter().enumerate() {
            let idp = s.build(i, environment, &saml)?;
            saml.push(idp);
        }
        Ok(WebConfig {
            saml,
            client_documents,
            path,
            session_idle: std::time::Duration::from_secs(idle),
            max_sessions_per_user: max,
            authorization_code_lifetime: std::time::Duration::from_secs(code),
            access_token_lifetime: std::time::Duration::from_secs(access),
            refresh_token_lifetime: std::time::Duration::from_secs(refresh),
            dynamic_registration: self.dynamic_registration,
            registration_unused: std::time::Duration::from_secs(unused),
            body_timeout: std::time::Duration::from_secs(body_timeout),
            password_checks,
            oidc_providers: providers,
        })
    }
}
