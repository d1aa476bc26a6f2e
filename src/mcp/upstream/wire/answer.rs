//! Reading an HTTP/1.1 answer off a plain-text upstream connection: the head (status line and
//! headers, parsed with `httparse`, informational answers skipped), then the body as its framing
//! says: `Content-Length`, chunked, or up to the close.
//!
//! Why not Pingora's client session, which read answers before: it is made for every exchange
//! and allocates each time (its read buffer, a `ResponseHeader` with its header map, a digest,
//! the body reader's state), and cannot be reset for the next request on the same connection.
//! Here the buffer and the list of header positions travel with the connection
//! ([`Connection`]), so a call on a pooled connection allocates nothing to read its answer; only
//! an answer slower than a second to begin gives the buffer back while it waits and takes one
//! again (`first_read`).
//!
//! The head stays at the front of the buffer while the body is read after it, so headers are
//! looked up in place (by position) for as long as the answer lives; body bytes are handed out
//! as slices of the buffer, never copied.

use std::ops::Range;

use http::header::HeaderName;
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The buffer a new connection starts with: a usual answer's head and body fit in one read.
const INITIAL_BUFFER: usize = 16 * 1024;

/// How long a connection waits for an answer's first bytes with its buffer. A slower answer (a
/// long tool call) is awaited without it, so a call in flight holds no buffer for the time its
/// app takes (BENCHMARKS.md, "Scale on one instance", POST streams).
#[cfg(not(test))]
const WAIT_WITH_BUFFER: std::time::Duration = std::time::Duration::from_secs(1);
#[cfg(test)]
const WAIT_WITH_BUFFER: std::time::Duration = std::time::Duration::from_millis(100);

/// The longest head read (status line and headers): a longer one is refused.
const MAX_HEAD: usize = 64 * 1024;

/// The most headers an answer may have.
const MAX_HEADERS: usize = 64;

/// The longest chunk-size line or trailer line.
const MAX_LINE: usize = 4 * 1024;

/// What went wrong reading an answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// The connection ended or failed before any byte of the answer: on a pooled connection,
    /// the sign that the server closed it while idle (the request may be sent again).
    #[error("the connection closed before the answer began: {0}")]
    NothingRead(String),
    #[error("the connection broke during the answer: {0}")]
    Broken(String),
    #[error("malformed answer: {0}")]
    Malformed(&'static str),
}

/// A connection and what was read from it but not yet used. `buf` is always fully initialised
/// (its length is its capacity), so reads go straight into it.
pub(crate) struct Connection<S> {
    pub stream: S,
    buf: Vec<u8>,
    /// Where each header's name and value lie in `buf`.
    headers: Vec<(Range<usize>, Range<usize>)>,
}

impl<S: AsyncRead + Unpin> Connection<S> {
    pub(super) fn new(stream: S) -> Self {
        Connection { stream, buf: vec![0; INITIAL_BUFFER], headers: Vec::new() }
    }

    /// Reads the head of the answer to the request just written, skipping 1xx answers.
    pub(super) async fn read_head(mut self, head_request: bool) -> Result<Answer<S>, (Self, AnswerError)> {
        let mut filled = 0;
        loop {
            match self.parse_head(filled) {
                Ok(Some(head)) if head.status.is_informational() => {
                    // Drop the 1xx head, keep what followed it.
                    self.buf.copy_within(head.len..filled, 0);
                    filled -= head.len;
                    continue;
                }
                Ok(Some(head)) => {
                    let body = if head_request
                        || head.status == StatusCode::NO_CONTENT
                        || head.status == StatusCode::NOT_MODIFIED
                    {
                        Framing::Done
                    } else {
                        head.framing
                    };
                    // A body up to the close leaves nothing to reuse.
                    let keep_alive = head.persistent && body != Framing::UntilClose;
                    return Ok(Answer {
                        status: head.status,
                        keep_alive,
                        body,
                        window: head.len..filled,
                        head_len: head.len,
                        conn: self,
                    });
                }
                Ok(None) => {}
                Err(e) => return Err((self, e)),
            }
            if filled == self.buf.len() {
                if self.buf.len() >= MAX_HEAD {
                    return Err((self, AnswerError::Malformed("head longer than 64 KiB")));
                }
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let read = match filled {
                0 => self.first_read().await,
                _ => self.stream.read(&mut self.buf[filled..]).await,
            };
            match read {
                Ok(0) if filled == 0 => return Err((self, AnswerError::NothingRead("end of stream".into()))),
                Ok(0) => return Err((self, AnswerError::Broken("end of stream within the head".into()))),
                Ok(n) => filled += n,
                Err(e) if filled == 0 => return Err((self, AnswerError::NothingRead(e.to_string()))),
                Err(e) => return Err((self, AnswerError::Broken(e.to_string()))),
            }
        }
    }

    /// Reads an answer's first bytes into the buffer. When they take longer than
    /// [`WAIT_WITH_BUFFER`], the buffer is given back and the wait goes on for one byte, after
    /// which a buffer is taken again: one more read for an answer already that slow. A read is
    /// cancel-safe, so nothing is lost in between.
    async fn first_read(&mut self) -> std::io::Result<usize> {
        if let Ok(read) = pingora::time::timeout(WAIT_WITH_BUFFER, self.stream.read(&mut self.buf)).await {
            return read;
        }
        let len = std::mem::take(&mut self.buf).len();
        let mut first = [0u8; 1];
        let read = self.stream.read(&mut first).await;
        self.buf = vec![0; len];
        self.buf[0] = first[0];
        read
    }

    /// The head in `buf[..filled]`, if whole; records its headers' positions.
    fn parse_head(&mut self, filled: usize) -> Result<Option<Head>, AnswerError> {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut slots);
        let len = match response.parse(&self.buf[..filled]) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(AnswerError::Malformed("more than 64 headers")),
            Err(_) => return Err(AnswerError::Malformed("unparsable head")),
        };
        let status =
            response.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or(AnswerError::Malformed("invalid status"))?;
        let base = self.buf.as_ptr() as usize;
        let at = |s: &[u8]| {
            let start = s.as_ptr() as usize - base;
            start..start + s.len()
        };
        let mut framing = Framing::UntilClose;
        let mut persistent = response.version == Some(1);
        let mut length: Option<u64> = None;
        self.headers.clear();
        for h in response.headers.iter() {
            let value = h.value;
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or(AnswerError::Malformed("invalid Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(AnswerError::Malformed("conflicting Content-Length"));
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked must be the last coding; anything else is read up to the close.
                let last = value.rsplit(|b| *b == b',').next().unwrap_or_default();
                framing = if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                    Framing::chunked()
                } else {
                    Framing::UntilClose
                };
                persistent &= matches!(framing, Framing::Chunked(_));
            } else if h.name.eq_ignore_ascii_case("connection")
                && value.split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
            {
                persistent = false;
            }
            self.headers.push((at(h.name.as_bytes()), at(value)));
        }
        // Chunked wins over a length (RFC 9112 6.3); such an answer is not reused.
        match (&framing, length) {
            (Framing::Chunked(_), Some(_)) => persistent = false,
            (Framing::UntilClose, Some(n)) => framing = Framing::Length(n),
            _ => {}
        }
        Ok(Some(Head { status, len, framing, persistent }))
    }
}

struct Head {
    status: StatusCode,
    /// Bytes of the head in the buffer.
    len: usize,
    framing: Framing,
    /// The connection may carry another request after this answer (HTTP/1.1, no
    /// `Connection: close`, no doubtful framing), body framing permitting.
    persistent: bool,
}

/// How the rest of the body is known to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// Where a chunked body's reading stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// At a chunk-size line.
    Size,
    /// Within a chunk's data, with this many bytes left.
    Data(u64),
    /// At the line break after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
}

impl Framing {
    fn chunked() -> Framing {
        Framing::Chunked(Chunk::Size)
    }
}

/// An answer whose head is read: status, headers, and the body on demand.
pub(crate) struct Answer<S> {
    pub status: StatusCode,
    keep_alive: bool,
    body: Framing,
    /// Bytes read and not yet used, after the head.
    window: Range<usize>,
    head_len: usize,
    conn: Connection<S>,
}

impl<S: AsyncRead + Unpin> Answer<S> {
    /// The first header named `name`.
    pub(super) fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        let buf = &self.conn.buf;
        self.conn.headers.iter().find(|(n, _)| buf[n.clone()].eq_ignore_ascii_case(name)).map(|(_, v)| &buf[v.clone()])
    }

    /// Whether the whole body has been read.
    pub(super) fn is_done(&self) -> bool {
        self.body == Framing::Done
    }

    /// The connection, once the body is read, when it can carry another request: the answer
    /// allowed it and nothing beyond the answer arrived.
    pub(super) fn reusable(self) -> Option<Connection<S>> {
        if !(self.is_done() && self.keep_alive && self.window.is_empty()) {
            return None;
        }
        let mut conn = self.conn;
        if conn.buf.len() > 4 * INITIAL_BUFFER {
            // One large answer should not keep a large buffer on an idle connection.
            conn.buf = vec![0; INITIAL_BUFFER];
        }
        Some(conn)
    }

    /// Hands the next piece of the body to `sink`; `Ok(false)` at its end.
    pub(super) async fn next_piece<E>(
        &mut self,
        sink: impl FnOnce(&[u8]) -> Result<(), E>,
    ) -> Result<Result<bool, E>, AnswerError> {
        loop {
            match self.body {
                Framing::Done => return Ok(Ok(false)),
                Framing::Length(0) => {
                    self.body = Framing::Done;
                    return Ok(Ok(false));
                }
                Framing::Length(left) => {
                    if self.window.is_empty() && !self.fill().await? {
                        return Err(AnswerError::Broken("end of stream within the body".into()));
                    }
                    let n = (self.window.len() as u64).min(left) as usize;
                    self.body = Framing::Length(left - n as u64);
                    return Ok(sink(self.take(n)).map(|_| true));
                }
                Framing::UntilClose => {
                    if self.window.is_empty() && !self.fill().await? {
                        self.body = Framing::Done;
                        return Ok(Ok(false));
                    }
                    let n = self.window.len();
                    return Ok(sink(self.take(n)).map(|_| true));
                }
                Framing::Chunked(Chunk::Data(left)) => {
                    if self.window.is_empty() && !self.fill().await? {
                        return Err(AnswerError::Broken("end of stream within a chunk".into()));
                    }
                    let n = (self.window.len() as u64).min(left) as usize;
                    let left = left - n as u64;
                    self.body = Framing::Chunked(if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) });
                    return Ok(sink(self.take(n)).map(|_| true));
                }
                Framing::Chunked(Chunk::Size) => {
                    let size = self.chunk_size().await?;
                    self.body = Framing::Chunked(if size == 0 { Chunk::Trailers } else { Chunk::Data(size) });
                }
                Framing::Chunked(Chunk::DataEnd) => {
                    let line = self.line().await?;
                    if !line.is_empty() {
                        return Err(AnswerError::Malformed("chunk longer than its size"));
                    }
                    self.body = Framing::Chunked(Chunk::Size);
                }
                Framing::Chunked(Chunk::Trailers) => {
                    if self.line().await?.is_empty() {
                        self.body = Framing::Done;
                    }
                }
            }
        }
    }

    /// Uses `n` bytes of the window.
    fn take(&mut self, n: usize) -> &[u8] {
        let piece = self.window.start..self.window.start + n;
        self.window.start += n;
        &self.conn.buf[piece]
    }

    /// Reads more into the buffer after the window (moving the window back to the end of the
    /// head first when it is empty or the buffer is full); `false` at the end of the stream.
    async fn fill(&mut self) -> Result<bool, AnswerError> {
        if self.window.is_empty() {
            self.window = self.head_len..self.head_len;
        }
        if self.window.end == self.conn.buf.len() {
            let len = self.window.len();
            self.conn.buf.copy_within(self.window.clone(), self.head_len);
            self.window = self.head_len..self.head_len + len;
            if self.window.end == self.conn.buf.len() {
                let grown = self.conn.buf.len() * 2;
                self.conn.buf.resize(grown, 0);
            }
        }
        match self.conn.stream.read(&mut self.conn.buf[self.window.end..]).await {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.window.end += n;
                Ok(true)
            }
            Err(e) => Err(AnswerError::Broken(e.to_string())),
        }
    }

    /// The size on the chunk-size line at the window's start (read more until it is whole;
    /// extensions ignored), and uses the line. `httparse` reads it; an empty size, which it
    /// takes for 0, is refused here.
    async fn chunk_size(&mut self) -> Result<u64, AnswerError> {
        let invalid = || AnswerError::Malformed("invalid chunk size");
        loop {
            let window = &self.conn.buf[self.window.clone()];
            match httparse::parse_chunk_size(window) {
                Ok(httparse::Status::Complete((used, size))) => {
                    if !window[0].is_ascii_hexdigit() {
                        return Err(invalid());
                    }
                    self.window.start += used;
                    return Ok(size);
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::InvalidChunkSize) => return Err(invalid()),
            }
            if self.window.len() > MAX_LINE {
                return Err(AnswerError::Malformed("chunk line longer than 4 KiB"));
            }
            if !self.fill().await? {
                return Err(AnswerError::Broken("end of stream within a chunked body".into()));
            }
        }
    }

    /// The next line of the window without its line break (read more until it is whole), and
    /// uses it.
    async fn line(&mut self) -> Result<Range<usize>, AnswerError> {
        loop {
            let window = &self.conn.buf[self.window.clone()];
            if let Some(at) = window.iter().position(|b| *b == b'\n') {
                let start = self.window.start;
                self.window.start += at + 1;
                let end = if at > 0 && window[at - 1] == b'\r' { start + at - 1 } else { start + at };
                return Ok(start..end);
            }
            if self.window.len() > MAX_LINE {
                return Err(AnswerError::Malformed("chunk line longer than 4 KiB"));
            }
            if !self.fill().await? {
                return Err(AnswerError::Broken("end of stream within a chunked body".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, CONTENT_TYPE};
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// A stream that hands out `data` `step` bytes per read, then ends.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self.step.min(self.data.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(()))
        }
    }

    fn conn(data: &[u8], step: usize) -> Connection<Trickle> {
        Connection::new(Trickle { data: data.to_vec(), at: 0, step })
    }

    /// Reads the whole answer: status, the body, and whether the connection can be reused.
    async fn read_all(c: Connection<Trickle>) -> Result<(u16, Vec<u8>, Option<Connection<Trickle>>), AnswerError> {
        let mut a = c.read_head(false).await.map_err(|(_, e)| e)?;
        let mut body = Vec::new();
        while a
            .next_piece(|p| -> Result<(), ()> {
                body.extend_from_slice(p);
                Ok(())
            })
            .await?
            .unwrap()
        {}
        Ok((a.status.as_u16(), body, a.reusable()))
    }

    const SSE_BODY: &[u8] = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";

    #[tokio::test]
    async fn a_slow_answer_is_awaited_without_the_buffer_and_read_whole() {
        let (client, mut server) = tokio::io::duplex(64);
        let answer = tokio::spawn(async move {
            let mut a = Connection::new(client).read_head(false).await.map_err(|(_, e)| e).unwrap();
            let mut body = Vec::new();
            let mut more = true;
            while more {
                more = a
                    .next_piece(|p| -> Result<(), ()> {
                        body.extend_from_slice(p);
                        Ok(())
                    })
                    .await
                    .unwrap()
                    .unwrap();
            }
            (a.status, body, a.reusable().map(|c| c.buf.len()))
        });
        // Past the wait with the buffer: the first byte is read alone, the rest into a new one.
        tokio::time::sleep(WAIT_WITH_BUFFER * 3).await;
        tokio::io::AsyncWriteExt::write_all(&mut server, b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
            .await
            .unwrap();
        let (status, body, reusable) = answer.await.unwrap();
        assert_eq!(
            (status, body.as_slice(), reusable),
            (StatusCode::OK, b"{\"ok\":true}".as_slice(), Some(INITIAL_BUFFER))
        );
    }

    #[tokio::test]
    async fn a_length_body_is_read_whole_however_the_bytes_arrive() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: abc\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
        for step in 1..=wire.len() {
            let mut a = conn(wire, step).read_head(false).await.map_err(|(_, e)| e).unwrap();
            assert_eq!(a.status, StatusCode::OK);
            assert_eq!(a.header(&CONTENT_TYPE), Some(&b"application/json"[..]), "step {step}");
            assert_eq!(a.header(&HeaderName::from_static("mcp-session-id")), Some(&b"abc"[..]));
            assert_eq!(a.header(&HeaderName::from_static("x-absent")), None);
            let mut body = Vec::new();
            while a
                .next_piece(|p| -> Result<(), ()> {
                    body.extend_from_slice(p);
                    Ok(())
                })
                .await
                .unwrap()
                .unwrap()
            {}
            assert_eq!(body, b"{\"ok\":true}", "step {step}");
            assert!(a.reusable().is_some(), "a whole keep-alive answer leaves the connection reusable (step {step})");
        }
    }

    #[tokio::test]
    async fn a_chunked_body_with_extensions_and_trailers_is_read_whole_however_the_bytes_arrive() {
        let mut wire =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let (first, second) = SSE_BODY.split_at(20);
        wire.extend_from_slice(format!("{:x};name=value\r\n", first.len()).as_bytes());
        wire.extend_from_slice(first);
        wire.extend_from_slice(format!("\r\n{:X}\r\n", second.len()).as_bytes());
        wire.extend_from_slice(second);
        wire.extend_from_slice(b"\r\n0\r\nX-Trailer: yes\r\n\r\n");
        for step in 1..=wire.len() {
            let (status, body, reusable) = read_all(conn(&wire, step)).await.unwrap();
            assert_eq!((status, body.as_slice()), (200, SSE_BODY), "step {step}");
            assert!(reusable.is_some(), "step {step}");
        }
    }

    #[tokio::test]
    async fn informational_answers_are_skipped() {
        let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
        for step in [1, 7, wire.len()] {
            let (status, body, reusable) = read_all(conn(wire, step)).await.unwrap();
            assert_eq!((status, body.len()), (202, 0));
            assert!(reusable.is_some());
        }
    }

    #[tokio::test]
    async fn an_answer_that_ends_the_connection_leaves_nothing_to_reuse() {
        // Read up to the close.
        let (status, body, reusable) = read_all(conn(b"HTTP/1.1 200 OK\r\n\r\nall of it", 3)).await.unwrap();
        assert_eq!((status, body.as_slice()), (200, &b"all of it"[..]));
        assert!(reusable.is_none());
        // `Connection: close`, and HTTP/1.0.
        let close = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\nok";
        assert!(read_all(conn(close, 100)).await.unwrap().2.is_none());
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert!(read_all(conn(old, 100)).await.unwrap().2.is_none());
        // Bytes beyond the answer: the connection is out of step, not reused.
        let extra = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokjunk";
        let (_, body, reusable) = read_all(conn(extra, 100)).await.unwrap();
        assert_eq!(body, b"ok");
        assert!(reusable.is_none());
        // No body for 204 whatever it says.
        let none = b"HTTP/1.1 204 No Content\r\n\r\n";
        let (status, body, reusable) = read_all(conn(none, 100)).await.unwrap();
        assert_eq!((status, body.len()), (204, 0));
        assert!(reusable.is_some());
    }

    #[tokio::test]
    async fn a_reused_connection_reads_the_next_answer_into_the_same_buffer() {
        let mut wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst".to_vec();
        wire.extend_from_slice(b"HTTP/1.1 201 Created\r\nX-Next: 2\r\nContent-Length: 6\r\n\r\nsecond");
        // One byte per read, so the first answer's reads stop at its end.
        let (_, body, reusable) = read_all(conn(&wire, 1)).await.unwrap();
        assert_eq!(body, b"first");
        let c = reusable.unwrap();
        let buffer = c.buf.as_ptr();
        let a = c.read_head(false).await.map_err(|(_, e)| e).unwrap();
        assert_eq!(a.status, StatusCode::CREATED);
        assert_eq!(a.header(&HeaderName::from_static("x-next")), Some(&b"2"[..]));
        assert_eq!(a.conn.buf.as_ptr(), buffer, "no new buffer for the next answer");
    }

    #[tokio::test]
    async fn a_large_body_goes_out_in_pieces_without_growing_the_buffer() {
        let body = vec![b'x'; 5 * INITIAL_BUFFER];
        let mut wire = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        wire.extend_from_slice(&body);
        let (_, read, reusable) = read_all(conn(&wire, 4096)).await.unwrap();
        assert_eq!(read, body);
        assert_eq!(reusable.unwrap().buf.len(), INITIAL_BUFFER);
    }

    #[tokio::test]
    async fn broken_answers_are_errors_that_say_whether_anything_was_read() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "NothingRead"),
            (b"HTTP/1.1 200 OK\r\nContent-Le", "Broken"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "Broken"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "Malformed"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", "Malformed"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;ext\r\n", "Malformed"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", "Malformed"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3", "Broken"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n", "Malformed"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "Broken"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", "Malformed"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Malformed"),
            (b"NOT HTTP\r\n\r\n", "Malformed"),
        ];
        for (wire, kind) in cases {
            let e = read_all(conn(wire, 3))
                .await
                .err()
                .unwrap_or_else(|| panic!("{:?} was accepted", String::from_utf8_lossy(wire)));
            assert!(format!("{e:?}").starts_with(kind), "{:?}: {e:?}", String::from_utf8_lossy(wire));
        }
        let mut huge = b"HTTP/1.1 200 OK\r\nX-Filler: ".to_vec();
        huge.resize(MAX_HEAD + 10, b'a');
        let e = read_all(conn(&huge, 8192)).await.err().unwrap();
        assert!(matches!(e, AnswerError::Malformed("head longer than 64 KiB")), "{e:?}");
        // A chunk-size line that never ends: refused once it passes 4 KiB, not read forever.
        let mut long = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;".to_vec();
        long.resize(long.len() + MAX_LINE + 10, b'x');
        let e = read_all(conn(&long, 1024)).await.err().unwrap();
        assert!(matches!(e, AnswerError::Malformed("chunk line longer than 4 KiB")), "{e:?}");
    }
}
