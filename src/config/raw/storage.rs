//! `storage:`: where records live.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    backend: Option<String>,
    path: Option<String>,
    url: Option<String>,
}

impl RawStorage {
    pub(super) fn build(self) -> Result<StorageConfig, ConfigError> {
        Ok(match self.backend.as_deref() {
            None | Some("embedded") => {
                if self.url.is_some() {
                    return Err(invalid("storage.url", "only used with backend: redis"));
                }
                StorageConfig::Embedded { path: PathBuf::from(self.path.unwrap_or_else(|| "./data".into())) }
            }
            Some("redis") => {
                let url = self.url.ok_or_else(|| invalid("storage.url", "required with backend: redis"))?;
                if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                    return Err(invalid("storage.url", "must start with redis:// or rediss://"));
                }
                // Refused here rather than when the store opens, so that `check-config` and the
                // start agree: a file that check-config passes starts.
                return Err(invalid("storage.backend", "redis is not available in this build yet"));
            }
            Some(other) => return Err(invalid("storage.backend", format!("`{other}`: expected embedded or redis"))),
        })
    }
}
