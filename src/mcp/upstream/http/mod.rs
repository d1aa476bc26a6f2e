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
use crate::mcp::jsonrpc::{self, Id, Incoming, Message, RawJson, Response, RpcErrorObject};

/// Largest JSON body or SSE event accepted from an upstream; a bigger one is a protocol error
/// (bounds memory per call).
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

mod listen;
mod source;
mod sse;
mod stateless;
#[cfg(test)]
mod tests;

use listen::{body_snippet, listen, Opened};
use source::CancelGuard;
pub(crate) use source::HttpSource;
pub use sse::{SseEvent, SseParser};
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
    pub(crate) fn sweep_idle(&self) {
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

    pub(crate) async fn notify(
        &self,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<(), UpstreamError> {
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
