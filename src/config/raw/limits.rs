//! `rate_limits:` (the tiers and buckets of the rate-limit filter) and `limits:` (the quotas of
//! each tier and the multipliers), which are read together: a quota row names a tier.

use crate::config::*;
use serde::Deserialize;
use toolgate_filters::rate_limit::{RateLimitConfig, RateLimitPolicy};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    service_account_multiplier: Option<f64>,
    bootstrap_tier: Option<String>,
    #[serde(default)]
    quotas: BTreeMap<String, RawQuotas>,
    batch_max_operations: Option<usize>,
    gateway_max_servers: Option<usize>,
}

/// One tier's row of `limits.quotas`; absent fields keep the built-in figure.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuotas {
    gateways: Option<u32>,
    api_keys: Option<u32>,
    service_accounts: Option<u32>,
    whitelist_entries: Option<u32>,
    webhooks: Option<u32>,
    max_multiplier: Option<f64>,
}

/// The rate-limit tiers (YAML's added to the built-in table) and the filter's policy of them.
pub(super) fn rate_limits(raw: RateLimitConfig) -> Result<(RateLimitConfig, RateLimitPolicy), ConfigError> {
    match raw.distributed.as_str() {
        "leased" | "exact" => {}
        other => return Err(invalid("rate_limits.distributed", format!("`{other}`: expected leased or exact"))),
    }
    if !["open", "closed"].contains(&raw.outage.as_str()) {
        let got: String = raw.outage.chars().take(32).collect();
        return Err(invalid("rate_limits.outage", format!("`{got}`: expected open or closed")));
    }
    if !(10..=10_000).contains(&raw.sync_ms) {
        return Err(invalid("rate_limits.sync_ms", "must be 10-10000"));
    }
    let mut rate_limits = raw;
    // Tiers given in YAML add to or replace the spec's table by name; the others stay.
    for (name, tier) in toolgate_filters::rate_limit::RateLimitConfig::default_tiers() {
        rate_limits.tiers.entry(name).or_insert(tier);
    }
    let rate_limit_policy = toolgate_filters::rate_limit::RateLimitPolicy::try_from(&rate_limits)
        .map_err(|e| invalid("rate_limits", e.to_string()))?;
    Ok((rate_limits, rate_limit_policy))
}

impl RawLimits {
    /// The quotas of every tier of `rate_limits`; each tier's `max_multiplier` also goes into
    /// the filter's `policy`.
    pub(super) fn build(
        self,
        rate_limits: &RateLimitConfig,
        policy: &mut RateLimitPolicy,
    ) -> Result<LimitsConfig, ConfigError> {
        let l = self;
        let tiers = &rate_limits.tiers;
        let bootstrap_tier = l.bootstrap_tier.unwrap_or_else(|| "enterprise".into());
        if !tiers.contains_key(&bootstrap_tier) {
            return Err(invalid("limits.bootstrap_tier", format!("unknown tier `{bootstrap_tier}`")));
        }
        for name in l.quotas.keys() {
            if !tiers.contains_key(name) {
                return Err(invalid(format!("limits.quotas.{name}"), format!("unknown tier `{name}`")));
            }
        }
        let mut quotas = BTreeMap::new();
        for name in tiers.keys() {
            let mut q = TierQuotas::defaults(name);
            if let Some(r) = l.quotas.get(name) {
                q.gateways = r.gateways.unwrap_or(q.gateways);
                q.api_keys = r.api_keys.unwrap_or(q.api_keys);
                q.service_accounts = r.service_accounts.unwrap_or(q.service_accounts);
                q.whitelist_entries = r.whitelist_entries.unwrap_or(q.whitelist_entries);
                q.webhooks = r.webhooks.unwrap_or(q.webhooks);
                q.max_multiplier = r.max_multiplier.unwrap_or(q.max_multiplier);
            }
            // Below 1 the ceiling would cut every caller's limits, not only multiplied ones.
            if !(q.max_multiplier.is_finite() && q.max_multiplier >= 1.0) {
                return Err(invalid(format!("limits.quotas.{name}.max_multiplier"), "must be a number >= 1"));
            }
            policy.set_max_multiplier(name, q.max_multiplier);
            quotas.insert(name.clone(), q);
        }
        let fallback_quotas = quotas.get(&rate_limits.default_tier).copied().unwrap_or(TierQuotas::defaults("free"));
        let batch_max_operations = l.batch_max_operations.unwrap_or(20);
        if !(1..=100).contains(&batch_max_operations) {
            return Err(invalid("limits.batch_max_operations", "must be between 1 and 100"));
        }
        let gateway_max_servers = l.gateway_max_servers.unwrap_or(50);
        if !(1..=1000).contains(&gateway_max_servers) {
            return Err(invalid("limits.gateway_max_servers", "must be between 1 and 1000"));
        }
        let limits = LimitsConfig {
            service_account_multiplier: l.service_account_multiplier.unwrap_or(5.0),
            bootstrap_tier,
            quotas,
            fallback_quotas,
            batch_max_operations,
            gateway_max_servers,
        };
        if limits.service_account_multiplier.is_nan() || limits.service_account_multiplier <= 0.0 {
            return Err(invalid("limits.service_account_multiplier", "must be positive"));
        }
        Ok(limits)
    }
}
