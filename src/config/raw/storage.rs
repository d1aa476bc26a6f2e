//! `storage:`: where records live.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    backend: Option<String>,
    path: Option<String>,
    url: Option<String>,
    key_prefix: Option<String>,
    connect_timeout_ms: Option<u64>,
    command_timeout_ms: Option<u64>,
    outage_grace_secs: Option<u64>,
}

impl RawStorage {
    pub(super) fn build(self) -> Result<StorageConfig, ConfigError> {
        Ok(match self.backend.as_deref() {
            None | Some("embedded") => {
                if self.url.is_some() || self.key_prefix.is_some() || self.outage_grace_secs.is_some() {
                    let field = match (&self.url, &self.key_prefix) {
                        (Some(_), _) => "storage.url",
                        (None, Some(_)) => "storage.key_prefix",
                        _ => "storage.outage_grace_secs",
                    };
                    return Err(invalid(field, "only used with backend: redis"));
                }
                StorageConfig::Embedded { path: PathBuf::from(self.path.unwrap_or_else(|| "./data".into())) }
            }
            Some("redis") => {
                let url = self.url.ok_or_else(|| invalid("storage.url", "required with backend: redis"))?;
                if !["redis://", "unix://", "redis+unix://"].iter().any(|s| url.starts_with(s)) {
                    let why = if url.starts_with("rediss://") {
                        "TLS to Redis (rediss://) is not available in this build yet; use redis:// on a private network"
                    } else {
                        "must start with redis:// (or unix:// for a local socket)"
                    };
                    return Err(invalid("storage.url", why));
                }
                if self.path.is_some() {
                    return Err(invalid("storage.path", "only used with backend: embedded"));
                }
                let prefix = self.key_prefix.unwrap_or_else(|| "toolgate".into());
                if prefix.is_empty() || prefix.contains(['{', '}', ' ', '\n']) {
                    return Err(invalid("storage.key_prefix", "must be non-empty, without braces or spaces"));
                }
                let ms = |v: Option<u64>, field: &str, default: u64| match v {
                    Some(0) => Err(invalid(field, "must be at least 1")),
                    Some(n) => Ok(std::time::Duration::from_millis(n)),
                    None => Ok(std::time::Duration::from_millis(default)),
                };
                let grace = self.outage_grace_secs.unwrap_or(300);
                if !(1..=86_400).contains(&grace) {
                    return Err(invalid("storage.outage_grace_secs", "must be between 1 and 86400"));
                }
                StorageConfig::Redis {
                    url,
                    key_prefix: prefix,
                    outage_grace: std::time::Duration::from_secs(grace),
                    connect_timeout: ms(self.connect_timeout_ms, "storage.connect_timeout_ms", 2000)?,
                    command_timeout: ms(self.command_timeout_ms, "storage.command_timeout_ms", 2000)?,
                }
            }
            Some(other) => return Err(invalid("storage.backend", format!("`{other}`: expected embedded or redis"))),
        })
    }
}
