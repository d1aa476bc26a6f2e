//! The apps' clients and their lists, per organisation: credentials differ per organisation, so an
//! upstream (and its upstream MCP session) belongs to one organisation's connection. Built-in apps
//! have no credentials and are shared.

use crate::base::fast_map::FastMap;
use crate::base::pair_key::pair;
use crate::config::{AppConfig, AppUpstream};
use crate::data::state::State;
use crate::mcp::failures::FailureRuns;
use crate::mcp::health::AppHealth;
use crate::mcp::jsonrpc::RawJson;
use crate::mcp::upstream::{
    AppNotice, CallContext, Credential, HttpSettings, ListMethod, StdioSettings, Timeouts, Transport, Upstream,
    UpstreamError, UpstreamReply, UpstreamSettings, UpstreamShared,
};
use dashmap::DashMap;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;
use toolgate_filters::Principal;

mod caller_pool;
mod user_upstreams;
pub(crate) use user_upstreams::UpstreamOwner;

mod exchanged;

#[derive(Debug, Clone, thiserror::Error)]
pub enum AppError {
    #[error("unknown app `{0}`")]
    UnknownApp(String),
    #[error("app `{0}` is not connected")]
    NotConnected(String),
    #[error("app `{app}`: {error}")]
    Upstream { app: String, error: Box<UpstreamError> },
    /// The app's OAuth tokens could not be renewed; the connection is marked `error`.
    #[error("app `{app}`: {error}")]
    Authorization { app: String, error: crate::identity::app_oauth::AppOAuthError },
    /// A call to an app that exchanges each caller's token came without one (`exchanged.rs`).
    #[error("app `{0}` is called with each caller's own token (oauth.token_exchange): this call names no caller")]
    NoCallerToken(String),
    /// A call to an app connected by each user whose credential names no user (a gateway key,
    /// or a token whose subject is no member).
    #[error("{}", no_caller(app, *gateway_key))]
    NoCaller { app: String, gateway_key: bool },
    /// The caller has not connected an app connected by each user.
    #[error("{}", not_connected_by_caller(app, url, *service_account))]
    NotConnectedByCaller { app: String, url: String, service_account: bool },
    /// Every one of the app's per-caller upstreams (a per-user app's, an exchanging app's) is in use.
    #[error("app `{app}` is busy: its {most} per-caller sessions are all in use; try again shortly")]
    UserSessionsFull { app: String, most: usize },
}

fn no_caller(app: &str, gateway_key: bool) -> String {
    let why = if gateway_key { "a gateway key names no user" } else { "this credential names no member" };
    format!("`{app}` is connected by each user; {why}: call with your own API key or sign in with OAuth")
}

fn not_connected_by_caller(app: &str, url: &str, service_account: bool) -> String {
    if service_account {
        format!("`{app}` is connected by each user and this service account has no connection of it: an administrator must connect it for the service account")
    } else {
        format!(
            "`{app}` is connected by each user and you have not connected it yet: connect it at {url}, then try again"
        )
    }
}

/// Whose upstream serves `org_id`'s calls to `app`: apps without credentials are the same for
/// every organisation, so they share one upstream (owner `""`).
fn upstream_owner<'a>(org_id: &'a str, app: &AppConfig) -> &'a str {
    if app.needs_credentials() {
        org_id
    } else {
        ""
    }
}

/// How long a discovered list is trusted before the app is asked again.
const LIST_TTL: Duration = Duration::from_secs(60);

type Key = (String, String);
/// (org, app, list method) -> (when fetched, items).
/// (organisation, app, method) -> (when listed, the items, the app's `ttlMs` for them if it gave one).
type ListCache = DashMap<(String, String, &'static str), (Instant, Arc<Vec<Value>>, Option<u64>)>;

pub struct AppClients {
    state: Arc<State>,
    shared: UpstreamShared,
    upstreams: FastMap<Key, Arc<Upstream>>,
    lists: ListCache,
    /// The latest tool listing any organisation got of each app (app id -> tools): what the
    /// app catalogue shows an organisation that has not connected the app. Never used to call
    /// anything, so another organisation's credentials are never used on its behalf.
    last_tools: DashMap<String, Arc<Vec<Value>>>,
    /// The apps' notices (list changes, resource updates), until the server's background
    /// service takes them.
    notices: parking_lot::Mutex<Option<UnboundedReceiver<AppNotice>>>,
    /// Each app's health as its background probe found it (`health.rs`).
    pub health: AppHealth,
    /// Runs of failed exchanges per organisation and app (`error.critical`).
    pub failures: FailureRuns,
    /// One renewal of a connection's OAuth tokens at a time, by connection id (the
    /// organisation's, or one user's, of one app).
    renewing: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// Each caller's own upstream of an app connected by each user (`user_upstreams.rs`), by
    /// member or service account and app.
    users: caller_pool::CallerPool<(String, String), Upstream>,
    /// Token exchange: the per-caller upstreams of the apps that exchange (`exchanged.rs`).
    exchanged: exchanged::CallerUpstreams,
}

impl AppClients {
    pub fn new(state: Arc<State>) -> AppClients {
        let mut shared = UpstreamShared::new(state.config().mcp.max_stdio_processes);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        shared.report_notices_to(tx);
        AppClients {
            state,
            shared,
            upstreams: FastMap::default(),
            lists: DashMap::new(),
            last_tools: DashMap::new(),
            health: AppHealth::default(),
            failures: FailureRuns::default(),
            notices: parking_lot::Mutex::new(Some(rx)),
            renewing: DashMap::new(),
            exchanged: Default::default(),
            users: Default::default(),
        }
    }

    /// The receiver of the apps' notices; `None` after the first call.
    pub(crate) fn take_notices(&self) -> Option<UnboundedReceiver<AppNotice>> {
        self.notices.lock().take()
    }

    /// Forgets an app's cached lists: `owner`'s, or every organisation's when `owner` is empty
    /// (a shared upstream, as in [`AppNotice::owner`]).
    pub(crate) fn forget_lists(&self, owner: &str, app_id: &str) {
        self.lists.retain(|(org, app, _), _| !(app == app_id && (owner.is_empty() || org == owner)));
    }

    fn app(&self, id: &str) -> Result<Arc<AppConfig>, AppError> {
        self.state.app(id).ok_or_else(|| AppError::UnknownApp(id.into()))
    }

    /// The organisation's upstream for an app (the one its lists are read with), made on first
    /// use.
    pub fn upstream(&self, org_id: &str, app_id: &str) -> Result<Arc<Upstream>, AppError> {
        let app = self.app(app_id)?;
        if !self.state.is_connected(org_id, app_id) {
            return Err(AppError::NotConnected(app_id.into()));
        }
        self.upstream_of(UpstreamOwner::for_lists(org_id, &app), &app)
    }

    /// `owner`'s upstream for an app, made on first use with `owner`'s credential: the one
    /// through which every call, list and renewal reaches the app.
    pub(crate) fn upstream_of(&self, owner: UpstreamOwner<'_>, app: &AppConfig) -> Result<Arc<Upstream>, AppError> {
        if matches!(owner, UpstreamOwner::Subject { .. }) {
            return self.user_upstream(owner, app);
        }
        let (org_id, app_id) = (owner.org_id(), app.id.as_str());
        if let Some(u) = self.upstreams.get(pair(&(org_id, app_id))) {
            return Ok(u.value().clone());
        }
        let key = (org_id.to_string(), app.id.clone());
        let settings = self.settings_with(app, self.credential(owner, app));
        let up = Arc::new(
            Upstream::for_owner(&key.0, &settings, &self.shared)
                .map_err(|error| AppError::Upstream { app: app_id.into(), error: Box::new(error) })?,
        );
        Ok(self.upstreams.entry(key).or_insert(up).value().clone())
    }

    /// Stdio app processes running now.
    pub fn stdio_processes(&self) -> usize {
        self.shared.stdio_processes()
    }

    /// The stdio upstreams of an app that exist now (each owner's): what its health probe
    /// asks, so that a probe starts no process of its own.
    pub(crate) fn stdio_upstreams(&self, app_id: &str) -> Vec<Arc<Upstream>> {
        self.upstreams
            .iter()
            .filter(|u| u.key().1 == app_id && matches!(**u.value(), Upstream::Stdio(_)))
            .map(|u| u.value().clone())
            .collect()
    }

    /// The health probe's settings of an app: no organisation's credential, and for a remote
    /// app the header `X-Toolgate-Probe: health`, so that the app's operator can tell probes
    /// from calls.
    pub(crate) fn probe_settings(&self, app: &AppConfig) -> UpstreamSettings {
        let mut settings = self.settings_with(app, None);
        if let Transport::Http(h) = &mut settings.transport {
            h.headers.push(("X-Toolgate-Probe".into(), "health".into()));
        }
        settings
    }

    /// Notes how an exchange of `org_id` with `app_id` went, in its runs of failures
    /// ([`FailureRuns`]). The app's health is its probe's business (`health.rs`): a call's
    /// failure may be its organisation's alone (a credential refused).
    fn note_health(&self, org_id: &str, app_id: &str, error: Option<&UpstreamError>) {
        match error {
            // Toolgate's own limits and shutdown say nothing about the app.
            Some(UpstreamError::ProcessLimit { .. } | UpstreamError::ShutDown | UpstreamError::Config(_)) => {}
            None => self.failures.succeeded(org_id, app_id),
            Some(e) => {
                let alerts = &self.state.config().alerts;
                self.failures.failed(org_id, app_id, e, alerts.app_failures, alerts.app_failure_window);
            }
        }
    }

    /// Whose upstream serves `org_id`'s calls to `app_id`: the organisation, or `""` for an app
    /// shared by all (as in [`AppNotice::owner`]).
    pub(crate) fn owner_of(&self, org_id: &str, app_id: &str) -> String {
        match self.app(app_id) {
            Ok(app) => upstream_owner(org_id, &app).to_string(),
            Err(_) => org_id.to_string(),
        }
    }

    fn settings_with(&self, app: &AppConfig, credential: Option<String>) -> UpstreamSettings {
        let transport = match &app.upstream {
            AppUpstream::Url(url) => Transport::Http(HttpSettings {
                url: url.clone(),
                headers: vec![],
                protocol_version: app.protocol_version.clone(),
                tls_roots: app.tls_roots.as_ref().map(|r| r.pem.clone()),
                credential: credential.map(|secret| {
                    if app.credential_header.eq_ignore_ascii_case("authorization") && app.credential_prefix == "Bearer "
                    {
                        Credential::Bearer(secret)
                    } else {
                        Credential::Header {
                            name: app.credential_header.clone(),
                            value: format!("{}{secret}", app.credential_prefix),
                        }
                    }
                }),
            }),
            AppUpstream::Command { argv, env } => {
                let mut env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                if let Some(secret) = credential {
                    env.push(("TOOLGATE_APP_API_KEY".into(), secret));
                }
                Transport::Stdio(StdioSettings { command: argv.clone(), env, cwd: None })
            }
            AppUpstream::Builtin(name) => Transport::Builtin(name.clone()),
        };
        let t = app.timeouts;
        UpstreamSettings {
            app_id: app.id.clone(),
            timeouts: Timeouts {
                connect_ms: t.connect.as_millis() as u64,
                first_byte_ms: t.first_byte.as_millis() as u64,
                total_ms: t.total.as_millis() as u64,
            },
            transport,
        }
    }

    /// The connection's API key, or its OAuth access token, opened from its sealed form.
    fn credential(&self, owner: UpstreamOwner<'_>, app: &AppConfig) -> Option<String> {
        let conn = owner.connection(&self.state, &app.id)?;
        let sealed = conn.sealed_credentials.as_ref()?;
        let plain = self.state.sealer.open(sealed).ok()?;
        let v: Value = serde_json::from_slice(&plain).ok()?;
        v.get("api_key").or_else(|| v.get("access_token")).and_then(Value::as_str).map(str::to_string)
    }

    /// The OAuth tokens of a connected OAuth connection.
    fn oauth_tokens(&self, owner: UpstreamOwner<'_>, app_id: &str) -> Option<crate::identity::app_oauth::Tokens> {
        let conn = owner.connection(&self.state, app_id)?;
        if conn.auth_type != "oauth" || conn.status != "connected" {
            return None;
        }
        let plain = self.state.sealer.open(conn.sealed_credentials.as_ref()?).ok()?;
        serde_json::from_slice(&plain).ok()
    }

    /// The connection's OAuth tokens for a call (read once per call: none for any other kind
    /// of connection), renewed first when they are due.
    async fn tokens_for_call(
        &self,
        owner: UpstreamOwner<'_>,
        app_id: &str,
    ) -> Result<Option<crate::identity::app_oauth::Tokens>, AppError> {
        let tokens = self.oauth_tokens(owner, app_id);
        if tokens.as_ref().is_some_and(|t| t.due(chrono::Utc::now().timestamp())) {
            // Boxed, here and below: a renewal (2 KB of future) is rare, and every call holds
            // what it awaits inline.
            Box::pin(self.renew(owner, app_id, None)).await?;
            return Ok(self.oauth_tokens(owner, app_id));
        }
        Ok(tokens)
    }

    /// The access token a call was sent with, when the app refused it with 401: worth a renewal
    /// and one more try.
    fn refused<'t>(
        tokens: &'t Option<crate::identity::app_oauth::Tokens>,
        error: Option<&UpstreamError>,
    ) -> Option<&'t str> {
        match error {
            Some(UpstreamError::Http { status: 401, .. }) => tokens.as_ref().map(|t| t.access_token.as_str()),
            _ => None,
        }
    }

    /// Renews the connection's OAuth access token: when it is due (`rejected` none), or when the
    /// app refused it (`rejected`, the token it refused). One renewal at a time per connection:
    /// a call that waited finds the token renewed and goes on with it. A renewal the provider
    /// refuses marks the connection `error` (connect it again). The organisation's connection
    /// and each user's own are renewed apart.
    async fn renew(&self, owner: UpstreamOwner<'_>, app_id: &str, rejected: Option<&str>) -> Result<(), AppError> {
        let now = chrono::Utc::now().timestamp();
        let due = |t: &crate::identity::app_oauth::Tokens| match rejected {
            Some(refused) => t.access_token == refused,
            None => t.due(now),
        };
        let org_id = owner.org_id();
        let Some(conn) = owner.connection(&self.state, app_id) else { return Ok(()) };
        let lock = self.renewing.entry(conn.id.clone()).or_default().clone();
        let _one_at_a_time = lock.lock().await;
        let Some(tokens) = self.oauth_tokens(owner, app_id).filter(|t| due(t)) else { return Ok(()) };
        let (Some(app), Some(conn)) = (self.state.app(app_id), owner.connection(&self.state, app_id)) else {
            return Ok(());
        };
        let mut renewed = (*conn).clone();
        let allow_http = self.state.config().environment.allows_http();
        match crate::identity::app_oauth::refresh(&app, allow_http, &tokens).await {
            Ok(fresh) => {
                let plain = serde_json::to_vec(&fresh).unwrap_or_default();
                renewed.sealed_credentials = Some(self.state.sealer.seal(&plain));
                let user = renewed.user_id.as_deref().unwrap_or("");
                tracing::info!(org = org_id, user, app = app_id, "renewed the app's OAuth access token");
                let _ = self.state.renew_connection(renewed).await;
                Ok(())
            }
            Err(
                error @ (crate::identity::app_oauth::AppOAuthError::Unreachable(_)
                | crate::identity::app_oauth::AppOAuthError::Discovery(_)),
            ) => {
                // The provider may be back soon: the connection stays, this call fails.
                Err(AppError::Authorization { app: app_id.into(), error })
            }
            Err(error) => {
                let user = renewed.user_id.as_deref().unwrap_or("");
                tracing::warn!(org = org_id, user, app = app_id, %error, "the app's OAuth authorization could not be renewed");
                renewed.status = "error".into();
                renewed.sealed_credentials = None;
                let _ = self.state.save_connection(renewed).await;
                Err(AppError::Authorization { app: app_id.into(), error })
            }
        }
    }

    /// One list of an app (`tools/list`, `resources/list`, ...), all pages, from cache when fresh.
    pub async fn list(&self, org_id: &str, app_id: &str, method: ListMethod) -> Result<Arc<Vec<Value>>, AppError> {
        let key = (org_id.to_string(), app_id.to_string(), method.method());
        if let Some(e) = self.lists.get(&key) {
            if e.0.elapsed() < LIST_TTL {
                return Ok(e.1.clone());
            }
        }
        self.refresh(org_id, app_id, method).await
    }

    pub async fn refresh(&self, org_id: &str, app_id: &str, method: ListMethod) -> Result<Arc<Vec<Value>>, AppError> {
        let app = self.app(app_id)?;
        let owner = UpstreamOwner::for_lists(org_id, &app);
        let tokens = self.tokens_for_call(owner, app_id).await?;
        let mut up = self.upstream(org_id, app_id)?;
        let mut listed = up.list_all_with_ttl(method, &CallContext::default()).await;
        if let Some(refused) = Self::refused(&tokens, listed.as_ref().err()) {
            self.renew(owner, app_id, Some(refused)).await?;
            up = self.upstream(org_id, app_id)?;
            listed = up.list_all_with_ttl(method, &CallContext::default()).await;
        }
        // An app without resources or prompts answers their lists with a JSON-RPC error: an
        // answer, not a failure (the cause of `toolgate_app_up` reading 0 for the built-in
        // `time` app once a catalogue was built again, after a reload).
        let answered = matches!(listed, Err(UpstreamError::Protocol(_))) && method != ListMethod::Tools;
        self.note_health(org_id, app_id, listed.as_ref().err().filter(|_| !answered));
        let (items, ttl_ms) = match listed {
            Ok((items, ttl_ms)) => (Arc::new(items), ttl_ms),
            // An app without resources or prompts has an empty list of them.
            Err(UpstreamError::Protocol(_)) if method != ListMethod::Tools => (Arc::new(vec![]), None),
            Err(error) => return Err(AppError::Upstream { app: app_id.into(), error: Box::new(error) }),
        };
        self.remember(org_id, app_id, method, &items, ttl_ms);
        Ok(items)
    }

    fn remember(&self, org_id: &str, app_id: &str, method: ListMethod, items: &Arc<Vec<Value>>, ttl_ms: Option<u64>) {
        let key = (org_id.to_string(), app_id.to_string(), method.method());
        self.lists.insert(key, (Instant::now(), items.clone(), ttl_ms));
        if method == ListMethod::Tools {
            self.last_tools.insert(app_id.to_string(), items.clone());
        }
    }

    /// `method`'s list read again for a check in the background ([`Self::lists_differ_from_cached`]):
    /// with the connection's token as it is, never renewed here, and without a mark on the app's
    /// health. A failure tells nothing the next call will not find out, and a renewal refused or a
    /// failure marked by a background check would take a call's own clear error from it.
    async fn reread(&self, org_id: &str, app_id: &str, method: ListMethod) -> Option<Arc<Vec<Value>>> {
        let up = self.upstream(org_id, app_id).ok()?;
        let (items, ttl_ms) = up.list_all_with_ttl(method, &CallContext::default()).await.ok()?;
        let items = Arc::new(items);
        self.remember(org_id, app_id, method, &items, ttl_ms);
        Some(items)
    }

    /// Whether an app's lists differ from those cached: each list cached for it (`owner`'s, or for
    /// a shared upstream any organisation's, one per method) is read again ([`Self::reread`]) and
    /// compared, and the cache keeps the new reading. For an app whose GET stream (re)opened, since a change
    /// it announced while none was open is lost.
    pub(crate) async fn lists_differ_from_cached(&self, owner: &str, app_id: &str) -> bool {
        let mut cached: Vec<(String, ListMethod, Arc<Vec<Value>>)> = Vec::new();
        for e in self.lists.iter() {
            let (org, app, method) = e.key();
            let Some(m) = ListMethod::ALL.into_iter().find(|m| m.method() == *method) else { continue };
            if app == app_id && (owner.is_empty() || org == owner) && !cached.iter().any(|c| c.1 == m) {
                cached.push((org.clone(), m, e.value().1.clone()));
            }
        }
        for (org, method, before) in cached {
            if self.reread(&org, app_id, method).await.is_some_and(|now| now != before) {
                return true;
            }
        }
        false
    }

    /// How long the app said its last listing of `method` may be kept (`ttlMs`), if it said.
    pub(crate) fn list_ttl(&self, org_id: &str, app_id: &str, method: ListMethod) -> Option<u64> {
        self.lists.get(&(org_id.to_string(), app_id.to_string(), method.method())).and_then(|e| e.2)
    }

    pub async fn tools(&self, org_id: &str, app_id: &str) -> Result<Arc<Vec<Value>>, AppError> {
        self.list(org_id, app_id, ListMethod::Tools).await
    }

    /// The latest tool listing of an app that any organisation got, if one did.
    pub(crate) fn last_tools(&self, app_id: &str) -> Option<Arc<Vec<Value>>> {
        self.last_tools.get(app_id).map(|t| t.value().clone())
    }

    pub(crate) async fn refresh_tools(&self, org_id: &str, app_id: &str) -> Result<Arc<Vec<Value>>, AppError> {
        self.refresh(org_id, app_id, ListMethod::Tools).await
    }

    /// Sends a request to an app for `who` (the call's credential) in `org_id`: with the
    /// organisation's connection, or for an app connected by each user with the caller's own
    /// ([`Self::owner_for_call`]), on that owner's upstream ([`Self::upstream_of`]).
    pub async fn request(
        &self,
        org_id: &str,
        who: Option<&Principal>,
        app_id: &str,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<UpstreamReply, AppError> {
        // Token exchange: the caller's own upstream; never the organisation's for such an app.
        if let Some(up) = &ctx.caller_upstream {
            return Box::pin(self.request_on_caller_upstream(org_id, app_id, up, method, params, ctx)).await;
        }
        let app = self.app(app_id)?;
        if app.oauth.as_ref().is_some_and(|o| o.token_exchange.is_some()) {
            return Err(AppError::NoCallerToken(app_id.into()));
        }
        let owner = self.owner_for_call(org_id, who, &app)?;
        if owner == UpstreamOwner::Organization(org_id) && !self.state.is_connected(org_id, app_id) {
            return Err(AppError::NotConnected(app_id.into()));
        }
        let tokens = self.tokens_for_call(owner, app_id).await?;
        // Kept for one retry only when a 401 could be cured by renewing an OAuth token.
        let again = tokens.as_ref().and(params.clone());
        let mut up = self.upstream_of(owner, &app)?;
        let mut reply = up.request(method, params, ctx).await;
        if let Some(refused) = Self::refused(&tokens, reply.as_ref().err()) {
            Box::pin(self.renew(owner, app_id, Some(refused))).await?;
            up = self.upstream_of(owner, &app)?;
            reply = up.request(method, again, ctx).await;
        }
        if let (UpstreamOwner::Subject { .. }, Ok(UpstreamReply::Stream(stream))) = (owner, &mut reply) {
            stream.went_on(&up);
        }
        self.note_health(org_id, app_id, reply.as_ref().err());
        reply.map_err(|error| AppError::Upstream { app: app_id.into(), error: Box::new(error) })
    }

    /// Forgets an organisation's upstream and lists of an app (its connection changed).
    pub(crate) fn invalidate(&self, org_id: &str, app_id: &str) {
        self.forget_lists(org_id, app_id);
        let Ok(app) = self.app(app_id) else { return };
        if let Some((_, up)) = self.upstreams.remove(pair(&(upstream_owner(org_id, &app), app.id.as_str()))) {
            tokio::spawn(async move { up.shutdown().await });
        }
    }

    /// Forgets every owner's upstream and lists of an app whose settings changed (a reload):
    /// the next call connects with the new ones. Calls in flight finish on the old upstream.
    pub(crate) fn forget_app(&self, app_id: &str) {
        self.forget_lists("", app_id);
        self.forget_exchanged(app_id);
        for up in self.users.remove_app(app_id) {
            tokio::spawn(async move { up.shutdown().await });
        }
        let keys: Vec<Key> = self.upstreams.iter().filter(|u| u.key().1 == app_id).map(|u| u.key().clone()).collect();
        for key in keys {
            if let Some((_, up)) = self.upstreams.remove(&key) {
                tokio::spawn(async move { up.shutdown().await });
            }
        }
    }

    /// Closes upstream connections idle past their time; run now and then by the flusher, so
    /// an app that gets no more calls does not hold its sockets open.
    pub(crate) fn sweep_idle(&self) {
        for up in self.upstreams.iter() {
            up.value().sweep_idle();
        }
        self.sweep_exchanged();
        for up in self.users.sweep(caller_pool::CALLER_IDLE, |_| false, Upstream::sweep_idle) {
            tokio::spawn(async move { up.shutdown().await });
        }
    }

    /// Stops every upstream (stdio processes included).
    pub async fn shutdown(&self) {
        let mut all: Vec<Arc<Upstream>> = self.upstreams.iter().map(|u| u.value().clone()).collect();
        self.upstreams.clear();
        all.extend(self.users.drain());
        all.extend(self.exchanged.drain().iter().filter_map(|slot| slot.take()));
        futures_util::future::join_all(all.iter().map(|up| up.shutdown())).await;
    }
}
