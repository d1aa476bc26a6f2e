//! Upstream transports: how the gateway talks to the MCP servers behind it.
//!
//! One [`Upstream`] per configured app, built once from [`UpstreamSettings`] with
//! [`Upstream::from_settings`] and shared (`Arc`) by every gateway session that uses the app:
//!
//! * [`http::HttpUpstream`]: Streamable HTTP (MCP 2025-03-26 and later). One upstream MCP session
//!   per app, opened lazily and reused; pooled keep-alive connections.
//! * [`stdio::StdioUpstream`]: a supervised child process speaking newline-delimited JSON-RPC.
//!   One process per app, shared by all callers, ids rewritten so that callers never collide.
//! * [`Upstream::Builtin`]: an in-process [`BuiltinApp`], answered without I/O.
//!
//! All three answer the same operations ([`Upstream::request`], [`Upstream::notify`],
//! [`Upstream::respond`], [`Upstream::list_all`]), so the dispatcher does not care which one an app
//! uses. A request's answer is an [`UpstreamReply`]: the final response, or a [`ReplyStream`] of the
//! messages the server sends before it (progress, logging, server->client requests) that ends with
//! the response. The final response always carries the caller's id
//! ([`CallContext::client_request_id`]), never the upstream-facing one.
//!
//! Errors are one enum, [`UpstreamError`]; the gateway maps it to a JSON-RPC error at its edge.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::mcp::builtin::BuiltinApp;
use crate::mcp::content::ContentCheck;
use crate::mcp::jsonrpc::{Id, Message, RawJson, Response, RpcErrorObject};

mod cause;
pub mod http;
pub(crate) mod stdio;
pub(crate) mod wire;

/// The versions spoken to apps: the one list of [`crate::mcp::protocol`].
pub(crate) use crate::mcp::protocol::{LATEST as LATEST_PROTOCOL_VERSION, VERSIONS as PROTOCOL_VERSIONS};

/// Per-app timeouts, in milliseconds in the YAML (`connect_ms`, `first_byte_ms`, `total_ms`).
///
/// * `connect`: TCP+TLS connect (HTTP); spawning the process and the `initialize` handshake (stdio).
/// * `first_byte`: until the upstream's response headers arrive (HTTP only; a stdio server has no
///   headers, and a silent long-running tool is legitimate there).
/// * `total`: the whole request, including the session handshake when it has to happen and every
///   streamed message. Progress notifications do not extend it: a hard upper bound is what protects
///   the gateway's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Timeouts {
    pub connect_ms: u64,
    pub first_byte_ms: u64,
    pub total_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect_ms: 5_000, first_byte_ms: 30_000, total_ms: 60_000 }
    }
}

impl Timeouts {
    pub(crate) fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }
    pub(crate) fn first_byte(&self) -> Duration {
        Duration::from_millis(self.first_byte_ms)
    }
    pub(crate) fn total(&self) -> Duration {
        Duration::from_millis(self.total_ms)
    }
}

/// A credential sent to an HTTP upstream on every request. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Credential {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// Any header, e.g. `X-Api-Key: <key>` for servers that want one.
    Header { name: String, value: String },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Credential::Header { name, .. } => write!(f, "Header({name}: <redacted>)"),
        }
    }
}

/// Streamable HTTP upstream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpSettings {
    /// The MCP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    pub url: String,
    /// Extra static headers (non-secret, e.g. `X-Tenant`).
    pub headers: Vec<(String, String)>,
    pub credential: Option<Credential>,
    /// The version offered in `initialize` (default: the newest). Some servers are much slower
    /// at newer versions (server-everything sends an SSE priming event per answer at 2025-11-25).
    pub protocol_version: Option<String>,
    /// PEM certificates an `https` app's chain may end at, besides the webpki roots.
    pub tls_roots: Option<Arc<[u8]>>,
}

/// Stdio upstream: `command[0]` run with `command[1..]`, `env` added to a minimal environment.
#[derive(Clone, PartialEq)]
pub(crate) struct StdioSettings {
    pub command: Vec<String>,
    /// Set in the child in addition to [`stdio::INHERITED_ENV`]; the gateway's own environment
    /// (which may hold `TOOLGATE_ADMIN_KEY`) is otherwise not passed on.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

impl fmt::Debug for StdioSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // env values are often credentials.
        let env: Vec<_> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("StdioSettings")
            .field("command", &self.command)
            .field("env", &env)
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// Which transport an app uses (exactly one of `url`, `command`, `builtin` in the YAML).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transport {
    Http(HttpSettings),
    Stdio(StdioSettings),
    Builtin(String),
}

/// Everything needed to build one app's [`Upstream`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpstreamSettings {
    /// The app id: used in logs and in error messages, never sent upstream.
    pub app_id: String,
    pub timeouts: Timeouts,
    pub transport: Transport,
}

/// Resources shared by all upstreams of one gateway process; build one at start-up.
pub(crate) struct UpstreamShared {
    /// The connection pools of Streamable HTTP upstreams.
    http: wire::HttpClients,
    /// Global bound on running stdio processes; a start beyond it fails with
    /// [`UpstreamError::ProcessLimit`] instead of waiting, because running processes are long
    /// lived and a waiter could wait forever.
    stdio_permits: Arc<Semaphore>,
    max_stdio_processes: usize,
    /// Where the apps' notices go ([`Self::report_notices_to`]).
    notices: Option<tokio::sync::mpsc::UnboundedSender<AppNotice>>,
}

impl UpstreamShared {
    /// `max_stdio_processes`: how many stdio apps may have a running process at once.
    pub(crate) fn new(max_stdio_processes: usize) -> Self {
        Self {
            http: wire::HttpClients::default(),
            stdio_permits: Arc::new(Semaphore::new(max_stdio_processes)),
            max_stdio_processes,
            notices: None,
        }
    }

    /// Stdio app processes running now.
    pub(crate) fn stdio_processes(&self) -> usize {
        self.max_stdio_processes.saturating_sub(self.stdio_permits.available_permits())
    }

    /// Where upstreams built from now on report what their apps announce ([`AppNotice`]).
    pub(crate) fn report_notices_to(&mut self, tx: tokio::sync::mpsc::UnboundedSender<AppNotice>) {
        self.notices = Some(tx);
    }
}

/// `base` doubled for each failure after the first (1-based), at most `cap`: stdio restarts and
/// HTTP stream reconnects back off alike.
pub(crate) fn backoff(failures: u32, base: Duration, cap: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    base.saturating_mul(1u32 << exp).min(cap)
}

/// Something an app announced that the gateway acts on beyond the call it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppNotice {
    /// The organisation whose upstream announced it; empty for an upstream shared by all
    /// organisations (an app without credentials).
    pub owner: String,
    pub app_id: String,
    pub kind: NoticeKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoticeKind {
    /// `notifications/{tools,prompts,resources}/list_changed`: the cached lists are stale.
    ListsChanged,
    /// `notifications/resources/updated`: the clients subscribed to `uri` want to know.
    ResourceUpdated { uri: String },
    /// The app's GET stream opened, or opened again: what the app announced while none was open
    /// is lost (an app without an event store drops it), so its cached lists are read again.
    StreamOpened,
}

/// An upstream's end of the notice reports: a no-op when nobody listens (unit tests). One `Arc`,
/// because every HTTP call's reply holds a copy.
#[derive(Clone, Default)]
pub(crate) struct NoticeReporter(Option<Arc<(tokio::sync::mpsc::UnboundedSender<AppNotice>, String, String)>>);

impl NoticeReporter {
    fn new(tx: tokio::sync::mpsc::UnboundedSender<AppNotice>, owner: &str, app_id: &str) -> Self {
        NoticeReporter(Some(Arc::new((tx, owner.to_string(), app_id.to_string()))))
    }

    /// Whether anyone listens (only then is an HTTP app's GET stream worth holding open).
    pub(crate) fn is_connected(&self) -> bool {
        self.0.is_some()
    }

    /// Reports the notifications the gateway acts on; ignores the rest.
    pub(crate) fn notice(&self, method: &str, params: Option<&RawJson>) {
        let kind = match method {
            "notifications/tools/list_changed"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed" => NoticeKind::ListsChanged,
            "notifications/resources/updated" => {
                #[derive(Deserialize)]
                struct Updated {
                    uri: String,
                }
                match params.and_then(|p| p.read::<Updated>().ok()) {
                    Some(u) => NoticeKind::ResourceUpdated { uri: u.uri },
                    None => return,
                }
            }
            _ => return,
        };
        self.report(kind);
    }

    /// The app's GET stream is open (again) ([`NoticeKind::StreamOpened`]).
    pub(crate) fn stream_opened(&self) {
        self.report(NoticeKind::StreamOpened);
    }

    fn report(&self, kind: NoticeKind) {
        let Some(to) = &self.0 else { return };
        let (tx, owner, app_id) = &**to;
        // A closed receiver means the server is stopping; nothing is left to tell.
        let _ = tx.send(AppNotice { owner: owner.clone(), app_id: app_id.clone(), kind });
    }
}

impl Default for UpstreamShared {
    fn default() -> Self {
        Self::new(crate::config::DEFAULT_MAX_STDIO_PROCESSES)
    }
}

/// Per-call information from the gateway.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The id the client used; the final response carries it. `Null` when the gateway calls on
    /// its own behalf (e.g. `tools/list` to build its catalogue).
    pub client_request_id: Id,
    /// Extra headers for this call only (HTTP), e.g. a per-connection credential. The gateway
    /// must never put the client's own `X-API-Key` here.
    pub headers: Vec<(::http::HeaderName, ::http::HeaderValue)>,
    /// The revision the calling client speaks: an HTTP app that speaks both is spoken to in the
    /// client's own ([`http`]'s module documentation).
    pub client_era: ClientEra,
    /// Token exchange: the upstream made for this call's caller (`mcp/apps/exchanged.rs`), which
    /// the call goes on instead of its organisation's.
    pub caller_upstream: Option<Arc<Upstream>>,
}

/// Which protocol era the client behind a call speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientEra {
    /// No client: the gateway calls on its own behalf (its catalogue's lists).
    #[default]
    None,
    /// A client of a session opened with `initialize` (2025-11-25 and before).
    Handshake,
    /// A client of the stateless revision (2026-07-28).
    Stateless,
}

/// The phase whose timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    Connect,
    FirstByte,
    Total,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::FirstByte => "first_byte",
            TimeoutPhase::Total => "total",
        })
    }
}

/// Why an upstream call failed. Messages name no secret.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream timed out ({phase})")]
    Timeout { phase: TimeoutPhase },
    #[error("cannot connect to upstream: {0}")]
    Connect(String),
    /// Non-2xx HTTP status; `body` is the first few hundred bytes, for logs.
    #[error("upstream answered HTTP {status}")]
    Http { status: u16, body: String },
    /// The upstream broke the protocol: malformed JSON, wrong content type, missing response...
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// The upstream answered `initialize` with a JSON-RPC error.
    #[error("upstream rejected initialize: {0}")]
    Initialize(RpcErrorObject),
    /// The stream or connection ended before the response.
    #[error("upstream closed the connection before responding")]
    Closed,
    /// The stdio process could not be started.
    #[error("cannot start upstream process: {0}")]
    Spawn(String),
    /// The stdio process died while the request was pending.
    #[error("upstream process exited: {0}")]
    Exited(String),
    /// The stdio process crashed recently and is in restart back-off.
    #[error("upstream restarting after a crash; retry in {} ms", retry_after.as_millis())]
    Backoff { retry_after: Duration },
    /// The global bound on stdio processes ([`UpstreamShared::new`]) is reached.
    #[error("limit of {limit} running stdio upstream processes reached")]
    ProcessLimit { limit: usize },
    /// [`Upstream::shutdown`] was called.
    #[error("upstream is shut down")]
    ShutDown,
    #[error("invalid upstream settings: {0}")]
    Config(String),
}

/// What a request got back.
#[derive(Debug)]
pub enum UpstreamReply {
    /// The response (id = the client's), nothing before it.
    Response(Response),
    /// Messages to relay, then the response. Dropping the stream before its end cancels the
    /// request upstream (`notifications/cancelled`).
    Stream(ReplyStream),
}

impl UpstreamReply {
    /// Waits for the final response, discarding anything streamed before it. Only for callers that
    /// relay nothing (the gateway's own `tools/list`); server->client requests in the stream are
    /// left unanswered.
    pub(crate) async fn into_response(self) -> Result<Response, UpstreamError> {
        match self {
            UpstreamReply::Response(r) => Ok(r),
            UpstreamReply::Stream(mut s) => {
                while let Some(item) = s.next().await {
                    if let Message::Response(r) = item? {
                        return Ok(r);
                    }
                }
                Err(UpstreamError::Closed)
            }
        }
    }
}

/// A message of a reply stream, as produced by a transport.
pub(crate) enum Event {
    /// A notification or server->client request to relay.
    Message(Message),
    /// The response to the request (id still the upstream-facing one).
    Final(Response),
}

/// Where a reply's messages come from. The HTTP source (it holds the pooled connection's
/// session) is boxed so that a [`ReplyStream`] stays small.
pub(crate) enum Source {
    Http(Box<http::HttpSource>),
    Stdio(stdio::StdioSource),
    /// A stateless app's call, made (round after round) by a task.
    Channel(http::ChannelSource),
}

impl Source {
    async fn recv(&mut self) -> Result<Event, UpstreamError> {
        match self {
            Source::Http(s) => s.recv().await,
            Source::Stdio(s) => s.recv().await,
            Source::Channel(s) => s.recv().await,
        }
    }

    /// The request is answered: nothing to cancel any more.
    fn complete(&mut self) {
        match self {
            Source::Http(s) => s.complete(),
            Source::Stdio(s) => s.complete(),
            Source::Channel(_) => {}
        }
    }
}

/// The messages an upstream sends in answer to one request, ending with the response.
pub struct ReplyStream {
    source: Source,
    peeked: Option<Event>,
    deadline: Instant,
    client_id: Id,
    done: bool,
    /// The gateway's content checks, applied to every message as it is read (`mcp/content/`).
    check: Option<Arc<ContentCheck>>,
    /// The gateway's response guards, asked about the final response (`mcp/callout/`).
    guards: Option<Arc<crate::mcp::callout::CallGuards>>,
    /// The caller's own upstream the call went on (a per-user app's, an exchanging app's): the
    /// app's requests on this stream are answered there, never on another caller's or the
    /// organisation's. Weak: an answer that comes after it closed has nowhere to go.
    via: Option<std::sync::Weak<Upstream>>,
}

impl fmt::Debug for ReplyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyStream").field("done", &self.done).finish_non_exhaustive()
    }
}

#[cfg(test)]
impl ReplyStream {
    /// A call whose answer never comes (tests of what holds one).
    pub(crate) fn idle_for_test() -> Self {
        Self::new(
            Source::Channel(http::ChannelSource::idle()),
            None,
            Instant::now() + Duration::from_secs(600),
            Id::NULL,
        )
    }
}

impl ReplyStream {
    pub(crate) fn new(source: Source, first: Option<Event>, deadline: Instant, client_id: Id) -> Self {
        Self { source, peeked: first, deadline, client_id, done: false, check: None, guards: None, via: None }
    }

    /// The stream of a call made on a caller's own upstream `up` (see `via`).
    pub(crate) fn went_on(&mut self, up: &Arc<Upstream>) {
        self.via = Some(Arc::downgrade(up));
    }

    /// Where the app's requests on this stream are answered: the caller's own upstream the
    /// call went on, if it did (none: the app's upstream of the organisation).
    pub(crate) fn via(&self) -> Option<&std::sync::Weak<Upstream>> {
        self.via.as_ref()
    }

    /// The stream with its final response asked about by the call's response guards.
    pub(crate) fn guarded(mut self, guards: Arc<crate::mcp::callout::CallGuards>) -> Self {
        self.guards = Some(guards);
        self
    }

    /// The stream with every message checked by `check` as it is read: a message the checks
    /// block ends the stream with the error the call is answered with, and dropping the rest
    /// cancels the call upstream.
    pub(crate) fn checked(mut self, check: Arc<ContentCheck>) -> Self {
        self.check = Some(check);
        self
    }

    /// The next message: notifications (`notifications/progress`, `notifications/message`, ...)
    /// and server->client requests (`sampling/createMessage`, `elicitation/create`, `ping`, ...)
    /// as they arrive, then the final [`Message::Response`] carrying the client's id, then `None`.
    /// An error ends the stream.
    pub async fn next(&mut self) -> Option<Result<Message, UpstreamError>> {
        if self.done {
            return None;
        }
        let event = match self.peeked.take() {
            Some(ev) => Ok(ev),
            None => match crate::base::deadline::until(self.deadline, self.source.recv()).await {
                Ok(r) => r,
                Err(_) => Err(UpstreamError::Timeout { phase: TimeoutPhase::Total }),
            },
        };
        match event {
            Ok(Event::Message(m)) => match self.check.as_deref() {
                None => Some(Ok(m)),
                Some(c) => match c.message(m) {
                    Ok(m) => Some(Ok(m)),
                    Err(e) => {
                        self.done = true;
                        Some(Ok(Message::Response(Response::error(self.client_id.clone(), e))))
                    }
                },
            },
            Ok(Event::Final(r)) => {
                self.done = true;
                self.source.complete();
                let r = r.with_id(self.client_id.clone());
                let r = match &self.check {
                    Some(c) => c.response(r),
                    None => r,
                };
                Some(Ok(Message::Response(match &self.guards {
                    Some(g) => Box::pin(g.on_response(r)).await,
                    None => r,
                })))
            }
            Err(e) => {
                self.done = true;
                self.fail(&e);
                Some(Err(e))
            }
        }
    }

    /// After an error other than a timeout the upstream is not working on the request any more
    /// (it broke the protocol, closed, or died), so there is nothing to cancel.
    fn fail(&mut self, e: &UpstreamError) {
        if !matches!(e, UpstreamError::Timeout { .. }) {
            self.source.complete();
        }
    }

    /// Reads up to the first event and turns "response first" into [`UpstreamReply::Response`],
    /// so the common case costs the gateway no streaming.
    pub(crate) async fn into_reply(mut self) -> Result<UpstreamReply, UpstreamError> {
        if self.peeked.is_none() {
            let ev = match crate::base::deadline::until(self.deadline, self.source.recv()).await {
                Ok(r) => r,
                Err(_) => Err(UpstreamError::Timeout { phase: TimeoutPhase::Total }),
            };
            match ev {
                Ok(ev) => self.peeked = Some(ev),
                Err(e) => {
                    self.fail(&e);
                    return Err(e);
                }
            }
        }
        match self.peeked.take() {
            Some(Event::Final(r)) => {
                self.source.complete();
                Ok(UpstreamReply::Response(r.with_id(self.client_id)))
            }
            other => {
                self.peeked = other;
                Ok(UpstreamReply::Stream(self))
            }
        }
    }
}

/// The paginated `*/list` methods, with the result member that holds the items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMethod {
    Tools,
    Resources,
    ResourceTemplates,
    Prompts,
}

impl ListMethod {
    pub const ALL: [ListMethod; 4] =
        [ListMethod::Tools, ListMethod::Resources, ListMethod::ResourceTemplates, ListMethod::Prompts];

    pub fn method(self) -> &'static str {
        match self {
            ListMethod::Tools => "tools/list",
            ListMethod::Resources => "resources/list",
            ListMethod::ResourceTemplates => "resources/templates/list",
            ListMethod::Prompts => "prompts/list",
        }
    }

    /// The member of the result that holds the page's items.
    pub(crate) fn items_key(self) -> &'static str {
        match self {
            ListMethod::Tools => "tools",
            ListMethod::Resources => "resources",
            ListMethod::ResourceTemplates => "resourceTemplates",
            ListMethod::Prompts => "prompts",
        }
    }

    #[cfg(test)]
    pub(crate) fn from_method(method: &str) -> Option<Self> {
        [Self::Tools, Self::Resources, Self::ResourceTemplates, Self::Prompts]
            .into_iter()
            .find(|m| m.method() == method)
    }
}

/// Upper bound on pages fetched by [`Upstream::list_all`], against a server that never stops.
const MAX_LIST_PAGES: usize = 1000;

/// One app's upstream.
pub enum Upstream {
    Http(http::HttpUpstream),
    Stdio(stdio::StdioUpstream),
    Builtin(Arc<dyn BuiltinApp>),
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Http(h) => write!(f, "Upstream::Http({})", h.app_id()),
            Upstream::Stdio(s) => write!(f, "Upstream::Stdio({})", s.app_id()),
            Upstream::Builtin(b) => write!(f, "Upstream::Builtin({})", b.name()),
        }
    }
}

impl Upstream {
    /// Closes keep-alive connections idle past their time (HTTP upstreams; others keep none).
    pub(crate) fn sweep_idle(&self) {
        if let Upstream::Http(h) = self {
            h.sweep_idle();
        }
    }

    /// Builds the upstream; validates everything that can be validated without I/O (URL, header
    /// names and values, command not empty, builtin name). Nothing is connected or spawned yet:
    /// that happens on first use, or with [`Upstream::connect`].
    #[cfg(test)]
    pub(crate) fn from_settings(settings: &UpstreamSettings, shared: &UpstreamShared) -> Result<Self, UpstreamError> {
        Self::for_owner("", settings, shared)
    }

    /// An upstream serving `owner`'s connection to the app (`""`: shared by every organisation);
    /// the notices it hears are reported under that owner.
    pub(crate) fn for_owner(
        owner: &str,
        settings: &UpstreamSettings,
        shared: &UpstreamShared,
    ) -> Result<Self, UpstreamError> {
        let notices = shared
            .notices
            .as_ref()
            .map(|tx| NoticeReporter::new(tx.clone(), owner, &settings.app_id))
            .unwrap_or_default();
        match &settings.transport {
            Transport::Http(h) => Ok(Upstream::Http(http::HttpUpstream::new(
                &settings.app_id,
                h,
                settings.timeouts,
                &shared.http,
                notices,
            )?)),
            Transport::Stdio(s) => Ok(Upstream::Stdio(stdio::StdioUpstream::new(
                &settings.app_id,
                s,
                settings.timeouts,
                shared.stdio_permits.clone(),
                shared.max_stdio_processes,
                notices,
            )?)),
            Transport::Builtin(name) => crate::mcp::builtin::by_name(name)
                .map(Upstream::Builtin)
                .ok_or_else(|| UpstreamError::Config(format!("unknown builtin app \"{name}\""))),
        }
    }

    /// Opens the session / starts the process now (start-up warm-up, readiness checks) and returns
    /// the upstream's `initialize` result.
    pub async fn connect(&self) -> Result<Value, UpstreamError> {
        match self {
            Upstream::Http(h) => h.connect().await,
            Upstream::Stdio(s) => s.connect().await,
            Upstream::Builtin(b) => Ok(builtin_initialize_result(b.as_ref())),
        }
    }

    /// Sends a request and returns its answer. `method` is never `initialize`: the upstream
    /// session is the transport's business.
    pub async fn request(
        &self,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<UpstreamReply, UpstreamError> {
        match self {
            Upstream::Http(h) => h.request(method, params, ctx).await,
            Upstream::Stdio(s) => s.request(method, params, ctx).await,
            Upstream::Builtin(b) => Ok(UpstreamReply::Response(
                builtin_request(b.as_ref(), method, params, ctx.client_request_id.clone()).await,
            )),
        }
    }

    /// Sends a notification (e.g. `notifications/cancelled`, `notifications/roots/list_changed`).
    pub(crate) async fn notify(
        &self,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<(), UpstreamError> {
        match self {
            Upstream::Http(h) => h.notify(method, params, ctx).await,
            Upstream::Stdio(s) => s.notify(method, params).await,
            Upstream::Builtin(_) => Ok(()),
        }
    }

    /// Sends the client's answer to a server->client request that came through a
    /// [`ReplyStream`]. `response.id` must be the id the upstream used in its request.
    pub async fn respond(&self, response: Response, ctx: &CallContext) -> Result<(), UpstreamError> {
        match self {
            Upstream::Http(h) => h.respond(response, ctx).await,
            Upstream::Stdio(s) => s.respond(response).await,
            Upstream::Builtin(_) => Ok(()),
        }
    }

    /// Every item of a paginated list, following `nextCursor` until it is absent.
    #[cfg(test)]
    pub(crate) async fn list_all(&self, method: ListMethod, ctx: &CallContext) -> Result<Vec<Value>, UpstreamError> {
        Ok(self.list_all_with_ttl(method, ctx).await?.0)
    }

    /// [`Upstream::list_all`], and how long the app says the list may be kept (`ttlMs`, an app
    /// of the 2026-07-28 revision; the smallest over the pages), if it says.
    pub(crate) async fn list_all_with_ttl(
        &self,
        method: ListMethod,
        ctx: &CallContext,
    ) -> Result<(Vec<Value>, Option<u64>), UpstreamError> {
        let mut ttl_ms: Option<u64> = None;
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor.as_ref().map(|c| RawJson::from_value(&json!({ "cursor": c })));
            let response = self.request(method.method(), params, ctx).await?.into_response().await?;
            let mut result = match response.outcome {
                Ok(r) => r.to_value(),
                Err(e) => return Err(UpstreamError::Protocol(format!("{} failed: {e}", method.method()))),
            };
            if let Some(t) = result.get("ttlMs").and_then(Value::as_u64) {
                ttl_ms = Some(ttl_ms.map_or(t, |m| m.min(t)));
            }
            match result.get_mut(method.items_key()).map(Value::take) {
                Some(Value::Array(page)) => items.extend(page),
                None | Some(Value::Null) => {}
                Some(_) => {
                    return Err(UpstreamError::Protocol(format!(
                        "{} result member \"{}\" is not an array",
                        method.method(),
                        method.items_key()
                    )))
                }
            }
            match result.get("nextCursor") {
                Some(Value::String(next)) if !next.is_empty() => {
                    if cursor.as_deref() == Some(next.as_str()) {
                        return Err(UpstreamError::Protocol(format!(
                            "{} returned the same nextCursor twice",
                            method.method()
                        )));
                    }
                    cursor = Some(next.clone());
                }
                _ => return Ok((items, ttl_ms)),
            }
        }
        Err(UpstreamError::Protocol(format!("{} has more than {MAX_LIST_PAGES} pages", method.method())))
    }

    /// `tools/list`, all pages.
    #[cfg(test)]
    pub(crate) async fn list_tools(&self, ctx: &CallContext) -> Result<Vec<Value>, UpstreamError> {
        match self {
            Upstream::Builtin(b) => Ok(b.tools()),
            _ => self.list_all(ListMethod::Tools, ctx).await,
        }
    }

    /// Ends the upstream session (HTTP `DELETE`) or stops the process (close stdin, then kill,
    /// then reap). Later calls fail with [`UpstreamError::ShutDown`] (stdio) or open a new session
    /// (HTTP).
    pub async fn shutdown(&self) {
        match self {
            Upstream::Http(h) => h.shutdown().await,
            Upstream::Stdio(s) => s.shutdown().await,
            Upstream::Builtin(_) => {}
        }
    }
}

fn builtin_initialize_result(app: &dyn BuiltinApp) -> Value {
    json!({
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": { "tools": {} },
        "serverInfo": { "name": app.name(), "version": env!("CARGO_PKG_VERSION") },
    })
}

/// A built-in app speaks just enough MCP for the gateway: `tools/list`, `tools/call`, `ping`.
async fn builtin_request(app: &dyn BuiltinApp, method: &str, params: Option<RawJson>, id: Id) -> Response {
    match method {
        "ping" => Response::success(id, json!({})),
        "tools/list" => Response::success(id, json!({ "tools": app.tools() })),
        "tools/call" => {
            let mut params = params.as_ref().map(RawJson::to_value).unwrap_or_default();
            let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
                return Response::error(id, RpcErrorObject::invalid_params("tools/call needs params.name (string)"));
            };
            let arguments = params.get_mut("arguments").map(Value::take).unwrap_or_else(|| json!({}));
            match app.call(&name, arguments).await {
                Ok(result) => Response::success(id, result),
                Err(e) => Response::error(id, e.to_error_object()),
            }
        }
        other => Response::error(id, RpcErrorObject::method_not_found(other)),
    }
}

/// An error with its whole `source()` chain: reqwest's own message ("error sending request")
/// hides the useful part ("connection refused").
pub(crate) fn describe_error(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_msg = s.to_string();
        if !msg.contains(&s_msg) {
            msg.push_str(": ");
            msg.push_str(&s_msg);
        }
        src = s.source();
    }
    msg
}

/// Test helper shared by the HTTP transport's tests: a raw-socket reader of HTTP/1.1 requests, so
/// that canned upstream servers need no HTTP library.
#[cfg(test)]
pub(crate) mod test_http {
    use tokio::io::AsyncReadExt;

    /// Reads one request (head and `Content-Length` body) from `sock`; bytes after it stay in
    /// `buf` for the next call. `None` when the peer closes first.
    pub(crate) async fn read_request(sock: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<String> {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()))
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    let request: Vec<u8> = buf.drain(..end + 4 + len).collect();
                    return Some(String::from_utf8_lossy(&request).into_owned());
                }
            }
            let mut tmp = [0u8; 4096];
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_defaults_and_yaml_names() {
        let t = Timeouts::default();
        assert_eq!(
            (t.connect(), t.first_byte(), t.total()),
            (Duration::from_secs(5), Duration::from_secs(30), Duration::from_secs(60))
        );
        let t: Timeouts = serde_json::from_value(json!({"total_ms": 1000})).unwrap();
        assert_eq!(t.total_ms, 1000);
        assert_eq!(t.connect_ms, 5000);
        assert!(serde_json::from_value::<Timeouts>(json!({"totl_ms": 1})).is_err());
    }

    #[test]
    fn secrets_are_not_debug_printed() {
        let c = Credential::Bearer("s3cret".into());
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = Credential::Header { name: "X-Key".into(), value: "s3cret".into() };
        assert!(!format!("{c:?}").contains("s3cret"));
        let s = StdioSettings { command: vec!["x".into()], env: vec![("TOKEN".into(), "s3cret".into())], cwd: None };
        let d = format!("{s:?}");
        assert!(d.contains("TOKEN") && !d.contains("s3cret"));
    }

    #[test]
    fn list_methods() {
        for m in [ListMethod::Tools, ListMethod::Resources, ListMethod::ResourceTemplates, ListMethod::Prompts] {
            assert_eq!(ListMethod::from_method(m.method()), Some(m));
        }
        assert_eq!(ListMethod::from_method("tools/call"), None);
    }

    #[test]
    fn list_changes_and_resource_updates_are_reported_with_the_owner() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut shared = UpstreamShared::default();
        shared.report_notices_to(tx);
        let settings = UpstreamSettings {
            app_id: "dyn".into(),
            timeouts: Timeouts::default(),
            transport: Transport::Http(HttpSettings {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![],
                credential: None,
                protocol_version: None,
                tls_roots: None,
            }),
        };
        let Upstream::Http(up) = Upstream::for_owner("org_a", &settings, &shared).unwrap() else { unreachable!() };
        let changes = up.notices_for_test();
        let notice = |kind| AppNotice { owner: "org_a".into(), app_id: "dyn".into(), kind };
        for method in ["notifications/message", "notifications/progress", "notifications/tools/list_changed_x"] {
            changes.notice(method, None);
        }
        // An update that names no resource tells nobody anything.
        changes.notice("notifications/resources/updated", Some(&RawJson::from_value(&json!({"url": "x"}))));
        assert!(rx.try_recv().is_err(), "nothing to act on");
        for method in [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
        ] {
            changes.notice(method, None);
            assert_eq!(rx.try_recv().unwrap(), notice(NoticeKind::ListsChanged), "{method}");
        }
        let params = RawJson::from_value(&json!({"uri": "demo://r/1", "_meta": {}}));
        changes.notice("notifications/resources/updated", Some(&params));
        assert_eq!(rx.try_recv().unwrap(), notice(NoticeKind::ResourceUpdated { uri: "demo://r/1".into() }));
        // Without a receiver (unit tests, tools) noticing is a no-op.
        NoticeReporter::default().notice("notifications/tools/list_changed", None);
    }

    fn builtin_time() -> Upstream {
        let settings = UpstreamSettings {
            app_id: "time".into(),
            timeouts: Timeouts::default(),
            transport: Transport::Builtin("time".into()),
        };
        Upstream::from_settings(&settings, &UpstreamShared::default()).unwrap()
    }

    #[tokio::test]
    async fn builtin_upstream_speaks_tools() {
        let up = builtin_time();
        let ctx = CallContext { client_request_id: Id::from("c-1"), ..Default::default() };
        let tools = up.list_tools(&ctx).await.unwrap();
        assert_eq!(tools[0]["name"], "get_current_time");
        let tools2 = up.list_all(ListMethod::Tools, &ctx).await.unwrap();
        assert_eq!(tools, tools2);

        let reply = up
            .request(
                "tools/call",
                Some(RawJson::from_value(&json!({"name":"get_current_time","arguments":{"format":"YYYY"}}))),
                &ctx,
            )
            .await
            .unwrap();
        let UpstreamReply::Response(r) = reply else { panic!("builtin replies at once") };
        assert_eq!(r.id, json!("c-1"));
        let result = r.outcome.unwrap();
        assert_eq!(result.to_value()["content"][0]["text"].as_str().unwrap().len(), 4);

        let r = up
            .request("tools/call", Some(RawJson::from_value(&json!({"name":"nope"}))), &ctx)
            .await
            .unwrap()
            .into_response()
            .await
            .unwrap();
        let e = r.outcome.unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-32602, "Unknown tool: nope"));

        let r = up.request("resources/list", None, &ctx).await.unwrap().into_response().await.unwrap();
        assert_eq!(r.outcome.unwrap_err().code, -32601);
        let r = up.request("tools/call", None, &ctx).await.unwrap().into_response().await.unwrap();
        assert_eq!(r.outcome.unwrap_err().code, -32602);
        assert!(up.connect().await.unwrap()["capabilities"]["tools"].is_object());
    }

    #[test]
    fn unknown_builtin_is_a_config_error() {
        let settings = UpstreamSettings {
            app_id: "x".into(),
            timeouts: Timeouts::default(),
            transport: Transport::Builtin("nope".into()),
        };
        assert!(matches!(
            Upstream::from_settings(&settings, &UpstreamShared::default()),
            Err(UpstreamError::Config(_))
        ));
    }
}
