//! `web:`: the identity service's pages (web sign-in) and the web sessions they start.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWeb {
    path: Option<String>,
    session_idle_secs: Option<u64>,
    max_sessions_per_user: Option<usize>,
}

impl RawWeb {
    pub(super) fn build(self) -> Result<WebConfig, ConfigError> {
        let path = self.path.unwrap_or_else(|| "/auth".into());
        let reserved = ["/v1", "/api", "/gateway", "/.well-known", "/healthz", "/readyz"];
        let segment_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !path.starts_with('/') || path.len() < 2 || !path[1..].split('/').all(segment_ok) {
            return Err(invalid("web.path", "must be a path like /auth (segments of A-Z a-z 0-9 - _ .)"));
        }
        if reserved.iter().any(|r| path == *r || path.starts_with(&format!("{r}/"))) {
            return Err(invalid("web.path", format!("`{path}` is a path of the management API or the gateways")));
        }
        let idle = self.session_idle_secs.unwrap_or(86_400);
        if !(1..=30 * 86_400).contains(&idle) {
            return Err(invalid("web.session_idle_secs", "must be between 1 and 2592000 (30 days)"));
        }
        let max = self.max_sessions_per_user.unwrap_or(5);
        if !(1..=100).contains(&max) {
            return Err(invalid("web.max_sessions_per_user", "must be between 1 and 100"));
        }
        Ok(WebConfig { path, session_idle: std::time::Duration::from_secs(idle), max_sessions_per_user: max })
    }
}
