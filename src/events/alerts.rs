//! Usage alerts: when a key uses an alert's share of a rate limit, one notification per
//! crossing (to the alert's Slack and e-mail, through the outbox) and a `usage.limit_warning`
//! event for the webhooks; the same event, without an alert, at `alerts.limit_warning_percent`.
//!
//! Nothing runs on a request's path: the rate limiter already counts each key's requests per
//! minute for `/metrics/rate-limits`, and keeps there the largest share of a limit a request of
//! the minute left in use ([`UsageMinute::peak_percent`]). Those counts are taken every half
//! second ([`crate::server::Server::flush_rate_usage`]) and read here.
//!
//! A crossing: a key's use reaches the threshold while it is armed. It then stays fired until a
//! whole calendar minute has passed without a reading at or above the threshold (quiet minutes
//! count), so a key held at its limit gives one notification, not one per request or per flush.
//! With several instances on one store, the instance that fires takes a short lock named after
//! the crossing, so that the others (which may see the same key near its limit) stay silent.

use crate::data::model::Alert;
use crate::data::state::State;
use crate::data::store::{Kind, StoreError};
use crate::mcp::quota::Reached;
use dashmap::DashMap;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_filters::rate_limit::UsageMinute;

/// How long an organisation's alerts are read from memory before the store is asked again (an
/// alert created or deleted on another instance takes effect here within this time).
const REREAD_AFTER: Duration = Duration::from_secs(5);

/// How long the lock that keeps other instances from repeating a notification is held.
const CROSSING_LOCK: Duration = Duration::from_secs(120);

/// One threshold watched for one key: (key id, alert id; empty for
/// `alerts.limit_warning_percent`).
type Watch = (String, String);

/// A threshold that has fired and is not yet armed again: the last minute with a reading at
/// or above it.
#[derive(Debug, Clone, Copy)]
struct Fired {
    last_high_minute: u64,
}

/// A crossing to tell: which alert (none for the default share) and what was seen.
#[derive(Debug, Clone)]
pub(crate) struct Crossing {
    pub org_id: String,
    pub alert: Option<Alert>,
    pub key_id: String,
    pub threshold: u8,
    pub usage_percent: u8,
    pub bucket: &'static str,
    pub minute_unix: u64,
}

impl Crossing {
    /// The `usage.limit_warning` event's `data`.
    pub(crate) fn data(&self) -> Value {
        json!({
            "type": "rate_limit",
            "alert_id": self.alert.as_ref().map(|a| a.id.as_str()),
            "key_id": self.key_id,
            "bucket": self.bucket,
            "threshold": self.threshold,
            "usage_percent": self.usage_percent,
            "minute": minute_text(self.minute_unix),
        })
    }

    /// One line for a person (Slack's text, the e-mail's subject).
    pub(crate) fn summary(&self) -> String {
        let what = match &self.alert {
            Some(a) => format!("alert {} at {} %", a.id, a.threshold),
            None => format!("warning at {} %", self.threshold),
        };
        format!(
            "toolgate: API key {} has used {} % of its `{}` rate limit ({what})",
            self.key_id, self.usage_percent, self.bucket
        )
    }
}

/// The crossings state of this instance, and the organisations' alerts as last read.
pub struct Watcher {
    state: Arc<State>,
    default_percent: u8,
    alerts: DashMap<String, (Instant, Arc<Vec<Alert>>)>,
    fired: DashMap<Watch, Fired>,
}

impl Watcher {
    pub fn new(state: Arc<State>) -> Watcher {
        let default_percent = state.config().alerts.limit_warning_percent;
        Watcher { state, default_percent, alerts: DashMap::new(), fired: DashMap::new() }
    }

    /// An organisation's alerts, read from the store at most every [`REREAD_AFTER`].
    pub(crate) async fn alerts_of(&self, org_id: &str) -> Result<Arc<Vec<Alert>>, StoreError> {
        if let Some(read) = self.alerts.get(org_id).filter(|r| r.0.elapsed() < REREAD_AFTER) {
            return Ok(read.1.clone());
        }
        let mut list: Vec<Alert> = self
            .state
            .store
            .load_partition(Kind::Alert, org_id)
            .await?
            .into_iter()
            .filter_map(|(_, body)| serde_json::from_str(&body).ok())
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        let list = Arc::new(list);
        self.alerts.insert(org_id.to_string(), (Instant::now(), list.clone()));
        Ok(list)
    }

    /// Forgets what was read of an organisation's alerts (after this instance changed them).
    pub fn forget(&self, org_id: &str) {
        self.alerts.remove(org_id);
    }

    /// The crossings in a batch of usage counts, in order.
    pub(crate) async fn crossings(&self, minutes: &[UsageMinute]) -> Vec<Crossing> {
        let mut out = Vec::new();
        for m in minutes {
            let Some(bucket) = m.peak_bucket else { continue };
            let Some(org_id) = self.state.key(&m.key_id).map(|k| k.org_id.clone()) else { continue };
            let alerts = match self.alerts_of(&org_id).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, org = org_id, "cannot read the alerts; crossings not checked this time");
                    continue;
                }
            };
            let default = (self.default_percent > 0).then_some((self.default_percent, None));
            let watches = default.into_iter().chain(alerts.iter().map(|a| (a.threshold, Some(a))));
            for (threshold, alert) in watches {
                let watch = (m.key_id.clone(), alert.map_or(String::new(), |a| a.id.clone()));
                if fire(&self.fired, watch, threshold, m) {
                    out.push(Crossing {
                        org_id: org_id.clone(),
                        alert: alert.cloned(),
                        key_id: m.key_id.clone(),
                        threshold,
                        usage_percent: m.peak_percent,
                        bucket: bucket.as_str(),
                        minute_unix: m.minute_unix,
                    });
                }
            }
        }
        // States armed again by time alone are dropped, so the map holds only recent crossings.
        if let Some(latest) = minutes.iter().map(|m| m.minute_unix).max() {
            self.fired.retain(|_, f| latest < f.last_high_minute + 120);
        }
        out
    }

    /// Whether this instance is the one to tell a crossing (several instances on one store).
    pub(crate) async fn claim(&self, c: &Crossing) -> bool {
        let id = c.alert.as_ref().map_or("default", |a| a.id.as_str());
        self.claim_named(&format!("alert-crossing:{}:{id}:{}:{}", c.org_id, c.key_id, c.minute_unix / 60)).await
    }

    async fn claim_named(&self, name: &str) -> bool {
        self.state.store.lock(name, CROSSING_LOCK, Duration::ZERO).await.is_ok()
    }

    /// The `usage.limit_warning` of a gateway that reached `alerts.limit_warning_percent` of
    /// its quota, as (organisation, `data`), when it is a crossing (the same one-per-crossing
    /// rule as keys) that this instance is the one to tell.
    pub(crate) async fn gateway_crossing(&self, r: &Reached) -> Option<(String, Value)> {
        let gw = self.state.gateway(&r.gateway_id)?;
        let percent = (r.count * 100 / u64::from(r.limit.max(1))).min(100) as u8;
        let reading = UsageMinute { minute_unix: r.minute_unix, peak_percent: percent, ..UsageMinute::default() };
        let watch = (format!("gateway:{}", r.gateway_id), String::new());
        if !fire(&self.fired, watch, self.default_percent, &reading) {
            return None;
        }
        if !self.claim_named(&format!("gateway-crossing:{}:{}", r.gateway_id, r.minute_unix / 60)).await {
            return None;
        }
        Some((
            gw.org_id.clone(),
            json!({
                "type": "gateway_quota",
                "alert_id": null,
                "gateway_id": r.gateway_id,
                "threshold": self.default_percent,
                "usage_percent": percent,
                "limit": r.limit,
                "minute": minute_text(r.minute_unix),
            }),
        ))
    }
}

/// A minute's start as the events' `data` writes it (`2026-11-25T10:41:00Z`).
fn minute_text(unix: u64) -> String {
    let t = chrono::DateTime::from_timestamp(unix as i64, 0).unwrap_or_default();
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The crossing rule for one reading: fires when the reading is at or above the threshold and
/// the watch is armed; a watch is armed again once a whole calendar minute after its last high
/// reading has passed.
fn fire(fired: &DashMap<Watch, Fired>, key: Watch, threshold: u8, m: &UsageMinute) -> bool {
    let high = m.peak_percent >= threshold;
    match fired.get_mut(&key) {
        Some(mut f) => {
            let rearmed = m.minute_unix >= f.last_high_minute + 120;
            if high {
                f.last_high_minute = f.last_high_minute.max(m.minute_unix);
            }
            if high && rearmed {
                f.last_high_minute = m.minute_unix;
                return true;
            }
            false
        }
        None if high => {
            fired.insert(key, Fired { last_high_minute: m.minute_unix });
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_filters::rate_limit::Bucket;

    fn reading(minute_unix: u64, peak_percent: u8) -> UsageMinute {
        UsageMinute {
            key_id: "k".into(),
            minute_unix,
            requests: 1,
            peak_percent,
            peak_bucket: Some(Bucket::Global),
            ..UsageMinute::default()
        }
    }

    #[test]
    fn one_notification_per_crossing() {
        let fired = DashMap::new();
        let key = || ("k".to_string(), "alert_1".to_string());
        let t = 1_800_000_000 / 60 * 60;
        assert!(!fire(&fired, key(), 80, &reading(t, 79)), "below: nothing");
        assert!(fire(&fired, key(), 80, &reading(t, 80)), "at the threshold: fires");
        assert!(!fire(&fired, key(), 80, &reading(t, 100)), "held above: once");
        assert!(!fire(&fired, key(), 80, &reading(t, 10)), "a dip within the minute does not re-arm");
        assert!(!fire(&fired, key(), 80, &reading(t + 60, 90)), "the next minute, still high: silent");
        assert!(!fire(&fired, key(), 80, &reading(t + 120, 50)), "a low minute after a high one");
        assert!(!fire(&fired, key(), 80, &reading(t + 120, 95)), "but high again in the same minute: silent");
        // A whole minute (t + 180) with nothing at or above the threshold re-arms it.
        assert!(fire(&fired, key(), 80, &reading(t + 240, 85)), "after a quiet minute: fires again");
        assert!(!fire(&fired, key(), 80, &reading(t + 240, 99)));
    }

    #[test]
    fn thresholds_are_independent() {
        let fired = DashMap::new();
        let t = 1_800_000_000 / 60 * 60;
        let a = || ("k".to_string(), "alert_a".to_string());
        let b = || ("k".to_string(), "alert_b".to_string());
        assert!(fire(&fired, a(), 50, &reading(t, 60)));
        assert!(!fire(&fired, b(), 90, &reading(t, 60)));
        assert!(fire(&fired, b(), 90, &reading(t, 95)));
        let other_key = ("k2".to_string(), "alert_a".to_string());
        assert!(fire(&fired, other_key, 50, &reading(t, 60)), "per key");
    }
}
