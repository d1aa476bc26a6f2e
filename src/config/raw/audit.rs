//! `audit:`: the audit trail's checkpoints (see `data/audit/`).

use super::secret_from_env;
use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    checkpoint_key_env: Option<String>,
    checkpoint_interval_secs: Option<u64>,
}

/// Shortest checkpoint key taken from the environment, in bytes.
const MIN_KEY_BYTES: usize = 32;

impl RawAudit {
    pub(super) fn build(self) -> Result<AuditConfig, ConfigError> {
        let field = "audit.checkpoint_key_env";
        let checkpoint_key = secret_from_env(|| field.to_string(), self.checkpoint_key_env.as_deref())?;
        if checkpoint_key.as_ref().is_some_and(|k| k.len() < MIN_KEY_BYTES) {
            return Err(invalid(field, format!("the key must be at least {MIN_KEY_BYTES} bytes")));
        }
        let interval = self.checkpoint_interval_secs.unwrap_or(60);
        if !(1..=3600).contains(&interval) {
            return Err(invalid("audit.checkpoint_interval_secs", "must be between 1 and 3600"));
        }
        Ok(AuditConfig {
            checkpoint_key: checkpoint_key.map(String::into_bytes),
            checkpoint_interval: std::time::Duration::from_secs(interval),
        })
    }
}
