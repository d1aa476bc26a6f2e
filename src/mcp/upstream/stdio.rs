//! Stdio upstream: one supervised child process per app, shared by every caller.
//!
//! * **Lifecycle.** The process is spawned on first use (`kill_on_drop`), gets `initialize` +
//!   `notifications/initialized` once per start, and lives until it exits, the upstream is
//!   dropped, or [`StdioUpstream::shutdown`] closes its stdin, waits up to 2 s, kills it and reaps
//!   it (no zombie). Four tasks serve it: a writer (owns stdin), a reader (stdout), a stderr
//!   drain (to `tracing`, never to clients: it may contain anything) and a waiter (owns the
//!   `Child`, reaps it, then fails every pending request with [`UpstreamError::Exited`]).
//! * **Crash restarts** happen lazily, on the next call, after an exponential back-off
//!   (250 ms, 500 ms, ... capped at 30 s) counted from the exit; a process that ran for 60 s
//!   resets the count. A call that cannot wait out the back-off within its own deadline fails at
//!   once with [`UpstreamError::Backoff`] rather than queueing behind a crash loop.
//! * **Multiplexing.** Callers' ids can collide (every client starts at 1), so each request goes
//!   up with a gateway-generated numeric id and the pending map routes the answer back; the
//!   caller's id is restored by [`super::ReplyStream`]. A `_meta.progressToken` is rewritten the
//!   same way so that progress notifications reach the right caller with the token it chose.
//! * **Server->client requests** cannot be tied to a caller on stdio (MCP gives them no related
//!   request), so the gateway answers them itself: `ping` with `{}`, anything else with
//!   "method not found" (the gateway declares no client capabilities to stdio servers).
//! * **Process bound.** A global semaphore ([`super::UpstreamShared::new`]) caps running stdio
//!   processes; a permit is taken before spawning and released only after the child is reaped.
//!   Reaching the cap fails the start with [`UpstreamError::ProcessLimit`].
//! * **Environment.** The child gets [`INHERITED_ENV`] from the gateway plus the app's `env`,
//!   nothing else: the gateway's environment can hold `TOOLGATE_ADMIN_KEY` and app secrets.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{
    CallContext, Event, NoticeReporter, ReplyStream, Source, StdioSettings, TimeoutPhase, Timeouts, UpstreamError,
    UpstreamReply, LATEST_PROTOCOL_VERSION, PROTOCOL_VERSIONS,
};
use crate::mcp::jsonrpc::{self, Id, Incoming, Message, RawJson, Response, RpcErrorObject};

/// Variables copied from the gateway's environment into every child (when set).
pub(crate) const INHERITED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT"];

/// Longest stdout line (one JSON-RPC message) accepted; longer ones are dropped with a warning.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
const MAX_STDERR_LINE: usize = 16 * 1024;
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// A process that lived this long is "stable": its crash restarts the back-off from the start.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How long a stopping process gets after its stdin is closed before it is killed.
const GRACEFUL_STOP: Duration = Duration::from_secs(2);

/// The longest [`StdioUpstream::shutdown`] waits: the graceful stop, then up to 3 s for the
/// kill and the reap.
pub(crate) const STOP_BOUND: Duration = Duration::from_secs(GRACEFUL_STOP.as_secs() + 3);
/// How long the waiter lets the reader drain stdout after the exit.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);
const STDERR_TAIL: usize = 5;

/// Delay before restart number `failures` (1-based).
fn backoff(failures: u32) -> Duration {
    super::backoff(failures, BACKOFF_BASE, BACKOFF_CAP)
}

enum WriterCmd {
    Line(Vec<u8>),
    /// Close stdin (graceful stop: a well-behaved server exits on EOF).
    Close,
}

struct Call {
    tx: mpsc::UnboundedSender<Result<Event, UpstreamError>>,
    progress_key: Option<String>,
}

#[derive(Default)]
struct Pending {
    /// `Some(reason)` once the process is gone: no new calls, all old ones failed.
    closed: Option<String>,
    calls: HashMap<u64, Call>,
    /// Rewritten progress token -> (request id, token the caller chose).
    progress: HashMap<String, (u64, Value)>,
}

/// State shared by one process's tasks and its callers.
struct Shared {
    app_id: String,
    notices: NoticeReporter,
    pending: parking_lot::Mutex<Pending>,
    exit_at: parking_lot::Mutex<Option<Instant>>,
    stderr_tail: parking_lot::Mutex<VecDeque<String>>,
}

impl Shared {
    fn is_closed(&self) -> bool {
        self.pending.lock().closed.is_some()
    }

    fn register(&self, id: u64, call: Call, progress: Option<(String, Value)>) -> Result<(), UpstreamError> {
        let mut p = self.pending.lock();
        if let Some(reason) = &p.closed {
            return Err(UpstreamError::Exited(reason.clone()));
        }
        if let Some((key, original)) = progress {
            p.progress.insert(key, (id, original));
        }
        p.calls.insert(id, call);
        Ok(())
    }

    fn take(&self, id: u64) -> Option<Call> {
        let mut p = self.pending.lock();
        let call = p.calls.remove(&id)?;
        if let Some(key) = &call.progress_key {
            p.progress.remove(key);
        }
        Some(call)
    }

    /// Fails every pending call; later registrations fail too.
    fn close(&self, reason: String) {
        let calls = {
            let mut p = self.pending.lock();
            if p.closed.is_some() {
                return;
            }
            p.closed = Some(reason.clone());
            p.progress.clear();
            std::mem::take(&mut p.calls)
        };
        for (_, call) in calls {
            let _ = call.tx.send(Err(UpstreamError::Exited(reason.clone())));
        }
    }
}

/// One running (or exited) child process.
struct Proc {
    generation: u64,
    started_at: Instant,
    writer: mpsc::UnboundedSender<WriterCmd>,
    shared: Arc<Shared>,
    init_result: OnceLock<Value>,
    /// Sending asks for a graceful stop; dropping (with the `Proc`) kills at once.
    stop: parking_lot::Mutex<Option<oneshot::Sender<()>>>,
    exited: watch::Receiver<bool>,
}

#[derive(Default)]
struct StartState {
    failures: u32,
    retry_at: Option<Instant>,
    /// The generation whose exit was already counted in `failures`.
    accounted: u64,
}

struct Inner {
    app_id: String,
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    timeouts: Timeouts,
    permits: Arc<Semaphore>,
    limit: usize,
    current: ArcSwapOption<Proc>,
    /// Serialises starts (and the back-off wait); never taken on the hot path.
    start: tokio::sync::Mutex<StartState>,
    next_id: AtomicU64,
    next_generation: AtomicU64,
    shut_down: AtomicBool,
    /// Where the app's list changes and resource updates are reported.
    notices: NoticeReporter,
}

/// A stdio upstream; cheap to clone (shared state).
#[derive(Clone)]
pub struct StdioUpstream {
    inner: Arc<Inner>,
}

impl StdioUpstream {
    /// Validates the settings. Nothing is spawned until the first call or [`Self::connect`].
    pub(crate) fn new(
        app_id: &str,
        settings: &StdioSettings,
        timeouts: Timeouts,
        permits: Arc<Semaphore>,
        limit: usize,
        notices: NoticeReporter,
    ) -> Result<Self, UpstreamError> {
        let Some((program, args)) = settings.command.split_first() else {
            return Err(UpstreamError::Config(format!("app {app_id}: command is empty")));
        };
        if program.trim().is_empty() {
            return Err(UpstreamError::Config(format!("app {app_id}: command[0] is empty")));
        }
        for (k, _) in &settings.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(UpstreamError::Config(format!("app {app_id}: invalid env name \"{k}\"")));
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                app_id: app_id.to_string(),
                program: program.clone(),
                args: args.to_vec(),
                env: settings.env.clone(),
                cwd: settings.cwd.clone(),
                timeouts,
                permits,
                limit,
                current: ArcSwapOption::empty(),
                start: tokio::sync::Mutex::new(StartState::default()),
                next_id: AtomicU64::new(1),
                next_generation: AtomicU64::new(1),
                shut_down: AtomicBool::new(false),
                notices,
            }),
        })
    }

    pub fn app_id(&self) -> &str {
        &self.inner.app_id
    }

    /// Starts the process now if needed; returns its `initialize` result.
    pub async fn connect(&self) -> Result<Value, UpstreamError> {
        let deadline = Instant::now() + self.inner.timeouts.total();
        let p = self.inner.process(deadline).await?;
        Ok(p.init_result.get().cloned().unwrap_or(Value::Null))
    }

    /// Process id of the running child, if any (diagnostics, tests).
    pub fn is_running(&self) -> bool {
        self.inner.current.load().as_ref().is_some_and(|p| !p.shared.is_closed())
    }

    pub async fn request(
        &self,
        method: &str,
        params: Option<RawJson>,
        ctx: &CallContext,
    ) -> Result<UpstreamReply, UpstreamError> {
        let deadline = Instant::now() + self.inner.timeouts.total();
        let mut attempt = 0;
        let source = loop {
            let p = self.inner.process(deadline).await?;
            match self.inner.send_request(&p, method, params.clone()) {
                Ok(source) => break source,
                // The process died between lookup and registration: the request was not sent,
                // so trying the next process is safe.
                Err(UpstreamError::Exited(_)) if attempt == 0 => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        ReplyStream::new(Source::Stdio(source), None, deadline, ctx.client_request_id.clone()).into_reply().await
    }

    /// Sends a notification to the running process; with no process running there is nobody
    /// to notify and this is a no-op.
    pub(crate) async fn notify(&self, method: &str, params: Option<RawJson>) -> Result<(), UpstreamError> {
        let Some(p) = self.inner.current.load_full() else { return Ok(()) };
        if p.shared.is_closed() {
            return Ok(());
        }
        p.writer
            .send(WriterCmd::Line(jsonrpc::notification_bytes(method, params.as_ref())))
            .map_err(|_| UpstreamError::Closed)
    }

    /// Writes a response to a server->client request to the running process.
    pub async fn respond(&self, response: Response) -> Result<(), UpstreamError> {
        let p = self.inner.current.load_full().ok_or(UpstreamError::Closed)?;
        if p.shared.is_closed() {
            return Err(UpstreamError::Closed);
        }
        p.writer.send(WriterCmd::Line(response.to_bytes())).map_err(|_| UpstreamError::Closed)
    }

    /// Stops the process (close stdin, wait up to 2 s, kill, reap) and refuses later calls.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.shut_down.store(true, Ordering::SeqCst);
        // Wait for a start in progress so that its process is seen (and stopped) below.
        let _start = inner.start.lock().await;
        let Some(p) = inner.current.swap(None) else { return };
        if let Some(stop) = p.stop.lock().take() {
            let _ = stop.send(());
        }
        let mut exited = p.exited.clone();
        let _ = tokio::time::timeout(STOP_BOUND, exited.wait_for(|e| *e)).await;
    }
}

impl Inner {
    /// The live process, or a new one (respecting back-off and the process bound).
    async fn process(self: &Arc<Self>, deadline: Instant) -> Result<Arc<Proc>, UpstreamError> {
        if let Some(p) = self.current.load_full() {
            if !p.shared.is_closed() {
                return Ok(p);
            }
        }
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(UpstreamError::ShutDown);
        }
        let mut st = tokio::time::timeout_at(deadline, self.start.lock())
            .await
            .map_err(|_| UpstreamError::Timeout { phase: TimeoutPhase::Total })?;
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(UpstreamError::ShutDown);
        }
        let now = Instant::now();
        if let Some(p) = self.current.load_full() {
            if !p.shared.is_closed() {
                return Ok(p);
            }
            if st.accounted < p.generation {
                st.accounted = p.generation;
                let exit = (*p.shared.exit_at.lock()).unwrap_or(now);
                if exit.saturating_duration_since(p.started_at) >= STABLE_AFTER {
                    st.failures = 0;
                }
                st.failures += 1;
                st.retry_at = Some(exit + backoff(st.failures));
            }
        }
        if let Some(at) = st.retry_at {
            if at > now {
                if at < deadline {
                    tokio::time::sleep_until(at).await;
                } else {
                    return Err(UpstreamError::Backoff { retry_after: at - now });
                }
            }
        }
        let permit =
            self.permits.clone().try_acquire_owned().map_err(|_| UpstreamError::ProcessLimit { limit: self.limit })?;
        let connect_deadline = deadline.min(Instant::now() + self.timeouts.connect());
        match self.spawn(permit, connect_deadline).await {
            Ok(p) => {
                st.retry_at = None;
                self.current.store(Some(p.clone()));
                Ok(p)
            }
            Err(e) => {
                st.failures += 1;
                st.retry_at = Some(Instant::now() + backoff(st.failures));
                tracing::warn!(app = %self.app_id, error = %e, failures = st.failures, "stdio upstream failed to start");
                Err(e)
            }
        }
    }

    /// Spawns the child, its four tasks, and runs the MCP handshake.
    async fn spawn(
        self: &Arc<Self>,
        permit: OwnedSemaphorePermit,
        deadline: Instant,
    ) -> Result<Arc<Proc>, UpstreamError> {
        let mut child = self.command().spawn().map_err(|e| UpstreamError::Spawn(format!("{}: {e}", self.program)))?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(UpstreamError::Spawn("child pipes missing".into()));
        };
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            app_id: self.app_id.clone(),
            notices: self.notices.clone(),
            pending: parking_lot::Mutex::new(Pending::default()),
            exit_at: parking_lot::Mutex::new(None),
            stderr_tail: parking_lot::Mutex::new(VecDeque::new()),
        });
        tracing::info!(app = %self.app_id, pid = ?child.id(), generation, "stdio upstream started");

        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        tokio::spawn(write_stdin(stdin, writer_rx));
        let (eof_tx, eof_rx) = oneshot::channel();
        let reader = tokio::spawn(read_stdout(stdout, shared.clone(), writer_tx.clone(), eof_tx));
        tokio::spawn(drain_stderr(stderr, shared.clone()));
        let (stop_tx, stop_rx) = oneshot::channel();
        let (exit_tx, exit_rx) = watch::channel(false);
        tokio::spawn(supervise(child, stop_rx, eof_rx, writer_tx.clone(), reader, shared.clone(), permit, exit_tx));

        let proc = Arc::new(Proc {
            generation,
            started_at: Instant::now(),
            writer: writer_tx,
            shared,
            init_result: OnceLock::new(),
            stop: parking_lot::Mutex::new(Some(stop_tx)),
            exited: exit_rx,
        });

        let result = self.handshake(&proc, deadline).await;
        match result {
            Ok(result) => {
                let _ = proc.init_result.set(result);
                let note = jsonrpc::notification_bytes("notifications/initialized", None);
                proc.writer.send(WriterCmd::Line(note)).map_err(|_| UpstreamError::Closed)?;
                Ok(proc)
            }
            Err(e) => {
                // Dropping the stop sender (with `proc`) makes the supervisor kill and reap.
                proc.stop.lock().take();
                Err(e)
            }
        }
    }

    /// The app's process as configured: its arguments and working directory, piped standard
    /// streams, killed when dropped, and an environment of [`INHERITED_ENV`] and the app's `env`
    /// only (the gateway's may hold `TOOLGATE_ADMIN_KEY`).
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for name in INHERITED_ENV {
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        cmd
    }

    /// `initialize` with a new process, by `deadline`: its result, once it names a protocol
    /// version toolgate speaks.
    async fn handshake(&self, proc: &Arc<Proc>, deadline: Instant) -> Result<Value, UpstreamError> {
        let params = RawJson::from_value(&json!({
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": { "name": "toolgate", "version": env!("CARGO_PKG_VERSION") },
        }));
        let handshake = async {
            let mut source = self.send_request(proc, "initialize", Some(params))?;
            loop {
                match source.recv().await? {
                    Event::Final(r) => {
                        source.complete();
                        return Ok(r);
                    }
                    Event::Message(_) => continue,
                }
            }
        };
        match tokio::time::timeout_at(deadline, handshake).await {
            Err(_) => Err(UpstreamError::Timeout { phase: TimeoutPhase::Connect }),
            Ok(Err(e)) => Err(e),
            Ok(Ok(r)) => r.outcome.map(|raw| raw.to_value()).map_err(UpstreamError::Initialize),
        }
        .and_then(|result| {
            let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
            if PROTOCOL_VERSIONS.contains(&version) {
                Ok(result)
            } else {
                Err(UpstreamError::Protocol(format!("upstream chose unsupported protocol version \"{version}\"")))
            }
        })
    }

    /// Registers a call and writes it to stdin with a gateway id.
    fn send_request(
        &self,
        p: &Arc<Proc>,
        method: &str,
        mut params: Option<RawJson>,
    ) -> Result<StdioSource, UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let progress = rewrite_progress_token(&mut params, id);
        let (tx, rx) = mpsc::unbounded_channel();
        let call = Call { tx, progress_key: progress.as_ref().map(|(k, _)| k.clone()) };
        p.shared.register(id, call, progress)?;
        let line = jsonrpc::request_bytes(&Id::from(id), method, params.as_ref());
        if p.writer.send(WriterCmd::Line(line)).is_err() {
            p.shared.take(id);
            return Err(UpstreamError::Exited("stdin closed".into()));
        }
        Ok(StdioSource { rx, cancel: Some(CancelGuard { shared: p.shared.clone(), writer: p.writer.clone(), id }) })
    }
}

/// Replaces `params._meta.progressToken` with one unique to this gateway request; returns
/// (new token, caller's token).
fn rewrite_progress_token(params: &mut Option<RawJson>, id: u64) -> Option<(String, Value)> {
    // Read as a tree only when a token may be there.
    if !params.as_ref()?.get().contains("progressToken") {
        return None;
    }
    let mut tree = params.as_ref()?.to_value();
    let token = tree.get_mut("_meta")?.get_mut("progressToken")?;
    let key = format!("tg-{id}");
    let original = std::mem::replace(token, Value::String(key.clone()));
    *params = Some(RawJson::from_value(&tree));
    Some((key, original))
}

/// Removes the call and tells the server to stop working on it, if dropped before the end.
struct CancelGuard {
    shared: Arc<Shared>,
    writer: mpsc::UnboundedSender<WriterCmd>,
    id: u64,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.shared.take(self.id).is_some() {
            let note = jsonrpc::notification_bytes(
                "notifications/cancelled",
                Some(&RawJson::from_value(&json!({
                    "requestId": self.id,
                    "reason": "gateway client went away or timed out"
                }))),
            );
            let _ = self.writer.send(WriterCmd::Line(note));
        }
    }
}

/// The events routed to one call.
pub(crate) struct StdioSource {
    rx: mpsc::UnboundedReceiver<Result<Event, UpstreamError>>,
    cancel: Option<CancelGuard>,
}

impl StdioSource {
    pub(crate) async fn recv(&mut self) -> Result<Event, UpstreamError> {
        match self.rx.recv().await {
            Some(r) => r,
            None => Err(UpstreamError::Closed),
        }
    }

    pub(crate) fn complete(&mut self) {
        if let Some(guard) = self.cancel.take() {
            // The reader already removed the call on the final response; `take` then finds
            // nothing and no cancellation is sent.
            drop(guard);
        }
    }
}

async fn write_stdin(mut stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<WriterCmd>) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            WriterCmd::Line(mut line) => {
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            WriterCmd::Close => break,
        }
    }
    // Dropping stdin sends EOF to the child.
}

/// Reads one `\n`-terminated line into `line` (without the `\n`), at most `max` bytes kept.
/// Returns `None` at end of stream, `Some(true)` for a line that was too long (its content is
/// discarded), `Some(false)` for a good line.
async fn next_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut overflow = false;
    loop {
        let (done, used) = {
            let buf = r.fill_buf().await?;
            if buf.is_empty() {
                return Ok(if line.is_empty() && !overflow { None } else { Some(overflow) });
            }
            let (chunk, done, used) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], true, i + 1),
                None => (buf, false, buf.len()),
            };
            if !overflow {
                if line.len() + chunk.len() > max {
                    overflow = true;
                    line.clear();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            (done, used)
        };
        r.consume(used);
        if done {
            return Ok(Some(overflow));
        }
    }
}

async fn read_stdout(
    stdout: tokio::process::ChildStdout,
    shared: Arc<Shared>,
    writer: mpsc::UnboundedSender<WriterCmd>,
    eof: oneshot::Sender<()>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        match next_line(&mut reader, &mut line, MAX_LINE_BYTES).await {
            Ok(Some(false)) => handle_line(&shared, &writer, &line),
            Ok(Some(true)) => {
                tracing::warn!(app = %shared.app_id, "stdio upstream wrote a line over {MAX_LINE_BYTES} bytes; dropped")
            }
            Ok(None) | Err(_) => break,
        }
    }
    let _ = eof.send(());
}

fn handle_line(shared: &Shared, writer: &mpsc::UnboundedSender<WriterCmd>, line: &[u8]) {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return;
    }
    let messages = match jsonrpc::parse(trimmed) {
        Ok(Incoming::Single(m)) => vec![m],
        Ok(Incoming::Batch(items)) => items.into_iter().filter_map(Result::ok).collect(),
        Err(e) => {
            let shown: String = String::from_utf8_lossy(trimmed).chars().take(200).collect();
            tracing::warn!(app = %shared.app_id, error = %e, line = %shown, "stdio upstream wrote a non-JSON-RPC line");
            return;
        }
    };
    for m in messages {
        route(shared, writer, m);
    }
}

fn route(shared: &Shared, writer: &mpsc::UnboundedSender<WriterCmd>, m: Message) {
    match m {
        Message::Response(r) => match r.id.as_u64().and_then(|id| shared.take(id)) {
            Some(call) => {
                let _ = call.tx.send(Ok(Event::Final(r)));
            }
            None => tracing::debug!(app = %shared.app_id, id = %r.id, "response to no pending request"),
        },
        Message::Notification(mut n) if n.method == "notifications/progress" => {
            let mut params = n.params.as_ref().map(RawJson::to_value);
            let target = {
                let p = shared.pending.lock();
                params
                    .as_ref()
                    .and_then(|v| v.get("progressToken"))
                    .and_then(Value::as_str)
                    .and_then(|k| p.progress.get(k))
                    .and_then(|(id, original)| p.calls.get(id).map(|c| (c.tx.clone(), original.clone())))
            };
            if let Some((tx, original)) = target {
                if let Some(Value::Object(tree)) = params.as_mut() {
                    tree.insert("progressToken".into(), original);
                }
                n.params = params.as_ref().map(RawJson::from_value);
                let _ = tx.send(Ok(Event::Message(Message::Notification(n))));
            }
        }
        Message::Notification(n) => {
            shared.notices.notice(&n.method, n.params.as_ref());
            if n.method == "notifications/message" {
                let params = n.params.as_ref().map_or("null", RawJson::get);
                tracing::info!(app = %shared.app_id, params, "stdio upstream log");
            } else {
                tracing::debug!(app = %shared.app_id, method = %n.method, "stdio upstream notification");
            }
        }
        Message::Request(r) => {
            let reply = if r.method == "ping" {
                jsonrpc::response_bytes(&r.id, &json!({}))
            } else {
                let e = RpcErrorObject::method_not_found(&r.method);
                jsonrpc::error_bytes(&r.id, e.code, &e.message, None)
            };
            let _ = writer.send(WriterCmd::Line(reply));
        }
    }
}

async fn drain_stderr(stderr: tokio::process::ChildStderr, shared: Arc<Shared>) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    while let Ok(Some(_)) = next_line(&mut reader, &mut line, MAX_STDERR_LINE).await {
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        tracing::info!(app = %shared.app_id, "stderr: {text}");
        let mut tail = shared.stderr_tail.lock();
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(text.chars().take(300).collect());
    }
}

/// Owns the child: waits for exit / stop / stdout EOF, reaps, fails pending calls, frees the permit.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    mut child: Child,
    stop: oneshot::Receiver<()>,
    eof: oneshot::Receiver<()>,
    writer: mpsc::UnboundedSender<WriterCmd>,
    mut reader: tokio::task::JoinHandle<()>,
    shared: Arc<Shared>,
    permit: OwnedSemaphorePermit,
    exited: watch::Sender<bool>,
) {
    let pid = child.id();
    let status = tokio::select! {
        status = child.wait() => status,
        asked = stop => {
            if asked.is_ok() {
                // Graceful: close stdin, as the MCP stdio transport prescribes, then kill.
                let _ = writer.send(WriterCmd::Close);
                match tokio::time::timeout(GRACEFUL_STOP, child.wait()).await {
                    Ok(s) => s,
                    Err(_) => kill_and_reap(&mut child).await,
                }
            } else {
                // The upstream was dropped without shutdown().
                kill_and_reap(&mut child).await
            }
        }
        _ = eof => {
            // stdout closed: the process is exiting or useless.
            match tokio::time::timeout(GRACEFUL_STOP, child.wait()).await {
                Ok(s) => s,
                Err(_) => kill_and_reap(&mut child).await,
            }
        }
    };
    drop(writer);
    *shared.exit_at.lock() = Some(Instant::now());
    // Let the reader hand out what the process wrote just before exiting.
    if tokio::time::timeout(DRAIN_AFTER_EXIT, &mut reader).await.is_err() {
        reader.abort();
    }
    let reason = match &status {
        Ok(s) => format!("process {s}"),
        Err(e) => format!("process wait failed: {e}"),
    };
    let tail: Vec<String> = shared.stderr_tail.lock().iter().cloned().collect();
    tracing::warn!(app = %shared.app_id, pid = ?pid, %reason, stderr_tail = ?tail, "stdio upstream exited");
    shared.close(reason);
    drop(permit);
    let _ = exited.send(true);
}

async fn kill_and_reap(child: &mut Child) -> std::io::Result<std::process::ExitStatus> {
    let _ = child.start_kill();
    child.wait().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::upstream::{Transport, Upstream, UpstreamSettings, UpstreamShared};

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_millis(500));
        assert_eq!(backoff(5), Duration::from_secs(4));
        assert_eq!(backoff(8), Duration::from_secs(30));
        assert_eq!(backoff(1000), Duration::from_secs(30));
    }

    #[test]
    fn progress_token_rewrite() {
        let mut p = Some(RawJson::from_value(&json!({"name": "x", "_meta": {"progressToken": 7}})));
        let (key, orig) = rewrite_progress_token(&mut p, 42).unwrap();
        assert_eq!(key, "tg-42");
        assert_eq!(orig, json!(7));
        assert_eq!(p.unwrap().to_value()["_meta"]["progressToken"], "tg-42");
        let mut none = Some(RawJson::from_value(&json!({"name": "x"})));
        assert!(rewrite_progress_token(&mut none, 1).is_none());
        assert!(rewrite_progress_token(&mut None, 1).is_none());
    }

    #[tokio::test]
    async fn bounded_lines() {
        let data: &[u8] = b"short\nthis line is too long\nok\nlast-no-newline";
        let mut r = BufReader::with_capacity(4, data);
        let mut line = Vec::new();
        let mut got = Vec::new();
        while let Some(over) = next_line(&mut r, &mut line, 10).await.unwrap() {
            got.push((over, String::from_utf8_lossy(&line).to_string()));
        }
        assert_eq!(
            got,
            vec![(false, "short".to_string()), (true, String::new()), (false, "ok".to_string()), (true, String::new()),]
        );
    }

    fn settings(command: Vec<&str>, timeouts: Timeouts) -> UpstreamSettings {
        UpstreamSettings {
            app_id: "test".into(),
            timeouts,
            transport: Transport::Stdio(StdioSettings {
                command: command.into_iter().map(String::from).collect(),
                env: vec![],
                cwd: None,
            }),
        }
    }

    /// A tiny MCP server in POSIX sh: answers initialize, echoes tools/call after a progress
    /// notification, exits on "crash", and ignores everything else.
    const SH_SERVER: &str = r#"
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"0"}}}\n' "$id" ;;
    *'"method":"tools/call"'*crash*) echo "crashing" >&2; exit 3 ;;
    *'"method":"tools/call"'*slow*) ;;
    *'"method":"tools/call"'*) printf 'not json at all\n{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tg-%s","progress":1}}\n{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}\n' "$id" "$id" ;;
  esac
done
"#;

    #[tokio::test]
    async fn sh_server_lifecycle() {
        let shared = UpstreamShared::new(1);
        let t = Timeouts { connect_ms: 2000, first_byte_ms: 2000, total_ms: 1000 };
        let up = Upstream::from_settings(&settings(vec!["sh", "-c", SH_SERVER], t), &shared).unwrap();
        let Upstream::Stdio(stdio) = &up else { panic!() };
        assert!(!stdio.is_running());

        // Progress is routed with the caller's own token; the response carries the caller's id.
        let ctx = CallContext { client_request_id: Id::from("abc"), ..Default::default() };
        let reply = up
            .request(
                "tools/call",
                Some(RawJson::from_value(&json!({"name":"echo","_meta":{"progressToken":"mine"}}))),
                &ctx,
            )
            .await
            .unwrap();
        let UpstreamReply::Stream(mut s) = reply else { panic!("progress first") };
        let Some(Ok(Message::Notification(n))) = s.next().await else { panic!() };
        assert_eq!(n.params.unwrap().to_value()["progressToken"], "mine");
        let Some(Ok(Message::Response(r))) = s.next().await else { panic!() };
        assert_eq!(r.id, json!("abc"));
        assert!(stdio.is_running());

        // A second process would exceed the bound of 1.
        let other = Upstream::from_settings(&settings(vec!["sh", "-c", SH_SERVER], t), &shared).unwrap();
        assert_eq!(other.connect().await.unwrap_err(), UpstreamError::ProcessLimit { limit: 1 });

        // Total timeout on a slow call.
        let e = up.request("tools/call", Some(RawJson::from_value(&json!({"name":"slow"}))), &ctx).await.unwrap_err();
        assert_eq!(e, UpstreamError::Timeout { phase: TimeoutPhase::Total });

        // A crash fails the pending call with a clear error and frees the permit.
        let e = up.request("tools/call", Some(RawJson::from_value(&json!({"name":"crash"}))), &ctx).await.unwrap_err();
        match e {
            UpstreamError::Exited(reason) => assert!(reason.contains("3"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // The next call restarts it after the back-off (250 ms < 1 s total).
        let r = up
            .request("tools/call", Some(RawJson::from_value(&json!({"name":"echo"}))), &ctx)
            .await
            .unwrap()
            .into_response()
            .await
            .unwrap();
        assert!(r.outcome.is_ok());

        up.shutdown().await;
        assert!(!stdio.is_running());
        assert_eq!(up.request("tools/list", None, &ctx).await.unwrap_err(), UpstreamError::ShutDown);
        // Permit released after the reap.
        assert!(other.connect().await.is_ok());
        other.shutdown().await;
    }

    #[tokio::test]
    async fn spawn_failure_and_backoff() {
        let shared = UpstreamShared::default();
        let t = Timeouts { connect_ms: 1000, first_byte_ms: 1000, total_ms: 100 };
        let up = Upstream::from_settings(&settings(vec!["/nonexistent/mcp-server"], t), &shared).unwrap();
        assert!(matches!(up.connect().await, Err(UpstreamError::Spawn(_))));
        // Within the back-off window and with a deadline too short to wait it out.
        assert!(matches!(up.connect().await, Err(UpstreamError::Backoff { .. })));
        assert!(matches!(Upstream::from_settings(&settings(vec![], t), &shared), Err(UpstreamError::Config(_))));
    }

    #[tokio::test]
    async fn exits_during_initialize() {
        let shared = UpstreamShared::new(1);
        let up = Upstream::from_settings(
            &settings(vec!["sh", "-c", "echo bad args >&2; exit 2"], Timeouts::default()),
            &shared,
        )
        .unwrap();
        match up.connect().await {
            Err(UpstreamError::Exited(reason)) => assert!(reason.contains('2'), "{reason}"),
            other => panic!("{other:?}"),
        }
        // The permit came back, so the bound of 1 does not block another start attempt later.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(shared.stdio_permits.available_permits(), 1);
    }
}
