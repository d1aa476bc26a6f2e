//! The messages of one HTTP answer, in order (`HttpSource`): a JSON body or an SSE stream read
//! incrementally, resumed with `Last-Event-ID` when the app closes it early, and the call
//! cancelled upstream when it is dropped before its response.

use super::*;

/// Sends `notifications/cancelled` for a request dropped before its response.
pub(super) struct CancelGuard {
    pub(super) inner: Arc<Inner>,
    pub(super) session: Arc<Session>,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) id: u64,
    pub(super) armed: bool,
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
    pub(super) fn from_response(
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
pub(super) fn push_json_body(queue: &mut VecDeque<Message>, bytes: &[u8]) -> Result<(), UpstreamError> {
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

pub(super) fn push_messages(queue: &mut VecDeque<Message>, bytes: &[u8]) -> Result<(), UpstreamError> {
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
