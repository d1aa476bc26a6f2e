//! MCP 2026-07-28 requests on `/gateway/{id}/mcp`: no session, each request carries its own
//! envelope (`modern::classify`), and an app's questions to the client (elicitation, sampling,
//! roots) come back to the client as an input-required result instead of a request on the
//! stream. toolgate speaks to every app as to a handshake-era one (`upstream/http/stateless.rs`
//! turns a stateless app's questions into requests), so it holds the app's call open between the
//! client's rounds ([`ParkedCalls`]) and carries its own sealed `requestState` to find it again. The decisions are in `README.md` ("MCP 2026-07-28").

use crate::data::model::Gateway;
use crate::edge::exchange::{sse_event, EventSink, EventSource, Exchange};
use crate::mcp::bounds::{Holder, StreamSlot};
use crate::mcp::jsonrpc::{self, Id, Message, RawJson, RawMembers, Response, RpcErrorObject};
use crate::mcp::modern::{self, Envelope, Rejection};
use crate::mcp::parked::{Binding, Parked, Pending, SealedState};
use crate::mcp::protocol::{Accept, RpcCode};
use crate::mcp::resumable::KEEPALIVE;
use crate::mcp::rpc_errors;
use crate::mcp::runtime::{McpRuntime, StreamMessage};
use crate::mcp::tasks;
use crate::mcp::upstream::ReplyStream;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// How long the app's further questions are awaited after its first, so that questions it asks
/// together reach the client in one input-required result.
const GATHER: Duration = Duration::from_millis(25);

/// Prefix of the `requestState` toolgate issues (the rest is sealed: AES-256-GCM).
const STATE_PREFIX: &str = "tg1.";

/// Answers a refusal of a stateless request: the JSON-RPC error under the specification's status.
async fn reject(ex: &mut Exchange<'_>, id: &Id, r: Rejection) -> pingora::Result<()> {
    let body = jsonrpc::error_bytes(id, r.code, &r.message, r.data.as_ref());
    ex.respond(r.status(), "application/json", body, &[]).await
}

/// Writes a stateless request's response: an error under its status, a result under 200 (or, when
/// a stream was started for the app's progress, as its last event), with `decorate`'s members
/// (`resultType`, caching hints) written into the result's text as it goes out.
pub(crate) async fn answer(ex: &mut Exchange<'_>, r: Response, decorate: &str, streaming: bool) -> pingora::Result<()> {
    let bytes = match &r.outcome {
        Ok(result) if !decorate.is_empty() => jsonrpc::response_bytes_with_members(&r.id, result, decorate),
        _ => r.to_bytes(),
    };
    if streaming {
        return ex.write(Some(sse_event(&bytes)), true).await;
    }
    let status = r.outcome.as_ref().err().map_or(200, |e| RpcCode::stateless_status(e.code));
    ex.respond(status, "application/json", bytes, &[]).await
}

/// Checks a stateless request's envelope and headers; a refusal is answered here.
pub(crate) async fn envelope(ex: &mut Exchange<'_>, req: &jsonrpc::Request) -> pingora::Result<Option<Envelope>> {
    match modern::classify(ex.headers(), &req.method, req.params.as_ref()) {
        Ok(env) => Ok(Some(env)),
        Err(r) => {
            reject(ex, &req.id, r).await?;
            Ok(None)
        }
    }
}

/// A stateless message that is not a request: a notification is accepted and dropped (no
/// notification of the client's means anything to a stateless server; cancelling is closing
/// the response stream), a response is refused.
pub(crate) async fn not_a_request(ex: &mut Exchange<'_>, message: &Message) -> pingora::Result<()> {
    if let Message::Notification(_) = message {
        return ex.respond(202, "application/json", Vec::new(), &[]).await;
    }
    let r = Rejection {
        code: RpcCode::InvalidRequest.code(),
        message: "a stateless request cannot carry a response: answers go in inputResponses".into(),
        data: None,
    };
    reject(ex, &Id::NULL, r).await
}

/// `server/discover`: the gateway's capabilities and identity.
pub(crate) async fn discover(mcp: &McpRuntime, ex: &mut Exchange<'_>, gw: &Gateway, id: &Id) -> pingora::Result<()> {
    let body = jsonrpc::response_bytes(id, &modern::discover_result(gw, mcp.state.config().environment.as_str()));
    ex.respond(200, "application/json", body, &[]).await
}

/// The continuation of a call named by a `requestState`: the parked call, once the state is
/// shown to be toolgate's own, unaltered, and bound to this caller, gateway, method and name.
pub(crate) fn resume(mcp: &McpRuntime, state: &str, binding: &Binding) -> Result<Parked, RpcErrorObject> {
    let invalid =
        || RpcErrorObject::invalid_params("requestState was not issued by this gateway for this call, or was altered");
    let sealed = state.strip_prefix(STATE_PREFIX).ok_or_else(invalid)?;
    let opened = mcp.state.sealer.open(sealed).map_err(|_| invalid())?;
    let state: SealedState = serde_json::from_slice(&opened).map_err(|_| invalid())?;
    if state.binding != *binding {
        return Err(invalid());
    }
    mcp.parked.take(&state.parked).ok_or_else(|| {
        RpcErrorObject::invalid_params(
            "requestState has expired (the call it continued is gone): call again without it",
        )
    })
}

/// Gives the app the client's answers (`inputResponses`) to its parked questions; the questions
/// still unanswered are returned, to be asked again. An answer that is not a result of its
/// question's method is a protocol error (-32602): the call is cancelled at the app.
pub(crate) async fn deliver_answers(
    mcp: &McpRuntime,
    call: &mut Parked,
    responses: Option<&HashMap<String, &RawValue>>,
) -> Result<Vec<Pending>, RpcErrorObject> {
    let mut unanswered = Vec::new();
    let mut answers = Vec::new();
    for p in std::mem::take(&mut call.pending) {
        match responses.and_then(|r| r.get(&p.key)) {
            Some(given) => answers.push((valid_answer(&p.method, &p.key, given)?, p.app_request)),
            None => unanswered.push(p),
        }
    }
    let via = call.stream.via().cloned();
    for (result, id) in answers {
        mcp.answer_on(via.as_ref(), &call.org_id, &call.app_id, Response { id, outcome: Ok(result) }).await;
    }
    Ok(unanswered)
}

/// A client's answer to a question of `method`, if it has the shape of that method's result:
/// an object, with `action` (elicitation), `content` (sampling) or a `roots` array.
fn valid_answer(method: &str, key: &str, given: &RawValue) -> Result<RawJson, RpcErrorObject> {
    let v: Value = serde_json::from_str(given.get()).unwrap_or(Value::Null);
    let ok = match method {
        "elicitation/create" => v.get("action").is_some_and(Value::is_string),
        "sampling/createMessage" => v.get("content").is_some(),
        "roots/list" => v.get("roots").is_some_and(Value::is_array),
        _ => v.is_object(),
    };
    if !ok {
        return Err(RpcErrorObject::invalid_params(format!("inputResponses.{key} is not a valid result of {method}")));
    }
    Ok(RawJson::from_text(given.get().to_string()).unwrap_or_else(|| RawJson::from_value(&v)))
}

/// A stateless call's params as a handshake-era app takes them: the envelope's
/// `io.modelcontextprotocol/*` keys leave `_meta` (such an app may refuse a request that carries
/// them), the continuation (`inputResponses`, `requestState`) is toolgate's, and the client's
/// capabilities ride along as `toolgate.dev/clientCapabilities`, so that the app can ask only
/// what the client can answer.
pub(crate) fn for_handshake_app(params: &RawJson) -> RawJson {
    let Ok(RawMembers(members)) = params.read::<RawMembers>() else { return params.clone() };
    let mut meta = None;
    let mut kept: Vec<(Cow<str>, &RawValue)> = Vec::with_capacity(members.len());
    for (k, v) in members {
        match k.as_ref() {
            "inputResponses" | "requestState" => {}
            "_meta" => meta = modern::translate_meta(v),
            _ => kept.push((k, v)),
        }
    }
    if let Some(meta) = meta.as_ref() {
        kept.push((Cow::Borrowed("_meta"), meta.as_raw()));
    }
    RawJson::from_value(&RawMembers(kept))
}

/// The key under which a 2026-07-28 client is asked to open `app_id`'s connect page, and
/// answers (`inputRequests`, `inputResponses`).
fn connect_key(app_id: &str) -> String {
    format!("connect_{app_id}")
}

/// The 2026-07-28 form of "URL elicitation required" (-32042 in 2025-11-25, which that revision
/// removed): an input-required result whose one question is an `elicitation/create` of mode
/// `url` naming the connect page. No `requestState`: the retry is the same call made again,
/// which goes through once the person has connected and is asked again until then; the
/// gateway keeps nothing between the two (the connect page signs the person in itself).
pub(crate) fn connect_required(app_id: &str, url: &str, message: &str) -> RawJson {
    let ask = json!({ "method": "elicitation/create", "params": { "mode": "url", "message": message, "url": url } });
    let result = json!({ "resultType": "input_required", "inputRequests": { connect_key(app_id): ask } });
    RawJson::from_value(&result)
}

/// How a stateless client that takes URL-mode elicitations is sent to `app_id`'s connect page:
/// asked again ([`connect_required`]) unless its answer with this request (`given`) declined or
/// cancelled the page, when it is told where to connect in an error instead, so that a person
/// who said no is not asked round after round.
pub(crate) fn connect_link(app_id: &str, given: Option<&HashMap<String, &RawValue>>) -> rpc_errors::ConnectLink {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        action: Cow<'a, str>,
    }
    let answer =
        given.and_then(|g| g.get(&connect_key(app_id))).and_then(|a| serde_json::from_str::<Answer>(a.get()).ok());
    match answer {
        Some(a) if a.action != "accept" => rpc_errors::ConnectLink::Url,
        _ => rpc_errors::ConnectLink::InputRequired,
    }
}

/// What the relay of a stateless call needs besides the stream.
pub(crate) struct CallInfo<'a> {
    pub gw: &'a Gateway,
    pub app_id: &'a str,
    pub id: &'a Id,
    pub env: &'a Envelope,
    pub binding: Binding,
    pub decorate: &'static str,
    /// The answers the client sent with this request (`inputResponses`), for questions the app
    /// asks again in a new call: the stateless revision lets a client answer ahead.
    pub given: Option<&'a HashMap<String, &'a RawValue>>,
}

/// Relays an app's streamed answer to a stateless call: progress (and, when asked for, log
/// messages) as events, the app's questions gathered into an input-required result, the
/// response last. `log` records the outcome once.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn relay(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    call: CallInfo<'_>,
    mut stream: ReplyStream,
    mut pending: Vec<Pending>,
    mut keys_issued: u32,
    acc: &Accept,
    log: &mut (dyn FnMut(&Result<RawJson, RpcErrorObject>, u16) + Send),
) -> pingora::Result<()> {
    let org_id = &call.gw.org_id;
    // The app's questions are answered on the upstream the call went on (the caller's own).
    let via = stream.via().cloned();
    let mut streaming = false;
    // Questions left unanswered from the last round are asked again at once.
    let mut gather_until = (!pending.is_empty()).then(Instant::now);
    loop {
        let item = match gather_until {
            Some(t) => match tokio::time::timeout_at(t.into(), stream.next()).await {
                Ok(item) => item,
                Err(_) => break,
            },
            None => stream.next().await,
        };
        let msg = match item {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                Message::Response(rpc_errors::app_failure(call.id, call.app_id, &e, ex.ctx.request_id.as_str()))
            }
            None => Message::Response(Response::error(
                call.id.clone(),
                RpcErrorObject::internal(format!("App `{}` ended its stream without a response", call.app_id)),
            )),
        };
        match msg {
            Message::Response(r) => {
                // A task the app created is named to the client by toolgate's own id.
                let r = if call.binding.method == "tools/call" {
                    let owner = tasks::Owner { gateway_id: &call.binding.gateway_id, key_id: &call.binding.key_id };
                    tasks::claim_created(mcp, owner, call.app_id, &call.binding.name, r)
                } else {
                    r
                };
                log(&r.outcome, 200);
                return answer(ex, r.with_id(call.id.clone()), call.decorate, streaming).await;
            }
            Message::Notification(n) => {
                let wanted = n.method == "notifications/progress"
                    || (n.method == "notifications/message" && call.env.wants_logs);
                if !wanted || !acc.sse {
                    continue;
                }
                if !streaming {
                    ex.start_sse().await?;
                    streaming = true;
                }
                let event = sse_event(&Message::Notification(n).to_bytes());
                if ex.write(Some(event), false).await.is_err() {
                    // The client went away; dropping the stream cancels the call upstream.
                    return Ok(());
                }
            }
            Message::Request(r) if r.method == "ping" => {
                mcp.answer_on(via.as_ref(), org_id, call.app_id, Response::success(r.id, json!({}))).await;
            }
            Message::Request(r) => match question(mcp, &call, r, &mut keys_issued, via.as_ref()).await {
                Question::Answered => {}
                Question::Asked(p) => {
                    pending.push(p);
                    gather_until.get_or_insert_with(|| Instant::now() + GATHER);
                }
                Question::Fails(e) => {
                    log(&Err(e.clone()), 400);
                    return answer(ex, Response::error(call.id.clone(), e), "", streaming).await;
                }
            },
        }
    }
    // The app waits for answers: park the call and ask the client.
    let id = call.id.clone();
    let (outcome, status) = park(mcp, call, stream, pending, keys_issued);
    log(&outcome, status);
    answer(ex, Response { id, outcome }, "", streaming).await
}

/// What became of an app's question to a stateless client.
enum Question {
    /// Answered at once: by the gateway (a question the client cannot be asked is refused) or
    /// with the answer the client sent ahead under its key.
    Answered,
    /// To be asked of the client.
    Asked(Pending),
    /// The call fails with this error: the client lacks the capability the question needs, or
    /// its answer sent ahead is not a result of the question's method.
    Fails(RpcErrorObject),
}

/// An app's request to a stateless client (other than `ping`): refused, answered from what the
/// client sent ahead, or kept to be asked under its key (`_meta["toolgate.dev/inputKey"]` when
/// the app names one, else `<method>_<n>`).
async fn question(
    mcp: &McpRuntime,
    call: &CallInfo<'_>,
    r: jsonrpc::Request,
    keys_issued: &mut u32,
    via: Option<&std::sync::Weak<crate::mcp::upstream::Upstream>>,
) -> Question {
    let org_id = &call.gw.org_id;
    if let Some(capability) = call.env.caps.missing_for(&r.method) {
        let refusal = format!("the client did not declare the {capability} capability ({})", r.method);
        let refusal = RpcErrorObject::new(jsonrpc::METHOD_NOT_FOUND, refusal);
        mcp.answer_on(via, org_id, call.app_id, Response::error(r.id, refusal)).await;
        let (code, message, data) = modern::missing_capability(capability, &r.method);
        return Question::Fails(RpcErrorObject::new(code, message).with_data(data));
    }
    if !matches!(r.method.as_str(), "elicitation/create" | "sampling/createMessage" | "roots/list") {
        let e = RpcErrorObject::method_not_found(&r.method);
        mcp.answer_on(via, org_id, call.app_id, Response::error(r.id, e)).await;
        return Question::Answered;
    }
    *keys_issued += 1;
    let params = r.params.as_ref().map(RawJson::to_value).unwrap_or_else(|| json!({}));
    let key = params
        .get("_meta")
        .and_then(|m| m.get(modern::META_INPUT_KEY))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty() && k.len() <= 64)
        .map_or_else(|| format!("{}_{keys_issued}", r.method.replace('/', "_")), str::to_string);
    // Answered already: the client sent this key's answer with the call itself.
    if let Some(given) = call.given.and_then(|g| g.get(&key)) {
        return match valid_answer(&r.method, &key, given) {
            Ok(result) => {
                mcp.answer_on(via, org_id, call.app_id, Response { id: r.id, outcome: Ok(result) }).await;
                Question::Answered
            }
            Err(e) => {
                let refusal = RpcErrorObject::invalid_params("the client's answer was not valid");
                mcp.answer_on(via, org_id, call.app_id, Response::error(r.id, refusal)).await;
                Question::Fails(e)
            }
        };
    }
    Question::Asked(Pending {
        key,
        app_request: r.id,
        request: json!({ "method": r.method, "params": params }),
        method: r.method,
    })
}

/// Parks a call whose app waits for the client's answers: the input-required result (the
/// questions and toolgate's sealed `requestState`), or the refusal when the table has no room
/// for it, with the status it is logged under.
fn park(
    mcp: &McpRuntime,
    call: CallInfo<'_>,
    stream: ReplyStream,
    pending: Vec<Pending>,
    keys_issued: u32,
) -> (Result<RawJson, RpcErrorObject>, u16) {
    let input_requests: serde_json::Map<String, Value> =
        pending.iter().map(|p| (p.key.clone(), p.request.clone())).collect();
    let binding = call.binding.clone();
    let parked = Parked {
        stream,
        org_id: call.gw.org_id.clone(),
        app_id: call.app_id.to_string(),
        binding: call.binding,
        pending,
        keys_issued,
        expires: Instant::now(),
    };
    let parked_id = match mcp.parked.park(parked) {
        Ok(id) => id,
        Err(refused) => {
            let (e, status) = refused.to_error();
            return (Err(e), status);
        }
    };
    let sealed = serde_json::to_vec(&SealedState { parked: parked_id, binding }).unwrap_or_default();
    let state = format!("{STATE_PREFIX}{}", mcp.state.sealer.seal(&sealed));
    let result = json!({ "resultType": "input_required", "inputRequests": input_requests, "requestState": state });
    (Ok(RawJson::from_value(&result)), 200)
}

/// What a `subscriptions/listen` asks to hear.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    tools_list_changed: bool,
    #[serde(default)]
    prompts_list_changed: bool,
    #[serde(default)]
    resources_list_changed: bool,
}

#[derive(Deserialize, Default)]
struct ListenParams {
    #[serde(default)]
    notifications: Option<Filter>,
}

impl Filter {
    fn wants(&self, method: &str) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools_list_changed,
            "notifications/prompts/list_changed" => self.prompts_list_changed,
            "notifications/resources/list_changed" => self.resources_list_changed,
            _ => false,
        }
    }

    /// The part of the request toolgate honours, echoed in the acknowledgement.
    fn honoured(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if on {
                m.insert(key.into(), Value::Bool(true));
            }
        }
        Value::Object(m)
    }
}

/// `subscriptions/listen`: the stateless revision's stream of the gateway's list changes, the
/// counterpart of the handshake era's GET stream. The acknowledgement comes first; every message
/// carries the request's id as its subscription id; only the kinds asked for are sent.
/// It counts under `mcp.streams` for its key and organisation (it has no session), like a GET
/// stream: past a bound it is refused with HTTP 429 and -32010 naming the bound.
pub(crate) async fn listen(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    gw: &Arc<Gateway>,
    key_id: &str,
    req: jsonrpc::Request,
) -> pingora::Result<()> {
    let filter = req.params.as_ref().and_then(|p| p.read::<ListenParams>().ok()).and_then(|p| p.notifications);
    let Some(filter) = filter else {
        let e = RpcErrorObject::invalid_params("subscriptions/listen needs params.notifications (the kinds to hear)");
        return answer(ex, Response::error(req.id, e), "", false).await;
    };
    let slot = match mcp.stream_slot(Holder { org_id: &gw.org_id, key_id, session_id: None }) {
        Ok(slot) => slot,
        Err(refused) => return rpc_errors::bound_refused(ex, &req.id, refused).await,
    };
    let meta = json!({ modern::META_SUBSCRIPTION_ID: req.id.to_value() });
    let rx = mcp.subscribe(&gw.id);
    ex.start_sse().await?;
    let ack =
        notification(&meta, "notifications/subscriptions/acknowledged", json!({ "notifications": filter.honoured() }));
    ex.write(Some(ack), false).await?;
    ex.stream_on(Subscription { id: req.id, meta, filter, rx, _slot: slot }).await;
    Ok(())
}

/// One notification of a subscription, carrying its id (`meta`).
fn notification(meta: &Value, method: &str, mut params: Value) -> Bytes {
    params["_meta"] = meta.clone();
    sse_event(&jsonrpc::notification_bytes(method, Some(&RawJson::from_value(&params))))
}

/// An open `subscriptions/listen` stream: the gateway's changes of the kinds asked for.
struct Subscription {
    id: Id,
    meta: Value,
    filter: Filter,
    rx: broadcast::Receiver<Arc<StreamMessage>>,
    /// Its place under `mcp.streams`, given back when the stream ends.
    _slot: StreamSlot,
}

impl EventSource for Subscription {
    async fn run<S: EventSink>(mut self, out: &mut S) {
        loop {
            let chunk = tokio::select! {
                m = self.rx.recv() => match m {
                    // A resource update for one handshake-era session.
                    Ok(m) if m.to.is_some() => continue,
                    Ok(m) => {
                        let mut events = Vec::new();
                        for method in m.list_changed.iter().filter(|method| self.filter.wants(method)) {
                            events.extend_from_slice(&notification(&self.meta, method, json!({})));
                        }
                        if events.is_empty() {
                            continue;
                        }
                        Bytes::from(events)
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => break,
                },
                _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keepalive\n\n"),
                gone = out.client_gone() => match gone {
                    Ok(()) => continue,
                    Err(_) => return,
                },
            };
            if out.send(chunk).await.is_err() {
                return;
            }
        }
        // The gateway is gone: the subscription ends with its result.
        let done = jsonrpc::response_bytes(&self.id, &json!({ "resultType": "complete", "_meta": self.meta }));
        out.end(Some(sse_event(&done))).await.ok();
    }
}
