//! The app's GET stream of a session: held open while the session is current, re-opened with
//! back-off, and what the app sends on it (list changes, `ping`) handled with no call behind it.

use super::source::push_messages;
use super::*;

/// What a `GET` on a session gave.
pub(super) enum Opened {
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
pub(super) async fn listen(inner: Weak<Inner>, session: Weak<Session>) {
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
        tokio::time::sleep(super::super::backoff(failures, LISTEN_BACKOFF_BASE, LISTEN_BACKOFF_CAP)).await;
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
        let e = RpcErrorObject::method_not_found(method);
        jsonrpc::error_bytes(&id, e.code, &e.message, None)
    };
    let deadline = Instant::now() + inner.timeouts.first_byte();
    if let Ok(Posted::Ok(resp)) = inner.post(Some(&session), body.into(), &CallContext::default(), deadline).await {
        resp.finish().await;
    }
}

/// The start of an error body, for logs; bounded in size and time.
pub(super) async fn body_snippet(mut resp: WireResponse) -> String {
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
