//! Per-organisation quotas (`limits.quotas.<tier>`): how many gateways, keys, service accounts,
//! whitelist entries and webhooks one organisation may hold. Checked by the creating handler
//! under the organisation's write lock (`State::lock_writes`), which several instances on Redis
//! share, so concurrent creations cannot overshoot.

use crate::config::TierQuotas;
use crate::data::state::State;
use crate::edge::error::ApiError;

/// A counted resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quota {
    Gateways,
    /// Usable account and service-account keys: revoked, expired and retired keys do not
    /// count (they authenticate nothing and a tenant cannot revive them), nor do gateway access
    /// keys (one per gateway, bounded by the gateway quota).
    ApiKeys,
    ServiceAccounts,
    WhitelistEntries,
    Webhooks,
}

impl Quota {
    /// The field name under `limits.quotas.<tier>`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Quota::Gateways => "gateways",
            Quota::ApiKeys => "api_keys",
            Quota::ServiceAccounts => "service_accounts",
            Quota::WhitelistEntries => "whitelist_entries",
            Quota::Webhooks => "webhooks",
        }
    }

    fn limit(self, q: &TierQuotas) -> u32 {
        match self {
            Quota::Gateways => q.gateways,
            Quota::ApiKeys => q.api_keys,
            Quota::ServiceAccounts => q.service_accounts,
            Quota::WhitelistEntries => q.whitelist_entries,
            Quota::Webhooks => q.webhooks,
        }
    }
}

/// The tier whose quotas bind `org_id` (the default tier's when the organisation is unknown).
fn tier_of(state: &State, org_id: &str) -> String {
    state.org(org_id).map(|o| o.tier.clone()).unwrap_or_else(|| state.config().rate_limits.default_tier.clone())
}

/// How many of `quota` the organisation holds now.
pub(crate) fn used(state: &State, org_id: &str, quota: Quota) -> usize {
    match quota {
        Quota::Gateways => state.gateway_count(org_id),
        Quota::ApiKeys => {
            let now = chrono::Utc::now();
            state.key_count_of(org_id, |k| k.gateway_id.is_none() && k.unusable(now).is_none())
        }
        Quota::ServiceAccounts => state.service_accounts_where(|a| a.org_id == org_id).len(),
        Quota::WhitelistEntries => state.org(org_id).map_or(0, |o| o.whitelist.len()),
        Quota::Webhooks => state.webhooks_of(org_id).len(),
    }
}

/// Refuses (409 `CONFLICT`, naming the quota) one more of `quota` when the organisation already
/// holds its tier's allowance. Call it under `state.lock_writes()`, just before saving.
pub(crate) fn check(state: &State, org_id: &str, quota: Quota) -> Result<(), ApiError> {
    let tier = tier_of(state, org_id);
    let limit = quota.limit(state.config().limits.quotas(&tier));
    if used(state, org_id, quota) >= limit as usize {
        return Err(ApiError::QuotaExceeded { quota: quota.name(), limit, tier });
    }
    Ok(())
}

/// The largest `rate_limit_multiplier` the organisation may give (a service account, a
/// whitelist entry); their product is capped at the same figure where limits are applied.
pub(crate) fn max_multiplier(state: &State, org_id: &str) -> f64 {
    state.config().limits.quotas(&tier_of(state, org_id)).max_multiplier
}

/// Validates a `rate_limit_multiplier` against the organisation's tier: a positive number up to
/// its `max_multiplier`.
pub(crate) fn multiplier(state: &State, org_id: &str, m: f64) -> Result<f64, ApiError> {
    let max = max_multiplier(state, org_id);
    if !(m.is_finite() && m > 0.0 && m <= max) {
        return Err(ApiError::validation(
            "rate_limit_multiplier",
            format!("must be a number in (0, {max}] on this organisation's tier"),
        ));
    }
    Ok(m)
}
