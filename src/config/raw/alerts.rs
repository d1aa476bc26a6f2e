//! `alerts:`: when usage warnings are raised.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    limit_warning_percent: Option<u8>,
    app_failures: Option<u32>,
    app_failure_window_secs: Option<u64>,
}

impl RawAlerts {
    pub(super) fn build(self) -> Result<AlertsConfig, ConfigError> {
        let percent = self.limit_warning_percent.unwrap_or(80);
        if percent > 100 {
            return Err(invalid("alerts.limit_warning_percent", "must be between 0 (off) and 100"));
        }
        let app_failures = self.app_failures.unwrap_or(5);
        if app_failures > 10_000 {
            return Err(invalid("alerts.app_failures", "must be between 0 (off) and 10000"));
        }
        let window = self.app_failure_window_secs.unwrap_or(300);
        if !(1..=86_400).contains(&window) {
            return Err(invalid("alerts.app_failure_window_secs", "must be between 1 and 86400"));
        }
        Ok(AlertsConfig {
            limit_warning_percent: percent,
            app_failures,
            app_failure_window: std::time::Duration::from_secs(window),
        })
    }
}
