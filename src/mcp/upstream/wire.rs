//! One HTTP exchange with a Streamable HTTP upstream: send a request, then read the status,
//! headers and body of its answer in chunks. [`super::http`] builds the MCP session on top.
//!
//! * **`http://` upstreams** connect through Pingora's connector and speak HTTP/1.1: the request
//!   is written and the answer read ([`answer`]) by the task that serves the gateway client.
//!   hyper's client (under reqwest) runs every connection as a task of its own,
//!   so each call handed its request to that task and its answer back: two cross-task wake-ups
//!   per call, which on a 2-worker runtime are cross-thread wake-ups. That hand-off, with
//!   reqwest's redirect and retry layers, was the largest cost left in a `tools/call`
//!   (BENCHMARKS.md).
//! * **Idle keep-alive connections wait in a list of the upstream's own** ([`IdleConnections`]),
//!   not in Pingora's pool. Pingora's pool spawns a task per released connection to watch it
//!   while idle, and taking the connection back wakes that task, waits for it to let go, and asks
//!   the kernel for the peer address: a task, two wake-ups and a system call per call, about 3 us
//!   of the 60 us a call costs here (BENCHMARKS.md). Here a connection is owned by its list, so it
//!   cannot be confused with another socket, and it is checked for a close or stray bytes with
//!   one non-blocking read when it is taken. The most recently used is taken first (its peer is
//!   the least likely to have closed it), the list is capped per upstream, and connections idle
//!   past [`POOL_IDLE_TIMEOUT`] are closed when the list is next touched or swept.
//! * A pooled connection that the server closed while idle and that the check missed shows up as
//!   a write error, or as an EOF before the first byte of the answer. The request is then sent
//!   again on a new connection, at most twice, and only when nothing of the answer was read, as
//!   Pingora's own proxy does (`RetryType::ReusedOnly`).
//! * The request line, headers and body leave in **one write** (Pingora's client session writes
//!   the head and the body separately): one system call and one wake-up of the upstream fewer
//!   per call. The head is written by hand (`request_bytes`).
//! * **The answer is read by toolgate's own reader** ([`answer`], on `httparse`), whose buffer
//!   stays with the pooled connection, rather than by a Pingora client session made for each
//!   exchange (a read buffer, a header map, a digest and a body reader allocated per call).
//! * **`https://` upstreams** use reqwest with rustls and the webpki roots (HTTP/2 by ALPN), plus
//!   the app's `tls_ca_file` roots (internal servers behind a company CA).
//!   toolgate's Pingora is built without a TLS backend, and certificate checking is not
//!   something to hand-roll.
//! * The host name is resolved when the first request needs it, and again after a failed
//!   connect, so an upstream that moves to a new address is found without a restart.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use futures_util::FutureExt as _;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, HOST};
use http::{Method, StatusCode};
use pingora::connectors::{ConnectorOptions, TransportConnector};
use pingora::protocols::Stream;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error as PingoraError, ErrorType};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt};

use super::{describe_error, TimeoutPhase, UpstreamError};

mod answer;

use answer::{Answer, AnswerError, Connection};

/// How long an idle pooled connection is kept. Servers close sooner (Node's default is 5 s); the
/// check on taking a connection notices that and drops it.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Idle connections kept per plain-text upstream; a connection released beyond it closes the
/// longest idle one.
const MAX_IDLE_PER_UPSTREAM: usize = 128;

/// A request sent on a stale pooled connection is sent again at most this many times.
const STALE_RETRIES: usize = 2;

/// The HTTP clients shared by every Streamable HTTP upstream of the process; build one at start.
pub(crate) struct HttpClients {
    /// Opens new connections only: idle ones are kept per upstream, in [`IdleConnections`].
    connector: Arc<TransportConnector>,
    /// reqwest clients (https) by connect timeout and extra roots: reqwest sets both per client,
    /// and nearly every app uses the defaults, so in practice there is one.
    tls: parking_lot::Mutex<HashMap<TlsClientKey, reqwest::Client>>,
}

impl Default for HttpClients {
    fn default() -> Self {
        // Pingora's own pool stays empty: nothing is released into it.
        let options = ConnectorOptions::new(0);
        Self {
            connector: Arc::new(TransportConnector::new(Some(options))),
            tls: parking_lot::Mutex::new(HashMap::new()),
        }
    }
}

type TlsClientKey = (Duration, Option<Arc<[u8]>>);

impl HttpClients {
    fn tls_client(
        &self,
        connect_timeout: Duration,
        roots: Option<&Arc<[u8]>>,
    ) -> Result<reqwest::Client, UpstreamError> {
        let key = (connect_timeout, roots.cloned());
        let mut clients = self.tls.lock();
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        // Redirects stay off: MCP servers do not redirect, and following one would replay
        // credentials elsewhere.
        let client = crate::outbound::client::builder()
            .roots(roots.map(|pem| &pem[..]))
            .connect_timeout(connect_timeout)
            .pool(POOL_IDLE_TIMEOUT, 64)
            .nodelay()
            .build()
            .map_err(|e| match e {
                crate::outbound::client::ClientError::Roots(e) => UpstreamError::Config(format!("tls_ca_file: {e}")),
                crate::outbound::client::ClientError::Build(e) => UpstreamError::Config(format!("HTTP client: {e}")),
            })?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// What one request carries besides the method: headers in three layers and the body.
pub(crate) struct Outgoing<'a> {
    /// The app's configured headers (content type, accept, credential, static headers).
    pub base: &'a HeaderMap,
    /// Session headers (`Mcp-Session-Id`, `MCP-Protocol-Version`), when a session is open.
    pub session: [Option<(&'a HeaderName, &'a HeaderValue)>; 2],
    /// Per-call headers ([`super::CallContext::headers`]).
    pub extra: &'a [(HeaderName, HeaderValue)],
    pub body: Bytes,
}

impl Outgoing<'_> {
    fn headers(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.base.iter().chain(self.session.iter().flatten().copied()).chain(self.extra.iter().map(|(n, v)| (n, v)))
    }
}

/// Where an upstream's requests go; parsed from its URL once.
pub(crate) enum Target {
    Plain(Box<PlainTarget>),
    Tls { url: reqwest::Url, client: reqwest::Client },
}

pub(crate) struct PlainTarget {
    connector: Arc<TransportConnector>,
    idle: Arc<IdleConnections>,
    host: Host,
    port: u16,
    /// `Host` header: the URL's host and explicit port.
    authority: HeaderValue,
    /// Path and query of the URL.
    path: String,
    connect_timeout: Duration,
    /// The resolved peer; cleared after a failed connect so the name is resolved again.
    peer: ArcSwapOption<HttpPeer>,
}

enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Target {
    /// Closes idle connections past their time (see [`IdleConnections::sweep`]); reqwest prunes
    /// its own.
    pub(crate) fn sweep_idle(&self) {
        if let Target::Plain(p) = self {
            p.idle.sweep();
        }
    }

    /// Checks the URL (http or https, with a host). No I/O. `tls_roots` (PEM) are trusted for an
    /// https URL besides the webpki roots.
    pub(crate) fn new(
        url: &str,
        connect_timeout: Duration,
        tls_roots: Option<&Arc<[u8]>>,
        clients: &HttpClients,
    ) -> Result<Self, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("url \"{url}\": {e}"))?;
        match parsed.scheme() {
            "https" => {
                let client = clients.tls_client(connect_timeout, tls_roots).map_err(|e| e.to_string())?;
                Ok(Target::Tls { url: parsed, client })
            }
            "http" => {
                let host = match parsed.host() {
                    Some(url::Host::Ipv4(ip)) => Host::Ip(ip.into()),
                    Some(url::Host::Ipv6(ip)) => Host::Ip(ip.into()),
                    Some(url::Host::Domain(name)) => Host::Name(name.to_owned()),
                    None => return Err(format!("url \"{url}\" has no host")),
                };
                let host_str = parsed.host_str().unwrap_or_default();
                let authority = match parsed.port() {
                    Some(p) => format!("{host_str}:{p}"),
                    None => host_str.to_owned(),
                };
                let mut path = parsed.path().to_owned();
                if let Some(q) = parsed.query() {
                    path.push('?');
                    path.push_str(q);
                }
                Ok(Target::Plain(Box::new(PlainTarget {
                    connector: clients.connector.clone(),
                    idle: Arc::new(IdleConnections::default()),
                    host,
                    port: parsed.port_or_known_default().unwrap_or(80),
                    authority: HeaderValue::from_str(&authority).map_err(|_| format!("url \"{url}\": invalid host"))?,
                    path,
                    connect_timeout,
                    peer: ArcSwapOption::empty(),
                })))
            }
            _ => Err("url must be http or https".into()),
        }
    }

    /// Sends the request and reads the answer's status and headers. The caller bounds the time.
    pub(crate) async fn send(&self, method: Method, out: Outgoing<'_>) -> Result<WireResponse, UpstreamError> {
        match self {
            Target::Plain(t) => t.send(method, &out).await,
            Target::Tls { url, client } => {
                let mut req = client.request(method, url.clone());
                for (name, value) in out.headers() {
                    req = req.header(name, value.clone());
                }
                match req.body(out.body).send().await {
                    Ok(resp) => Ok(WireResponse { status: resp.status(), reply: Reply::Tls { resp: Box::new(resp) } }),
                    Err(e) if e.is_connect() && e.is_timeout() => {
                        Err(UpstreamError::Timeout { phase: TimeoutPhase::Connect })
                    }
                    Err(e) => Err(UpstreamError::Connect(describe_error(&e))),
                }
            }
        }
    }
}

impl PlainTarget {
    async fn peer(&self) -> Result<Arc<HttpPeer>, UpstreamError> {
        if let Some(peer) = self.peer.load_full() {
            return Ok(peer);
        }
        let addr = match &self.host {
            Host::Ip(ip) => SocketAddr::new(*ip, self.port),
            Host::Name(name) => {
                let lookup = tokio::net::lookup_host((name.as_str(), self.port));
                let mut addrs = tokio::time::timeout(self.connect_timeout, lookup)
                    .await
                    .map_err(|_| UpstreamError::Timeout { phase: TimeoutPhase::Connect })?
                    .map_err(|e| UpstreamError::Connect(format!("cannot resolve {name}: {e}")))?;
                addrs.next().ok_or_else(|| UpstreamError::Connect(format!("{name} has no address")))?
            }
        };
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(self.connect_timeout);
        let peer = Arc::new(peer);
        self.peer.store(Some(peer.clone()));
        Ok(peer)
    }

    async fn send(&self, method: Method, out: &Outgoing<'_>) -> Result<WireResponse, UpstreamError> {
        let peer = self.peer().await?;
        let request = self.request_bytes(&method, out);
        let mut attempt = 0;
        loop {
            let (conn, reused) = match self.idle.take() {
                Some(c) => (c, true),
                // Boxed: Pingora's connect future is about 8 KB, and held inline it made every
                // call's future that much larger (each level above it holds this one), so every
                // move and copy of the call's state copied it, while a pooled connection, the
                // usual case, never runs it.
                None => match Box::pin(self.connector.new_stream(&*peer)).await {
                    Ok(s) => (Connection::new(s), false),
                    Err(e) => {
                        self.peer.store(None);
                        return Err(connect_error(&e));
                    }
                },
            };
            match exchange(conn, &method, &request).await {
                Ok(answer) => {
                    return Ok(WireResponse {
                        status: answer.status,
                        reply: Reply::Pooled { answer: Some(answer), idle: self.idle.clone() },
                    })
                }
                Err(e) => {
                    let stale = reused
                        && matches!(e, ExchangeError::Write(_) | ExchangeError::Read(AnswerError::NothingRead(_)));
                    if stale && attempt < STALE_RETRIES {
                        attempt += 1;
                        tracing::debug!(error = %e, "pooled upstream connection was stale; sending again");
                        continue;
                    }
                    return Err(match e {
                        ExchangeError::Read(AnswerError::Malformed(why)) => UpstreamError::Protocol(why.to_string()),
                        e => UpstreamError::Connect(e.to_string()),
                    });
                }
            }
        }
    }

    /// The whole request as it goes on the wire: head and body in one buffer. Written by hand
    /// rather than through Pingora's `RequestHeader` (a header map built, serialised and dropped
    /// per call, 2% of toolgate's CPU): every part is already valid here, as the URL was parsed
    /// once and names and values are `http` types, which cannot hold a line break.
    fn request_bytes(&self, method: &Method, out: &Outgoing<'_>) -> Bytes {
        let size = self.request_len(method, out);
        let mut length = itoa::Buffer::new();
        let length = length.format(out.body.len());
        let mut wire = Vec::with_capacity(size);
        wire.extend_from_slice(method.as_str().as_bytes());
        wire.push(b' ');
        wire.extend_from_slice(self.path.as_bytes());
        wire.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        wire.extend_from_slice(self.authority.as_bytes());
        wire.extend_from_slice(b"\r\n");
        for (name, value) in out.headers() {
            if !sent(name) {
                continue;
            }
            wire.extend_from_slice(name.as_str().as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(value.as_bytes());
            wire.extend_from_slice(b"\r\n");
        }
        if with_length(method, out) {
            wire.extend_from_slice(b"Content-Length: ");
            wire.extend_from_slice(length.as_bytes());
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(&out.body);
        // A `Vec` whose length is its capacity becomes a `Bytes` without another allocation.
        debug_assert_eq!(wire.len(), size);
        Bytes::from(wire)
    }

    /// The exact length of [`Self::request_bytes`]'s output.
    fn request_len(&self, method: &Method, out: &Outgoing<'_>) -> usize {
        let headers: usize =
            out.headers().filter(|(n, _)| sent(n)).map(|(n, v)| n.as_str().len() + 2 + v.len() + 2).sum();
        let length = if with_length(method, out) {
            b"Content-Length: ".len() + itoa::Buffer::new().format(out.body.len()).len() + 2
        } else {
            0
        };
        method.as_str().len()
            + 1
            + self.path.len()
            + b" HTTP/1.1\r\nHost: ".len()
            + self.authority.len()
            + 2
            + headers
            + length
            + 2
            + out.body.len()
    }
}

/// Whether a `Content-Type` value names the media type `ty` (lowercase), in any case, before
/// its parameters. No allocation: it runs on every answer.
pub(crate) fn media_type_is(value: &[u8], ty: &str) -> bool {
    let value = value.trim_ascii_start();
    value.len() >= ty.len()
        && value[..ty.len()].eq_ignore_ascii_case(ty.as_bytes())
        && matches!(value.get(ty.len()), None | Some(b';' | b' ' | b'\t'))
}

/// Whether a configured or per-call header goes on the wire: framing and routing are the
/// transport's own.
fn sent(name: &HeaderName) -> bool {
    name != HOST && name != CONTENT_LENGTH
}

/// Whether the request says its body's length (a POST always does, even when empty).
fn with_length(method: &Method, out: &Outgoing<'_>) -> bool {
    !out.body.is_empty() || method == Method::POST
}

/// The idle keep-alive connections of one plain-text upstream, most recently used last.
pub(crate) struct IdleConnections {
    list: parking_lot::Mutex<VecDeque<IdleConnection>>,
    cap: usize,
    max_idle: Duration,
}

impl Default for IdleConnections {
    fn default() -> Self {
        Self::new(MAX_IDLE_PER_UPSTREAM, POOL_IDLE_TIMEOUT)
    }
}

struct IdleConnection {
    conn: Connection<Stream>,
    since: Instant,
}

impl IdleConnections {
    fn new(cap: usize, max_idle: Duration) -> Self {
        Self { list: parking_lot::Mutex::new(VecDeque::new()), cap, max_idle }
    }

    /// The most recently used connection that is still open, if any.
    fn take(&self) -> Option<Connection<Stream>> {
        loop {
            let mut c = {
                let mut list = self.list.lock();
                let c = list.pop_back()?;
                if c.since.elapsed() >= self.max_idle {
                    // The newest is past its time, so every other one is too.
                    let expired = std::mem::take(&mut *list);
                    drop(list);
                    drop(expired);
                    return None;
                }
                c
            };
            // Checked outside the lock; a closed one is dropped and the next one tried.
            if still_open(&mut c.conn.stream) {
                return Some(c.conn);
            }
        }
    }

    fn put(&self, conn: Connection<Stream>) {
        let now = Instant::now();
        let surplus = {
            let mut list = self.list.lock();
            list.push_back(IdleConnection { conn, since: now });
            let surplus = self.expired(&list, now).max(list.len().saturating_sub(self.cap));
            list.drain(..surplus).collect::<Vec<_>>()
        };
        // Closed outside the lock.
        drop(surplus);
    }

    /// Closes the connections idle past their time, for an upstream that gets no
    /// calls (the list is otherwise pruned when it is touched).
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let expired = {
            let mut list = self.list.lock();
            let expired = self.expired(&list, now);
            list.drain(..expired).collect::<Vec<_>>()
        };
        drop(expired);
    }

    /// How many of the oldest connections are past their time at `now`.
    fn expired(&self, list: &VecDeque<IdleConnection>, now: Instant) -> usize {
        list.iter().take_while(|c| now.duration_since(c.since) >= self.max_idle).count()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.list.lock().len()
    }
}

/// Whether an idle connection can carry a request: a read that does not wait finds nothing. An
/// EOF (the server closed it), an error, or bytes that no request asked for all say no.
/// `unconstrained`: tokio's cooperative budget must not turn a ready read into "nothing yet".
fn still_open(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    match tokio::task::unconstrained(stream.read(&mut byte)).now_or_never() {
        None => true,
        Some(Ok(0)) => false,
        Some(Ok(_)) => {
            tracing::warn!("unexpected bytes on an idle upstream connection; closing it");
            false
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "idle upstream connection broke");
            false
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("while writing the request: {0}")]
    Write(std::io::Error),
    #[error(transparent)]
    Read(AnswerError),
}

/// Writes the request in one go and reads the answer's head (skipping 1xx).
async fn exchange(
    mut conn: Connection<Stream>,
    method: &Method,
    request: &[u8],
) -> Result<Answer<Stream>, ExchangeError> {
    conn.stream.write_all(request).await.map_err(ExchangeError::Write)?;
    conn.stream.flush().await.map_err(ExchangeError::Write)?;
    conn.read_head(method == Method::HEAD).await.map_err(|(_, e)| ExchangeError::Read(e))
}

fn connect_error(e: &PingoraError) -> UpstreamError {
    match e.etype {
        ErrorType::ConnectTimedout => UpstreamError::Timeout { phase: TimeoutPhase::Connect },
        _ => UpstreamError::Connect(e.to_string()),
    }
}

/// The answer to one request: status and headers are read, the body is read on demand.
pub(crate) struct WireResponse {
    status: StatusCode,
    reply: Reply,
}

enum Reply {
    Pooled {
        /// `None` once the body is read and the connection is back in the pool.
        answer: Option<Answer<Stream>>,
        /// Where the connection goes when the body is read.
        idle: Arc<IdleConnections>,
    },
    Tls {
        /// Boxed: the rare case should not make every reply larger.
        resp: Box<reqwest::Response>,
    },
}

impl WireResponse {
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        match &self.reply {
            Reply::Pooled { answer, .. } => answer.as_ref()?.header(name),
            Reply::Tls { resp, .. } => resp.headers().get(name).map(HeaderValue::as_bytes),
        }
    }

    /// Hands the next piece of the body to `sink`; `false` at the end of the body, when a pooled
    /// connection goes back to the pool. A broken body is [`UpstreamError::Closed`]; an error of
    /// `sink` is returned as is. (A callback rather than a returned slice: the connection must be
    /// released after the last piece is read, which a borrow of it would forbid.)
    pub(crate) async fn next_into(
        &mut self,
        mut sink: impl FnMut(&[u8]) -> Result<(), UpstreamError>,
    ) -> Result<bool, UpstreamError> {
        match &mut self.reply {
            Reply::Pooled { answer, idle } => {
                let Some(a) = answer.as_mut() else { return Ok(false) };
                match a.next_piece(&mut sink).await {
                    Ok(Ok(true)) => return Ok(true),
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => return Err(e),
                    Err(e) => {
                        tracing::debug!(error = %e, "upstream body broke");
                        *answer = None;
                        return Err(UpstreamError::Closed);
                    }
                }
                if let Some(conn) = answer.take().and_then(Answer::reusable) {
                    idle.put(conn);
                }
                Ok(false)
            }
            Reply::Tls { resp } => match resp.chunk().await {
                Ok(Some(piece)) => {
                    sink(&piece)?;
                    Ok(true)
                }
                Ok(None) => Ok(false),
                Err(e) => {
                    tracing::debug!(error = %describe_error(&e), "upstream body broke");
                    Err(UpstreamError::Closed)
                }
            },
        }
    }

    /// The whole body; a body over `cap` bytes is a protocol error.
    pub(crate) async fn read_to_end(&mut self, cap: usize) -> Result<Vec<u8>, UpstreamError> {
        let mut buf = Vec::new();
        while self
            .next_into(|piece| {
                if buf.len() + piece.len() > cap {
                    return Err(UpstreamError::Protocol(format!("response larger than {cap} bytes")));
                }
                buf.extend_from_slice(piece);
                Ok(())
            })
            .await?
        {}
        Ok(buf)
    }

    /// Reads and drops the rest of a (small) body so the connection can be pooled; gives up after
    /// a short while or 64 KiB and closes the connection instead.
    pub(crate) async fn finish(mut self) {
        let drain = async {
            let mut left: usize = 64 * 1024;
            let mut sink = |piece: &[u8]| {
                left = left.checked_sub(piece.len()).ok_or(UpstreamError::Closed)?;
                Ok(())
            };
            while let Ok(true) = self.next_into(&mut sink).await {}
        };
        let _ = pingora::time::timeout(Duration::from_secs(2), drain).await;
    }

    /// [`Self::finish`] without waiting: done here when the rest of the body is already read
    /// (the usual case: an SSE server's last event and the chunked end arrive in one segment),
    /// so the connection is back in the pool before the caller answers its client and the next
    /// call reuses it; otherwise finished by a background task.
    pub(crate) fn release(self) {
        let mut finish = Box::pin(self.finish());
        let mut now = std::task::Context::from_waker(futures_util::task::noop_waker_ref());
        if finish.as_mut().poll(&mut now).is_pending() {
            // Polled again by the task, with its own waker.
            tokio::spawn(finish);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::upstream::test_http::read_request;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;

    /// A keep-alive HTTP/1.1 server answering every request with `ok <n>` (with Content-Length,
    /// or chunked in two chunks as an SSE server does), closing each connection after
    /// `per_connection` requests (without saying so, as an idle timeout would). Returns its port,
    /// the number of connections accepted and the requests seen.
    async fn server(
        per_connection: usize,
        chunked: bool,
    ) -> (u16, Arc<AtomicUsize>, Arc<parking_lot::Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (c, s) = (conns.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let seen = s.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut served = 0;
                    while served < per_connection {
                        let Some(request) = read_request(&mut sock, &mut buf).await else { return };
                        seen.lock().push(request);
                        served += 1;
                        let body = format!("ok {served}");
                        let resp = if chunked {
                            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nok \r\n{:x}\r\n{}\r\n0\r\n\r\n", body.len() - 3, &body[3..])
                        } else {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len())
                        };
                        sock.write_all(resp.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        (port, conns, seen)
    }

    fn post<'a>(headers: &'a HeaderMap, body: &'static str) -> Outgoing<'a> {
        Outgoing { base: headers, session: [None, None], extra: &[], body: Bytes::from_static(body.as_bytes()) }
    }

    async fn call(target: &Target, body: &'static str) -> String {
        let headers = HeaderMap::new();
        let mut resp = target.send(Method::POST, post(&headers, body)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        String::from_utf8(resp.read_to_end(1024).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn plain_requests_reuse_one_pooled_connection() {
        let (port, conns, seen) = server(usize::MAX, false).await;
        let clients = HttpClients::default();
        let target =
            Target::new(&format!("http://127.0.0.1:{port}/mcp?x=1"), Duration::from_secs(1), None, &clients).unwrap();
        assert!(matches!(target, Target::Plain(_)));
        for i in 1..=3 {
            assert_eq!(call(&target, "{\"a\":1}").await, format!("ok {i}"));
        }
        assert_eq!(conns.load(Ordering::SeqCst), 1, "one connection, kept alive and pooled");
        let first = seen.lock()[0].clone();
        assert!(first.starts_with("POST /mcp?x=1 HTTP/1.1\r\n"), "{first}");
        assert!(first.to_ascii_lowercase().contains(&format!("host: 127.0.0.1:{port}\r\n")), "{first}");
        assert!(first.ends_with("\r\n\r\n{\"a\":1}"), "{first}");
    }

    /// A call's future holds the send's inline, and every level above it holds that, so what
    /// the send holds is copied with the call's state: Pingora's connect future (about 8 KB,
    /// run only when no pooled connection is idle) stays boxed.
    #[tokio::test]
    async fn the_send_future_stays_small() {
        let clients = HttpClients::default();
        let target = Target::new("http://127.0.0.1:9/mcp", Duration::from_secs(1), None, &clients).unwrap();
        let headers = HeaderMap::new();
        let send = target.send(Method::POST, post(&headers, "{}"));
        let size = std::mem::size_of_val(&send);
        assert!(size < 2048, "the send future is {size} bytes");
    }

    fn out_again<'a>(
        base: &'a HeaderMap,
        sid: &'a HeaderName,
        sid_value: &'a HeaderValue,
        extra: &'a [(HeaderName, HeaderValue)],
    ) -> Outgoing<'a> {
        Outgoing { base, session: [Some((sid, sid_value)), None], extra, body: Bytes::new() }
    }

    #[tokio::test]
    async fn the_request_head_carries_every_header_once_and_the_body_length() {
        let (port, _, seen) = server(usize::MAX, false).await;
        let clients = HttpClients::default();
        let target =
            Target::new(&format!("http://127.0.0.1:{port}/mcp"), Duration::from_secs(1), None, &clients).unwrap();
        let mut base = HeaderMap::new();
        base.insert(http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        // Framing and routing are the transport's: a configured Host or Content-Length is not sent.
        base.insert(HOST, HeaderValue::from_static("evil.example"));
        base.insert(CONTENT_LENGTH, HeaderValue::from_static("1"));
        let (sid, sid_value) = (HeaderName::from_static("mcp-session-id"), HeaderValue::from_static("s-1"));
        let extra = [(HeaderName::from_static("x-tenant"), HeaderValue::from_static("acme"))];
        let body = "{\"jsonrpc\":\"2.0\"}";
        let out = Outgoing {
            base: &base,
            session: [Some((&sid, &sid_value)), None],
            extra: &extra,
            body: Bytes::from_static(body.as_bytes()),
        };
        let mut resp = target.send(Method::POST, out).await.unwrap();
        resp.read_to_end(64).await.unwrap();
        let head = seen.lock()[0].clone();
        // The buffer is sized exactly (no second allocation when it becomes `Bytes`), with or
        // without a body.
        let Target::Plain(plain) = &target else { panic!() };
        for (method, body) in [(Method::POST, body), (Method::GET, ""), (Method::DELETE, "")] {
            let out =
                Outgoing { body: Bytes::from_static(body.as_bytes()), ..out_again(&base, &sid, &sid_value, &extra) };
            assert_eq!(plain.request_bytes(&method, &out).len(), plain.request_len(&method, &out), "{method}");
        }
        let mut lines: Vec<&str> = head.split("\r\n").collect();
        assert_eq!(lines.remove(0), "POST /mcp HTTP/1.1");
        assert_eq!(lines.pop(), Some(body));
        assert_eq!(lines.pop(), Some(""), "a blank line ends the head");
        lines.sort_unstable();
        let host = format!("Host: 127.0.0.1:{port}");
        let length = format!("Content-Length: {}", body.len());
        let mut want = vec![
            "accept: application/json, text/event-stream",
            "mcp-session-id: s-1",
            "x-tenant: acme",
            host.as_str(),
            length.as_str(),
        ];
        want.sort_unstable();
        assert_eq!(lines, want);
    }

    #[tokio::test]
    async fn a_released_answer_whose_end_is_already_read_frees_its_connection_at_once() {
        let (port, conns, _) = server(usize::MAX, true).await;
        let clients = HttpClients::default();
        let target =
            Target::new(&format!("http://127.0.0.1:{port}/mcp"), Duration::from_secs(1), None, &clients).unwrap();
        let headers = HeaderMap::new();
        let mut resp = target.send(Method::POST, post(&headers, "{}")).await.unwrap();
        assert!(resp.next_into(|_| Ok(())).await.unwrap(), "the first chunk, with more to come");
        // The rest (second chunk and chunked end) came in the same segment: no task, no wait.
        resp.release();
        // On this single-threaded test runtime a background task could not have run yet, so the
        // next call finds the connection in the pool only if `release` freed it itself.
        assert_eq!(call(&target, "{}").await, "ok 2");
        assert_eq!(conns.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_closed_by_the_server_is_replaced() {
        let (port, conns, seen) = server(1, false).await;
        let clients = HttpClients::default();
        let target =
            Target::new(&format!("http://localhost:{port}/mcp"), Duration::from_secs(1), None, &clients).unwrap();
        for _ in 0..3 {
            assert_eq!(call(&target, "{}").await, "ok 1");
        }
        assert_eq!(conns.load(Ordering::SeqCst), 3);
        assert_eq!(seen.lock().len(), 3, "each request reached the server exactly once");
    }

    #[tokio::test]
    async fn idle_connections_are_capped_checked_when_taken_and_expire() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let clients = HttpClients::default();
        let peer = HttpPeer::new(addr, false, String::new());
        // Connects one client stream and returns it with its server side (accepted in order).
        let connect = || async {
            let client = clients.connector.new_stream(&peer).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            (Connection::new(client), server)
        };
        let closed = |mut server: tokio::net::TcpStream| async move {
            let mut b = [0u8; 1];
            matches!(tokio::time::timeout(Duration::from_secs(2), server.read(&mut b)).await, Ok(Ok(0)))
        };

        let idle = IdleConnections::new(2, Duration::from_secs(60));
        let (c1, s1) = connect().await;
        let (c2, mut s2) = connect().await;
        let (c3, s3) = connect().await;
        idle.put(c1);
        idle.put(c2);
        idle.put(c3);
        assert_eq!(idle.len(), 2, "capped");
        assert!(closed(s1).await, "the longest idle one is closed to make room");
        // The newest one's server went away: it is dropped when taken, and the next one is used.
        drop(s3);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut taken = idle.take().expect("the older connection is still open");
        assert_eq!(idle.len(), 0);
        taken.stream.write_all(b"ping").await.unwrap();
        taken.stream.flush().await.unwrap();
        let mut got = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), s2.read_exact(&mut got)).await.unwrap().unwrap();
        assert_eq!(&got, b"ping", "the connection handed out is the one still open");
        // A server that wrote bytes nobody asked for: not handed out.
        idle.put(taken);
        s2.write_all(b"junk").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(idle.take().is_none());

        let idle = IdleConnections::new(2, Duration::from_millis(30));
        let (c4, s4) = connect().await;
        let (c5, s5) = connect().await;
        idle.put(c4);
        tokio::time::sleep(Duration::from_millis(40)).await;
        idle.sweep();
        assert_eq!(idle.len(), 0, "swept when past its time");
        assert!(closed(s4).await);
        idle.put(c5);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(idle.take().is_none(), "past its time: closed, not handed out");
        assert!(closed(s5).await);
    }

    #[test]
    fn a_media_type_is_matched_in_any_case_before_its_parameters() {
        assert!(media_type_is(b"text/event-stream", "text/event-stream"));
        assert!(media_type_is(b" Text/Event-Stream; charset=utf-8", "text/event-stream"));
        assert!(media_type_is(b"application/json;charset=UTF-8", "application/json"));
        assert!(!media_type_is(b"application/jsonl", "application/json"));
        assert!(!media_type_is(b"text/html", "text/event-stream"));
        assert!(!media_type_is(b"", "application/json"));
    }

    #[tokio::test]
    async fn a_chunked_body_read_to_its_end_releases_the_connection() {
        let (port, conns, _) = server(usize::MAX, true).await;
        let clients = HttpClients::default();
        let target =
            Target::new(&format!("http://127.0.0.1:{port}/mcp"), Duration::from_secs(1), None, &clients).unwrap();
        for i in 1..=3 {
            assert_eq!(call(&target, "{}").await, format!("ok {i}"));
        }
        // Read piece by piece, then handed to `finish` before the end, as the SSE path does.
        let headers = HeaderMap::new();
        let mut resp = target.send(Method::POST, post(&headers, "{}")).await.unwrap();
        let mut first = Vec::new();
        let more = resp
            .next_into(|p| {
                first.extend_from_slice(p);
                Ok(())
            })
            .await
            .unwrap();
        assert!(more);
        assert_eq!(first, b"ok ");
        resp.finish().await;
        assert_eq!(call(&target, "{}").await, "ok 5");
        assert_eq!(conns.load(Ordering::SeqCst), 1, "chunked answers must not cost a connection each");
    }

    /// A server that reads one request per connection, writes `answer` and closes.
    async fn answering(answer: &'static [u8]) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    if read_request(&mut sock, &mut buf).await.is_some() {
                        let _ = sock.write_all(answer).await;
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn malformed_and_broken_answers_map_to_their_upstream_errors() {
        let clients = HttpClients::default();
        let headers = HeaderMap::new();
        let target = |port: u16| {
            Target::new(&format!("http://127.0.0.1:{port}/mcp"), Duration::from_secs(2), None, &clients).unwrap()
        };
        // A head that cannot be read: a protocol error, not a connection failure.
        for garbage in [&b"NOT HTTP AT ALL\r\n\r\n"[..], b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n"] {
            let err = target(answering(garbage).await).send(Method::POST, post(&headers, "{}")).await.err().unwrap();
            assert!(matches!(err, UpstreamError::Protocol(_)), "{:?}: {err:?}", String::from_utf8_lossy(garbage));
        }
        // Closed before answering, on a fresh connection: not sent again, a connection failure.
        let err = target(answering(b"").await).send(Method::POST, post(&headers, "{}")).await.err().unwrap();
        assert!(matches!(err, UpstreamError::Connect(_)), "{err:?}");
        // A good head, then a body that breaks: the head is the answer, the body read fails.
        let broken = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
        let mut resp = target(answering(broken).await).send(Method::POST, post(&headers, "{}")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let err = resp.read_to_end(1024).await.err().unwrap();
        assert!(matches!(err, UpstreamError::Closed), "{err:?}");
    }

    #[tokio::test]
    async fn connect_failures_and_bad_urls() {
        let clients = HttpClients::default();
        let target = Target::new("http://127.0.0.1:1/mcp", Duration::from_secs(1), None, &clients).unwrap();
        let headers = HeaderMap::new();
        let err = target.send(Method::POST, post(&headers, "{}")).await.err().unwrap();
        assert!(matches!(err, UpstreamError::Connect(_)), "{err:?}");
        let target = Target::new("http://no-such-host.invalid/mcp", Duration::from_secs(2), None, &clients).unwrap();
        let err = target.send(Method::POST, post(&headers, "{}")).await.err().unwrap();
        assert!(matches!(err, UpstreamError::Connect(_) | UpstreamError::Timeout { .. }), "{err:?}");
        for bad in ["ftp://x/mcp", "not a url", "http://[::1/mcp"] {
            assert!(Target::new(bad, Duration::from_secs(1), None, &clients).is_err(), "{bad}");
        }
        assert!(matches!(
            Target::new("https://example.com/mcp", Duration::from_secs(1), None, &clients),
            Ok(Target::Tls { .. })
        ));
    }
}
