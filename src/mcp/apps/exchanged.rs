//! The upstreams of apps that exchange each caller's token (`oauth.token_exchange`, RFC 8693):
//! one per (subject token, app), built with the token the app's authorization server issued in
//! exchange for that caller's, and kept until shortly before that token expires.
//!
//! Why an upstream per caller rather than a per-call header: a handshake-era app binds its MCP
//! session to whoever initialized it, and the session's `initialize` goes with the upstream's
//! own credential; so callers whose tokens differ never share one. The key is SHA-256 of the
//! app's id and the subject token (`identity::token_exchange::cache_key`): the same token finds
//! its entry again, another caller's never does. Kept in the one per-caller pool
//! (`caller_pool.rs`): at most [`MAX_CALLERS`] per app, the least recently used idle entry making
//! room, closed when idle for its time or past its token's; one exchange at a time per key, so
//! that a caller's concurrent calls wait for one exchange.

use super::caller_pool::{CallerPool, Pooled, CALLER_IDLE};
use super::{AppClients, AppError};
use crate::config::{AppConfig, SubjectTokenType};
use crate::identity::app_oauth::AppOAuthError;
use crate::identity::token_exchange;
use crate::mcp::jsonrpc::RawJson;
use crate::mcp::upstream::{CallContext, Credential, Transport, Upstream, UpstreamReply};
use crate::observe::metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most (subject token, app) entries kept per app; past it, the least recently used idle one
/// goes, and when every one is in use a new caller is refused (-32010).
const MAX_CALLERS: usize = 10_000;
/// An exchanged token is used until this long before it expires (at most half its life).
const RENEW_AHEAD: Duration = Duration::from_secs(60);
/// How long a token is used when the provider did not say how long it lives.
const UNSTATED_LIFE: Duration = Duration::from_secs(300);

/// The per-caller upstreams of the exchanging apps: entries of the one per-caller pool
/// (`caller_pool.rs`), by [`token_exchange::cache_key`], at most [`MAX_CALLERS`] per app.
pub(crate) type CallerUpstreams = CallerPool<[u8; 32], Slot>;

/// One (subject token, app)'s entry: its upstream while its token is fresh, and the lock that
/// lets one exchange run at a time.
#[derive(Default)]
pub(crate) struct Slot {
    held: parking_lot::Mutex<Option<Held>>,
    exchanging: tokio::sync::Mutex<()>,
}

struct Held {
    upstream: Arc<Upstream>,
    renew_at: Instant,
}

impl Slot {
    fn fresh(&self) -> Option<Arc<Upstream>> {
        let held = self.held.lock();
        held.as_ref().filter(|h| Instant::now() < h.renew_at).map(|h| h.upstream.clone())
    }

    /// Takes its upstream out (to be closed).
    pub(super) fn take(&self) -> Option<Arc<Upstream>> {
        self.held.lock().take().map(|h| h.upstream)
    }

    /// Its token is due (or it has none): the sweep may take it out once no call holds it.
    fn due(&self, now: Instant) -> bool {
        self.held.lock().as_ref().is_none_or(|h| now >= h.renew_at)
    }
}

/// An entry is in use while a call holds its upstream, though the call no longer holds it.
impl Pooled for Slot {
    fn busy(&self) -> bool {
        self.held.lock().as_ref().is_some_and(|h| Arc::strong_count(&h.upstream) > 1)
    }
}

impl AppClients {
    /// The upstream a caller with `subject` token has of an exchanging app, if it has a fresh
    /// one (never made here: for a notification of the caller's, which has no call to make).
    pub(super) fn exchanged_upstream(&self, subject: &str, app_id: &str) -> Option<Arc<Upstream>> {
        self.exchanged.get(&token_exchange::cache_key(subject, app_id))?.fresh()
    }

    /// Forgets an app's entries (its settings changed): the next call exchanges again.
    pub(super) fn forget_exchanged(&self, app_id: &str) {
        for slot in self.exchanged.remove_app(app_id) {
            close(slot.take());
        }
    }

    /// Closes idle connections of the per-caller upstreams, and takes out the entries idle
    /// for [`CALLER_IDLE`] or past their token's time.
    pub(super) fn sweep_exchanged(&self) {
        let now = Instant::now();
        let each = |slot: &Slot| {
            if let Some(h) = slot.held.lock().as_ref() {
                h.upstream.sweep_idle();
            }
        };
        for slot in self.exchanged.sweep(CALLER_IDLE, |slot| slot.due(now), each) {
            close(slot.take());
        }
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
    ) -> Result<Arc<Upstream>, AppError> {
        let key = token_exchange::cache_key(subject, &app.id);
        let slot = match self.exchanged.get(&key) {
            Some(slot) => slot,
            None => {
                let (kept, evicted) = self.exchanged.insert(key, &app.id, Arc::default(), MAX_CALLERS);
                if let Some(old) = evicted {
                    close(old.take());
                }
                kept.ok_or_else(|| AppError::UserSessionsFull { app: app.id.clone(), most: MAX_CALLERS })?
            }
        };
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
                return Err(AppError::Authorization { app: app.id.clone(), error });
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
            .map_err(|e| AppError::Upstream { app: app.id.clone(), error: Box::new(e) })?;
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
        up: &Arc<Upstream>,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<UpstreamReply, AppError> {
        let mut reply = up.request(method, params, ctx).await;
        if let Ok(UpstreamReply::Stream(stream)) = &mut reply {
            stream.went_on(up);
        }
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
}
