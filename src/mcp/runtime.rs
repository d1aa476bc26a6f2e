//! The running MCP side of the server: the app clients, protocol sessions, quotas, the
//! catalogue cache, and the channels of the gateways' open GET streams. The HTTP endpoint
//! (`transport`, `dispatch`) and the relay of server-to-client messages (`relay`) work on it;
//! management handlers reach it through `Server::mcp` to list sessions or test apps.

use crate::base::fast_map::FastMap;
use crate::base::quick::{self, Quick};
use crate::data::audit::Audit;
use crate::data::changes::Change;
use crate::data::model::Gateway;
use crate::data::model::{PendingDefinition, PinnedDefinition, ToolPin, ToolPolicy};
use crate::data::reqlog::RequestLog;
use crate::data::state::State;
use crate::data::store::StoreError;
use crate::data::tool_pins::{self, GatewayPins, Verdict};
use crate::edge::exchange::sse_event;
use crate::mcp::apps::AppClients;
use crate::mcp::bounds::{Holder, OpenStreams, Refused, StreamSlot};
use crate::mcp::catalogue::{Catalogue, Found};
use crate::mcp::jsonrpc;
use crate::mcp::parked::ParkedCalls;
use crate::mcp::quota::MinuteQuota;
use crate::mcp::resumable::CallStreams;
use crate::mcp::rules::{self, RuleSet, RuleSlots};
use crate::mcp::sessions::{SessionLimits, Sessions};
use crate::mcp::subscriptions::Subscriptions;
use crate::mcp::tool_limits::ToolLimits;
use crate::mcp::upstream::{AppNotice, NoticeKind};
use bytes::Bytes;
use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use toolgate_filters::rate_limit::{RateLimit, RateLimiter};

/// A message for a gateway's open GET streams: for all of them, or for one session's only.
pub struct StreamMessage {
    pub to: Option<String>,
    /// The `notifications/*/list_changed` it carries (none for a resource update), for streams
    /// that frame their own (`subscriptions/listen`).
    pub list_changed: &'static [&'static str],
    /// One or more SSE events, framed once for every stream: each stream writes this same
    /// buffer (a reference count, no copy), in one write.
    pub event: Bytes,
}

/// What a change of a gateway or of one of its apps sends to its streams, in this order.
const LIST_CHANGED: &[&str] =
    &["notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"];

pub struct McpRuntime {
    pub state: Arc<State>,
    pub apps: AppClients,
    pub sessions: Sessions,
    /// Where `tools/call` entries go (shared with the management API, which reads the log).
    pub reqlog: Arc<RequestLog>,
    /// Per-minute quotas of gateways and apps (all callers together).
    pub quotas: MinuteQuota,
    /// The audit trail, shared with the management API: denied tool calls are appended to it.
    pub audit: Arc<Audit>,
    catalogues: FastMap<String, Arc<Catalogue>>,
    /// Gateway id -> its rules, compiled (only gateways that have rules).
    rules: FastMap<String, Arc<RuleSet>>,
    /// Where the dear rule sets run: a few at a time per organisation, off the worker threads.
    pub rule_slots: RuleSlots,
    /// Gateway id -> its tool pins (`tool_policy`), read from the store when a catalogue needs
    /// them and dropped when they change (here or on another instance).
    pins: FastMap<String, Arc<GatewayPins>>,
    /// Bumped whenever pins are dropped: pins read from the store before are not kept.
    pins_dropped: std::sync::atomic::AtomicU64,
    /// Gateway id -> sender of server-to-client messages for its open GET streams.
    pub(super) streams: FastMap<String, broadcast::Sender<Arc<StreamMessage>>>,
    /// Which client sessions are subscribed to which resource of which upstream.
    pub subscriptions: Subscriptions,
    /// (session id, JSON of a relayed server->client request id) -> (org, app).
    pub(super) relayed: DashMap<(String, String), crate::mcp::forwarding::Relayed>,
    /// Stateless calls whose app asked the client something, until the client answers.
    pub parked: ParkedCalls,
    /// Handshake-era call streams a client may resume with `Last-Event-ID`, and the bytes they
    /// hold per key and organisation.
    pub call_streams: CallStreams,
    /// The long-lived streams open now, per session, key and organisation (`mcp.streams`).
    pub stream_slots: Arc<OpenStreams>,
    /// The gateways' external guards: their HTTP client and calls in flight (`callout/`).
    pub(crate) callouts: crate::mcp::callout::Callouts,
    /// The gateways' per-tool quotas, counted on the callers' limiter.
    pub tool_limits: ToolLimits,
    /// The URL-mode elicitations issued for missing connections, until completed or expired.
    pub(crate) elicitations: crate::mcp::elicitations::UrlElicitations,
}

impl McpRuntime {
    pub async fn new(
        state: Arc<State>,
        reqlog: Arc<RequestLog>,
        limiter: RateLimit<dyn RateLimiter>,
        audit: Arc<Audit>,
    ) -> Result<McpRuntime, StoreError> {
        let limits = SessionLimits::of(&state.config().mcp);
        let sessions = Sessions::load(state.store.clone(), limits, state.changes.clone()).await?;
        // Keys revoked and gateways deleted while the process was down (or before their sessions
        // were written ended) end their sessions now.
        let ended = sessions.end_where(|s| !state.gateway_exists(&s.gateway_id));
        let ended = ended + sessions.end_of_unusable_keys(|key| credential_usable(&state, key));
        if ended > 0 {
            tracing::info!(sessions = ended, "ended MCP sessions of deleted gateways or unusable keys");
        }
        let rule_slots = RuleSlots::new(state.config().mcp.rules.concurrency_per_organization);
        Ok(McpRuntime {
            audit,
            apps: AppClients::new(state.clone()),
            reqlog,
            quotas: MinuteQuota::new(limiter.backend().clone(), state.config().alerts.limit_warning_percent),
            sessions,
            state,
            catalogues: FastMap::default(),
            rules: FastMap::default(),
            rule_slots,
            pins: FastMap::default(),
            pins_dropped: std::sync::atomic::AtomicU64::new(0),
            streams: FastMap::default(),
            subscriptions: Subscriptions::default(),
            relayed: DashMap::new(),
            parked: ParkedCalls::default(),
            call_streams: CallStreams::default(),
            stream_slots: Arc::default(),
            callouts: Default::default(),
            tool_limits: ToolLimits::new(limiter),
            elicitations: Default::default(),
        })
    }

    /// What the runtime does about a change of state (a listener of the change feed, so it has
    /// happened before the management API answers): a gateway's or a connection's change drops
    /// the catalogues it affects and tells the open streams; a key's change, or a grant's
    /// revocation (a token revoked, its client deleted, its user's password changed), ends the
    /// sessions of credentials that no longer work at once, instead of at the next flush.
    pub(crate) fn on_change(&self, change: &Change) {
        match change {
            Change::GatewaySaved { gateway_id, .. } => self.gateway_changed(gateway_id),
            Change::GatewayDeleted { gateway_id, .. } => {
                self.tool_limits.forget(gateway_id);
                // Its pins are deleted with it.
                self.drop_pins(gateway_id);
                self.gateway_changed(gateway_id)
            }
            Change::ConnectionSaved { org_id, app_id, user_id: None, .. }
            | Change::ConnectionDeleted { org_id, app_id, user_id: None } => self.app_changed(org_id, app_id),
            // A user's own connection changed or ended: that user's upstream goes (on every
            // instance); a service account whose view the app is listed with changes the lists.
            Change::ConnectionSaved { org_id, app_id, user_id: Some(user), .. }
            | Change::ConnectionDeleted { org_id, app_id, user_id: Some(user) } => {
                self.apps.forget_user_upstream(user, app_id);
                let listed_as = self.state.app(app_id).and_then(|a| a.per_user.clone()).map(|p| p.list_as);
                if listed_as == Some(crate::config::ListAs::ServiceAccount(user.clone())) {
                    self.app_changed(org_id, app_id)
                }
            }
            // A member or a service account gone: whatever upstream of theirs is left closes.
            Change::UserDeleted { user_id: subject, .. }
            | Change::ServiceAccountDeleted { account_id: subject, .. } => self.apps.forget_upstreams_of(subject),
            Change::KeySaved { .. } | Change::KeyDeleted { .. } | Change::GrantDeleted { .. } => {
                self.end_sessions_of_unusable_keys()
            }
            Change::ToolPinsSaved { gateway_id, decided, .. } => {
                self.drop_pins(gateway_id);
                if *decided {
                    self.notify_changed(gateway_id);
                }
            }
            Change::ToolChangeDetected { gateway_id, .. } => self.drop_pins(gateway_id),
            // Already ended here when this instance ended it; another instance's end closes
            // this one's streams of it.
            Change::SessionEnded { session_id, .. } => self.sessions.ended_elsewhere(session_id),
            Change::ElicitationIssued { .. } | Change::ElicitationCompleted { .. } => {
                self.on_elicitation_change(change)
            }
            _ => {}
        }
    }

    /// The gateway's rules, compiled; `None` when it has none, which is all a call of such a
    /// gateway pays. Compiled when the record changes (on any instance: the change feed) or,
    /// for a record this instance has not compiled yet, at its first call.
    pub fn rules(&self, gw: &Gateway) -> Option<Arc<RuleSet>> {
        if gw.rules.is_empty() {
            return None;
        }
        let limits = self.state.config().mcp.rules;
        if let Some(set) = self.rules.get(&gw.id).filter(|s| s.current(gw, &limits)) {
            return Some(set.clone());
        }
        Some(self.compile_rules(gw, &limits))
    }

    fn compile_rules(&self, gw: &Gateway, limits: &crate::config::RulesConfig) -> Arc<RuleSet> {
        let set = rules::compile(&gw.rules, gw.updated_at, limits).unwrap_or_else(|e| {
            tracing::error!(gateway = %gw.id, error = %e, "a gateway's stored rules do not compile: every call is denied");
            rules::deny_all(gw.updated_at, limits)
        });
        let set = Arc::new(set);
        self.rules.insert(gw.id.clone(), set.clone());
        set
    }

    /// The gateway's catalogue, cached for `cache_ttl` when `cache_enabled`.
    ///
    /// Not an `async fn`: a cached catalogue is ready in a future of a few bytes, and only a build
    /// is boxed. Every call awaits its catalogue, so the call's own future would otherwise hold
    /// (and copy in) the build's kilobyte each time, to take the cached one.
    pub fn catalogue<'a>(&'a self, gw: &'a Gateway) -> Quick<'a, Arc<Catalogue>> {
        let c = &gw.configuration;
        if c.cache_enabled {
            if let Some(cat) = self.catalogues.get(&gw.id) {
                if cat.built.is_some_and(|b| b.elapsed() < Duration::from_secs(c.cache_ttl.into())) {
                    return quick::now(cat.clone());
                }
            }
        }
        quick::later(self.build_catalogue(gw))
    }

    /// Builds the gateway's catalogue (and caches it when `cache_enabled`).
    async fn build_catalogue(&self, gw: &Gateway) -> Arc<Catalogue> {
        let c = &gw.configuration;
        let pins = match c.tool_policy {
            ToolPolicy::Off => None,
            _ => match self.gateway_pins(gw).await {
                Ok(pins) => Some(pins),
                Err(e) => {
                    // Without its pins nothing can be checked: no tool is served, nothing cached.
                    tracing::warn!(gateway = gw.id, error = %e, "cannot read the gateway's tool pins");
                    let failures =
                        gw.servers.iter().map(|a| (a.clone(), format!("tool pins unavailable: {e}"))).collect();
                    return Arc::new(Catalogue::failed(failures));
                }
            },
        };
        let mut cat = Catalogue::build(&self.apps, gw, self.state.config().mcp.list_deadline, pins.as_deref()).await;
        let found = std::mem::take(&mut cat.found);
        let recorded = match (&pins, found.is_empty()) {
            (Some(pins), false) => self.record_found(gw, pins, found).await,
            _ => true,
        };
        let cat = Arc::new(cat);
        if c.cache_enabled && recorded {
            self.catalogues.insert(gw.id.clone(), cat.clone());
        }
        cat
    }

    /// The gateway's tool pins: this instance's copy, else read from the store (and kept, if no
    /// pin changed meanwhile).
    async fn gateway_pins(&self, gw: &Gateway) -> Result<Arc<GatewayPins>, StoreError> {
        use std::sync::atomic::Ordering;
        if let Some(p) = self.pins.get(&gw.id) {
            return Ok(p.value().clone());
        }
        let dropped = self.pins_dropped.load(Ordering::Acquire);
        let pins = Arc::new(GatewayPins::new(self.state.tool_pins_of(&gw.org_id, &gw.id).await?));
        if self.pins_dropped.load(Ordering::Acquire) == dropped {
            self.pins.insert(gw.id.clone(), pins.clone());
        }
        Ok(pins)
    }

    fn drop_pins(&self, gateway_id: &str) {
        self.pins_dropped.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.pins.remove(gateway_id);
    }

    /// Writes what a catalogue's build found: definitions pinned on first use, changes now
    /// pending (counted, and told to the feed for the `tool.changed` event). `false` when the
    /// store refused them (the catalogue is then not kept, so the next request tries again).
    async fn record_found(&self, gw: &Gateway, pins: &GatewayPins, found: Vec<Found>) -> bool {
        let now = chrono::Utc::now();
        let mut written = Vec::with_capacity(found.len());
        for f in found {
            let mut pin = pins.get(&f.app_id, &f.tool).cloned().unwrap_or_else(|| ToolPin {
                id: tool_pins::pin_id(&gw.id, &f.app_id, &f.tool),
                org_id: gw.org_id.clone(),
                gateway_id: gw.id.clone(),
                app_id: f.app_id,
                tool: f.tool,
                approved: None,
                pending: None,
                rejected: None,
            });
            match f.verdict {
                Verdict::PinNow => {
                    pin.approved = Some(PinnedDefinition { hash: f.hash, definition: f.definition, at: now })
                }
                Verdict::Pending(reason) => {
                    let id = tool_pins::change_id(&pin.id, &f.hash);
                    let pending =
                        PendingDefinition { id, hash: f.hash, definition: f.definition, reason, detected_at: now };
                    pin.pending = Some(pending);
                }
                Verdict::Serve | Verdict::Hide => continue,
            }
            written.push(pin);
        }
        if let Err(e) = self.state.save_tool_pins(&gw.org_id, &gw.id, &written, false).await {
            tracing::warn!(gateway = gw.id, error = %e, "cannot record the gateway's tool pins");
            return false;
        }
        for pin in &written {
            if let Some(p) = &pin.pending {
                tracing::info!(
                    gateway = gw.id,
                    app = pin.app_id,
                    tool = pin.tool,
                    kind = p.reason.kind(),
                    change = p.id,
                    "a tool definition awaits approval"
                );
                crate::observe::metrics::tool_change_detected(p.reason.kind());
                self.state.tool_change_detected(pin);
            }
        }
        true
    }

    /// Long-lived streams open now: GET streams (listening or resuming a call) and
    /// `subscriptions/listen` streams.
    pub fn open_streams(&self) -> usize {
        self.stream_slots.len()
    }

    /// A place for one more long-lived stream of `who`, under the bounds in force
    /// (`mcp.streams`, read at each opening so that a reload applies to the next stream).
    pub(crate) fn stream_slot(&self, who: Holder<'_>) -> Result<StreamSlot, Refused> {
        self.stream_slots.open(who, &self.state.config().mcp.streams)
    }

    pub fn subscribe(&self, gateway_id: &str) -> broadcast::Receiver<Arc<StreamMessage>> {
        self.streams.entry(gateway_id.to_string()).or_insert_with(|| broadcast::channel(64).0).subscribe()
    }

    pub(super) fn notify_changed(&self, gateway_id: &str) {
        self.catalogues.remove(gateway_id);
        if let Some(tx) = self.streams.get(gateway_id) {
            // The three notifications as one message: a stream wakes and writes once for them,
            // which is what lets a change reach 10,000 streams within a second on two cores
            // (`BENCHMARKS.md`, "Streams").
            let mut event = Vec::new();
            for method in LIST_CHANGED {
                event.extend_from_slice(&sse_event(&jsonrpc::notification_bytes(method, None)));
            }
            let _ =
                tx.send(Arc::new(StreamMessage { to: None, list_changed: LIST_CHANGED, event: Bytes::from(event) }));
        }
    }

    /// A gateway's configuration, apps or allowed tools changed, or it was deleted: then its
    /// sessions end and its open GET streams close.
    pub(crate) fn gateway_changed(&self, gateway_id: &str) {
        self.notify_changed(gateway_id);
        match self.state.gateway(gateway_id).filter(|g| !g.rules.is_empty()) {
            Some(g) => drop(self.compile_rules(&g, &self.state.config().mcp.rules)),
            None => drop(self.rules.remove(gateway_id)),
        }
        if !self.state.gateway_exists(gateway_id) {
            self.sessions.end_where(|s| s.gateway_id == gateway_id);
            // Streams that were not told by their session's end see the channel close.
            self.streams.remove(gateway_id);
        }
    }

    /// Ends the sessions (and so closes the GET streams) of keys that can no longer be used:
    /// revoked, expired, retired by a rotation, or deleted with their gateway; and of OAuth
    /// access tokens whose grant was revoked or ran out. Cheap: reads only the credentials that
    /// have live sessions; run at every flush, so a stream closes within one.
    pub(crate) fn end_sessions_of_unusable_keys(&self) {
        let n = self.sessions.end_of_unusable_keys(|key| credential_usable(&self.state, key));
        if n > 0 {
            tracing::info!(sessions = n, "ended MCP sessions of revoked or expired keys");
        }
    }

    /// What an app announced: a list change makes the gateways that include it (the owner's, or
    /// every organisation's for a shared upstream) drop their catalogues and tell their open
    /// streams, as when the gateway itself changes; a resource update goes to its subscribers.
    /// A GET stream the app opened again has its lists read again (in a task of its own): a
    /// difference is a list change it announced while no stream was open to carry it.
    pub(crate) fn app_notice(self: &Arc<Self>, notice: &AppNotice) {
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
            NoticeKind::StreamOpened => {
                let (mcp, notice) = (Arc::clone(self), notice.clone());
                tokio::spawn(async move {
                    if mcp.apps.lists_differ_from_cached(&notice.owner, &notice.app_id).await {
                        mcp.app_notice(&AppNotice { kind: NoticeKind::ListsChanged, ..notice });
                    }
                });
            }
        }
    }

    /// An organisation's connection to an app changed.
    pub(crate) fn app_changed(&self, org_id: &str, app_id: &str) {
        self.apps.invalidate(org_id, app_id);
        for g in self.gateways_with_app(Some(org_id), app_id) {
            self.notify_changed(&g);
        }
    }

    /// An app's settings changed in the configuration (a reload): every organisation's upstream
    /// of it is dropped, and the gateways that include it tell their open streams.
    pub(crate) fn app_reconfigured(&self, app_id: &str) {
        self.apps.forget_app(app_id);
        for g in self.gateways_with_app(None, app_id) {
            self.notify_changed(&g);
        }
    }

    /// Ids of the gateways that include `app_id`: of one organisation, or of all.
    fn gateways_with_app(&self, org_id: Option<&str>, app_id: &str) -> Vec<String> {
        let includes = |g: &Gateway| org_id.is_none_or(|o| g.org_id == o) && g.servers.iter().any(|s| s == app_id);
        self.state.gateways_where(includes).into_iter().map(|g| g.id.clone()).collect()
    }
}

/// Whether the credential a session is bound to still works. An access token of toolgate's
/// authorization server (`oauth:<grant>`) works while its grant lives: revoking it deletes it,
/// and a refreshed token keeps the grant (and so the session). JWT callers (`jwt:<user>`) and
/// the gateway issuer's tokens (`oauth:<gateway>:<subject>`) have no record to revoke; their
/// tokens expire on their own.
fn credential_usable(state: &State, key_id: &str) -> bool {
    if let Some(rest) = key_id.strip_prefix("oauth:") {
        return match state.grant(rest) {
            Some(g) => g.refresh_expires_ms > crate::base::time::now_ms(),
            // A grant id has no `:`; the gateway issuer's subject follows one.
            None => rest.contains(':'),
        };
    }
    match state.key(key_id) {
        Some(k) => k.unusable(chrono::Utc::now()).is_none(),
        None => key_id.starts_with("jwt:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::OAuthGrant;

    fn grant(id: &str, refresh_expires_ms: i64) -> OAuthGrant {
        OAuthGrant {
            id: id.into(),
            org_id: "org_1".into(),
            user_id: "usr_1".into(),
            client_id: "tgc_1".into(),
            scopes: Vec::new(),
            created_at: chrono::Utc::now(),
            access_hash: String::new(),
            access_expires_ms: 0,
            refresh_hash: String::new(),
            refresh_expires_ms,
            used_refresh: Vec::new(),
            resource: None,
        }
    }

    /// A state on an embedded store in `dir`.
    async fn state(dir: &tempfile::TempDir) -> Arc<State> {
        let yaml = format!(
            "server:\n  listen: 127.0.0.1:0\nstorage:\n  backend: embedded\n  path: {}\n",
            dir.path().display()
        );
        let config = Arc::new(crate::config::Config::parse(&yaml).unwrap());
        State::open(config, Some("tg_test_key".into())).await.unwrap().0
    }

    #[tokio::test]
    async fn an_oauth_credential_is_usable_while_its_grant_lives() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(&dir).await;
        let now = crate::base::time::now_ms();
        state.save_grant(grant("grt_live", now + 60_000)).await.unwrap();
        // An access token that ran out does not end the session: a refresh keeps the grant.
        assert!(credential_usable(&state, "oauth:grt_live"));
        assert!(!credential_usable(&state, "oauth:grt_gone"), "a revoked (deleted) grant");
        state.delete_grant("grt_live").await.unwrap();
        assert!(!credential_usable(&state, "oauth:grt_live"));
        // The gateway issuer's tokens and JWT callers have no record to revoke.
        assert!(credential_usable(&state, "oauth:gw_1:alice"));
        assert!(credential_usable(&state, "jwt:usr_1"));
        assert!(!credential_usable(&state, "key_nope"));
    }

    #[tokio::test]
    async fn a_change_reaches_each_stream_as_one_message_framed_once() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(&dir).await;
        let reqlog = Arc::new(RequestLog::new(state.store.clone()));
        let audit = Arc::new(Audit::new(state.store.clone(), vec![7; 32]));
        let backend: Arc<dyn RateLimiter> = Arc::new(toolgate_filters::rate_limit::LocalRateLimiter::new());
        let limiter = RateLimit::new(Arc::new(toolgate_filters::RateLimitPolicy::default()), backend);
        let mcp = McpRuntime::new(state, reqlog, limiter, audit).await.unwrap();
        let (mut a, mut b) = (mcp.subscribe("gw_1"), mcp.subscribe("gw_1"));
        mcp.notify_changed("gw_1");
        let (ma, mb) = (a.try_recv().unwrap(), b.try_recv().unwrap());
        assert!(a.try_recv().is_err() && b.try_recv().is_err(), "one message per change, not one per list");
        assert!(Arc::ptr_eq(&ma, &mb) && ma.to.is_none());
        assert_eq!(ma.list_changed, LIST_CHANGED);
        let text = std::str::from_utf8(&ma.event).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 3, "{text}");
        for (event, method) in events.iter().zip(LIST_CHANGED) {
            let data = event.strip_prefix("event: message\ndata: ").expect("an SSE event of one message");
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["method"], *method, "{text}");
        }
        // Another gateway's streams hear nothing.
        let mut other = mcp.subscribe("gw_2");
        mcp.notify_changed("gw_1");
        assert!(other.try_recv().is_err());
    }
}
