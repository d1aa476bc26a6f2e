//! `jwt:`: bearer tokens on the management API. The verifier built here, which has read the
//! keys, is the one the server uses.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJwt {
    issuer: Option<String>,
    audience: Option<String>,
    leeway_secs: Option<u64>,
    #[serde(default)]
    keys: Vec<RawJwtKey>,
    jwks_file: Option<String>,
    jwks_url: Option<String>,
    refresh_secs: Option<u64>,
    max_lifetime_secs: Option<u64>,
    #[serde(default)]
    insecure_skip_issuer_audience: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJwtKey {
    kid: String,
    pem_file: String,
}

impl RawJwt {
    pub(super) fn build(
        self,
        environment: Environment,
    ) -> Result<std::sync::Arc<crate::base::jwt::JwtVerifier>, ConfigError> {
        let j = self;
        if j.keys.is_empty() && j.jwks_file.is_none() && j.jwks_url.is_none() {
            return Err(invalid("jwt", "needs keys, jwks_file or jwks_url"));
        }
        let max_lifetime_secs = j.max_lifetime_secs.unwrap_or(86_400);
        if max_lifetime_secs == 0 {
            return Err(invalid("jwt.max_lifetime_secs", "must be at least 1"));
        }
        if let Some(u) = &j.jwks_url {
            if url::Url::parse(u).map(|u| !matches!(u.scheme(), "http" | "https")).unwrap_or(true) {
                return Err(invalid("jwt.jwks_url", "must be an http or https URL"));
            }
        }
        let cfg = JwtConfig {
            issuer: j.issuer,
            audience: j.audience,
            leeway_secs: j.leeway_secs.unwrap_or(30),
            keys: j
                .keys
                .into_iter()
                .map(|k| JwtKeyConfig { kid: k.kid, pem_file: PathBuf::from(k.pem_file) })
                .collect(),
            jwks_file: j.jwks_file.map(PathBuf::from),
            jwks_url: j.jwks_url,
            refresh_secs: j.refresh_secs.unwrap_or(300).max(10),
            max_lifetime_secs,
            discover_jwks: false,
        };
        // Keys that cannot be read stop the start (and `check-config`), naming the field.
        // The verifier that read them is the server's: one verifier, built once.
        let verifier = crate::base::jwt::JwtVerifier::new(cfg.clone()).map_err(|e| {
            let text = e.to_string();
            let (field, message) = text.split_once(": ").unwrap_or(("jwt", &text));
            invalid(field, message)
        })?;
        // A token minted by any party that holds a trusted key, for any audience, would
        // otherwise be accepted: production binds tokens to one issuer and audience.
        if environment == Environment::Production
            && !j.insecure_skip_issuer_audience
            && (cfg.issuer.is_none() || cfg.audience.is_none())
        {
            let field = if cfg.issuer.is_none() { "jwt.issuer" } else { "jwt.audience" };
            return Err(invalid(
                field,
                "is required in production (set jwt.issuer and jwt.audience, or \
                 jwt.insecure_skip_issuer_audience: true to accept any)",
            ));
        }
        Ok(std::sync::Arc::new(verifier))
    }
}
