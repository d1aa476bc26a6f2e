//! The upstreams of apps that exchange each caller's token (`oauth.token_exchange`, RFC 8693):
//! one per (subject token, app), built with the token the app's authorization server issued in
//! exchange for that caller's, and kept until shortly before that token expires.
//!
//! Why an upstream per caller rather than a per-call header: a handshake-era app binds its MCP
//! session to whoever initialized it, and the session's `initialize` goes with the upstream's
//! own credential; so callers whose tokens differ never share one. The key is SHA-256 of the
//! app's id and the subject token (`identity::token_exchange::cache_key`): the same token finds
//! its entry again, another caller's never does. Bounded ([`MAX_CALLERS`]); one exchange at a
//! time per key, so that a caller's concurrent calls wait for one exchange.

use super::{AppClients, AppError};
use crate::config::{AppConfig, SubjectTokenType};
use crate::identity::app_oauth::AppOAuthError;
use crate::identity::token_exchange;
use crate::mcp::jsonrpc::RawJson;
use crate::mcp::upstream::{CallContext, Credential, Transport, Upstream, UpstreamReply};
use crate::observe::metrics;
use dashmap::DashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most (subject token, app) entries kept; past it, stale entries go first, then any.
const MAX_CALLERS: usize = 10_000;
/// An exchanged token is used until this long before it expires (at most half its life).
const RENEW_AHEAD: Duration = Duration::from_secs(60);
/// How long a token is used when the provider did not say how long it lives.
const UNSTATED_LIFE: Duration = Duration::from_secs(300);

/// The per-caller upstreams of the exchanging apps.
#[derive(Default)]
pub(crate) struct CallerUpstreams {
    slots: DashMap<[u8; 32], Arc<Slot>>,
}

/// One (subject token, app)'s entry: its upstream while its token is fresh, and the lock that
/// lets one exchange run at a time.
struct Slot {
    app_id: String,
    held: parking_lot::Mutex<Option<Held>>,
    exchanging: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
struct Held {
    upstream: Arc<Upstream>,
    renew_at: Instant,
}

impl Slot {
    fn fresh(&self) -> Option<Arc<Upstream>> {
        let held = self.held.lock();
        held.as_ref().filter(|h| Instant::now() < h.renew_at).map(|h| h.upstream.clone())
    }

    fn take(&self) -> Option<Arc<Upstream>> {
        self.held.lock().take().map(|h| h.upstream)
    }
}

impl CallerUpstreams {
    /// The entry of `key`, made when missing (room made first when full).
    fn slot(&self, key: [u8; 32], app_id: &str) -> Arc<Slot> {
        if let Some(s) = self.slots.get(&key) {
            return s.value().clone();
        }
        if self.slots.len() >= MAX_CALLERS {
            self.make_room();
        }
        let made = Slot { app_id: app_id.to_string(), held: Default::default(), exchanging: Default::default() };
        self.slots.entry(key).or_insert_with(|| Arc::new(made)).value().clone()
    }

    /// Drops the entries whose token is due, then, if still full, some others.
    fn make_room(&self) {
        let now = Instant::now();
        self.retain(|s| s.held.lock().as_ref().is_some_and(|h| now < h.renew_at));
        let excess = self.slots.len().saturating_sub(MAX_CALLERS - MAX_CALLERS / 10);
        let victims: Vec<[u8; 32]> = self.slots.iter().take(excess).map(|s| *s.key()).collect();
        for key in victims {
            if let Some((_, slot)) = self.slots.remove(&key) {
                close(slot.take());
            }
        }
    }

    /// Keeps the entries `keep` says, closing the others' upstreams.
    fn retain(&self, keep: impl Fn(&Slot) -> bool) {
        let mut dropped = Vec::new();
        self.slots.retain(|_, s| {
            let kept = keep(s);
            if !kept {
                dropped.push(s.clone());
            }
            kept
        });
        for slot in dropped {
            close(slot.take());
        }
    }

    /// Forgets an app's entries (its settings changed): the next call exchanges again.
    pub(crate) fn forget_app(&self, app_id: &str) {
        self.retain(|s| s.app_id != app_id);
    }

    /// Closes idle connections of the per-caller upstreams, and forgets entries past their time.
    pub(crate) fn sweep_idle(&self) {
        let now = Instant::now();
        self.retain(|s| s.held.lock().as_ref().is_none_or(|h| now < h.renew_at));
        for s in self.slots.iter() {
            if let Some(h) = s.held.lock().as_ref() {
                h.upstream.sweep_idle();
            }
        }
    }

    /// Stops every per-caller upstream.
    pub(crate) async fn shutdown(&self) {
        let all: Vec<Arc<Upstream>> = self.slots.iter().filter_map(|s| s.take()).collect();
        self.slots.clear();
        futures_util::future::join_all(all.iter().map(|up| up.shutdown())).await;
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len()
    }
}

/// Ends an upstream's session in the background.
fn close(upstream: Option<Arc<Upstream>>) {
    if let Some(up) = upstream {
        tokio::spawn(async move { up.shutdown().await });
    }
}

/// When an exchanged token that lives `expires_in` seconds is renewed: [`RENEW_AHEAD`] before it
/// expires, at most half its life.
fn renew_after(expires_in: Option<u64>) -> Duration {
    match expires_in {
        Some(secs) => {
            let life = Duration::from_secs(secs);
            life - RENEW_AHEAD.min(life / 2)
        }
        None => UNSTATED_LIFE,
    }
}

impl AppClients {
    /// The upstream a caller's call to an exchanging app goes on: the one built with the token
    /// exchanged for `subject` (of kind `kind`), exchanged now when there is none or it is due.
    /// The token is the upstream's `Authorization: Bearer`; the organisation's connection is not
    /// used. The one place a per-caller upstream is made (see the module's comment).
    pub(crate) async fn caller_upstream(
        &self,
        org_id: &str,
        app: &AppConfig,
        subject: &str,
        kind: SubjectTokenType,
    ) -> Result<Arc<Upstream>, AppOAuthError> {
        let key = token_exchange::cache_key(subject, &app.id);
        let slot = self.exchanged.slot(key, &app.id);
        if let Some(up) = slot.fresh() {
            return Ok(up);
        }
        let _one_at_a_time = slot.exchanging.lock().await;
        if let Some(up) = slot.fresh() {
            return Ok(up);
        }
        let allow_http = self.state.config().environment.allows_http();
        let issued = match token_exchange::exchange(app, allow_http, subject, kind).await {
            Ok(issued) => {
                metrics::token_exchange(&app.id, "issued");
                issued
            }
            Err(error) => {
                let outcome = if matches!(error, AppOAuthError::Refused { .. }) { "refused" } else { "failed" };
                metrics::token_exchange(&app.id, outcome);
                tracing::warn!(org = org_id, app = %app.id, %error, "the caller's token could not be exchanged");
                return Err(error);
            }
        };
        let renew_at = Instant::now() + renew_after(issued.expires_in);
        let mut settings = self.settings_with(app, None);
        if let Transport::Http(h) = &mut settings.transport {
            h.credential = Some(Credential::Bearer(issued.access_token));
        }
        // Named for the organisation and the entry (never the token), as its notices are.
        let owner = format!("{org_id}/x:{}", hex::encode(&key[..8]));
        let upstream = Upstream::for_owner(&owner, &settings, &self.shared)
            .map_err(|e| AppOAuthError::Malformed(format!("the app's settings: {e}")))?;
        let upstream = Arc::new(upstream);
        let before = slot.held.lock().replace(Held { upstream: upstream.clone(), renew_at });
        close(before.map(|h| h.upstream));
        Ok(upstream)
    }

    /// A call on a caller's own upstream (`ctx.caller_upstream`): no renewal of the
    /// organisation's tokens, and no retry on another upstream.
    pub(super) async fn request_on_caller_upstream(
        &self,
        org_id: &str,
        app_id: &str,
        up: &Upstream,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<UpstreamReply, AppError> {
        let reply = up.request(method, params, ctx).await;
        self.note_health(org_id, app_id, reply.as_ref().err());
        reply.map_err(|error| AppError::Upstream { app: app_id.into(), error: Box::new(error) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_used_until_a_minute_before_it_expires_and_half_a_short_life() {
        assert_eq!(renew_after(Some(3600)), Duration::from_secs(3540));
        assert_eq!(renew_after(Some(60)), Duration::from_secs(30));
        assert_eq!(renew_after(Some(0)), Duration::ZERO);
        assert_eq!(renew_after(None), UNSTATED_LIFE);
    }

    #[tokio::test]
    async fn the_entries_are_bounded_and_an_apps_are_forgotten() {
        let callers = CallerUpstreams::default();
        for i in 0..MAX_CALLERS + 5 {
            let key = token_exchange::cache_key(&i.to_string(), "crm");
            callers.slot(key, "crm");
        }
        assert!(callers.len() <= MAX_CALLERS, "{}", callers.len());
        let key = token_exchange::cache_key("t", "other");
        let slot = callers.slot(key, "other");
        assert!(Arc::ptr_eq(&slot, &callers.slot(key, "other")), "one entry per key");
        callers.forget_app("crm");
        assert_eq!(callers.len(), 1);
    }
}
