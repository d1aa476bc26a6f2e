//! `webhooks:`: where deliveries may go and how they are retried.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhooks {
    allowed_hosts: Option<Vec<String>>,
    attempt_timeout_ms: Option<u64>,
    retry_schedule_secs: Option<Vec<u64>>,
    per_endpoint_concurrency: Option<usize>,
    concurrency: Option<usize>,
    delivery_retention_days: Option<u64>,
    disable_after_secs: Option<u64>,
}

/// About a day of retries: 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h, 8 h (each with
/// up to 20 % of jitter), 11 attempts in all.
pub(super) const DEFAULT_SCHEDULE: [u64; 10] = [5, 30, 120, 600, 1800, 3600, 7200, 14_400, 28_800, 28_800];

impl RawWebhooks {
    pub(super) fn build(self) -> Result<WebhooksConfig, ConfigError> {
        let timeout = self.attempt_timeout_ms.unwrap_or(10_000);
        if !(100..=120_000).contains(&timeout) {
            return Err(invalid("webhooks.attempt_timeout_ms", "must be between 100 and 120000"));
        }
        let schedule = self.retry_schedule_secs.unwrap_or_else(|| DEFAULT_SCHEDULE.to_vec());
        if schedule.len() > 50 || schedule.iter().any(|s| !(1..=86_400).contains(s)) {
            return Err(invalid("webhooks.retry_schedule_secs", "at most 50 waits, each 1-86400 seconds"));
        }
        let per_endpoint = self.per_endpoint_concurrency.unwrap_or(2);
        let concurrency = self.concurrency.unwrap_or(32);
        if !(1..=64).contains(&per_endpoint) {
            return Err(invalid("webhooks.per_endpoint_concurrency", "must be between 1 and 64"));
        }
        if !(1..=1024).contains(&concurrency) {
            return Err(invalid("webhooks.concurrency", "must be between 1 and 1024"));
        }
        let retention = self.delivery_retention_days.unwrap_or(7);
        if !(1..=365).contains(&retention) {
            return Err(invalid("webhooks.delivery_retention_days", "must be between 1 and 365"));
        }
        let disable_after = self.disable_after_secs.unwrap_or(86_400);
        if !(1..=30 * 86_400).contains(&disable_after) {
            return Err(invalid("webhooks.disable_after_secs", "must be between 1 and 2592000"));
        }
        let allowed_hosts = self.allowed_hosts.unwrap_or_default();
        if let Some(h) = allowed_hosts.iter().find(|h| h.is_empty() || h.contains(['/', ' ', '@'])) {
            return Err(invalid("webhooks.allowed_hosts", format!("`{h}` is not a host name or address")));
        }
        Ok(WebhooksConfig {
            allowed_hosts: allowed_hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            attempt_timeout: std::time::Duration::from_millis(timeout),
            retry_schedule: schedule.into_iter().map(std::time::Duration::from_secs).collect(),
            per_endpoint_concurrency: per_endpoint,
            concurrency,
            delivery_retention: std::time::Duration::from_secs(retention * 86_400),
            disable_after: std::time::Duration::from_secs(disable_after),
        })
    }
}
