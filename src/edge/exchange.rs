//! One HTTP exchange: the only code that holds Pingora's `Session`. It reads the request body
//! (within `server.max_body_bytes`), writes complete answers and SSE streams, and puts the
//! headers every answer carries (the request id, the filters' rate-limit headers). The proxy
//! routes and runs the filter chains, then hands an [`Exchange`] to `api` glue or to `mcp`,
//! which decide what to answer and never touch the connection otherwise.

use crate::base::route::Route;
use crate::edge::error::ApiError;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderName, HeaderValue};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::protocols::http::ServerSession;
use pingora::protocols::Stream;
use serde_json::{json, Value};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_filters::FilterContext;

/// Every answer carries the request's id (also in its logs and error bodies).
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A request's id: a UUID v4, hyphenated, kept inline (no allocation per request).
#[derive(Clone, Copy)]
pub(crate) struct RequestId([u8; uuid::fmt::Hyphenated::LENGTH]);

impl RequestId {
    /// A fresh random id (not a `Default`: every request needs its own).
    pub(crate) fn generate() -> RequestId {
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
        RequestId(text)
    }

    /// The id of a request not yet given one (all zeros); replaced first thing.
    pub(crate) fn unset() -> RequestId {
        RequestId([b'0'; uuid::fmt::Hyphenated::LENGTH])
    }

    pub(crate) fn as_str(&self) -> &str {
        // Hex digits and hyphens only.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the proxy learned of a request before its handler runs.
pub(crate) struct RequestCtx {
    pub request_id: RequestId,
    pub client_ip: IpAddr,
    pub route: Route,
    pub filters: FilterContext,
    pub started: Instant,
    /// The status written, for the metrics and the access log.
    pub status: u16,
    /// The W3C trace context: the client's, or toolgate's own when spans are exported.
    pub trace: Option<crate::observe::trace::TraceContext>,
    /// The subject of the connection's verified client certificate (mTLS), if any.
    pub client_certificate: Option<std::sync::Arc<str>>,
    /// The gateway rule that denied this request's tool call (the access line's `rule`).
    pub denied_by: Option<std::sync::Arc<str>>,
    /// A `tools/call` refused because the tool awaits approval (for the access line).
    pub tool_pending: bool,
    /// The rest of a streamed answer that goes on by itself once the request is finished
    /// ([`Exchange::stream_on`]).
    pub tail: Option<StreamTail>,
}

impl Default for RequestCtx {
    /// A context with nothing learned yet (the proxy makes each request's own from its header).
    fn default() -> RequestCtx {
        RequestCtx {
            request_id: RequestId::unset(),
            client_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            route: Route::NotFound,
            filters: FilterContext::default(),
            started: Instant::now(),
            status: 0,
            trace: None,
            client_certificate: None,
            denied_by: None,
            tool_pending: false,
            tail: None,
        }
    }
}

/// The envelope's `meta`.
fn meta(ctx: &RequestCtx) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    json!({ "timestamp": now, "request_id": ctx.request_id.as_str() })
}

/// The management envelope of an error: `success: false`, `error`, `meta`.
pub(crate) fn error_body(err: &ApiError, ctx: &RequestCtx) -> Vec<u8> {
    serde_json::to_vec(&json!({ "success": false, "error": err.to_error_object(), "meta": meta(ctx) }))
        .unwrap_or_default()
}

/// The management envelope of a success: `success: true`, `data` and `message` when given,
/// `meta`.
pub(crate) fn success_body(data: Option<Value>, message: Option<String>, ctx: &RequestCtx) -> Vec<u8> {
    let mut env = json!({ "success": true, "meta": meta(ctx) });
    if let Some(d) = data {
        env["data"] = d;
    }
    if let Some(m) = message {
        env["message"] = Value::String(m);
    }
    serde_json::to_vec(&env).unwrap_or_default()
}

/// The head of an answer with its status, the request id and the filters' headers (rate limits),
/// with room for `more` headers.
///
/// Built as `http` parts and handed to Pingora whole: `ResponseHeader::insert_header` turns every
/// name into a title-cased copy and parses that back into a name (two allocations for each header
/// that is not a standard one, seven of them here), while these names are already `HeaderName`s.
/// With no header-case map, names go out lower-case, as HTTP/2 and HTTP/3 require anyway.
fn response_head(status: u16, more: usize, ctx: &mut RequestCtx) -> Result<http::response::Parts> {
    let (mut h, ()) = http::Response::new(()).into_parts();
    h.status = http::StatusCode::from_u16(status)
        .map_err(|_| Error::explain(ErrorType::InternalError, format!("invalid status {status}")))?;
    // The filters' headers are answered once: moved, not copied.
    let filters = std::mem::take(&mut ctx.filters.response_headers);
    h.headers.reserve(1 + filters.len() + more);
    let id = HeaderValue::from_str(ctx.request_id.as_str())
        .map_err(|_| Error::explain(ErrorType::InternalError, "request id is not a header value"))?;
    h.headers.insert(X_REQUEST_ID, id);
    for (k, v) in filters {
        h.headers.append(k, v);
    }
    Ok(h)
}

/// The most a declared `Content-Length` reserves before the body arrives; a larger body grows
/// the buffer as it comes. Most bodies (MCP calls, management requests) fit, so they are read
/// into one allocation as before.
pub(crate) const PREALLOCATED_BODY_BYTES: usize = 64 * 1024;

/// One request and its answer.
pub(crate) struct Exchange<'a> {
    session: &'a mut ServerSession,
    pub ctx: &'a mut RequestCtx,
    max_body: usize,
    /// How long the body may take to arrive, on routes that set one (the identity service's).
    body_deadline: Option<std::time::Duration>,
}

impl<'a> Exchange<'a> {
    pub(crate) fn new(session: &'a mut ServerSession, ctx: &'a mut RequestCtx, max_body: usize) -> Exchange<'a> {
        Exchange { session, ctx, max_body, body_deadline: None }
    }

    /// Gives the request's body `deadline` to arrive whole (408 past it).
    pub(crate) fn set_body_deadline(&mut self, deadline: std::time::Duration) {
        self.body_deadline = Some(deadline);
    }

    /// The request's method, URI and headers.
    pub(crate) fn request(&self) -> &RequestHeader {
        self.session.req_header()
    }

    /// The request and the context at once, for the filter chain, which reads the one and
    /// writes the other.
    pub(crate) fn parts(&mut self) -> (&RequestHeader, &mut RequestCtx) {
        (self.session.req_header(), self.ctx)
    }

    pub(crate) fn headers(&self) -> &http::HeaderMap {
        &self.session.req_header().headers
    }

    /// A request header's value, when it is text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers().get(name).and_then(|v| v.to_str().ok())
    }

    /// Writes a complete response with the request id and the filters' headers.
    pub(crate) async fn respond(
        &mut self,
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<()> {
        let mut h = response_head(status, 4 + extra.len(), self.ctx)?;
        h.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        // Never cached, unless the answer says otherwise (the console's content-addressed files).
        if !extra.iter().any(|(k, _)| k == http::header::CACHE_CONTROL) {
            h.headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        for (k, v) in extra {
            h.headers.append(k.clone(), v.clone());
        }
        self.ctx.status = status;
        self.session.write_response_header(Box::new(ResponseHeader::from(h))).await?;
        self.session.write_response_body(Bytes::from(body), true).await
    }

    /// A JSON answer.
    pub(crate) async fn json(&mut self, status: u16, body: Vec<u8>) -> Result<()> {
        self.respond(status, "application/json", body, &[]).await
    }

    /// Writes an error in the management envelope, with `Retry-After` when it has one.
    pub(crate) async fn respond_error(&mut self, err: ApiError) -> Result<()> {
        let mut extra = Vec::new();
        if let Some(r) = err.retry_after() {
            extra.push((http::header::RETRY_AFTER, HeaderValue::from(r)));
        }
        if err.status() >= 500 {
            tracing::error!(request_id = %self.ctx.request_id, error = ?err, "request failed");
        }
        let body = error_body(&err, self.ctx);
        self.respond(err.status(), "application/json", body, &extra).await
    }

    /// Reads the whole request body, refusing more than `server.max_body_bytes`.
    pub(crate) async fn read_body(&mut self) -> std::result::Result<Bytes, ApiError> {
        self.read_body_within(self.max_body).await
    }

    /// Reads the whole request body, refusing more than `limit` bytes (413, at once when the
    /// declared length is larger) and, when the route set a deadline
    /// ([`Exchange::set_body_deadline`]), a body that has not arrived whole within it (408). The buffer grows with what arrives: a declared length reserves at most
    /// [`PREALLOCATED_BODY_BYTES`], so a client that announces a large body and sends it
    /// slowly holds only what it sent. After a refusal the connection is not reused (its body
    /// is left unread).
    pub(crate) async fn read_body_within(&mut self, limit: usize) -> std::result::Result<Bytes, ApiError> {
        let deadline = self.body_deadline;
        let limit = limit.min(self.max_body);
        let declared = self
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            self.session.set_keepalive(None);
            return Err(ApiError::PayloadTooLarge(limit));
        }
        let mut buf = bytes::BytesMut::with_capacity(declared.unwrap_or(0).min(PREALLOCATED_BODY_BYTES));
        let read = async {
            loop {
                match self.session.read_request_body().await {
                    Ok(Some(chunk)) => {
                        if buf.len() + chunk.len() > limit {
                            return Err(ApiError::PayloadTooLarge(limit));
                        }
                        buf.extend_from_slice(&chunk);
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(ApiError::validation("body", format!("cannot read request body: {e}"))),
                }
            }
        };
        let read = match deadline {
            Some(d) => tokio::time::timeout(d, read).await.unwrap_or_else(|_| {
                Err(ApiError::Rejected {
                    status: 408,
                    code: "REQUEST_TIMEOUT",
                    message: format!("the request body did not arrive within {} s", d.as_secs_f64()),
                    retry_after: None,
                })
            }),
            None => read.await,
        };
        if let Err(e) = read {
            self.session.set_keepalive(None);
            return Err(e);
        }
        Ok(buf.freeze())
    }

    /// Starts a `text/event-stream` answer (a relayed call's events, or the GET stream): status
    /// 200, the request id and the filters' headers, as [`Exchange::respond`] puts them.
    pub(crate) async fn start_sse(&mut self) -> Result<()> {
        let mut h = response_head(200, 2, self.ctx)?;
        h.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        self.ctx.status = 200;
        self.session.write_response_header(Box::new(ResponseHeader::from(h))).await
    }

    /// Writes a piece of a streamed answer; `end` closes it.
    pub(crate) async fn write(&mut self, chunk: Option<Bytes>, end: bool) -> Result<()> {
        match chunk {
            Some(data) => self.session.write_response_body(data, end).await,
            None if end => self.session.write_response_body(Bytes::new(), true).await,
            None => Ok(()),
        }
    }

    /// Runs the rest of a streamed answer (its head and first events written). On HTTP/1 it is
    /// handed over ([`RequestCtx::tail`]) and runs by itself on the bare connection once the
    /// request is finished ([`EventStream`]); on HTTP/2, where the stream is one of its
    /// connection's, it runs here.
    ///
    /// An open stream is not a request in flight: the caller's `concurrent` slot (taken by a
    /// `subscriptions/listen` POST; a GET takes none) is given back here, so listening clients
    /// leave their key's calls the whole figure.
    pub(crate) async fn stream_on<S: EventSource>(&mut self, source: S) {
        self.ctx.filters.concurrency = None;
        if matches!(self.session, ServerSession::H1(_)) && self.session.response_written().is_some() {
            self.ctx.tail = Some(Box::new(move |mut out: EventStream| {
                Box::pin(async move {
                    // What Pingora's session left in its write buffer (the head) goes out first.
                    if out.flush().await.is_ok() {
                        source.run(&mut out).await;
                    }
                    out.close().await;
                })
            }));
        } else {
            source.run(self).await;
        }
    }
}

impl EventSink for Exchange<'_> {
    async fn send(&mut self, events: Bytes) -> Result<()> {
        unstalled(self.session.write_response_body(events, false)).await
    }

    async fn client_gone(&mut self) -> Result<()> {
        let done = self.session.is_body_done();
        self.session.read_body_or_idle(done).await.map(|_| ())
    }

    async fn end(&mut self, last: Option<Bytes>) -> Result<()> {
        unstalled(self.session.write_response_body(last.unwrap_or_default(), true)).await
    }
}

/// How long one write of a long-lived stream may wait for its client to take it. A client that
/// stops reading would otherwise hold its stream (the loop, the MCP session's place, the
/// kernel's buffers) until the MCP session ends, however long that is; a stream's events are
/// small, so a write this late means a client that does not read.
const STALLED_WRITE: std::time::Duration =
    if cfg!(test) { std::time::Duration::from_millis(300) } else { std::time::Duration::from_secs(30) };

/// `write`, failed once it has waited [`STALLED_WRITE`] for the client.
async fn unstalled(write: impl Future<Output = Result<()>>) -> Result<()> {
    match pingora::time::timeout(STALLED_WRITE, write).await {
        Ok(written) => written,
        Err(_) => Error::e_explain(ErrorType::WriteTimedout, "the client of an event stream stopped reading"),
    }
}

/// Where a streamed answer's events go: an [`Exchange`], or the [`EventStream`] an HTTP/1
/// answer goes on with by itself. The loops that write long-lived streams are written once,
/// for both.
pub(crate) trait EventSink: Send {
    /// Writes events; `Err` when the client has gone.
    fn send(&mut self, events: Bytes) -> impl Future<Output = Result<()>> + Send;
    /// Completes with `Err` when the client closes its side (there is no request body left to
    /// read), with `Ok` when it sent something, which is ignored.
    fn client_gone(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// Ends the answer, with its last events.
    fn end(&mut self, last: Option<Bytes>) -> impl Future<Output = Result<()>> + Send;
}

/// The rest of a streamed answer: what writes its events, to whichever sink it is given.
pub(crate) trait EventSource: Send + Sync + 'static {
    fn run<S: EventSink>(self, out: &mut S) -> impl Future<Output = ()> + Send;
}

/// A streamed answer's rest, handed over until the request's own state is freed.
pub(crate) type StreamTail = Box<dyn FnOnce(EventStream) -> BoxFuture<'static, ()> + Send + Sync>;

/// An HTTP/1 connection whose answer is an event stream, its head written: the events go
/// straight to the socket. Pingora's session (its 4 KiB header buffer and header maps), the
/// request's context and the connection's task are freed; an open stream holds only this and
/// its loop (BENCHMARKS.md, "Scale on one instance", streams). Pingora frames an event stream's
/// body by the connection's close (it has no length), so this writes the events as they are
/// and ends the answer by closing.
pub(crate) struct EventStream {
    stream: Stream,
}

impl EventStream {
    /// The connection of a session whose answer's head has been written.
    pub(crate) fn new(stream: Stream) -> EventStream {
        EventStream { stream }
    }

    async fn flush(&mut self) -> Result<()> {
        unstalled(async { self.stream.flush().await.or_err(ErrorType::WriteError, "flushing an event stream") }).await
    }

    async fn close(mut self) {
        let _ = self.stream.shutdown().await;
    }
}

impl EventSink for EventStream {
    async fn send(&mut self, events: Bytes) -> Result<()> {
        unstalled(async {
            self.stream.write_all(&events).await.or_err(ErrorType::WriteError, "writing an event stream")?;
            self.stream.flush().await.or_err(ErrorType::WriteError, "flushing an event stream")
        })
        .await
    }

    async fn client_gone(&mut self) -> Result<()> {
        let mut probe = [0u8; 1];
        match self.stream.read(&mut probe).await {
            Ok(0) => Error::e_explain(ErrorType::ConnectionClosed, "the client closed an event stream"),
            Ok(_) => Ok(()),
            Err(e) => Error::e_because(ErrorType::ReadError, "reading an event stream's connection", e),
        }
    }

    async fn end(&mut self, last: Option<Bytes>) -> Result<()> {
        match last {
            Some(events) => self.send(events).await,
            None => Ok(()),
        }
    }
}

/// One event of a `text/event-stream` answer carrying one JSON-RPC message.
pub(crate) fn sse_event(data: &[u8]) -> Bytes {
    const HEAD: &[u8] = b"event: message\ndata: ";
    // Sized exactly: a `Vec` whose length is its capacity becomes a `Bytes` without another
    // allocation.
    let mut out = Vec::with_capacity(HEAD.len() + data.len() + 2);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_a_fresh_uuid_v4() {
        let (a, b) = (RequestId::generate(), RequestId::generate());
        let parsed = uuid::Uuid::parse_str(a.as_str()).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(a.as_str(), parsed.hyphenated().to_string());
        assert_eq!(a.to_string(), a.as_str());
        assert_ne!(a.as_str(), b.as_str());
    }

    #[test]
    fn an_answer_head_carries_the_request_id_and_moves_the_filters_headers() {
        let mut ctx = RequestCtx { request_id: RequestId::generate(), ..Default::default() };
        ctx.filters.response_headers.push((HeaderName::from_static("x-ratelimit-limit"), HeaderValue::from(10)));
        let h = response_head(429, 0, &mut ctx).unwrap();
        assert_eq!(h.status, 429);
        assert_eq!(h.headers[X_REQUEST_ID], ctx.request_id.as_str());
        assert_eq!(h.headers["x-ratelimit-limit"], "10");
        assert!(ctx.filters.response_headers.is_empty(), "moved, not copied");
    }

    /// A connected pair: the server's end as Pingora's stream, the client's as a plain socket.
    async fn pair() -> (EventStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let stream: Stream = Box::new(pingora::protocols::l4::stream::Stream::from(server));
        (EventStream::new(stream), client)
    }

    #[tokio::test]
    async fn an_event_stream_writes_its_events_as_they_are_and_ends_by_closing() {
        let (mut out, mut client) = pair().await;
        out.send(Bytes::from_static(b": stream open\n\n")).await.unwrap();
        out.send(sse_event(b"{}")).await.unwrap();
        out.end(Some(Bytes::from_static(b"data: last\n\n"))).await.unwrap();
        out.close().await;
        let mut got = Vec::new();
        tokio::time::timeout(std::time::Duration::from_secs(5), client.read_to_end(&mut got)).await.unwrap().unwrap();
        assert_eq!(got, b": stream open\n\nevent: message\ndata: {}\n\ndata: last\n\n", "no framing added");
    }

    #[tokio::test]
    async fn an_event_stream_hears_its_client_go_and_ignores_what_it_sends() {
        let (mut out, mut client) = pair().await;
        client.write_all(b"x").await.unwrap();
        let wait = std::time::Duration::from_secs(5);
        assert!(
            tokio::time::timeout(wait, out.client_gone()).await.unwrap().is_ok(),
            "a byte from the client is not its end"
        );
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), out.client_gone()).await;
        assert!(pending.is_err(), "nothing more from the client: still listening");
        client.shutdown().await.unwrap();
        let gone = tokio::time::timeout(wait, out.client_gone()).await.unwrap().unwrap_err();
        assert_eq!(gone.etype(), &ErrorType::ConnectionClosed);
        drop(client);
        // Writes to a client that has gone fail (the first may still be taken by the kernel).
        let mut failed = false;
        for _ in 0..50 {
            if out.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                failed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(failed, "writing to a closed connection fails");
    }

    #[tokio::test]
    async fn a_write_its_client_does_not_take_fails_after_the_stall_limit() {
        let (mut out, client) = pair().await;
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let started = std::time::Instant::now();
        // The client reads nothing: the kernel's buffers fill, then a write waits and fails.
        let failed = loop {
            if let Err(e) = out.send(chunk.clone()).await {
                break e;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "writes never stalled");
        };
        assert_eq!(failed.etype(), &ErrorType::WriteTimedout);
        drop(client);
    }

    /// A stream with nothing to say: it waits for its client to go.
    struct Quiet;

    impl EventSource for Quiet {
        async fn run<S: EventSink>(self, out: &mut S) {
            while out.client_gone().await.is_ok() {}
        }
    }

    #[tokio::test]
    async fn an_http1_stream_is_handed_over_sends_its_head_at_once_and_ends_when_its_client_goes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut session = ServerSession::new_http1(Box::new(pingora::protocols::l4::stream::Stream::from(server)));
        client.write_all(b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
        assert!(session.read_request().await.unwrap());
        let mut ctx = RequestCtx::default();
        let mut ex = Exchange::new(&mut session, &mut ctx, 1024);
        ex.start_sse().await.unwrap();
        ex.stream_on(Quiet).await;
        let tail = ctx.tail.take().expect("an HTTP/1 stream is handed over");
        let ServerSession::H1(h1) = session else { panic!("HTTP/1") };
        let task = tokio::spawn(tail(EventStream::new(h1.into_inner())));
        // The head arrives though no event has been written.
        let wait = std::time::Duration::from_secs(5);
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(wait, client.read(&mut buf)).await.unwrap().unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200") && head.contains("content-type: text/event-stream"), "{head}");
        // The client goes: the stream's task ends and closes the connection.
        client.shutdown().await.unwrap();
        tokio::time::timeout(wait, task).await.unwrap().unwrap();
        assert_eq!(tokio::time::timeout(wait, client.read(&mut buf)).await.unwrap().unwrap(), 0);
    }

    #[test]
    fn an_sse_event_is_one_message_event() {
        assert_eq!(&sse_event(b"{}")[..], b"event: message\ndata: {}\n\n");
    }

    #[test]
    fn envelopes_carry_meta() {
        let ctx = RequestCtx::default();
        let e: Value = serde_json::from_slice(&error_body(&ApiError::NotFound("gateway"), &ctx)).unwrap();
        assert_eq!(e["success"], false);
        assert_eq!(e["error"]["code"], "NOT_FOUND");
        assert_eq!(e["meta"]["request_id"], ctx.request_id.as_str());
        let s: Value = serde_json::from_slice(&success_body(Some(json!(1)), Some("ok".into()), &ctx)).unwrap();
        assert_eq!(
            (s["success"].clone(), s["data"].clone(), s["message"].clone()),
            (json!(true), json!(1), json!("ok"))
        );
    }
}
