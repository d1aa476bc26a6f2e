//! Streamable HTTP upstream (MCP 2025-03-26, 2025-06-18, 2025-11-25).
//!
//! * **One upstream session per app**, not per gateway client: MCP sessions are expensive for
//!   servers (many keep per-session state and an event store) and tools do not depend on who
//!   calls them. The session is opened on first use (`initialize` + `notifications/initialized`),
//!   concurrent first callers wait on one handshake (`init_lock`), and afterwards every request
//!   sends `Mcp-Session-Id` and `MCP-Protocol-Version` and reads the session lock-free (`ArcSwap`).
//! * **Expired sessions** are re-opened transparently, once per call: the spec says a server
//!   answers 404 to an unknown session id; the TypeScript SDK's example servers (including
//!   `server-everything`) answer 400 "No valid session ID provided" instead, so a 400 whose body
//!   mentions a session counts too. Only the caller whose session was rejected clears it
//!   (compare-and-swap), so a restart of the upstream costs one new handshake, not one per caller.
//! * **Replies** may be `application/json` (one message) or `text/event-stream` (any number of
//!   notifications and server->client requests, then the response); both are read incrementally
//!   and handed out as [`super::ReplyStream`] items as they arrive.
//! * **Transport**: [`super::wire`] (Pingora's pooled HTTP/1.1 connector for `http://`, reqwest
//!   for `https://`).
//! * **Timeouts**: connect (per peer), first byte = response headers, total = the whole call. A call dropped before its response (client gone, total timeout) is cancelled
//!   upstream with `notifications/cancelled`, as the spec asks, because closing an SSE stream is
//!   not a cancellation.
//! * The client's `X-API-Key` is never sent: only the app's configured credential and headers,
//!   plus [`super::CallContext::headers`].
//! * **Server-initiated messages**: each session holds the app's GET stream open (when the
//!   gateway listens for list changes, i.e. in the server), because that is where a server
//!   announces `notifications/*/list_changed` that no call caused. A 405 (no such stream) or a
//!   404 (session gone) ends it; a broken stream is re-opened with back-off; the task stops with
//!   the session. `ping` on it is answered, any other request gets "method not found" (no
//!   gateway client asked for it, so none can answer it).
//! * **Client capabilities**: `sampling` and `elicitation` are declared upstream, since the
//!   gateway relays those requests, arriving on a call's stream, to the calling client, or refuses
//!   them on its behalf when it did not declare them (`dispatch::refusal`).
//! * **Apps of both eras**: an app that answers `server/discover` naming 2026-07-28 may still speak
//!   the handshake era on the same endpoint (the official SDKs' servers and the conformance
//!   suite's reference server do, naming only 2026-07-28). It is spoken to in the calling client's
//!   era ([`super::CallContext::client_era`]) whenever it offers it: a handshake-era client's
//!   calls go over the app's upstream session (sampling, elicitation, subscriptions as with a
//!   handshake app), a 2026-07-28 client's and the gateway's own go stateless. Whether such an app
//!   takes `initialize` is known from `supportedVersions` when it names a handshake version, else
//!   tried once, when a handshake-era client first calls it; an app that refuses it is translated
//!   for those clients (`stateless.rs`).

use crate::base::fast_map::FastMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::wire::{media_type_is, HttpClients, Outgoing, Target, WireResponse};
use super::{
    CallContext, ClientEra, Credential, Event, HttpSettings, NoticeReporter, ReplyStream, Source, TimeoutPhase,
    Timeouts, UpstreamError, UpstreamReply, LATEST_PROTOCOL_VERSION, PROTOCOL_VERSIONS,
};
use crate::mcp::jsonrpc::{self, ErrorObject, Id, Incoming, Message, RawJson, Response};

/// Largest JSON body or SSE event accepted from an upstream; a bigger one is a protocol error
/// (bounds memory per call).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

mod stateless;
pub(crate) use stateless::ChannelSource;
use stateless::Era;

static SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
static PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// An open upstream session.
#[derive(Debug)]
struct Session {
    /// Absent for servers that run without sessions (stateless mode).
    id: Option<HeaderValue>,
    version: HeaderValue,
    init_result: Value,
    /// The task holding the session's GET stream ([`listen`]); stopped with the session.
    listener: parking_lot::Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().take() {
            task.abort();
        }
    }
}

struct Inner {
    app_id: String,
    target: Target,
    /// Content-Type, Accept, User-Agent, the credential and the configured headers.
    headers: HeaderMap,
    timeouts: Timeouts,
    session: ArcSwapOption<Session>,
    /// The version offered in `initialize`.
    protocol_version: &'static str,
    init_lock: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
    /// Where the app's list changes and resource updates are reported.
    notices: NoticeReporter,
    /// The revision the app speaks: pinned by `protocol_version`, else asked once
    /// (`server/discover`).
    era: tokio::sync::OnceCell<Era>,
    /// Whether an app of [`Era::Stateless`] also takes `initialize` (tried once, when a
    /// handshake-era client first calls it; `false` when pinned to 2026-07-28).
    handshake: tokio::sync::OnceCell<bool>,
    /// A stateless app's questions to the client (by the id toolgate gave them), waiting for
    /// the answers.
    waiters: FastMap<u64, tokio::sync::oneshot::Sender<Response>>,
}

/// A Streamable HTTP upstream; cheap to clone (shared state).
#[derive(Clone)]
pub struct HttpUpstream {
    inner: Arc<Inner>,
}

enum Posted {
    Ok(WireResponse),
    /// The upstream no longer knows our session.
    Expired,
}

impl HttpUpstream {
    /// See [`Target::sweep_idle`].
    pub fn sweep_idle(&self) {
        self.inner.target.sweep_idle();
    }

    /// Validates the URL and headers. No I/O. `notices` hears what the app announces.
    pub(crate) fn new(
        app_id: &str,
        settings: &HttpSettings,
        timeouts: Timeouts,
        clients: &HttpClients,
        notices: NoticeReporter,
    ) -> Result<Self, UpstreamError> {
        let target = Target::new(&settings.url, timeouts.connect(), settings.tls_roots.as_ref(), clients)
            .map_err(|e| UpstreamError::Config(format!("app {app_id}: {e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        headers.insert(USER_AGENT, HeaderValue::from_static(crate::outbound::client::USER_AGENT));
        let header = |name: &str, value: &str, secret: bool| -> Result<(HeaderName, HeaderValue), UpstreamError> {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| UpstreamError::Config(format!("app {app_id}: invalid header name \"{name}\"")))?;
            let mut v = HeaderValue::from_str(value)
                .map_err(|_| UpstreamError::Config(format!("app {app_id}: invalid value for header \"{name}\"")))?;
            v.set_sensitive(secret);
            Ok((n, v))
        };
        for (name, value) in &settings.headers {
            let (n, v) = header(name, value, false)?;
            headers.append(n, v);
        }
        match &settings.credential {
            Some(Credential::Bearer(token)) => {
                let (_, v) = header(AUTHORIZATION.as_str(), &format!("Bearer {token}"), true)?;
                headers.insert(AUTHORIZATION, v);
            }
            Some(Credential::Header { name, value }) => {
                let (n, v) = header(name, value, true)?;
                headers.insert(n, v);
            }
            None => {}
        }
        let mut handshake = tokio::sync::OnceCell::new();
        let (protocol_version, era) = match settings.protocol_version.as_deref() {
            None => (LATEST_PROTOCOL_VERSION, tokio::sync::OnceCell::new()),
            Some(crate::mcp::protocol::STATELESS) => {
                handshake = tokio::sync::OnceCell::new_with(Some(false));
                (LATEST_PROTOCOL_VERSION, tokio::sync::OnceCell::new_with(Some(Era::Stateless)))
            }
            Some(v) => {
                let known = PROTOCOL_VERSIONS.iter().copied().find(|known| *known == v).ok_or_else(|| {
                    UpstreamError::Config(format!("app {app_id}: unsupported protocol_version \"{v}\""))
                })?;
                (known, tokio::sync::OnceCell::new_with(Some(Era::Handshake)))
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                app_id: app_id.to_string(),
                target,
                headers,
                timeouts,
                session: ArcSwapOption::empty(),
                protocol_version,
                init_lock: tokio::sync::Mutex::new(()),
                next_id: AtomicU64::new(1),
                notices,
                era,
                handshake,
                waiters: FastMap::default(),
            }),
        })
    }

    #[cfg(test)]
    pub(crate) fn notices_for_test(&self) -> NoticeReporter {
        self.inner.notices.clone()
    }

    pub fn app_id(&self) -> &str {
        &self.inner.app_id
    }

    /// Opens the session now if it is not open; returns the `initialize` result (for an app of
    /// the stateless revision, its `server/discover` result).
    pub async fn connect(&self) -> Result<Value, UpstreamError> {
        let deadline = Instant::now() + self.inner.timeouts.total();
        if self.inner.era(deadline).await? != Era::Handshake {
            return Ok(self.inner.discover(deadline).await?.1);
        }
        Ok(self.inner.ensure_session(deadline).await?.init_result.clone())
    }

    pub fn initialize_result(&self) -> Option<Value> {
        self.inner.session.load().as_ref().map(|s| s.init_result.clone())
    }

    /// The protocol version negotiated with the upstream, if a session is open.
    pub fn protocol_version(&self) -> Option<String> {
        self.inner.session.load().as_ref().and_then(|s| s.version.to_str().ok().map(str::to_owned))
    }

    pub async fn request(
        &self,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<UpstreamReply, UpstreamError> {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.timeouts.total();
        if inner.path(ctx.client_era, deadline).await? == Path::Stateless {
            return Box::pin(stateless::request(inner, method, params, ctx, deadline)).await;
        }
        let mut retried = false;
        loop {
            let session = inner.ensure_session(deadline).await?;
            let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
            let body = jsonrpc::request_bytes(&Id::from(id), method, params.as_ref()).into();
            match inner.post(Some(&session), body, ctx, deadline).await? {
                Posted::Expired if !retried => {
                    tracing::info!(app = %inner.app_id, "upstream session expired; re-initializing");
                    inner.invalidate(&session);
                    retried = true;
                }
                Posted::Expired => {
                    return Err(UpstreamError::Protocol("upstream rejected a session it had just created".into()))
                }
                Posted::Ok(resp) => {
                    let guard =
                        CancelGuard { inner: inner.clone(), session, headers: ctx.headers.clone(), id, armed: true };
                    let source = HttpSource::from_response(resp, id, Some(guard), inner.notices.clone())?;
                    return ReplyStream::new(
                        Source::Http(Box::new(source)),
                        None,
                        deadline,
                        ctx.client_request_id.clone(),
                    )
                    .into_reply()
                    .await;
                }
            }
        }
    }

    pub async fn notify(&self, method: &str, params: Option<RawJson>, ctx: &CallContext) -> Result<(), UpstreamError> {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.timeouts.total();
        // The stateless revision has no client notifications (cancelling is closing the stream):
        // an app of that revision hears them only on a session a handshake-era client's calls
        // opened, and only while it is open.
        if matches!(inner.era.get(), Some(Era::Stateless | Era::Both)) {
            if ctx.client_era == ClientEra::Stateless {
                return Ok(());
            }
            let Some(session) = inner.session.load_full() else { return Ok(()) };
            let body = jsonrpc::notification_bytes(method, params.as_ref()).into();
            match inner.post(Some(&session), body, ctx, deadline).await? {
                Posted::Ok(resp) => resp.finish().await,
                Posted::Expired => inner.invalidate(&session),
            }
            return Ok(());
        }
        let body = Bytes::from(jsonrpc::notification_bytes(method, params.as_ref()));
        let mut retried = false;
        loop {
            let session = inner.ensure_session(deadline).await?;
            match inner.post(Some(&session), body.clone(), ctx, deadline).await? {
                Posted::Ok(resp) => {
                    resp.finish().await;
                    return Ok(());
                }
                Posted::Expired if !retried => {
                    inner.invalidate(&session);
                    retried = true;
                }
                Posted::Expired => {
                    return Err(UpstreamError::Protocol("upstream rejected a session it had just created".into()))
                }
            }
        }
    }

    /// Posts the client's answer to a server->client request, on the path the request came: an
    /// answer to a question of a stateless call (its id is one toolgate gave) to that call, any
    /// other to the app's session. Not retried on an expired session: the request it answers
    /// died with that session.
    pub async fn respond(&self, response: Response, ctx: &CallContext) -> Result<(), UpstreamError> {
        let inner = &self.inner;
        if let Some(asked) = stateless::asked(&response.id) {
            return stateless::answer(inner, asked, response);
        }
        let deadline = Instant::now() + inner.timeouts.total();
        let session = match inner.era.get() {
            // No session, no request of the app's that could be waiting on it.
            Some(Era::Stateless | Era::Both) => inner.session.load_full().ok_or(UpstreamError::Closed)?,
            _ => inner.ensure_session(deadline).await?,
        };
        match inner.post(Some(&session), response.to_bytes().into(), ctx, deadline).await? {
            Posted::Ok(resp) => {
                resp.finish().await;
                Ok(())
            }
            Posted::Expired => {
                inner.invalidate(&session);
                Err(UpstreamError::Closed)
            }
        }
    }

    /// Ends the upstream session with `DELETE` (best effort, bounded by the connect timeout).
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        let Some(session) = inner.session.swap(None) else { return };
        let Some(id) = &session.id else { return };
        let headers = credential_headers(&inner.headers);
        let out = Outgoing {
            base: &headers,
            session: [Some((&SESSION_ID, id)), Some((&PROTOCOL_VERSION, &session.version))],
            extra: &[],
            body: Bytes::new(),
        };
        let delete = async {
            if let Ok(resp) = inner.target.send(Method::DELETE, out).await {
                resp.finish().await;
            }
        };
        let _ = tokio::time::timeout(inner.timeouts.connect(), delete).await;
    }
}

/// The configured headers minus the ones that describe a body.
fn credential_headers(all: &HeaderMap) -> HeaderMap {
    let mut h = all.clone();
    h.remove(CONTENT_TYPE);
    h
}

/// How one call reaches its app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Over the app's upstream session (the handshake era).
    Session,
    /// Without a session (2026-07-28, `stateless.rs`).
    Stateless,
}

impl Inner {
    /// How a call of a client of `client` era reaches the app: in the client's own era whenever
    /// the app speaks it; the gateway's own calls (no client) go stateless to an app that can.
    async fn path(self: &Arc<Self>, client: ClientEra, deadline: Instant) -> Result<Path, UpstreamError> {
        Ok(match self.era(deadline).await? {
            Era::Handshake => Path::Session,
            Era::Both if client == ClientEra::Handshake => Path::Session,
            Era::Stateless if client == ClientEra::Handshake && self.offers_handshake(deadline).await? => Path::Session,
            Era::Both | Era::Stateless => Path::Stateless,
        })
    }

    /// Whether an app that named only 2026-07-28 also takes `initialize`: tried once (the session
    /// it opens is kept for the calls). A refusal (an HTTP or JSON-RPC error, an answer that is
    /// not a handshake) is remembered; an unreachable app is tried again next time.
    async fn offers_handshake(self: &Arc<Self>, deadline: Instant) -> Result<bool, UpstreamError> {
        if let Some(known) = self.handshake.get() {
            return Ok(*known);
        }
        let probe = self.handshake.get_or_try_init(|| async {
            match self.ensure_session(deadline).await {
                Ok(_) => Ok(true),
                Err(e @ (UpstreamError::Http { .. } | UpstreamError::Protocol(_) | UpstreamError::Initialize(_))) => {
                    tracing::info!(app = %self.app_id, error = %e, "the app speaks only 2026-07-28; handshake-era clients reach it translated");
                    Ok(false)
                }
                Err(e) => Err(e),
            }
        });
        // Once per app: boxed, so that the probe's future does not size every call's.
        Box::pin(probe).await.copied()
    }

    /// The open session, or a new one. Concurrent callers share one handshake.
    async fn ensure_session(self: &Arc<Self>, deadline: Instant) -> Result<Arc<Session>, UpstreamError> {
        if let Some(s) = self.session.load_full() {
            return Ok(s);
        }
        // The handshake's future is large and needed once per session: boxed, so that it does not
        // size (and get copied with) the future of every call.
        Box::pin(self.open_session(deadline)).await
    }

    /// The handshake of [`Inner::ensure_session`], unless another caller completed it meanwhile.
    async fn open_session(self: &Arc<Self>, deadline: Instant) -> Result<Arc<Session>, UpstreamError> {
        let _guard = tokio::time::timeout_at(deadline, self.init_lock.lock())
            .await
            .map_err(|_| UpstreamError::Timeout { phase: TimeoutPhase::Total })?;
        if let Some(s) = self.session.load_full() {
            return Ok(s);
        }
        let s = Arc::new(self.initialize(deadline).await?);
        self.session.store(Some(s.clone()));
        self.start_listener(&s);
        tracing::debug!(app = %self.app_id, version = ?s.version, "upstream session opened");
        Ok(s)
    }

    /// Holds the session's GET stream open on a task of its own, when someone wants the app's
    /// notices.
    fn start_listener(self: &Arc<Self>, session: &Arc<Session>) {
        if !self.notices.is_connected() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let task = runtime.spawn(listen(Arc::downgrade(self), Arc::downgrade(session)));
        *session.listener.lock() = Some(task.abort_handle());
    }

    /// Whether `session` is still the one calls use.
    fn is_current(&self, session: &Arc<Session>) -> bool {
        self.session.load().as_ref().is_some_and(|cur| Arc::ptr_eq(cur, session))
    }

    /// `GET` on the session: the stream of server-initiated messages, or why there is none. With
    /// `last_event_id`, the resumption of a call's stream the app closed before its response.
    async fn open_stream(&self, session: &Session, last_event_id: Option<&str>) -> Result<Opened, UpstreamError> {
        let mut headers = credential_headers(&self.headers);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let resume: Vec<(HeaderName, HeaderValue)> = last_event_id
            .and_then(|id| HeaderValue::from_str(id).ok())
            .map(|v| (HeaderName::from_static("last-event-id"), v))
            .into_iter()
            .collect();
        let out = Outgoing {
            base: &headers,
            session: [session.id.as_ref().map(|id| (&SESSION_ID, id)), Some((&PROTOCOL_VERSION, &session.version))],
            extra: &resume,
            body: Bytes::new(),
        };
        let limit = Instant::now() + self.timeouts.first_byte();
        let resp = crate::base::deadline::until(limit, self.target.send(Method::GET, out))
            .await
            .map_err(|_| UpstreamError::Timeout { phase: TimeoutPhase::FirstByte })??;
        let status = resp.status();
        let is_sse = resp.header(&CONTENT_TYPE).is_some_and(|t| media_type_is(t, "text/event-stream"));
        if status == StatusCode::OK && is_sse {
            return Ok(Opened::Stream(resp));
        }
        resp.release();
        if status.is_client_error() {
            Ok(Opened::Refused(status))
        } else {
            Err(UpstreamError::Http { status: status.as_u16(), body: String::new() })
        }
    }

    /// Forgets `session` unless another caller already replaced it.
    fn invalidate(&self, session: &Arc<Session>) {
        self.session.rcu(|cur| match cur {
            Some(c) if Arc::ptr_eq(c, session) => None,
            other => other.clone(),
        });
    }

    async fn initialize(self: &Arc<Self>, deadline: Instant) -> Result<Session, UpstreamError> {
        // The handshake gets its own connect-phase bound so a hanging upstream is reported as
        // such, not as a total timeout of whichever call happened to trigger it.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = RawJson::from_value(&json!({
            "protocolVersion": self.protocol_version,
            // What the gateway relays to its clients; a client that did not declare one of them
            // gets the app's request refused on its behalf (`dispatch::refusal`).
            "capabilities": { "sampling": {}, "elicitation": {}, "roots": {} },
            "clientInfo": { "name": "toolgate", "version": env!("CARGO_PKG_VERSION") },
        }));
        let body = jsonrpc::request_bytes(&Id::from(id), "initialize", Some(&params)).into();
        let ctx = CallContext::default();
        let resp = match self.post(None, body, &ctx, deadline).await? {
            Posted::Ok(r) => r,
            Posted::Expired => return Err(UpstreamError::Protocol("initialize rejected".into())),
        };
        let session_id = resp.header(&SESSION_ID).and_then(|v| HeaderValue::from_bytes(v).ok());
        let source = HttpSource::from_response(resp, id, None, self.notices.clone())?;
        let response = ReplyStream::new(Source::Http(Box::new(source)), None, deadline, Id::NULL)
            .into_reply()
            .await?
            .into_response()
            .await?;
        let result = response.outcome.map_err(UpstreamError::Initialize)?.to_value();
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| UpstreamError::Protocol("initialize result has no protocolVersion".into()))?;
        if !PROTOCOL_VERSIONS.contains(&version) {
            return Err(UpstreamError::Protocol(format!("upstream chose unsupported protocol version \"{version}\"")));
        }
        let version = HeaderValue::from_str(version)
            .map_err(|_| UpstreamError::Protocol("protocolVersion is not a valid header value".into()))?;
        let session = Session { id: session_id, version, init_result: result, listener: Default::default() };
        let note = jsonrpc::notification_bytes("notifications/initialized", None).into();
        match self.post(Some(&session), note, &ctx, deadline).await? {
            Posted::Ok(resp) => {
                resp.finish().await;
                Ok(session)
            }
            Posted::Expired => Err(UpstreamError::Protocol("session rejected right after initialize".into())),
        }
    }

    /// One POST with session headers; maps transport failures and statuses.
    async fn post(
        &self,
        session: Option<&Session>,
        body: Bytes,
        ctx: &CallContext,
        deadline: Instant,
    ) -> Result<Posted, UpstreamError> {
        let session_headers = match session {
            Some(s) => [s.id.as_ref().map(|id| (&SESSION_ID, id)), Some((&PROTOCOL_VERSION, &s.version))],
            None => [None, None],
        };
        let out = Outgoing { base: &self.headers, session: session_headers, extra: &ctx.headers, body };
        let first_byte = Instant::now() + self.timeouts.first_byte();
        let (limit, phase) =
            if first_byte < deadline { (first_byte, TimeoutPhase::FirstByte) } else { (deadline, TimeoutPhase::Total) };
        let resp = match crate::base::deadline::until(limit, self.target.send(Method::POST, out)).await {
            Err(_) => return Err(UpstreamError::Timeout { phase }),
            Ok(result) => result?,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(Posted::Ok(resp));
        }
        let sent_session = session.is_some_and(|s| s.id.is_some());
        let body = body_snippet(resp).await;
        if sent_session
            && (status == StatusCode::NOT_FOUND
                || (status == StatusCode::BAD_REQUEST && body.to_ascii_lowercase().contains("session")))
        {
            return Ok(Posted::Expired);
        }
        tracing::debug!(app = %self.app_id, %status, body = %body, "upstream HTTP error");
        Err(UpstreamError::Http { status: status.as_u16(), body })
    }
}

/// What a `GET` on a session gave.
enum Opened {
    Stream(WireResponse),
    /// 405 (the server offers no such stream), 404 (the session is gone: the next call opens a
    /// new one, with a listener of its own), or another client error: not worth retrying.
    Refused(StatusCode),
}

/// A GET stream that lived this long was healthy: its end starts the back-off afresh.
const LISTEN_HEALTHY: Duration = Duration::from_secs(30);
const LISTEN_BACKOFF_BASE: Duration = Duration::from_secs(1);
const LISTEN_BACKOFF_CAP: Duration = Duration::from_secs(60);

/// Holds a session's GET stream open and handles what the app sends on it, until the session
/// is no longer the current one (or the task is aborted with it). Only weak references are
/// kept between reads, so an upstream that is dropped is not kept alive by its listener.
async fn listen(inner: Weak<Inner>, session: Weak<Session>) {
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        let opened = {
            let (Some(inner), Some(session)) = (inner.upgrade(), session.upgrade()) else { return };
            if !inner.is_current(&session) {
                return;
            }
            match inner.open_stream(&session, None).await {
                Ok(Opened::Stream(resp)) => {
                    inner.notices.stream_opened();
                    Some((resp, inner.notices.clone(), inner.app_id.clone()))
                }
                Ok(Opened::Refused(status)) => {
                    tracing::debug!(app = %inner.app_id, %status, "upstream offers no GET stream on this session");
                    return;
                }
                Err(e) => {
                    tracing::debug!(app = %inner.app_id, error = %e, "cannot open the upstream GET stream");
                    None
                }
            }
        };
        if let Some((resp, notices, app_id)) = opened {
            read_server_stream(resp, &notices, &app_id, &inner, &session).await;
        }
        failures = if started.elapsed() >= LISTEN_HEALTHY { 1 } else { failures + 1 };
        tokio::time::sleep(super::backoff(failures, LISTEN_BACKOFF_BASE, LISTEN_BACKOFF_CAP)).await;
    }
}

/// Reads a GET stream to its end: list changes and resource updates are reported, log messages
/// logged, `ping` answered.
async fn read_server_stream(
    mut resp: WireResponse,
    notices: &NoticeReporter,
    app_id: &str,
    inner: &Weak<Inner>,
    session: &Weak<Session>,
) {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    loop {
        let more = resp.next_into(|piece| parser.feed(piece, &mut events)).await;
        for ev in events.drain(..) {
            if ev.event.as_deref().is_some_and(|t| t != "message") || ev.data.trim().is_empty() {
                continue;
            }
            let mut messages = VecDeque::new();
            if let Err(e) = push_messages(&mut messages, ev.data.as_bytes()) {
                tracing::debug!(app = %app_id, error = %e, "unreadable message on the upstream GET stream");
                continue;
            }
            for m in messages {
                match m {
                    Message::Notification(n) => {
                        notices.notice(&n.method, n.params.as_ref());
                        if n.method == "notifications/message" {
                            let params = n.params.as_ref().map_or("null", RawJson::get);
                            tracing::info!(app = %app_id, params, "upstream log");
                        } else {
                            tracing::debug!(app = %app_id, method = %n.method, "upstream notification");
                        }
                    }
                    Message::Request(r) => answer_server_request(r.id, &r.method, inner, session).await,
                    Message::Response(_) => {}
                }
            }
        }
        if !matches!(more, Ok(true)) {
            return;
        }
    }
}

/// Answers a request that came on the GET stream (no gateway client asked for it, so none can
/// answer it): `ping` with `{}`, anything else with "method not found".
async fn answer_server_request(id: Id, method: &str, inner: &Weak<Inner>, session: &Weak<Session>) {
    let (Some(inner), Some(session)) = (inner.upgrade(), session.upgrade()) else { return };
    let body = if method == "ping" {
        jsonrpc::response_bytes(&id, &json!({}))
    } else {
        let e = ErrorObject::method_not_found(method);
        jsonrpc::error_bytes(&id, e.code, &e.message, None)
    };
    let deadline = Instant::now() + inner.timeouts.first_byte();
    if let Ok(Posted::Ok(resp)) = inner.post(Some(&session), body.into(), &CallContext::default(), deadline).await {
        resp.finish().await;
    }
}

/// The start of an error body, for logs; bounded in size and time.
async fn body_snippet(mut resp: WireResponse) -> String {
    const MAX: usize = 512;
    let mut buf = Vec::new();
    let read = async {
        let mut sink = |piece: &[u8]| {
            buf.extend_from_slice(piece);
            if buf.len() >= MAX {
                return Err(UpstreamError::Closed); // enough for a log line
            }
            Ok(())
        };
        while let Ok(true) = resp.next_into(&mut sink).await {}
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), read).await;
    buf.truncate(MAX);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Sends `notifications/cancelled` for a request dropped before its response.
struct CancelGuard {
    inner: Arc<Inner>,
    session: Arc<Session>,
    headers: Vec<(HeaderName, HeaderValue)>,
    id: u64,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let inner = self.inner.clone();
        let session = self.session.clone();
        let ctx = CallContext { headers: std::mem::take(&mut self.headers), ..Default::default() };
        let id = self.id;
        handle.spawn(async move {
            let body = jsonrpc::notification_bytes(
                "notifications/cancelled",
                Some(&RawJson::from_value(
                    &json!({ "requestId": id, "reason": "gateway client went away or timed out" }),
                )),
            );
            let deadline = Instant::now() + inner.timeouts.connect();
            if let Ok(Posted::Ok(resp)) = inner.post(Some(&session), body.into(), &ctx, deadline).await {
                resp.finish().await;
            }
        });
    }
}

enum Body {
    /// `application/json`: one body, read on first `recv`.
    Json(Option<WireResponse>),
    Sse {
        /// `None` once the stream ended or was handed to [`HttpSource::recycle`].
        body: Option<WireResponse>,
        parser: SseParser,
    },
}

/// The messages of one HTTP reply, in order.
pub(crate) struct HttpSource {
    body: Body,
    our_id: u64,
    queue: VecDeque<Message>,
    cancel: Option<CancelGuard>,
    notices: NoticeReporter,
    /// Times the app's closed stream was resumed with `Last-Event-ID` in this call.
    resumed: u32,
}

/// How often one call's stream is resumed after the app closed it before the response (MCP
/// 2025-11-25 lets a server close a stream and have the client poll with `Last-Event-ID`).
const MAX_RESUMES: u32 = 16;

impl HttpSource {
    fn from_response(
        resp: WireResponse,
        our_id: u64,
        cancel: Option<CancelGuard>,
        notices: NoticeReporter,
    ) -> Result<Self, UpstreamError> {
        if resp.status() == StatusCode::ACCEPTED {
            return Err(UpstreamError::Protocol("upstream answered a request with 202 Accepted".into()));
        }
        let ctype = resp
            .header(&CONTENT_TYPE)
            .and_then(|v| std::str::from_utf8(v).ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim();
        let body = match ctype {
            t if t.eq_ignore_ascii_case("application/json") => Body::Json(Some(resp)),
            t if t.eq_ignore_ascii_case("text/event-stream") => {
                Body::Sse { body: Some(resp), parser: SseParser::default() }
            }
            other => {
                return Err(UpstreamError::Protocol(format!(
                    "unexpected content type \"{other}\" (want application/json or text/event-stream)"
                )))
            }
        };
        Ok(Self { body, our_id, queue: VecDeque::new(), cancel, notices, resumed: 0 })
    }

    pub(crate) fn complete(&mut self) {
        if let Some(mut c) = self.cancel.take() {
            c.armed = false;
        }
    }

    /// The response is in: the server ends its SSE stream right after it (MCP: it SHOULD), so
    /// the end is read in the background and the connection goes back to the pool instead of
    /// being closed, which would cost both sides a new TCP connection on the next call.
    fn recycle(&mut self) {
        if let Body::Sse { body, .. } = &mut self.body {
            if let Some(stream) = body.take() {
                stream.release();
            }
        }
    }

    /// The next event; never waits forever on its own (the caller applies the deadline).
    pub(crate) async fn recv(&mut self) -> Result<Event, UpstreamError> {
        loop {
            while let Some(m) = self.queue.pop_front() {
                match m {
                    Message::Response(r) if r.id.as_u64() == Some(self.our_id) => {
                        self.recycle();
                        return Ok(Event::Final(r));
                    }
                    Message::Response(r) => {
                        tracing::debug!(id = %r.id, "ignoring upstream response to an unknown id");
                    }
                    Message::Notification(n) => {
                        // Relayed to this call's client like any notification, and reported so
                        // that every gateway with the app refreshes its lists.
                        self.notices.notice(&n.method, n.params.as_ref());
                        return Ok(Event::Message(Message::Notification(n)));
                    }
                    other => return Ok(Event::Message(other)),
                }
            }
            match &mut self.body {
                Body::Json(resp) => {
                    let Some(mut resp) = resp.take() else { return Err(UpstreamError::Closed) };
                    let bytes = resp.read_to_end(MAX_MESSAGE_BYTES).await?;
                    push_json_body(&mut self.queue, &bytes)?;
                }
                Body::Sse { body, parser } => {
                    // The app closed the call's stream before its response: resume it.
                    if body.is_none() {
                        let last_id = parser.last_event_id().map(str::to_owned);
                        let retry = parser.retry();
                        let (Some(last_id), Some(guard)) = (last_id, self.cancel.as_ref()) else {
                            return Err(UpstreamError::Closed);
                        };
                        if self.resumed >= MAX_RESUMES {
                            return Err(UpstreamError::Closed);
                        }
                        self.resumed += 1;
                        // The server's `retry:` hint, within reason (the call's deadline still holds).
                        tokio::time::sleep(retry.unwrap_or(Duration::ZERO).min(Duration::from_secs(5))).await;
                        // Boxed: a rare path, whose future would otherwise make every call's bigger.
                        match Box::pin(guard.inner.open_stream(&guard.session, Some(&last_id))).await? {
                            Opened::Stream(resp) => {
                                *body = Some(resp);
                                parser.reset_keeping_id();
                            }
                            Opened::Refused(status) => {
                                return Err(UpstreamError::Http { status: status.as_u16(), body: String::new() })
                            }
                        }
                    }
                    let Some(stream) = body else { return Err(UpstreamError::Closed) };
                    let mut events = Vec::new();
                    match stream.next_into(|piece| parser.feed(piece, &mut events)).await {
                        Ok(true) => {}
                        Ok(false) => {
                            *body = None;
                            parser.finish(&mut events);
                            // Closed before the response: resumed on the next turn, once the
                            // events read so far are delivered.
                        }
                        Err(e) => {
                            *body = None;
                            return Err(e);
                        }
                    }
                    for ev in events {
                        if ev.event.as_deref().is_some_and(|t| t != "message") || ev.data.trim().is_empty() {
                            continue; // priming events (id only) and foreign event types
                        }
                        push_json_body(&mut self.queue, ev.data.as_bytes())?;
                    }
                }
            }
        }
    }
}

/// An `application/json` body: one message or a batch; or several messages one after the other
/// (JSON texts separated by whitespace, in practice one per line), the notifications first and
/// the response last, as servers of the 2026-07-28 revision stream an answer under that type
/// (the conformance suite's reference server does). Only a body that is not one JSON text is
/// read as a sequence, so the usual answer costs one parse.
fn push_json_body(queue: &mut VecDeque<Message>, bytes: &[u8]) -> Result<(), UpstreamError> {
    let first = match jsonrpc::parse(bytes) {
        Err(jsonrpc::ParseError::Parse(e)) => e,
        parsed => return push_parsed(queue, parsed),
    };
    let mut texts = serde_json::Deserializer::from_slice(bytes).into_iter::<&serde_json::value::RawValue>();
    let mut messages = VecDeque::new();
    let mut count = 0;
    for text in texts.by_ref() {
        let Ok(text) = text else { return Err(UpstreamError::Protocol(format!("upstream sent parse error: {first}"))) };
        push_messages(&mut messages, text.get().as_bytes())?;
        count += 1;
    }
    if count < 2 {
        return Err(UpstreamError::Protocol(format!("upstream sent parse error: {first}")));
    }
    queue.append(&mut messages);
    Ok(())
}

fn push_messages(queue: &mut VecDeque<Message>, bytes: &[u8]) -> Result<(), UpstreamError> {
    push_parsed(queue, jsonrpc::parse(bytes))
}

fn push_parsed(
    queue: &mut VecDeque<Message>,
    parsed: Result<Incoming, jsonrpc::ParseError>,
) -> Result<(), UpstreamError> {
    match parsed {
        Ok(Incoming::Single(m)) => queue.push_back(m),
        Ok(Incoming::Batch(items)) => {
            for item in items {
                queue.push_back(
                    item.map_err(|e| UpstreamError::Protocol(format!("invalid message in batch: {}", e.reason)))?,
                );
            }
        }
        Err(e) => return Err(UpstreamError::Protocol(format!("upstream sent {e}"))),
    }
    Ok(())
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` seen on the stream (kept across events, as the SSE spec says). Shared,
    /// not copied: a long id followed by many tiny events would otherwise cost its length once
    /// per event (a 35 KB stream asked for more than 40 MiB before this was an `Arc`).
    pub id: Option<Arc<str>>,
}

/// Incremental `text/event-stream` parser (WHATWG HTML "server-sent events" rules): lines end in
/// LF, CR or CRLF (also split across chunks); `data:` lines accumulate; a blank line dispatches;
/// lines starting with `:` are comments; one space after the colon is dropped.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    event: Option<String>,
    last_id: Option<Arc<str>>,
    /// The previous chunk ended in CR: a LF at the start of the next one belongs to it.
    pending_cr: bool,
    /// The last `retry:` (reconnection time, ms).
    retry_ms: Option<u64>,
}

impl SseParser {
    /// Feeds bytes, appending complete events to `out`. Fails only on an over-long line or event.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), UpstreamError> {
        let mut rest = chunk;
        if self.pending_cr {
            self.pending_cr = false;
            if rest.first() == Some(&b'\n') {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.line);
            let r = self.process_line(&line, out);
            self.line = line;
            self.line.clear();
            r?;
            if rest[pos] == b'\r' {
                match rest.get(pos + 1) {
                    Some(b'\n') => {
                        rest = &rest[pos + 2..];
                        continue;
                    }
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            rest = &rest[pos + 1..];
        }
        if self.line.len() + rest.len() > MAX_MESSAGE_BYTES {
            return Err(UpstreamError::Protocol("SSE line too long".into()));
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    /// End of stream: an event not terminated by a blank line is still delivered (lenient: some
    /// servers close right after the last `data:` line).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let _ = self.process_line(&line, out);
        }
        self.dispatch(out);
    }

    /// The last event id seen (for `Last-Event-ID` on resumption).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection time the server asked for (`retry:`).
    pub fn retry(&self) -> Option<Duration> {
        self.retry_ms.map(Duration::from_millis)
    }

    /// A new stream continues an old one: its event id carries over (until the new one sends its
    /// own), the rest starts afresh.
    pub fn reset_keeping_id(&mut self) {
        let last_id = self.last_id.take();
        let retry_ms = self.retry_ms;
        *self = SseParser { last_id, retry_ms, ..SseParser::default() };
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), UpstreamError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                if self.data.len() > MAX_MESSAGE_BYTES {
                    return Err(UpstreamError::Protocol("SSE event too large".into()));
                }
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => self.last_id = Some(String::from_utf8_lossy(value).into()),
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok()) {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {} // unknown fields
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        let data = String::from_utf8_lossy(&std::mem::take(&mut self.data)).into_owned();
        out.push(SseEvent { event, data, id: self.last_id.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canned servers below speak the handshake era: pinned, so no `server/discover` is
    /// sent first (`discovery_*` tests the probe).
    const HANDSHAKE: &str = "2025-11-25";

    /// Settings of a canned server of the handshake era at `url`.
    fn handshake(url: String) -> HttpSettings {
        HttpSettings {
            url,
            headers: vec![],
            credential: None,
            protocol_version: Some(HANDSHAKE.into()),
            tls_roots: None,
        }
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out).unwrap();
        }
        p.finish(&mut out);
        out
    }

    fn ev(data: &str, id: Option<&str>) -> SseEvent {
        SseEvent { event: None, data: data.into(), id: id.map(Into::into) }
    }

    #[test]
    fn sse_basic_and_multiline() {
        let out = parse_all(&[b"event: message\nid: 1\ndata: {\"a\":1}\n\n: comment\ndata: x\ndata:y\ndata\n\n"]);
        assert_eq!(
            out,
            vec![
                SseEvent { event: Some("message".into()), data: "{\"a\":1}".into(), id: Some("1".into()) },
                ev("x\ny\n", Some("1")),
            ]
        );
    }

    /// A long id followed by many tiny events: every event shares the one id (the fuzzer found
    /// the copy per event: a 35 KB stream asking for more than 40 MiB).
    #[test]
    fn sse_long_id_is_shared_not_copied() {
        let mut stream = format!("id: {}\n", "x".repeat(20_000)).into_bytes();
        stream.extend(b"data:\n\n".repeat(2_000));
        let out = parse_all(&[&stream]);
        assert_eq!(out.len(), 2_000);
        let first = out[0].id.as_ref().unwrap();
        assert_eq!(first.len(), 20_000);
        assert!(out.iter().all(|e| e.id.as_ref().is_some_and(|id| Arc::ptr_eq(id, first))));
    }

    #[test]
    fn sse_line_endings_and_chunk_splits() {
        let whole: &[u8] = b"data: one\r\n\r\ndata: two\r\rdata: three\n\n";
        let expect = vec![ev("one", None), ev("two", None), ev("three", None)];
        assert_eq!(parse_all(&[whole]), expect);
        // Every possible split point, including between CR and LF.
        for i in 0..whole.len() {
            assert_eq!(parse_all(&[&whole[..i], &whole[i..]]), expect, "split at {i}");
        }
        // Byte by byte.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(parse_all(&bytes), expect);
    }

    #[test]
    fn sse_priming_event_and_unterminated_tail() {
        let out = parse_all(&[b"id: abc\ndata:\n\nid: def\ndata: {\"x\":2}"]);
        assert_eq!(out, vec![ev("", Some("abc")), ev("{\"x\":2}", Some("def"))]);
        let out = parse_all(&[b"id: only\n\n: keepalive\n\n"]);
        assert!(out.is_empty());
        let out = parse_all(&[b"retry: 100\nfoo: bar\ndata:  two spaces\n\n"]);
        assert_eq!(out, vec![ev(" two spaces", None)]);
    }

    #[test]
    fn sse_limits() {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        let big = vec![b'a'; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(p.feed(&big, &mut out), Err(UpstreamError::Protocol(_))));
    }

    #[test]
    fn push_messages_rejects_garbage() {
        let mut q = VecDeque::new();
        assert!(matches!(push_messages(&mut q, b"{not json"), Err(UpstreamError::Protocol(_))));
        assert!(matches!(push_messages(&mut q, b"{\"jsonrpc\":\"1.0\"}"), Err(UpstreamError::Protocol(_))));
        push_messages(&mut q, br#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"result":{}}]"#).unwrap();
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn settings_validation() {
        let client = HttpClients::default();
        let base = HttpSettings {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: vec![],
            credential: None,
            protocol_version: None,
            tls_roots: None,
        };
        assert!(HttpUpstream::new("a", &base, Timeouts::default(), &client, NoticeReporter::default()).is_ok());
        for bad in [
            HttpSettings { url: "not a url".into(), ..base.clone() },
            HttpSettings { url: "ftp://x/mcp".into(), ..base.clone() },
            HttpSettings { headers: vec![("bad name".into(), "v".into())], ..base.clone() },
            HttpSettings { headers: vec![("x-ok".into(), "bad\nvalue".into())], ..base.clone() },
            HttpSettings { credential: Some(Credential::Bearer("a\nb".into())), ..base.clone() },
        ] {
            let e =
                HttpUpstream::new("a", &bad, Timeouts::default(), &client, NoticeReporter::default()).err().unwrap();
            assert!(matches!(e, UpstreamError::Config(_)), "{bad:?}");
            assert!(!e.to_string().contains("a\nb"));
        }
    }

    /// A minimal raw-TCP HTTP server that answers each request with the next canned response and
    /// records the requests, so that session handling is tested without an MCP SDK in the loop.
    async fn canned_server(responses: Vec<String>) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let handle = tokio::spawn(async move {
            let mut seen = Vec::new();
            for resp in responses {
                let (mut sock, _) = listener.accept().await.unwrap();
                let request = super::super::test_http::read_request(&mut sock, &mut Vec::new()).await;
                seen.push(request.unwrap_or_default());
                sock.write_all(resp.as_bytes()).await.unwrap();
                sock.shutdown().await.ok();
            }
            seen
        });
        (url, handle)
    }

    fn http_resp(status: &str, headers: &str, body: &str) -> String {
        format!("HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
    }

    #[tokio::test]
    async fn reinitializes_once_on_404_and_parses_sse() {
        let init = |sid: &str, id: u64| {
            http_resp(
                "200 OK",
                &format!("Content-Type: application/json\r\nMcp-Session-Id: {sid}\r\n"),
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-06-18","capabilities":{{}},"serverInfo":{{"name":"t","version":"1"}}}}}}"#
                ),
            )
        };
        let accepted = http_resp("202 Accepted", "", "");
        let sse_body = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n: ping\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"ok\":true}}\n\n";
        let responses = vec![
            init("s1", 1),
            accepted.clone(),
            http_resp("404 Not Found", "", "gone"),
            init("s2", 3),
            accepted.clone(),
            http_resp("200 OK", "Content-Type: text/event-stream\r\n", sse_body),
        ];
        let (url, server) = canned_server(responses).await;
        let up = HttpUpstream::new(
            "t",
            &HttpSettings {
                url,
                headers: vec![("X-Tenant".into(), "t1".into())],
                credential: Some(Credential::Bearer("tok".into())),
                protocol_version: Some(HANDSHAKE.into()),
                tls_roots: None,
            },
            Timeouts::default(),
            &HttpClients::default(),
            NoticeReporter::default(),
        )
        .unwrap();
        let ctx = CallContext { client_request_id: Id::from("client-7"), ..Default::default() };
        up.connect().await.unwrap();
        assert_eq!(up.protocol_version().as_deref(), Some("2025-06-18"));
        let reply = up.request("tools/call", Some(RawJson::from_value(&json!({"name":"x"}))), &ctx).await.unwrap();
        let UpstreamReply::Stream(mut s) = reply else { panic!("progress first means a stream") };
        let Some(Ok(Message::Notification(n))) = s.next().await else { panic!() };
        assert_eq!(n.method, "notifications/progress");
        let Some(Ok(Message::Response(r))) = s.next().await else { panic!() };
        assert_eq!(r.id, json!("client-7"));
        assert_eq!(r.outcome.unwrap(), json!({"ok": true}));
        assert!(s.next().await.is_none());
        let seen = server.await.unwrap();
        // Request 3 used the old session, request 6 the new one and the negotiated version.
        assert!(seen[2].to_ascii_lowercase().contains("mcp-session-id: s1"));
        assert!(seen[5].to_ascii_lowercase().contains("mcp-session-id: s2"));
        assert!(seen[5].to_ascii_lowercase().contains("mcp-protocol-version: 2025-06-18"));
        assert!(seen[5].to_ascii_lowercase().contains("authorization: bearer tok"));
        assert!(seen[5].to_ascii_lowercase().contains("x-tenant: t1"));
        assert!(seen[5].to_ascii_lowercase().contains("accept: application/json, text/event-stream"));
        assert!(!seen[0].to_ascii_lowercase().contains("mcp-session-id"));
    }

    #[tokio::test]
    async fn malformed_upstream_json_is_a_protocol_error() {
        let init = http_resp(
            "200 OK",
            "Content-Type: application/json\r\n",
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-03-26","capabilities":{}}}"#,
        );
        let responses = vec![
            init,
            http_resp("202 Accepted", "", ""),
            http_resp("200 OK", "Content-Type: application/json\r\n", "{oops"),
            http_resp("200 OK", "Content-Type: text/html\r\n", "<html>"),
            http_resp("500 Internal Server Error", "", "boom"),
        ];
        let (url, server) = canned_server(responses).await;
        let up = HttpUpstream::new(
            "t",
            &handshake(url),
            Timeouts::default(),
            &HttpClients::default(),
            NoticeReporter::default(),
        )
        .unwrap();
        let ctx = CallContext::default();
        assert!(matches!(up.request("tools/list", None, &ctx).await, Err(UpstreamError::Protocol(_))));
        assert!(matches!(up.request("tools/list", None, &ctx).await, Err(UpstreamError::Protocol(_))));
        match up.request("tools/list", None, &ctx).await {
            Err(UpstreamError::Http { status: 500, body }) => assert_eq!(body, "boom"),
            other => panic!("{other:?}"),
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn discovery_finds_a_stateless_app_and_calls_it_without_a_session() {
        let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
        let responses = vec![
            json_resp(
                r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#,
            ),
            json_resp(
                r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"resultType":"complete"}}"#,
            ),
            // An error of this revision comes under a 4xx status and is still the answer.
            http_resp(
                "400 Bad Request",
                "Content-Type: application/json\r\n",
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: nope"}}"#,
            ),
        ];
        let (url, server) = canned_server(responses).await;
        let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
        let up =
            HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
                .unwrap();
        let call = |name: &str| RawJson::from_value(&json!({ "name": name, "arguments": {} }));
        let ctx = CallContext { client_request_id: Id::from(7u64), headers: vec![], client_era: ClientEra::Stateless };
        let r = up.request("tools/call", Some(call("echo")), &ctx).await.unwrap().into_response().await.unwrap();
        assert_eq!(r.id, Id::from(7u64));
        assert_eq!(r.outcome.unwrap().to_value()["content"][0]["text"], "hi");
        let r = up.request("tools/call", Some(call("nope")), &ctx).await.unwrap().into_response().await.unwrap();
        assert_eq!(r.outcome.unwrap_err().code, -32602);
        let seen = server.await.unwrap();
        assert!(seen[0].contains("server/discover") && !seen.iter().any(|r| r.contains("\"initialize\"")), "{seen:?}");
        let call = seen[1].to_ascii_lowercase();
        for h in ["mcp-protocol-version: 2026-07-28", "mcp-method: tools/call", "mcp-name: echo"] {
            assert!(call.contains(h), "{h} missing: {call}");
        }
        assert!(seen[1].contains(r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#), "{}", seen[1]);
        assert!(!call.contains("mcp-session-id"));
    }

    /// The app of each call's path, from the requests a canned server saw.
    fn is_handshake_call(req: &str, session: &str) -> bool {
        let r = req.to_ascii_lowercase();
        r.contains(&format!("mcp-session-id: {session}")) && r.contains("mcp-protocol-version: 2025-11-25")
    }

    fn is_stateless_call(req: &str) -> bool {
        let r = req.to_ascii_lowercase();
        !r.contains("mcp-session-id") && r.contains("mcp-protocol-version: 2026-07-28")
    }

    /// An app that names only 2026-07-28 in `server/discover` and still takes `initialize` (as
    /// the official SDKs' servers do) is spoken to in each client's era: a handshake-era
    /// client's calls over a session (opened once), a 2026-07-28 client's and the gateway's own
    /// without one.
    #[tokio::test]
    async fn a_dual_era_app_is_spoken_to_in_the_client_s_era() {
        let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
        let done = |id: u64| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"resultType":"complete","tools":[]}}}}"#)
        };
        let responses = vec![
            json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#),
            http_resp(
                "200 OK",
                "Content-Type: application/json\r\nMcp-Session-Id: s1\r\n",
                r#"{"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
            ),
            http_resp("202 Accepted", "", ""),
            json_resp(&done(3)),
            json_resp(&done(4)),
            json_resp(&done(5)),
            json_resp(&done(6)),
            http_resp("202 Accepted", "", ""),
        ];
        let (url, server) = canned_server(responses).await;
        let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
        let up =
            HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
                .unwrap();
        let ctx = |client_era| CallContext { client_request_id: Id::from(9u64), headers: vec![], client_era };
        let call = || Some(RawJson::from_value(&json!({ "name": "echo", "arguments": {} })));
        for era in [ClientEra::Handshake, ClientEra::Stateless] {
            let r = up.request("tools/call", call(), &ctx(era)).await.unwrap().into_response().await.unwrap();
            assert_eq!(r.id, Id::from(9u64));
            assert!(r.outcome.is_ok(), "{era:?}");
        }
        up.request("tools/list", None, &ctx(ClientEra::None)).await.unwrap().into_response().await.unwrap();
        up.request("tools/call", call(), &ctx(ClientEra::Handshake)).await.unwrap().into_response().await.unwrap();
        // A handshake-era client's notification goes to the session; a 2026-07-28 client's nowhere.
        up.notify("notifications/roots/list_changed", None, &ctx(ClientEra::Stateless)).await.unwrap();
        up.notify("notifications/roots/list_changed", None, &ctx(ClientEra::Handshake)).await.unwrap();
        let seen = server.await.unwrap();
        assert_eq!(seen.len(), 8, "{seen:#?}");
        assert!(seen[0].contains("server/discover"), "{}", seen[0]);
        assert!(seen[1].contains(r#""method":"initialize""#) && seen[1].contains("2025-11-25"), "{}", seen[1]);
        assert!(is_handshake_call(&seen[3], "s1"), "the handshake-era client's call: {}", seen[3]);
        assert!(is_stateless_call(&seen[4]), "the 2026-07-28 client's call: {}", seen[4]);
        assert!(seen[4].contains(r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#), "{}", seen[4]);
        assert!(is_stateless_call(&seen[5]) && seen[5].contains("tools/list"), "the gateway's own: {}", seen[5]);
        assert!(is_handshake_call(&seen[6], "s1"), "the session is kept: {}", seen[6]);
        assert!(is_handshake_call(&seen[7], "s1") && seen[7].contains("roots/list_changed"), "{}", seen[7]);
    }

    /// An app of 2026-07-28 alone refuses `initialize`: handshake-era clients reach it
    /// translated, and it is not asked again.
    #[tokio::test]
    async fn a_stateless_only_app_is_translated_for_handshake_era_clients_and_tried_once() {
        let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
        let responses = vec![
            json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#),
            http_resp("400 Bad Request", "Content-Type: text/plain\r\n", "initialize is not a method of 2026-07-28"),
            json_resp(r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"resultType":"complete"}}"#),
            json_resp(r#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"complete"}}"#),
        ];
        let (url, server) = canned_server(responses).await;
        let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
        let up =
            HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
                .unwrap();
        let ctx = CallContext { client_era: ClientEra::Handshake, ..Default::default() };
        for _ in 0..2 {
            let call = RawJson::from_value(&json!({ "name": "echo", "arguments": {} }));
            let r = up.request("tools/call", Some(call), &ctx).await.unwrap().into_response().await.unwrap();
            assert!(r.outcome.is_ok());
        }
        let seen = server.await.unwrap();
        assert!(seen[1].contains(r#""method":"initialize""#), "{}", seen[1]);
        assert!(is_stateless_call(&seen[2]) && is_stateless_call(&seen[3]), "{seen:#?}");
        assert!(!seen[3].contains("initialize"));
    }

    /// A 2026-07-28 server may stream an answer as `application/json` (chunked), one message per
    /// line, notifications first (the conformance suite's reference server does): each message is
    /// read, the response last.
    #[tokio::test]
    async fn a_json_answer_of_several_lines_is_read_message_by_message() {
        let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
        let lines = concat!(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":50}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"Streaming complete"}]}}"#,
        );
        let chunked = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            lines.len(),
            lines
        );
        let responses = vec![
            json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#),
            chunked,
            // Not JSON at all stays a protocol error.
            json_resp("{\"jsonrpc\":\"2.0\"}\n{oops"),
        ];
        let (url, server) = canned_server(responses).await;
        let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
        let up =
            HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
                .unwrap();
        let ctx =
            CallContext { client_request_id: Id::from("c"), client_era: ClientEra::Stateless, ..Default::default() };
        let call = || Some(RawJson::from_value(&json!({ "name": "test_streaming_elicitation", "arguments": {} })));
        let UpstreamReply::Stream(mut s) = up.request("tools/call", call(), &ctx).await.unwrap() else {
            panic!("a notification first means a stream")
        };
        let Some(Ok(Message::Notification(n))) = s.next().await else { panic!("the progress first") };
        assert_eq!(n.method, "notifications/progress");
        let Some(Ok(Message::Response(r))) = s.next().await else { panic!("then the response") };
        assert_eq!(r.id, Id::from("c"));
        assert_eq!(r.outcome.unwrap().to_value()["content"][0]["text"], "Streaming complete");
        assert!(matches!(up.request("tools/call", call(), &ctx).await, Err(UpstreamError::Protocol(_))));
        server.await.unwrap();
    }

    #[test]
    fn a_json_body_read_as_one_message_or_a_sequence() {
        let mut q = VecDeque::new();
        push_json_body(&mut q, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").unwrap();
        assert_eq!(q.len(), 1);
        let mut q = VecDeque::new();
        push_json_body(&mut q, b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\r\n {\"jsonrpc\":\"2.0\",\"method\":\"b\"}{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}").unwrap();
        assert_eq!(q.len(), 3);
        assert!(matches!(q.pop_back(), Some(Message::Response(_))));
        for bad in [
            &b"{oops"[..],
            b"",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"} nope",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n{\"x\":1}",
        ] {
            let mut q = VecDeque::new();
            assert!(
                matches!(push_json_body(&mut q, bad), Err(UpstreamError::Protocol(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert!(q.is_empty());
        }
    }

    #[tokio::test]
    async fn list_all_follows_next_cursor() {
        let json_resp = |body: String| http_resp("200 OK", "Content-Type: application/json\r\n", &body);
        let responses = vec![
            json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#.into()),
            http_resp("202 Accepted", "", ""),
            json_resp(
                r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a"},{"name":"b"}],"nextCursor":"page-2"}}"#
                    .into(),
            ),
            json_resp(r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"c"}]}}"#.into()),
        ];
        let (url, server) = canned_server(responses).await;
        let up = super::super::Upstream::Http(
            HttpUpstream::new(
                "t",
                &handshake(url),
                Timeouts::default(),
                &HttpClients::default(),
                NoticeReporter::default(),
            )
            .unwrap(),
        );
        let tools = up.list_tools(&CallContext::default()).await.unwrap();
        let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let seen = server.await.unwrap();
        assert!(seen[3].contains(r#""params":{"cursor":"page-2"}"#), "{}", seen[3]);
        assert!(!seen[2].contains("cursor"));
    }

    #[tokio::test]
    async fn unsupported_version_and_connect_errors() {
        let responses = vec![http_resp(
            "200 OK",
            "Content-Type: application/json\r\n",
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"1999-01-01","capabilities":{}}}"#,
        )];
        let (url, _server) = canned_server(responses).await;
        let up = HttpUpstream::new(
            "t",
            &handshake(url),
            Timeouts::default(),
            &HttpClients::default(),
            NoticeReporter::default(),
        )
        .unwrap();
        match up.connect().await {
            Err(UpstreamError::Protocol(m)) => assert!(m.contains("1999-01-01")),
            other => panic!("{other:?}"),
        }
        // Nothing listens on port 1.
        let up = HttpUpstream::new(
            "t",
            &HttpSettings {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![],
                credential: None,
                protocol_version: Some(HANDSHAKE.into()),
                tls_roots: None,
            },
            Timeouts::default(),
            &HttpClients::default(),
            NoticeReporter::default(),
        )
        .unwrap();
        assert!(matches!(up.connect().await, Err(UpstreamError::Connect(_))));
    }

    #[tokio::test]
    async fn first_byte_timeout() {
        // Accepts and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let _hold = tokio::spawn(async move {
            let mut socks = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                socks.push(s);
            }
        });
        let t = Timeouts { connect_ms: 1000, first_byte_ms: 200, total_ms: 5000 };
        let up =
            HttpUpstream::new("t", &handshake(url), t, &HttpClients::default(), NoticeReporter::default()).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(up.connect().await.unwrap_err(), UpstreamError::Timeout { phase: TimeoutPhase::FirstByte });
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
