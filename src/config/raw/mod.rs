//! The YAML file as written. Every struct refuses unknown fields. `validate` turns it into the
//! runtime [`Config`](super::Config) section by section: each section is a file here whose
//! `build` validates it and names the field of the first problem with its full path
//! (`server.max_body_bytes`, `apps[2].tls_ca_file`). Sections that depend on others get those
//! already built (users need the organisations, quotas the tiers).

mod alerts;
pub(crate) mod app_connections;
mod apps;
mod audit;
mod courier;
mod gateway_oauth;
mod identity;
mod jwt;
mod limits;
mod mcp;
mod observability;
mod server;
mod storage;
mod token_exchange;
mod web;
mod webhooks;

use super::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    environment: Option<String>,
    #[serde(default)]
    server: server::RawServer,
    #[serde(default)]
    storage: storage::RawStorage,
    #[serde(default)]
    apps: Vec<apps::RawApp>,
    #[serde(default)]
    organizations: Vec<identity::RawOrg>,
    #[serde(default)]
    users: Vec<identity::RawUser>,
    #[serde(default)]
    api_keys: Vec<identity::RawKey>,
    #[serde(default)]
    rate_limits: toolgate_filters::rate_limit::RateLimitConfig,
    #[serde(default)]
    limits: limits::RawLimits,
    #[serde(default)]
    mcp: mcp::RawMcp,
    #[serde(default)]
    observability: observability::RawObservability,
    #[serde(default)]
    webhooks: webhooks::RawWebhooks,
    #[serde(default)]
    alerts: alerts::RawAlerts,
    #[serde(default)]
    audit: audit::RawAudit,
    smtp: Option<courier::RawSmtp>,
    sms: Option<courier::RawSms>,
    jwt: Option<jwt::RawJwt>,
    gateway_oauth: Option<gateway_oauth::RawGatewayOAuth>,
    #[serde(default)]
    web: web::RawWeb,
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The secret held by the environment variable a `*_env` field names (`var`); `field` is that
/// field, named when the variable is not set.
fn secret_from_env(field: impl FnOnce() -> String, var: Option<&str>) -> Result<Option<String>, ConfigError> {
    let Some(var) = var else { return Ok(None) };
    let secret =
        std::env::var(var).map_err(|_| invalid(field(), format!("the environment variable `{var}` is not set")))?;
    Ok(Some(secret))
}

/// Reads a file of CA certificates (PEM) at load, so that a wrong path or a file without a
/// certificate stops the start instead of failing the first connection that needs it. `Err`
/// is the message for the field that names the file.
fn read_ca_pem(file: &str) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(file).map_err(|e| format!("`{file}`: {e}"))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        Ok(_) => Err(format!("`{file}` holds no PEM certificate")),
        Err(e) => Err(format!("`{file}`: {e}")),
    }
}

impl RawConfig {
    pub(crate) fn validate(self) -> Result<Config, ConfigError> {
        let environment = match self.environment.as_deref() {
            None | Some("production") => Environment::Production,
            Some("development") => Environment::Development,
            Some(other) => {
                return Err(invalid("environment", format!("`{other}`: expected production or development")))
            }
        };
        let server = self.server.build()?;
        let storage = self.storage.build()?;
        let mut apps = Vec::with_capacity(self.apps.len());
        for (i, a) in self.apps.into_iter().enumerate() {
            let app = a.build(i, &apps)?;
            apps.push(std::sync::Arc::new(app));
        }
        let (rate_limits, mut rate_limit_policy) = limits::rate_limits(self.rate_limits)?;
        let organizations = (self.organizations.into_iter().enumerate())
            .map(|(i, o)| o.build(i, &rate_limits.tiers))
            .collect::<Result<Vec<_>, _>>()?;
        let users = (self.users.into_iter().enumerate())
            .map(|(i, u)| u.build(i, &organizations))
            .collect::<Result<Vec<_>, _>>()?;
        let api_keys =
            (self.api_keys.into_iter().enumerate()).map(|(i, k)| k.build(i, &users)).collect::<Result<Vec<_>, _>>()?;
        let limits = self.limits.build(&rate_limits, &mut rate_limit_policy)?;
        let mcp = self.mcp.build()?;
        let observability = self.observability.build()?;
        let webhooks = self.webhooks.build()?;
        let alerts = self.alerts.build()?;
        let audit = self.audit.build()?;
        let smtp = self.smtp.map(|s| s.build(environment)).transpose()?;
        let sms = self.sms.map(|s| s.build(environment)).transpose()?;
        let jwt = self.jwt.map(|j| j.build(environment)).transpose()?;
        let gateway_oauth = self.gateway_oauth.map(|g| g.build(environment)).transpose()?;
        let web = self.web.build(environment)?;
        Ok(Config {
            environment,
            server,
            storage,
            apps,
            organizations,
            users,
            api_keys,
            rate_limits,
            rate_limit_policy: std::sync::Arc::new(rate_limit_policy),
            limits,
            mcp,
            observability,
            webhooks,
            alerts,
            audit,
            smtp,
            sms,
            jwt,
            gateway_oauth,
            web,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(yaml: &str) -> String {
        match Config::parse(yaml) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal of {yaml:?}, got {other:?}"),
        }
    }

    /// Each section validates itself and names the field of its refusal with the whole path; a
    /// later section that depends on an earlier one (users on organisations, keys on users,
    /// quotas on tiers) sees it built.
    #[test]
    fn every_section_names_its_refusals_by_their_full_path() {
        let org = "organizations:\n  - {id: acme, name: Acme}\n";
        let user = "users:\n  - {id: u1, email: a@b.c, role: owner, organization: acme}\n";
        let app = "apps:\n  - {id: t, name: T, builtin: time}\n";
        let saml = "web:\n  saml:\n    - {organization: acme, idp_entity_id: idp, sso_url: 'https://idp.example/sso', ";
        assert!(Config::parse(&format!("{org}{user}{app}")).is_ok(), "the sections together are valid");
        // An SMS relay on the loopback may be plain http, in production too.
        assert!(Config::parse("sms:\n  url: http://127.0.0.1:9000/send\n  from: toolgate\n").is_ok());
        // Plain SMTP in production: to the loopback, or when allowed explicitly; in development.
        let plain_smtp = "smtp:\n  host: mail.example.com\n  tls: none\n  from: a@b.c\n";
        assert!(Config::parse(&format!("{plain_smtp}  allow_plaintext: true\n")).is_ok());
        assert!(Config::parse(&plain_smtp.replace("mail.example.com", "127.0.0.1")).is_ok());
        assert!(Config::parse(&plain_smtp.replace("mail.example.com", "localhost")).is_ok());
        assert!(Config::parse(&format!("environment: development\n{plain_smtp}")).is_ok());
        // Required client certificates beside a plain listener: only when it is declared trusted.
        let mtls = "server:\n  plain_listen: 127.0.0.3:0\n  tls:\n    certificates: [{cert_file: c, key_file: k}]\n    client_ca_file: ca\n";
        assert!(Config::parse(&mtls.replace("  tls:", "  plain_listen_trusted: true\n  tls:")).is_ok());
        assert!(Config::parse(&format!("{mtls}    client_auth: optional\n")).is_ok());
        for (yaml, field) in [
            ("environment: staging\n".to_string(), "environment"),
            ("server:\n  threads: 0\n".into(), "server.threads"),
            ("storage:\n  backend: s3\n".into(), "storage.backend"),
            (format!("{app}  - {{id: t, name: Again, builtin: time}}\n"), "apps[1].id"),
            ("apps:\n  - {id: x, name: X, builtin: time, rate_limit: 0}\n".into(), "apps[0].rate_limit"),
            ("apps:\n  - {id: x, name: \"Time\\U000E0041\", builtin: time}\n".into(), "apps[0].name"),
            ("apps:\n  - {id: x, name: X, description: \"a\\u3164b\", builtin: time}\n".into(), "apps[0].description"),
            (
                "apps:\n  - {id: x, name: X, long_description: \"\\u2028\", builtin: time}\n".into(),
                "apps[0].long_description",
            ),
            ("organizations:\n  - {id: acme, name: Acme, tier: gold}\n".into(), "organizations[0].tier"),
            (
                format!("{org}users:\n  - {{id: u1, email: a@b.c, role: owner, organization: other}}\n"),
                "users[0].organization",
            ),
            (format!("{org}{user}api_keys:\n  - {{id: k, name: K, user: u1, sha256: abc}}\n"), "api_keys[0].sha256"),
            ("limits:\n  quotas:\n    gold: {gateways: 1}\n".into(), "limits.quotas.gold"),
            ("mcp:\n  page_size: 0\n".into(), "mcp.page_size"),
            ("mcp:\n  app_health: {interval_secs: 0}\n".into(), "mcp.app_health.interval_secs"),
            ("mcp:\n  app_health: {concurrency: 0}\n".into(), "mcp.app_health.concurrency"),
            (
                "apps:\n  - {id: x, name: X, builtin: time, health: {timeout_ms: 0}}\n".into(),
                "apps[0].health.timeout_ms",
            ),
            ("observability:\n  log_retention_days: 0\n".into(), "observability.log_retention_days"),
            ("observability:\n  max_log_rows: 10\n".into(), "observability.max_log_rows"),
            ("observability:\n  rollup_retention_days: 0\n".into(), "observability.rollup_retention_days"),
            ("observability:\n  metric_tool_labels: 20000\n".into(), "observability.metric_tool_labels"),
            ("observability:\n  log_format: xml\n".into(), "observability.log_format"),
            ("observability:\n  otlp_endpoint: collector:4318\n".into(), "observability.otlp_endpoint"),
            ("observability:\n  log_level: 'info,[bad'\n".into(), "observability.log_level"),
            ("jwt:\n  issuer: i\n".into(), "jwt"),
            ("smtp:\n  host: mail.example.com\n  tls: ssl\n  from: a@b.c\n".into(), "smtp.tls"),
            (plain_smtp.into(), "smtp.tls"),
            (mtls.into(), "server.plain_listen"),
            ("server:\n  plain_listen_trusted: true\n".into(), "server.plain_listen_trusted"),
            ("sms:\n  url: http://sms.example.com/send\n".into(), "sms.url"),
            ("sms:\n  url: https://user:pw@sms.example.com/send\n".into(), "sms.url"),
            (
                "sms:\n  url: https://sms.example.com/send\n  token_env: TOOLGATE_TEST_UNSET_ENV\n".into(),
                "sms.token_env",
            ),
            ("sms:\n  url: https://sms.example.com/send\n  from: ''\n".into(), "sms.from"),
            (
                "apps:\n  - {id: x, name: X, url: 'https://x.example/mcp', oauth: {client_id: c, \
                 client_secret_env: TOOLGATE_TEST_UNSET_ENV}}\n"
                    .into(),
                "apps[0].oauth.client_secret_env",
            ),
            (
                "web:\n  oidc_providers:\n    - {id: g, name: G, issuer: 'https://id.example', client_id: c, \
                 client_secret_env: TOOLGATE_TEST_UNSET_ENV}\n"
                    .into(),
                "web.oidc_providers[0].client_secret_env",
            ),
            ("sms:\n  url: https://sms.example.com/send\n  timeout_ms: 5\n".into(), "sms.timeout_ms"),
            (format!("{saml}certificate_file: /nonexistent/idp.pem}}\n"), "web.saml[0].certificate_file"),
            (format!("{saml}certificate_file: x, default_role: owner}}\n"), "web.saml[0].default_role"),
            (format!("{saml}certificate_file: x, group_roles: {{ops: owner}}}}\n"), "web.saml[0].group_roles.ops"),
            (saml.replace("https://idp", "http://idp") + "certificate_file: x}\n", "web.saml[0].sso_url"),
        ] {
            assert_eq!(refusal(&yaml), field, "{yaml}");
        }
    }

    #[test]
    fn an_apps_probe_settings_fall_back_to_the_global_ones() {
        let yaml = "mcp:\n  app_health: {interval_secs: 10, timeout_ms: 700}\n\
                    apps:\n  - {id: a, name: A, builtin: time, health: {interval_secs: 2}}\n  - {id: b, name: B, builtin: time}\n";
        let c = Config::parse(yaml).unwrap();
        let global = c.mcp.app_health;
        assert_eq!(global.concurrency, 8);
        let probe = |i: usize| c.apps[i].health_probe(&global);
        assert_eq!(probe(0), (std::time::Duration::from_secs(2), std::time::Duration::from_millis(700)));
        assert_eq!(probe(1), (std::time::Duration::from_secs(10), std::time::Duration::from_millis(700)));
    }
}
