//! HTTP apps of the stateless revision (MCP 2026-07-28): no `initialize`, no session; each
//! request carries the envelope in `params._meta` and the routing headers. Whether an app speaks
//! it is found once with `server/discover` (or pinned by `protocol_version`). An app that also
//! speaks the handshake era is called here only for 2026-07-28 clients and the gateway itself
//! (`mod.rs`, "Apps of both eras").
//!
//! The rest of toolgate speaks to every app as to a handshake-era one, so this module translates
//! the one difference that reaches the gateway: an app's input-required result. Its questions
//! (`inputRequests`) become server->client requests on the call's reply stream, exactly as a
//! handshake-era app's would arrive; their answers (`respond`) are collected and the call is made
//! again with `inputResponses` and the app's `requestState`, which toolgate passes back unchanged
//! and never reads. A handshake-era client thus answers the app's questions on its stream, and a
//! stateless client gets them as toolgate's own input-required result.

use super::{HttpSource, Inner, PROTOCOL_VERSION};
use crate::mcp::jsonrpc::{self, Id, Message, RawJson, Request, Response};
use crate::mcp::modern;
use crate::mcp::protocol::STATELESS;
use crate::mcp::upstream::wire::media_type_is;
use crate::mcp::upstream::{CallContext, ClientEra, Event, ReplyStream, Source, UpstreamError, UpstreamReply};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::Method;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Which revision an app speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    Handshake,
    /// 2026-07-28; whether it also takes `initialize` is tried when first needed.
    Stateless,
    /// 2026-07-28 and a handshake version its `supportedVersions` names.
    Both,
}

/// The ids toolgate gives a stateless call's questions to the client start with this, so that
/// the answer finds its way back to the call (`HttpUpstream::respond`), never to a session.
const ASKED: &str = "toolgate-ask-";

static STATELESS_VERSION: HeaderValue = HeaderValue::from_static(STATELESS);
static MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
static MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// The capabilities toolgate declares for a call whose client's own are not known (a
/// handshake-era session: toolgate relays all three, refusing on the client's behalf what it
/// did not declare).
fn toolgate_capabilities() -> Value {
    json!({ "sampling": {}, "elicitation": {}, "roots": {} })
}

/// `params` with the envelope: the version, the capabilities (a stateless client's own, which
/// the dispatcher passed as `toolgate.dev/clientCapabilities`, else toolgate's), toolgate as the
/// client; and the continuation of an input-required exchange.
fn with_envelope(params: &Value, continuation: Option<&(Map<String, Value>, Option<Value>)>) -> Value {
    let mut p = match params {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let mut meta = match p.remove("_meta") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let caps = meta.remove(modern::META_TOOLGATE_CLIENT_CAPABILITIES).unwrap_or_else(toolgate_capabilities);
    meta.insert("io.modelcontextprotocol/protocolVersion".into(), json!(STATELESS));
    meta.insert("io.modelcontextprotocol/clientCapabilities".into(), caps);
    meta.insert(
        "io.modelcontextprotocol/clientInfo".into(),
        json!({ "name": "toolgate", "version": env!("CARGO_PKG_VERSION") }),
    );
    p.insert("_meta".into(), Value::Object(meta));
    if let Some((responses, state)) = continuation {
        p.insert("inputResponses".into(), Value::Object(responses.clone()));
        if let Some(state) = state {
            p.insert("requestState".into(), state.clone());
        }
    }
    Value::Object(p)
}

impl Inner {
    /// The app's revision: pinned, or asked once (an unreachable app is asked again next time).
    pub(super) async fn era(&self, deadline: Instant) -> Result<Era, UpstreamError> {
        if let Some(era) = self.era.get() {
            return Ok(*era);
        }
        // Once per app: boxed, so that the probe's future does not size every call's.
        Box::pin(self.era.get_or_try_init(|| async { Ok(self.discover(deadline).await?.0) })).await.copied()
    }

    /// `server/discover`: the app speaks the stateless revision if it answers with a result
    /// naming it; any other answer (an error, a refusal, no such method) is the handshake era.
    pub(super) async fn discover(&self, deadline: Instant) -> Result<(Era, Value), UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = with_envelope(&json!({}), None);
        let body = jsonrpc::request_bytes(&Id::from(id), "server/discover", Some(&RawJson::from_value(&params)));
        // On a connection of its own, closed after it: a handshake-era server may answer the
        // probe with an error and close the connection, which must not be handed to the next call.
        let ctx = CallContext {
            headers: vec![(http::header::CONNECTION, HeaderValue::from_static("close"))],
            ..CallContext::default()
        };
        let resp = match self.post_stateless(body.into(), "server/discover", None, &ctx, deadline).await {
            Ok(resp) if !resp.status().is_success() => {
                let _ = super::body_snippet(resp).await;
                return Ok((Era::Handshake, Value::Null));
            }
            Ok(resp) => resp,
            Err(UpstreamError::Http { .. } | UpstreamError::Protocol(_)) => return Ok((Era::Handshake, Value::Null)),
            Err(e) => return Err(e),
        };
        let Ok(source) = HttpSource::from_response(resp, id, None, self.notices.clone()) else {
            return Ok((Era::Handshake, Value::Null));
        };
        let reply = ReplyStream::new(Source::Http(Box::new(source)), None, deadline, Id::NULL).into_reply().await;
        let result = match reply {
            Ok(reply) => match reply.into_response().await {
                Ok(Response { outcome: Ok(result), .. }) => result.to_value(),
                _ => return Ok((Era::Handshake, Value::Null)),
            },
            Err(UpstreamError::Protocol(_)) => return Ok((Era::Handshake, Value::Null)),
            Err(e) => return Err(e),
        };
        let versions = result.get("supportedVersions").and_then(Value::as_array);
        let named =
            |which: &dyn Fn(&str) -> bool| versions.is_some_and(|v| v.iter().filter_map(Value::as_str).any(which));
        let speaks = named(&|v| v == STATELESS);
        let handshake = named(&|v| super::PROTOCOL_VERSIONS.contains(&v));
        tracing::info!(app = %self.app_id, stateless = speaks, handshake, "asked the app which MCP revision it speaks");
        let era = match (speaks, handshake) {
            (false, _) => Era::Handshake,
            (true, false) => Era::Stateless,
            (true, true) => Era::Both,
        };
        Ok((era, result))
    }

    /// One stateless POST. An error status with a JSON-RPC body is an answer (this revision
    /// puts its errors under 4xx statuses); any other error status is an HTTP failure.
    async fn post_stateless(
        &self,
        body: Bytes,
        method: &str,
        name: Option<&str>,
        ctx: &CallContext,
        deadline: Instant,
    ) -> Result<super::WireResponse, UpstreamError> {
        let method_value = HeaderValue::from_str(method)
            .map_err(|_| UpstreamError::Protocol(format!("method `{method}` is not a header")))?;
        let mut extra = ctx.headers.clone();
        if let Some(v) = name.and_then(|n| HeaderValue::from_str(&crate::mcp::modern::encode_header_value(n)).ok()) {
            extra.push((MCP_NAME.clone(), v));
        }
        let out = super::Outgoing {
            base: &self.headers,
            session: [Some((&PROTOCOL_VERSION, &STATELESS_VERSION)), Some((&MCP_METHOD, &method_value))],
            extra: &extra,
            body,
        };
        let first_byte = Instant::now() + self.timeouts.first_byte();
        let (limit, phase) = if first_byte < deadline {
            (first_byte, super::TimeoutPhase::FirstByte)
        } else {
            (deadline, super::TimeoutPhase::Total)
        };
        let resp = match crate::base::deadline::until(limit, self.target.send(Method::POST, out)).await {
            Err(_) => return Err(UpstreamError::Timeout { phase }),
            Ok(result) => result?,
        };
        let status = resp.status();
        let json = resp.header(&CONTENT_TYPE).is_some_and(|t| media_type_is(t, "application/json"));
        // A client error answered in JSON is the app's JSON-RPC answer, except an HTTP
        // authentication challenge (RFC 6750: `WWW-Authenticate`, an OAuth error body), which
        // is about the credential, not the call.
        let challenge = resp.header(&WWW_AUTHENTICATE).is_some();
        if status.is_success() || (status.is_client_error() && json && !challenge) {
            return Ok(resp);
        }
        let body = super::body_snippet(resp).await;
        Err(UpstreamError::Http { status: status.as_u16(), body })
    }
}

/// A call to a stateless app: its reply stream is fed by a task that makes the call (again, for
/// each round of the app's questions) and ends with the app's final answer.
pub(super) async fn request(
    inner: &Arc<Inner>,
    method: &str,
    params: Option<RawJson>,
    ctx: &CallContext,
    deadline: Instant,
) -> Result<UpstreamReply, UpstreamError> {
    let (tx, rx) = mpsc::channel(16);
    let task = tokio::spawn(rounds(inner.clone(), method.to_string(), params, ctx.headers.clone(), deadline, tx));
    let source = ChannelSource { rx, task: task.abort_handle() };
    ReplyStream::new(Source::Channel(source), None, deadline, ctx.client_request_id.clone()).into_reply().await
}

/// The events of a call made by a task; dropping it stops the task, which closes the app's
/// response stream: in this revision that is the cancellation.
pub(crate) struct ChannelSource {
    rx: mpsc::Receiver<Result<Event, UpstreamError>>,
    task: tokio::task::AbortHandle,
}

impl ChannelSource {
    pub(crate) async fn recv(&mut self) -> Result<Event, UpstreamError> {
        self.rx.recv().await.unwrap_or(Err(UpstreamError::Closed))
    }
}

#[cfg(test)]
impl ChannelSource {
    /// A source whose answer never comes (tests of what holds a call).
    pub(crate) fn idle() -> Self {
        let (tx, rx) = mpsc::channel(1);
        let task = tokio::spawn(async move {
            let _hold = tx;
            std::future::pending::<()>().await
        });
        ChannelSource { rx, task: task.abort_handle() }
    }
}

impl Drop for ChannelSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Removes a call's waiting questions when it ends, however it ends.
struct Waiting<'a>(&'a Inner, Vec<u64>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        for id in &self.1 {
            self.0.waiters.remove(id);
        }
    }
}

/// A stateless app's call, in rounds: the questions of an input-required result go to the caller
/// as requests on the reply stream, and the call is made again with the answers and the app's
/// `requestState`, until its final answer.
async fn rounds(
    inner: Arc<Inner>,
    method: String,
    params: Option<RawJson>,
    headers: Vec<(HeaderName, HeaderValue)>,
    deadline: Instant,
    tx: mpsc::Sender<Result<Event, UpstreamError>>,
) {
    let params = params.map(|p| p.to_value()).unwrap_or_else(|| json!({}));
    let name = modern::name_field(&method).and_then(|f| params.get(f)).and_then(Value::as_str).map(str::to_string);
    let ctx =
        CallContext { client_request_id: Id::NULL, headers, client_era: ClientEra::Stateless, caller_upstream: None };
    let mut continuation: Option<(Map<String, Value>, Option<Value>)> = None;
    let mut waiting = Waiting(&inner, Vec::new());
    loop {
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let body = with_envelope(&params, continuation.as_ref());
        let body = jsonrpc::request_bytes(&Id::from(id), &method, Some(&RawJson::from_value(&body)));
        let source = match inner.post_stateless(body.into(), &method, name.as_deref(), &ctx, deadline).await {
            Ok(resp) => HttpSource::from_response(resp, id, None, inner.notices.clone()),
            Err(e) => Err(e),
        };
        let answer = match source {
            Ok(source) => until_final(source, &tx).await,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        let Some(answer) = answer else { return };
        let questions = match &answer.outcome {
            Ok(result) if result.get().contains("\"input_required\"") => {
                let v = result.to_value();
                (v.get("resultType").and_then(Value::as_str) == Some("input_required")).then_some(v)
            }
            _ => None,
        };
        let Some(questions) = questions else {
            let _ = tx.send(Ok(Event::Final(answer))).await;
            return;
        };
        let Some(pending) = ask(&inner, &mut waiting, &questions, &tx).await else { return };
        let Some(responses) = answers(pending, id, deadline, &tx).await else { return };
        continuation = Some((responses, questions.get("requestState").cloned()));
    }
}

/// The app's messages on one request's answer, relayed on `tx`, until its response; `None` when
/// the call ended (its error was sent, or the caller is gone).
async fn until_final(mut source: HttpSource, tx: &mpsc::Sender<Result<Event, UpstreamError>>) -> Option<Response> {
    loop {
        match source.recv().await {
            Ok(Event::Message(m)) => {
                if tx.send(Ok(Event::Message(m))).await.is_err() {
                    return None;
                }
            }
            Ok(Event::Final(r)) => return Some(r),
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return None;
            }
        }
    }
}

/// Each question of an input-required result as a server->client request on the reply stream,
/// as a handshake-era app would send it; the answers come back through
/// `HttpUpstream::respond`, each to its receiver. `None` when the caller is gone.
async fn ask(
    inner: &Inner,
    waiting: &mut Waiting<'_>,
    questions: &Value,
    tx: &mpsc::Sender<Result<Event, UpstreamError>>,
) -> Option<Vec<(String, oneshot::Receiver<Response>)>> {
    let mut pending = Vec::new();
    let asked = questions.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
    for (key, q) in asked {
        let ask_id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (otx, orx) = oneshot::channel();
        inner.waiters.insert(ask_id, otx);
        waiting.1.push(ask_id);
        // The app's key goes along, so that a stateless client is asked under the same one.
        let mut params = q.get("params").cloned().unwrap_or_else(|| json!({}));
        if let Some(p) = params.as_object_mut() {
            let meta = p.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(modern::META_INPUT_KEY.into(), Value::String(key.clone()));
            }
        }
        let request = Request {
            id: Id::from(format!("{ASKED}{ask_id}").as_str()),
            method: q.get("method").and_then(Value::as_str).unwrap_or_default().to_string(),
            params: Some(RawJson::from_value(&params)),
        };
        if tx.send(Ok(Event::Message(Message::Request(request)))).await.is_err() {
            return None;
        }
        pending.push((key, orx));
    }
    Some(pending)
}

/// The client's answers to the questions, by key, by `deadline`; `None` when the call ended
/// (the reason sent on `tx` as the answer to request `id`).
async fn answers(
    pending: Vec<(String, oneshot::Receiver<Response>)>,
    id: u64,
    deadline: Instant,
    tx: &mpsc::Sender<Result<Event, UpstreamError>>,
) -> Option<Map<String, Value>> {
    let mut responses = Map::new();
    for (key, orx) in pending {
        let answered = match crate::base::deadline::until(deadline, orx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => {
                let _ = tx.send(Err(UpstreamError::Closed)).await;
                return None;
            }
            Err(_) => {
                let _ = tx.send(Err(UpstreamError::Timeout { phase: super::TimeoutPhase::Total })).await;
                return None;
            }
        };
        match answered.outcome {
            Ok(result) => {
                responses.insert(key, result.to_value());
            }
            Err(e) => {
                // The client could not answer (or toolgate refused on its behalf): the revision
                // has no way to tell the app, so the call ends with the reason.
                let e = jsonrpc::RpcErrorObject::new(
                    e.code,
                    format!("the client did not answer the app's question `{key}`: {}", e.message),
                );
                let _ = tx.send(Ok(Event::Final(Response::error(Id::from(id), e)))).await;
                return None;
            }
        }
    }
    Some(responses)
}

/// The number of a stateless call's question, if `id` is one toolgate gave.
pub(super) fn asked(id: &Id) -> Option<u64> {
    if id.as_u64().is_some() || id.is_null() {
        return None;
    }
    let Value::String(text) = id.to_value() else { return None };
    text.strip_prefix(ASKED)?.parse().ok()
}

/// Delivers the client's answer to a question of a stateless app's call.
pub(super) fn answer(inner: &Inner, asked: u64, response: Response) -> Result<(), UpstreamError> {
    let waiter = inner.waiters.remove(&asked);
    match waiter {
        Some((_, tx)) => tx.send(response).map_err(|_| UpstreamError::Closed),
        None => Err(UpstreamError::Closed),
    }
}
