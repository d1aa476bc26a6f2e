//! `gateway_oauth:`: OAuth for MCP clients on the gateways that opt in (`configuration.auth:
//! oauth`). The issuer whose access tokens those gateways accept, verified with its keys.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGatewayOAuth {
    issuer: String,
    jwks_url: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    leeway_secs: Option<u64>,
    refresh_secs: Option<u64>,
    max_lifetime_secs: Option<u64>,
}

impl RawGatewayOAuth {
    pub(super) fn build(self, environment: Environment) -> Result<GatewayOAuthConfig, ConfigError> {
        let https_only = environment == Environment::Production;
        let url = |field: &str, value: &str| -> Result<(), ConfigError> {
            match url::Url::parse(value).map(|u| u.scheme().to_string()).as_deref() {
                Ok("https") => Ok(()),
                Ok("http") if !https_only => Ok(()),
                Ok("http") => Err(invalid(field, "must be https (http only in environment: development)")),
                _ => Err(invalid(field, "must be an http or https URL")),
            }
        };
        url("gateway_oauth.issuer", &self.issuer)?;
        if let Some(u) = &self.jwks_url {
            url("gateway_oauth.jwks_url", u)?;
        }
        // A scope is one RFC 6749 scope token: printable ASCII without spaces, quotes or backslashes.
        let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b > 0x20 && b < 0x7f && b != b'"' && b != b'\\');
        if let Some(bad) = self.scopes.iter().find(|s| !token(s)) {
            return Err(invalid("gateway_oauth.scopes", format!("`{bad}` is not a scope token")));
        }
        let max_lifetime_secs = self.max_lifetime_secs.unwrap_or(86_400);
        if max_lifetime_secs == 0 {
            return Err(invalid("gateway_oauth.max_lifetime_secs", "must be at least 1"));
        }
        let jwt = JwtConfig {
            issuer: Some(self.issuer.clone()),
            // Each gateway is its own audience: checked per request.
            audience: None,
            leeway_secs: self.leeway_secs.unwrap_or(30),
            keys: Vec::new(),
            jwks_file: None,
            jwks_url: self.jwks_url,
            refresh_secs: self.refresh_secs.unwrap_or(300).max(10),
            max_lifetime_secs,
            discover_jwks: true,
        };
        let verifier = crate::base::jwt::JwtVerifier::new(jwt).map_err(|e| invalid("gateway_oauth", e.to_string()))?;
        Ok(GatewayOAuthConfig { issuer: self.issuer, scopes: self.scopes, verifier: std::sync::Arc::new(verifier) })
    }
}
