//! Everything a request handler can reach: state, app clients, MCP sessions, catalogues, the
//! request log, and the streams that carry change notifications.

use crate::api::gateways::GatewayMetrics;
use crate::error::ApiError;
use crate::mcp::apps::AppClients;
use crate::mcp::catalogue::Catalogue;
use crate::mcp::jsonrpc::{self, Id, RawJson, Response};
use crate::mcp::sessions::{SessionLimits, Sessions};
use crate::mcp::subscriptions::Subscriptions;
use crate::mcp::upstream::{AppNotice, CallContext, NoticeKind};
use crate::mfa::Mfa;
use crate::model::Gateway;
use crate::reqlog::{RequestLog, Urgency};
use crate::state::State;
use crate::store::{LogQuery, StoreError};
use dashmap::DashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use toolgate_filters::rate_limit::RateLimit;

/// A message for a gateway's open GET streams: for all of them, or for one session's only.
pub struct StreamMessage {
    pub to: Option<String>,
    pub bytes: Vec<u8>,
}

pub struct Server {
    pub state: Arc<State>,
    pub apps: AppClients,
    pub sessions: Sessions,
    pub reqlog: RequestLog,
    pub mfa: Mfa,
    /// A handle on the rate-limit filter, for `/rate-limit` and extra charges.
    pub limiter: RateLimit,
    /// Per-minute quotas of gateways and apps (all callers together).
    pub quotas: crate::mcp::quota::MinuteQuota,
    catalogues: DashMap<String, Arc<Catalogue>>,
    /// Gateway id -> sender of server-to-client messages for its open GET streams.
    streams: DashMap<String, broadcast::Sender<Arc<StreamMessage>>>,
    /// Which client sessions are subscribed to which resource of which upstream.
    pub subscriptions: Subscriptions,
    /// (session id, JSON of a relayed server->client request id) -> (org, app).
    relayed: DashMap<(String, String), (String, String)>,
}

impl Server {
    pub async fn new(state: Arc<State>, limiter: RateLimit) -> Result<Server, StoreError> {
        let m = &state.config.mcp;
        let limits = SessionLimits {
            idle_timeout: m.session_idle_timeout,
            retention: m.session_retention,
            per_key: m.max_sessions_per_key,
            per_org: m.max_sessions_per_org,
        };
        let sessions = Sessions::load(state.store.clone(), limits).await?;
        // Keys revoked and gateways deleted while the process was down (or before their sessions
        // were written ended) end their sessions now.
        let ended = sessions.end_where(|s| !state.gateways.contains_key(&s.gateway_id));
        let ended = ended + sessions.end_of_unusable_keys(|key| credential_usable(&state, key));
        if ended > 0 {
            tracing::info!(sessions = ended, "ended MCP sessions of deleted gateways or unusable keys");
        }
        Ok(Server {
            apps: AppClients::new(state.clone()),
            reqlog: RequestLog::new(state.store.clone()),
            mfa: Mfa::load(state.store.clone()).await?,
            limiter,
            quotas: Default::default(),
            sessions,
            state,
            catalogues: DashMap::new(),
            streams: DashMap::new(),
            subscriptions: Subscriptions::default(),
            relayed: DashMap::new(),
        })
    }

    /// The gateway's catalogue, cached for `cache_ttl` when `cache_enabled`.
    pub async fn catalogue(&self, gw: &Gateway) -> Arc<Catalogue> {
        let c = &gw.configuration;
        if c.cache_enabled {
            if let Some(cat) = self.catalogues.get(&gw.id) {
                if cat.built.is_some_and(|b| b.elapsed() < Duration::from_secs(c.cache_ttl.into())) {
                    return cat.clone();
                }
            }
        }
        let cat = Arc::new(Catalogue::build(&self.apps, gw).await);
        if c.cache_enabled {
            self.catalogues.insert(gw.id.clone(), cat.clone());
        }
        cat
    }

    pub fn subscribe(&self, gateway_id: &str) -> broadcast::Receiver<Arc<StreamMessage>> {
        self.streams.entry(gateway_id.to_string()).or_insert_with(|| broadcast::channel(64).0).subscribe()
    }

    fn notify_changed(&self, gateway_id: &str) {
        self.catalogues.remove(gateway_id);
        if let Some(tx) = self.streams.get(gateway_id) {
            for method in [
                "notifications/tools/list_changed",
                "notifications/prompts/list_changed",
                "notifications/resources/list_changed",
            ] {
                let _ = tx.send(Arc::new(StreamMessage { to: None, bytes: jsonrpc::notification_bytes(method, None) }));
            }
        }
    }

    /// A gateway's configuration, apps or allowed tools changed, or it was deleted: then its
    /// sessions end and its open GET streams close.
    pub fn gateway_changed(&self, gateway_id: &str) {
        self.notify_changed(gateway_id);
        if !self.state.gateways.contains_key(gateway_id) {
            self.sessions.end_where(|s| s.gateway_id == gateway_id);
            // Streams that were not told by their session's end see the channel close.
            self.streams.remove(gateway_id);
        }
    }

    /// Ends the sessions (and so closes the GET streams) of keys that can no longer be used:
    /// revoked, expired, retired by a rotation, or deleted with their gateway. Cheap: reads only
    /// the keys that have live sessions; run at every flush, so a stream closes within one.
    pub fn end_sessions_of_unusable_keys(&self) {
        let n = self.sessions.end_of_unusable_keys(|key| credential_usable(&self.state, key));
        if n > 0 {
            tracing::info!(sessions = n, "ended MCP sessions of revoked or expired keys");
        }
    }

    /// What an app announced: a list change makes the gateways that include it (the owner's, or
    /// every organisation's for a shared upstream) drop their catalogues and tell their open
    /// streams, as when the gateway itself changes; a resource update goes to its subscribers.
    pub fn app_notice(&self, notice: &AppNotice) {
        match &notice.kind {
            NoticeKind::ListsChanged => {
                self.apps.forget_lists(&notice.owner, &notice.app_id);
                let owner = Some(notice.owner.as_str()).filter(|o| !o.is_empty());
                let affected = self.gateways_with_app(owner, &notice.app_id);
                tracing::info!(app = %notice.app_id, gateways = affected.len(), "app announced a list change");
                for g in affected {
                    self.notify_changed(&g);
                }
            }
            NoticeKind::ResourceUpdated { uri } => self.resource_updated(notice, uri),
        }
    }

    /// Delivers an app's `notifications/resources/updated` to the GET streams of the sessions
    /// subscribed to it through that upstream; ended sessions are forgotten on the way.
    fn resource_updated(&self, notice: &AppNotice, uri: &str) {
        let key = (notice.owner.clone(), notice.app_id.clone(), uri.to_string());
        let sessions = self.subscriptions.sessions(&key);
        if sessions.is_empty() {
            return;
        }
        let params = RawJson::from_value(&serde_json::json!({ "uri": uri }));
        let bytes = jsonrpc::notification_bytes("notifications/resources/updated", Some(&params));
        for session_id in sessions {
            let gateway = self.sessions.get(&session_id).filter(|s| s.status == "active").map(|s| s.gateway_id);
            let Some(gateway) = gateway else {
                self.subscriptions.remove(&key, &session_id);
                continue;
            };
            // Without an open stream the update is not kept: MCP does not ask a server to.
            if let Some(tx) = self.streams.get(&gateway) {
                let _ = tx.send(Arc::new(StreamMessage { to: Some(session_id), bytes: bytes.clone() }));
            }
        }
    }

    /// An organisation's connection to an app changed.
    pub fn app_changed(&self, org_id: &str, app_id: &str) {
        self.apps.invalidate(org_id, app_id);
        for g in self.gateways_with_app(Some(org_id), app_id) {
            self.notify_changed(&g);
        }
    }

    /// Ids of the gateways that include `app_id`: of one organisation, or of all.
    fn gateways_with_app(&self, org_id: Option<&str>, app_id: &str) -> Vec<String> {
        let gateways = self.state.gateways.iter();
        gateways
            .filter(|g| org_id.is_none_or(|o| g.org_id == o) && g.servers.iter().any(|s| s == app_id))
            .map(|g| g.id.clone())
            .collect()
    }

    /// Remembers which app sent a server->client request, so the client's answer goes back to it.
    pub fn remember_relayed(&self, session_id: &str, id: &Id, app_id: &str, org_id: &str) {
        self.relayed.insert((session_id.to_string(), id.to_string()), (org_id.to_string(), app_id.to_string()));
    }

    /// A client answered a relayed server->client request (sampling, elicitation, roots).
    pub async fn relay_client_response(&self, session_id: &str, _gw: &Gateway, r: Response) {
        let Some((_, (org, app))) = self.relayed.remove(&(session_id.to_string(), r.id.to_string())) else {
            tracing::debug!("response from client matches no relayed request; ignored");
            return;
        };
        self.answer_app(&org, &app, r).await;
    }

    /// Delivers an answer to an app's server->client request: the client's, or the gateway's
    /// refusal on its behalf.
    pub async fn answer_app(&self, org_id: &str, app_id: &str, r: Response) {
        match self.apps.upstream(org_id, app_id) {
            Ok(up) => {
                if let Err(e) = up.respond(r, &CallContext::default()).await {
                    tracing::warn!(app = app_id, error = %e, "cannot deliver an answer to the app's request");
                }
            }
            Err(e) => tracing::warn!(app = app_id, error = %e, "app gone before the answer to its request"),
        }
    }

    /// Client notifications that concern the apps (cancellation, roots) go to every app of the
    /// gateway that has an upstream session.
    pub async fn forward_notification(&self, gw: &Gateway, method: &str, params: Option<RawJson>) {
        for app in &gw.servers {
            if let Ok(up) = self.apps.upstream(&gw.org_id, app) {
                let _ = up.notify(method, params.clone(), &CallContext::default()).await;
            }
        }
    }

    /// Writes buffered activity (sessions, request log) to the store; `Background` is the
    /// periodic flush (request log at idle priority), `Now` one that someone waits for.
    pub async fn flush(&self, urgency: Urgency) {
        self.reqlog.flush(urgency).await;
        self.sessions.flush().await;
        self.state.flush_usage().await;
    }

    /// `metrics` of the gateway detail, from today's request log (UTC day).
    pub async fn gateway_metrics_today(&self, g: &Gateway) -> Result<GatewayMetrics, ApiError> {
        self.reqlog.flush(Urgency::Now).await;
        let midnight = chrono::Utc::now().date_naive().and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp_millis());
        let sum = self
            .state
            .store
            .log_summary(LogQuery {
                org_id: g.org_id.clone(),
                gateway_id: Some(g.id.clone()),
                since_ms: midnight,
                ..Default::default()
            })
            .await?;
        let avg = sum.total_duration_ms.checked_div(sum.requests).unwrap_or(0);
        Ok(GatewayMetrics { requests_today: sum.requests, errors_today: sum.errors, avg_response_time: avg })
    }
}

/// Runs [`Server::flush`] every `period` until the process stops; a Pingora background service.
pub struct Flusher {
    pub server: Arc<Server>,
    pub period: Duration,
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Flusher {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let mut tick = tokio::time::interval(self.period);
        let mut last_sweep = Instant::now();
        let mut last_session_sweep = Instant::now();
        let session_sweep = self.server.sessions.limits().sweep_period();
        let mut last_jwt_refresh: Option<Instant> = None;
        let mut notices = self.server.apps.take_notices();
        loop {
            tokio::select! {
                _ = tick.tick() => self.server.flush(Urgency::Background).await,
                Some(change) = next_notice(&mut notices) => self.server.app_notice(&change),
                _ = shutdown.changed() => break,
            }
            // Idle rate-limit buckets are dropped so memory follows active callers only, and idle
            // upstream connections past their time are closed.
            self.server.end_sessions_of_unusable_keys();
            // Expired and ended sessions leave memory here; their store records are deleted by a
            // task of their own (one durable write each), so flushes never wait for them.
            if last_session_sweep.elapsed() >= session_sweep {
                self.server.sessions.sweep();
                if self.server.sessions.claim_deletion() {
                    let server = self.server.clone();
                    tokio::spawn(async move { server.sessions.delete_removed().await });
                }
                last_session_sweep = Instant::now();
            }
            if last_sweep.elapsed() >= Duration::from_secs(60) {
                self.server.limiter.sweep();
                self.server.quotas.sweep();
                self.server.apps.sweep_idle();
                last_sweep = Instant::now();
            }
            if let Some(jwt) = &self.server.state.jwt {
                if last_jwt_refresh.is_none_or(|t: Instant| t.elapsed() >= jwt.refresh_period()) {
                    jwt.refresh().await;
                    last_jwt_refresh = Some(Instant::now());
                }
            }
        }
        // Pingora lets in-flight requests run for the grace period after SIGTERM; the apps must
        // keep serving them, so they are stopped only at its end, after the last writes.
        let grace = self.server.state.config.server.grace_period.saturating_sub(Duration::from_millis(500));
        let started = Instant::now();
        while started.elapsed() < grace {
            tokio::time::sleep(self.period.min(grace - started.elapsed())).await;
            self.server.flush(Urgency::Now).await;
        }
        self.server.flush(Urgency::Now).await;
        self.server.apps.shutdown().await;
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "flushed and stopped apps");
    }
}

/// Whether the credential a session is bound to still works. JWT callers (`jwt:<user>`) have no
/// key record to revoke; their tokens expire on their own.
fn credential_usable(state: &State, key_id: &str) -> bool {
    match state.keys.get(key_id) {
        Some(k) => k.unusable(chrono::Utc::now()).is_none(),
        None => key_id.starts_with("jwt:"),
    }
}

async fn next_notice(rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<AppNotice>>) -> Option<AppNotice> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
