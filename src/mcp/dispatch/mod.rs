//! What each JSON-RPC message to a gateway asks for: `initialize` (a new session), the lists
//! (the gateway's catalogue, paged), and the calls that go to the app owning the named tool,
//! prompt or resource, whose answer (JSON or a stream of events) is relayed back. Every
//! `tools/call` leaves an entry in the request log.

use crate::base::secrets;
use crate::data::audit::{Actor, AuditEvent};
use crate::data::model::{ClientCapabilities, Discovery, Gateway, McpSession, RuleMethod};
use crate::data::reqlog::{Answer, EntryWriter};
use crate::data::store::LogRecord;
use crate::edge::exchange::{sse_event, Exchange, RequestId};
use crate::mcp::apps::AppError;
use crate::mcp::bounds::{Holder, Refused};
use crate::mcp::catalogue::Catalogue;
use crate::mcp::content::ContentCheck;
use crate::mcp::jsonrpc::{self, Id, Message, RawJson, RawMembers, Response, RpcErrorObject};
use crate::mcp::modern::{self, Envelope};
use crate::mcp::parked;
use crate::mcp::protocol::{self, Accept, RpcCode, SESSION_COOKIE};
use crate::mcp::quota;
use crate::mcp::resumable::{CallStream, Following};
use crate::mcp::rpc_errors;
use crate::mcp::rules::{self, CallFacts, Cause, RuleSet, Subject};
use crate::mcp::runtime::McpRuntime;
use crate::mcp::sessions::CreateError;
use crate::mcp::shaped::Shape;
use crate::mcp::stateless;
use crate::mcp::tasks;
use crate::mcp::upstream::{CallContext, ClientEra, ReplyStream, UpstreamError, UpstreamReply};
use crate::observe::metrics::{self, ErrorType};
use crate::observe::trace::{self, Span, SpanKind, TraceContext};
use chrono::Utc;
use http::{HeaderName, HeaderValue};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use toolgate_filters::Principal;

mod answer;
mod failure;
mod guarded;
mod limited;
mod lists;
mod params;
mod search;

use lists::{listed_tools, page};

pub(crate) use answer::calls_going_on_alone;
use answer::*;
use params::*;

/// Who asks: a handshake-era client in its session, or a stateless (2026-07-28) request with
/// its own envelope and the credential that sent it.
#[derive(Clone, Copy)]
pub(crate) enum Caller<'a> {
    Session(&'a str),
    /// `app_charged`: the app whose per-minute limit this request was already counted against,
    /// from its routing headers before its body was read (`transport::app_quota_from_headers`).
    /// `via_call_tool`: the call came wrapped in `call_tool` (`search.rs`), whose client could
    /// not send the inner tool's `Mcp-Param-*` headers.
    Stateless {
        env: &'a Envelope,
        key_id: &'a str,
        app_charged: Option<&'a str>,
        via_call_tool: bool,
    },
}

impl Caller<'_> {
    fn stateless(&self) -> bool {
        matches!(self, Caller::Stateless { .. })
    }
}

/// Writes the answer to a request: under HTTP 200 in a session; in the stateless revision an
/// error under the status its code has there and a result with `resultType` (and `decorate`'s
/// other members).
async fn respond(
    ex: &mut Exchange<'_>,
    caller: Caller<'_>,
    r: Response,
    decorate: &'static str,
) -> pingora::Result<()> {
    match caller {
        Caller::Session(_) => rpc_errors::json(ex, r).await,
        Caller::Stateless { .. } => stateless::answer(ex, r, decorate, false).await,
    }
}

/// The server->client requests a client said it takes (`sampling`, `elicitation` objects in its
/// `initialize` capabilities).
fn declared_capabilities(declared: Option<&Value>) -> ClientCapabilities {
    let has = |name: &str| declared.and_then(|c| c.get(name)).is_some_and(Value::is_object);
    let url = declared.and_then(|c| c.pointer("/elicitation/url")).is_some_and(Value::is_object);
    ClientCapabilities { sampling: has("sampling"), elicitation: has("elicitation"), elicitation_url: url }
}

/// Why the calling client cannot be sent this server->client request, if it cannot: it did not
/// declare the capability, or it takes JSON answers only (no stream to carry a request).
fn refusal(method: &str, caps: ClientCapabilities, sse: bool) -> Option<RpcErrorObject> {
    let needs = match method {
        "sampling/createMessage" => Some(("sampling", caps.sampling)),
        "elicitation/create" => Some(("elicitation", caps.elicitation)),
        _ => None,
    };
    match needs {
        Some((capability, false)) => Some(RpcErrorObject::new(
            jsonrpc::METHOD_NOT_FOUND,
            format!("the gateway's client did not declare the {capability} capability ({method})"),
        )),
        _ if !sse => Some(RpcErrorObject::new(
            jsonrpc::METHOD_NOT_FOUND,
            format!("the gateway's client takes JSON answers only and cannot receive {method}"),
        )),
        _ => None,
    }
}

/// `initialize`: a new session, bound to the key and the gateway and stored before it is
/// answered, sent as `Mcp-Session-Id` and as the session cookie.
pub(super) async fn initialize(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    gw: &Arc<Gateway>,
    key_id: &str,
    req: jsonrpc::Request,
) -> pingora::Result<()> {
    let started = Instant::now();
    let observe =
        |error: ErrorType| metrics::mcp_server_operation("initialize", None, error, &gw.id, started.elapsed());
    let params = req.params.as_ref().map(RawJson::to_value).unwrap_or_default();
    let version = protocol::negotiate(params.get("protocolVersion").and_then(Value::as_str));
    let record = session_record(gw, key_id, ex.ctx.client_ip.to_string(), version, &params);
    match mcp.sessions.create(record.clone()).await {
        Ok(()) => {}
        Err(CreateError::Store(e)) => {
            observe(ErrorType::Code(jsonrpc::INTERNAL_ERROR));
            return rpc_errors::api_error(ex, e.into()).await;
        }
        Err(e @ (CreateError::KeyCap(limit) | CreateError::OrgCap(limit))) => {
            let code = RpcCode::LimitExceeded;
            observe(ErrorType::Code(code.code()));
            // Not a rate: no Retry-After, since only an ended or expired session frees a place.
            let data = json!({ "code": "TOO_MANY_SESSIONS", "limit": limit });
            let body = jsonrpc::error_bytes(&req.id, code.code(), &e.to_string(), Some(&data));
            return ex.respond(code.status(), "application/json", body, &[]).await;
        }
    }
    let result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": true },
            "prompts": { "listChanged": true },
            "resources": { "subscribe": true, "listChanged": true },
            "logging": {},
        },
        "serverInfo": {
            "name": "toolgate",
            "title": format!("toolgate: {}", modern::shown_name(gw)),
            "version": env!("CARGO_PKG_VERSION"),
            // Decision 12: which deployment answers (`production` or `development`).
            "environment": mcp.state.config().environment.as_str(),
        },
        "instructions": format!("Gateway `{}`: tools of its apps {}.", modern::shown_name(gw), gw.servers.join(", ")),
    });
    let secure = if mcp.state.config().server.public_url.starts_with("https://") { "; Secure" } else { "" };
    let cookie = format!("{SESSION_COOKIE}={}; Path=/gateway/{}/; HttpOnly; SameSite=Strict{secure}", record.id, gw.id);
    let headers = [
        (
            HeaderName::from_static("mcp-session-id"),
            HeaderValue::from_str(&record.id).expect("hex id is a valid header"),
        ),
        (http::header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("cookie is a valid header")),
    ];
    let body = jsonrpc::response_bytes(&req.id, &result);
    observe(ErrorType::None);
    ex.respond(200, "application/json", body, &headers).await
}

/// The session an `initialize` with `params` opens: a new CSPRNG id (ordered by time, see
/// [`secrets::new_ordered_session_id`]), the negotiated `version`,
/// the client's name and version (cut to 100 and 50 characters) and the capabilities it declared.
fn session_record(gw: &Gateway, key_id: &str, client_ip: String, version: &str, params: &Value) -> McpSession {
    let client = params.get("clientInfo");
    let info = |key: &str, default: &str, most: usize| -> String {
        client.and_then(|c| c.get(key)).and_then(Value::as_str).unwrap_or(default).chars().take(most).collect()
    };
    let now = Utc::now();
    McpSession {
        id: secrets::new_ordered_session_id(now.timestamp_millis()),
        org_id: gw.org_id.clone(),
        gateway_id: gw.id.clone(),
        key_id: key_id.to_string(),
        protocol_version: version.to_string(),
        client_type: info("name", "unknown", 100),
        client_version: info("version", "", 50),
        client_ip,
        started_at: now,
        last_activity: now,
        requests_count: 1,
        status: "active".into(),
        capabilities: declared_capabilities(params.get("capabilities")),
    }
}

pub(super) async fn request(
    mcp: &Arc<McpRuntime>,
    ex: &mut Exchange<'_>,
    gw: &Arc<Gateway>,
    caller: Caller<'_>,
    req: jsonrpc::Request,
    acc: Accept,
) -> pingora::Result<()> {
    let started = Instant::now();
    let params = req.params.as_ref();
    let page_size = mcp.state.config().mcp.page_size;
    // The smallest `ttlMs` the apps gave the lists of the catalogue a list was read from.
    let mut app_ttl_ms = None;
    let mut list = |cat: &Catalogue, key: &str, shown: Option<Vec<Value>>| {
        let slot = ["tools", "prompts", "resources"].iter().position(|k| *k == key).unwrap_or(3);
        app_ttl_ms = cat.app_ttl_ms[slot];
        match key {
            "tools" => page(shown.as_deref().unwrap_or(&cat.tools), params, key, page_size),
            "prompts" => page(&cat.prompts, params, key, page_size),
            "resources" => page(&cat.resources, params, key, page_size),
            _ => page(&cat.templates, params, key, page_size),
        }
    };
    let outcome: Result<Value, RpcErrorObject> = match req.method.as_str() {
        "ping" => Ok(json!({})),
        "logging/setLevel" => Ok(json!({})),
        "tools/list" => {
            let cat = mcp.catalogue(gw).await;
            // A gateway with rules shows each caller the tools it may call.
            match mcp.rules(gw) {
                _ if gw.configuration.discovery == Discovery::Search => {
                    search::list(mcp, ex, gw, caller, &cat).await.and_then(|shown| list(&cat, "tools", Some(shown)))
                }
                None => list(&cat, "tools", None),
                Some(set) => match listed_tools(mcp, ex, set, &cat).await {
                    Ok(shown) => list(&cat, "tools", Some(shown)),
                    Err(e) => Err(e),
                },
            }
        }
        "prompts/list" => list(&*mcp.catalogue(gw).await, "prompts", None),
        "resources/list" => list(&*mcp.catalogue(gw).await, "resources", None),
        "resources/templates/list" => list(&*mcp.catalogue(gw).await, "resourceTemplates", None),
        "resources/subscribe" | "resources/unsubscribe" => {
            // The app's one upstream session serves every client: the gateway keeps who is
            // subscribed to what, tells the app of the first subscriber and the last to leave,
            // and delivers updates to each subscriber's own GET stream.
            let Caller::Session(mcp_id) = caller else {
                // The stateless revision removed these methods (answered before dispatch).
                return respond(ex, caller, Response::error(req.id, RpcErrorObject::method_not_found(&req.method)), "")
                    .await;
            };
            let uri = resource_uri(params);
            let app = mcp.catalogue(gw).await.resource_app(&uri).map(str::to_string);
            if let Some(app) = app {
                let subscription = (mcp.apps.owner_of(&gw.org_id, &app), app, uri.into_owned());
                if req.method == "resources/subscribe" {
                    mcp.subscriptions.add(subscription, mcp_id);
                } else if !mcp.subscriptions.remove(&subscription, mcp_id) {
                    // Others still want the updates: the app keeps sending them.
                    let body = jsonrpc::response_bytes(&req.id, &json!({}));
                    return ex.respond(200, "application/json", body, &[]).await;
                }
            }
            return forward(mcp, ex, gw, caller, req, acc).await;
        }
        "tools/call" if gw.configuration.discovery == Discovery::Search => {
            // Boxed: the search's future (about 6 KB) would otherwise size every request's.
            return Box::pin(search::call(mcp, ex, gw, caller, req, acc)).await;
        }
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete" => {
            return forward(mcp, ex, gw, caller, req, acc).await;
        }
        // The tasks extension is the stateless revision's; a session's `tasks/*` (the
        // handshake era's own tasks) is not relayed.
        m if tasks::is_task_method(m) && caller.stateless() => {
            let Caller::Stateless { env, key_id, .. } = caller else { unreachable!("checked: stateless") };
            let caller_of = (key_id, ex.ctx.filters.principal.as_deref());
            let r = Box::pin(tasks::follow(mcp, gw, env, caller_of, &req, ex.ctx.request_id.as_str())).await;
            return respond(ex, caller, r, modern::COMPLETE).await;
        }
        other => Err(RpcErrorObject::method_not_found(other)),
    };
    let error = outcome.as_ref().map_or_else(|e| ErrorType::Code(e.code), |_| ErrorType::None);
    metrics::mcp_server_operation(&req.method, None, error, &gw.id, started.elapsed());
    if caller.stateless() {
        let r = match outcome {
            Ok(result) => Response { id: req.id, outcome: Ok(RawJson::from_value(&result)) },
            Err(e) => Response::error(req.id, e),
        };
        return stateless::answer(ex, r, &modern::list_hints(gw, app_ttl_ms), false).await;
    }
    let body = match outcome {
        Ok(result) => jsonrpc::response_bytes(&req.id, &result),
        Err(e) => Response::error(req.id.clone(), e).to_bytes(),
    };
    ex.respond(200, "application/json", body, &[]).await
}

/// The caller of this request as the rules see it; its token's claims are read only when a
/// rule reads them: the grant of an access token of toolgate's authorization server, or the
/// payload of the JWT the credential filter verified for this very request.
fn subject(mcp: &McpRuntime, ex: &Exchange<'_>, set: &RuleSet, p: &Principal) -> Subject {
    use toolgate_filters::CredentialKind;
    let ip = ex.ctx.client_ip;
    if !set.reads_claims() {
        return Subject::new(set, p, ip, rules::Claims::None);
    }
    if let Some(grant) = p.key_id.strip_prefix("oauth:").and_then(|g| mcp.state.grant(g)) {
        let config = mcp.state.config();
        let claims = rules::Claims::Grant { grant: &grant, issuer: &config.server.public_url };
        return Subject::new(set, p, ip, claims);
    }
    let bearer = ex.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let token = bearer.and_then(|b| b.get(7..).filter(|_| b[..7].eq_ignore_ascii_case("bearer "))).map(str::trim);
    let claims = match (&p.credential, token) {
        (CredentialKind::Jwt { .. } | CredentialKind::GatewayToken { .. }, Some(t)) => rules::Claims::Jwt(t),
        _ => rules::Claims::None,
    };
    Subject::new(set, p, ip, claims)
}

/// A call on its way through [`forward`]'s phases: who asks, on which gateway, with which
/// method, since when. Made of borrows of the request; nothing is copied to make it.
struct Call<'a> {
    mcp: &'a Arc<McpRuntime>,
    gw: &'a Arc<Gateway>,
    caller: Caller<'a>,
    method: &'a str,
    started: Instant,
    /// The request's id: in what the client is told of an app's failure and in the log entry.
    request_id: RequestId,
    /// The gateway's checks of what the app answers (`mcp/content/`), once the target is known.
    content: Option<Arc<ContentCheck>>,
    /// The gateway's external guards of this call (`mcp/callout/`), once they let it through.
    guards: Option<Arc<crate::mcp::callout::CallGuards>>,
}

/// Where a call goes, from the catalogue (`'c`): the app and, for `tools/call` and
/// `prompts/get`, the name at the gateway and at the app and the `Mcp-Param-*` headers the tool
/// declares; and the call's params as read from the request (`'p`), every member but `name`
/// relayed as it came.
struct Target<'c, 'p> {
    app_id: &'c str,
    tool: Option<(&'c str, &'c str)>,
    /// The resource a `resources/read` names (for the rules).
    uri: Option<Cow<'p, str>>,
    declared: &'c [modern::ParamHeader],
    named: Option<NamedParams<'p>>,
    /// The tool's override (`shaped.rs`), if the gateway shapes it.
    shape: Option<&'c Shape>,
}

/// Sends a call to the app that owns the named tool, prompt or resource, and relays its answer,
/// in phases: resolve the target, check the `Mcp-Param-*` headers, admit the app's quota, bind
/// the call to its caller or continue a parked one, call the app, and finish (relay the answer;
/// the metrics, the span and the log entry once).
async fn forward(
    mcp: &Arc<McpRuntime>,
    ex: &mut Exchange<'_>,
    gw: &Arc<Gateway>,
    caller: Caller<'_>,
    mut req: jsonrpc::Request,
    acc: Accept,
) -> pingora::Result<()> {
    let request_id = ex.ctx.request_id;
    let method = req.method.as_str();
    let mut call = Call { mcp, gw, caller, method, started: Instant::now(), request_id, content: None, guards: None };
    let params = req.params.take();
    let catalogue = mcp.catalogue(gw).await;
    let mut target = match call.resolve(&catalogue, params.as_ref()) {
        Ok(Some(target)) => target,
        // A completion for a prompt no app has: nothing to complete.
        Ok(None) => {
            let none = Response::success(req.id, json!({ "completion": { "values": [] } }));
            return respond(ex, caller, none, modern::COMPLETE).await;
        }
        Err(e) => {
            ex.ctx.tool_pending = e.code == RpcCode::ToolPending.code();
            call.audit_held(ex, &e);
            return respond(ex, caller, Response::error(req.id, e), "").await;
        }
    };
    // A shaped tool's arguments as the app gets them, borrowed by the target like the params.
    let shaped_arguments = match call.shaped_arguments(&target) {
        Ok(a) => a,
        Err(e) => return respond(ex, caller, Response::error(req.id, e), "").await,
    };
    if let (Some(args), Some(named)) = (shaped_arguments.as_deref(), target.named.as_mut()) {
        named.set("arguments", args);
    }
    // Each wait for a feature is entered only when the gateway has it: an entered wait builds
    // its future (a kilobyte or two) into the call's, which a call without the feature skips.
    if !gw.rules.is_empty() {
        if let Err(e) = call.rules(ex, &target).await {
            return respond(ex, caller, Response::error(req.id, e), "").await;
        }
    }
    if !gw.tool_limits.is_empty() {
        if let Some(refused) = limited::check(&call, ex, &target, &req.id).await {
            return refused;
        }
    }
    let (mut call_ctx, guarded_arguments) = match call.before_app(ex, &catalogue, &target, &req.id).await {
        Ok(ready) => ready,
        Err(e) => return respond(ex, caller, Response::error(req.id, e), "").await,
    };
    guarded::replace_arguments(&mut target, guarded_arguments.as_deref(), &mut call_ctx.headers);
    let Target { app_id, tool, named, .. } = target;
    if let Err(refused) = call.resumable_room(ex, &acc) {
        let e = refused.to_error();
        call.refused(&e);
        if let Some((_, function)) = tool.filter(|_| call.method == "tools/call") {
            let args = named.as_ref().and_then(|n| n.get("arguments"));
            call.log_refused(app_id, function, args, &e, RpcCode::LimitExceeded.status());
        }
        return rpc_errors::bound_refused(ex, &req.id, refused).await;
    }
    if let Err(spent) = call.admit(app_id) {
        return rpc_errors::app_quota_exceeded(ex, spent, app_id).await;
    }
    let binding = call.binding(tool, params.as_ref());
    let continuation_text = call.continuation_text(params.as_ref());
    let continuation: Option<Continuation> = continuation_text.as_deref().and_then(|t| serde_json::from_str(t).ok());
    // A `requestState` continues the call it names, whose app is given the client's answers.
    let resumed = match resuming(binding.as_ref(), continuation.as_ref()) {
        Some(r) => match Box::pin(resume_parked(mcp, r.state, r.binding, app_id, r.given)).await {
            Ok(r) => Some(r),
            Err(e) => {
                call.refused(&e);
                return respond(ex, caller, Response::error(req.id, e), "").await;
            }
        },
        None => None,
    };
    let mut entry = call.begin_entry(app_id, tool, named.as_ref());
    if let (Some(entry), Some(p)) = (entry.as_mut(), ex.ctx.filters.principal.as_deref()) {
        entry.caller(&p.key_id, &p.user_id);
    }
    let mut params = match named {
        Some(named) => Some(named.renamed(tool.map_or("", |t| t.1), caller.stateless())),
        None if caller.stateless() => params.as_ref().map(stateless::for_handshake_app),
        None => params,
    };
    let trace = ex.ctx.trace.clone().or_else(|| params.as_ref().and_then(trace_in_meta));
    let span = trace.map(|t| {
        let (span_id, start) = trace_call(&t, &mut params, &mut call_ctx.headers);
        (t, span_id, start)
    });
    let answered = match resumed {
        Some(r) => {
            let (parked, unanswered) = *r;
            let carried = Some((unanswered, parked.keys_issued));
            let stream = crate::mcp::callout::guard_stream(parked.stream, call.guards.as_ref());
            Answered { reply: Ok(UpstreamReply::Stream(stream)), carried }
        }
        None => match call.request(ex, app_id, params, call_ctx, &acc).await? {
            Requested::Answered(reply) => Answered { reply, carried: None },
            Requested::Slow(slow) => {
                let mut done = Finish { call: &call, app_id, tool, span, entry, finished: false };
                return go_on_alone(ex, &mut done, &req.id, slow).await;
            }
        },
    };
    let mut done = Finish { call: &call, app_id, tool, span, entry, finished: false };
    let given = continuation.as_ref().and_then(|c| c.input_responses.as_ref());
    finish(&mut done, ex, answered, req.id, binding, given, &acc).await
}

/// The app's reply with the gateway's content checks on it: a response checked now, a stream
/// message by message as it is read.
fn checked(
    reply: Result<UpstreamReply, AppError>,
    check: Option<Arc<ContentCheck>>,
) -> Result<UpstreamReply, AppError> {
    let Some(check) = check else { return reply };
    reply.map(|r| match r {
        UpstreamReply::Response(r) => UpstreamReply::Response(check.response(r)),
        UpstreamReply::Stream(s) => UpstreamReply::Stream(s.checked(check)),
    })
}

/// What the app's call came to: its reply; and for a continued call, the questions still
/// unanswered and the keys issued so far.
struct Answered {
    reply: Result<UpstreamReply, AppError>,
    carried: Option<(Vec<parked::Pending>, u32)>,
}

/// The app's call, owning what it needs, so that it can go on in a task of its own
/// ([`go_on_alone`]).
type AppCall = std::pin::Pin<Box<dyn std::future::Future<Output = Result<UpstreamReply, AppError>> + Send>>;

/// What is left of a slow call: the wait for its app's answer, or the rest of the events the app
/// streams (boxed, as the call is).
enum Pending {
    Call(AppCall),
    Stream(Box<ReplyStream>),
}

/// How [`Call::request`] left a call: answered, or slow, its resumable stream opened.
// Lives on the stack once per call: boxing the reply would allocate on every call to save a few
// bytes of a short-lived value.
#[allow(clippy::large_enum_variant)]
enum Requested {
    Answered(Result<UpstreamReply, AppError>),
    Slow(Slow),
}

/// A call not done after [`EARLY_STREAM`]: what is left of it, its resumable stream (the
/// priming event and the events so far written), and whether the client still listens.
struct Slow {
    pending: Pending,
    stream: Arc<CallStream>,
    connected: bool,
}

/// Relays the app's answer (`id` is the client's) and records the call once: a response as it
/// came, a stream as a stateless client's (input-required rounds), as JSON only, or as events.
async fn finish(
    done: &mut Finish<'_>,
    ex: &mut Exchange<'_>,
    answered: Answered,
    id: Id,
    binding: Option<parked::Binding>,
    given: Option<&HashMap<String, &RawValue>>,
    acc: &Accept,
) -> pingora::Result<()> {
    let (call, app_id) = (done.call, done.app_id);
    let (mcp, caller) = (call.mcp, call.caller);
    let decorate = if call.method == "resources/read" { modern::READ_HINTS } else { modern::COMPLETE };
    match answered.reply {
        Ok(UpstreamReply::Response(r)) => {
            // A task the app created is named to a stateless client by toolgate's own id.
            let r = match binding.as_ref().filter(|_| call.method == "tools/call") {
                Some(b) => {
                    let owner = tasks::Owner { gateway_id: &b.gateway_id, key_id: &b.key_id };
                    tasks::claim_created(mcp, owner, app_id, &b.name, r)
                }
                None => r,
            };
            done.record(&r.outcome, 200);
            respond(ex, caller, r.with_id(id), decorate).await
        }
        Ok(UpstreamReply::Stream(stream)) => match (caller, binding) {
            (Caller::Stateless { env, .. }, Some(binding)) => {
                let (pending, keys_issued) = answered.carried.unwrap_or_default();
                let info = stateless::CallInfo { gw: call.gw, app_id, id: &id, env, binding, decorate, given };
                let log = &mut |o: &Result<RawJson, RpcErrorObject>, status| done.record(o, status);
                Box::pin(stateless::relay(mcp, ex, info, stream, pending, keys_issued, acc, log)).await
            }
            (Caller::Session(mcp_id), _) if !acc.sse => {
                let r = json_only(call, app_id, mcp_id, stream).await;
                let r = r.unwrap_or_else(|e| rpc_errors::app_failure(&id, app_id, &e, call.request_id.as_str()));
                done.record(&r.outcome, 200);
                rpc_errors::json(ex, r.with_id(id)).await
            }
            // Boxed: relaying an app's events (2.6 KB of future) would otherwise size every
            // call's future, the plain JSON answers' too.
            (Caller::Session(mcp_id), _) => Box::pin(relay_events(done, ex, mcp_id, &id, stream)).await,
            (Caller::Stateless { .. }, None) => unreachable!("a stateless caller has a binding"),
        },
        Err(e) => {
            let r = call.failure(app_id, &id, &e, given, ex.ctx.filters.principal.as_deref());
            done.record(&r.outcome, if r.outcome.is_ok() { 200 } else { 502 });
            respond(ex, caller, r, "").await
        }
    }
}

impl Call<'_> {
    /// A request refused before it reached an app, in the operation metrics.
    fn refused(&self, e: &RpcErrorObject) {
        metrics::mcp_server_operation(self.method, None, ErrorType::Code(e.code), &self.gw.id, self.started.elapsed())
    }

    /// The app that serves the call: the owner of the named tool or prompt, of the resource, or
    /// of the prompt a completion refers to (none: no app has it). A refusal is counted (and a
    /// `tools/call`'s logged) here; the caller answers it.
    fn resolve<'c, 'p>(
        &self,
        catalogue: &'c Catalogue,
        params: Option<&'p RawJson>,
    ) -> Result<Option<Target<'c, 'p>>, RpcErrorObject> {
        match self.method {
            "tools/call" | "prompts/get" => self.resolve_named(catalogue, params).map(Some),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let uri = resource_uri(params);
                if let Some(w) = catalogue.withheld_resource(&uri) {
                    let e = rpc_errors::withheld(w);
                    self.refused(&e);
                    return Err(e);
                }
                if let Some(app_id) = catalogue.resource_app(&uri) {
                    return Ok(Some(Target {
                        app_id,
                        tool: None,
                        uri: Some(uri),
                        declared: &[],
                        named: None,
                        shape: None,
                    }));
                }
                // The stateless revision answers an unknown resource with -32602 (SEP-2164).
                let code =
                    if self.caller.stateless() { jsonrpc::INVALID_PARAMS } else { RpcCode::ResourceNotFound.code() };
                let e =
                    RpcErrorObject::new(code, format!("Resource not found: {uri}")).with_data(json!({ "uri": uri }));
                self.refused(&e);
                Err(e)
            }
            _ => {
                // completion/complete: the app of the referenced prompt.
                let name = params.map(RawJson::to_value).unwrap_or_default();
                let name = name.pointer("/ref/name").and_then(Value::as_str).unwrap_or_default();
                Ok(catalogue.prompt(name).map(|t| Target {
                    app_id: t.app_id.as_str(),
                    tool: None,
                    uri: None,
                    declared: &[],
                    named: None,
                    shape: None,
                }))
            }
        }
    }

    /// The target of a `tools/call` or `prompts/get`: the app owning the name in its params.
    fn resolve_named<'c, 'p>(
        &self,
        catalogue: &'c Catalogue,
        params: Option<&'p RawJson>,
    ) -> Result<Target<'c, 'p>, RpcErrorObject> {
        let Some(named) = params.and_then(|p| p.read::<NamedParams>().ok()).filter(|n| n.name.is_some()) else {
            let e = RpcErrorObject::invalid_params(format!("{} needs params.name (string)", self.method));
            self.refused(&e);
            return Err(e);
        };
        let name = named.name.as_deref().unwrap_or_default();
        let Some((exposed, t)) = catalogue.entry(name, self.method == "prompts/get") else {
            let e = self.unknown_name(catalogue, name);
            // The name is the client's own and not in the catalogue: no label of its own.
            self.refused(&e);
            if self.method == "tools/call" {
                let (app, function) = named_app(self.gw, name);
                self.log_refused(app, function, named.get("arguments"), &e, 200);
            }
            return Err(e);
        };
        Ok(Target {
            app_id: t.app_id.as_str(),
            tool: Some((exposed, t.name.as_str())),
            uri: None,
            declared: &t.param_headers,
            named: Some(named),
            shape: t.shape.as_deref(),
        })
    }

    /// The answer to a tool or prompt name the catalogue does not have. The name may belong to
    /// one of the gateway's apps that is down. When the name says which (the only app, or its
    /// `<app><sep>` prefix), that app's failure is the answer; otherwise the unavailable apps
    /// ride along as data.
    fn unknown_name(&self, catalogue: &Catalogue, name: &str) -> RpcErrorObject {
        if let Some(w) = catalogue.withheld(name, self.method == "prompts/get") {
            return rpc_errors::withheld(w);
        }
        let gw = self.gw;
        if self.method == "tools/call" {
            if let Some(held) = catalogue.pending_tool(name) {
                return rpc_errors::tool_pending(name, held);
            }
        }
        let sep = &gw.configuration.tool_name_separator;
        let owner = catalogue.failures.iter().find(|(app, _)| {
            gw.servers.len() == 1 || name.strip_prefix(app.as_str()).is_some_and(|r| r.starts_with(sep.as_str()))
        });
        if let Some((app, reason)) = owner {
            let data = json!({ "request_id": self.request_id.as_str(), "app": app, "cause": reason });
            return RpcErrorObject::new(RpcCode::UpstreamFailure.code(), rpc_errors::unavailable(app, reason))
                .with_data(data);
        }
        let e = if self.method == "tools/call" {
            RpcErrorObject::unknown_tool(name)
        } else {
            RpcErrorObject::invalid_params(format!("Unknown prompt: {name}"))
        };
        if catalogue.failures.is_empty() {
            return e;
        }
        e.with_data(json!({ "unavailable_apps": catalogue.failures }))
    }

    /// A call to a tool awaiting approval, or to a tool, prompt or resource withheld for its
    /// hidden text, is in the audit trail (`tool_call.refused`, folded past a share per minute):
    /// someone tried what the gateway holds back.
    fn audit_held(&self, ex: &Exchange<'_>, e: &RpcErrorObject) {
        let withheld = e.data.as_ref().is_some_and(|d| d.get("withheld").is_some());
        let reason = match (e.code == RpcCode::ToolPending.code(), withheld) {
            (true, _) => "pending",
            (false, true) => "withheld",
            _ => return,
        };
        let Some(p) = ex.ctx.filters.principal.as_deref() else { return };
        let detail = json!({
            "method": self.method, "reason": reason, "message": e.message, "data": e.data, "key_id": p.key_id,
        });
        let target = crate::data::audit::Target { kind: "gateway".into(), id: self.gw.id.clone() };
        self.mcp.audit.refused(&self.gw.org_id, Actor::of(p), "tool_call.refused", target, detail);
    }

    /// A call of a gateway with rules: refused when a rule denies it (counted, logged,
    /// audited, and named in the access line), when its arguments cannot be read, or when its
    /// organisation's slots for dear rule sets are all taken (both counted and logged). A
    /// gateway without rules pays one branch.
    async fn rules(&self, ex: &mut Exchange<'_>, target: &Target<'_, '_>) -> Result<(), RpcErrorObject> {
        let Some(set) = self.mcp.rules(self.gw) else { return Ok(()) };
        let Some(facts) = self.facts(target) else { return Ok(()) };
        let Some(p) = ex.ctx.filters.principal.as_deref() else { return Ok(()) };
        let args = target.named.as_ref().and_then(|n| n.get("arguments"));
        let (tool, function) = (facts.tool, facts.function);
        let who = || subject(self.mcp, ex, &set, p);
        let slots = &self.mcp.rule_slots;
        let Err(refused) = set.decide_call_bounded(slots, p, ex.ctx.client_ip, facts, args, who).await else {
            return Ok(());
        };
        let e = rpc_errors::rules_refused(&refused);
        self.refused(&e);
        if facts.method == RuleMethod::ToolsCall {
            self.log_refused(target.app_id, function, args, &e, 200);
        }
        let denied = match refused {
            rules::Refused::Denied(d) => d,
            rules::Refused::Unreadable { reason } => {
                metrics::rule_refused("unreadable_arguments");
                tracing::info!(gateway = %self.gw.id, tool, key = %p.key_id, reason, "tool call refused: its arguments cannot be read");
                return Err(e);
            }
            rules::Refused::Busy => {
                metrics::rule_refused("busy");
                tracing::warn!(gateway = %self.gw.id, org = %self.gw.org_id, tool, "tool call refused: the organisation's rule slots are taken");
                return Err(e);
            }
        };
        metrics::tool_denied(&self.gw.id, &denied.rule);
        let why = match &denied.cause {
            Cause::Matched => "",
            Cause::Failed(why) | Cause::TooLarge(why) => {
                metrics::rule_refused(denied.cause.as_str());
                why
            }
        };
        tracing::info!(gateway = %self.gw.id, method = denied.method.as_str(), tool = %denied.tool, rule = %denied.rule,
            key = %denied.key_id, reason = denied.cause.as_str(), failed = why, "call denied by rule");
        let event = AuditEvent::ToolCallDenied {
            gateway_id: self.gw.id.clone(),
            method: denied.method.as_str(),
            tool: denied.tool.clone(),
            rule: denied.rule.to_string(),
            reason: denied.cause.as_str(),
        };
        self.mcp.audit.record(&self.gw.org_id, Actor::of(p), event);
        ex.ctx.denied_by = Some(denied.rule);
        Err(e)
    }

    /// A tool that declares `Mcp-Param-*` headers: a stateless caller's must agree with the
    /// arguments, and the app gets them from the arguments (`to_app`), whoever called. The
    /// arguments are read only then.
    fn param_headers(
        &self,
        target: &Target<'_, '_>,
        headers: &http::HeaderMap,
        to_app: &mut Vec<(HeaderName, HeaderValue)>,
    ) -> Result<(), RpcErrorObject> {
        let declared = target.declared;
        let Some(named) = target.named.as_ref().filter(|_| !declared.is_empty()) else {
            return Ok(());
        };
        let arguments: Value =
            named.get("arguments").and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or_default();
        if matches!(self.caller, Caller::Stateless { via_call_tool: false, .. }) {
            if let Err(r) = modern::check_param_headers(declared, &arguments, headers) {
                let e = RpcErrorObject { code: r.code, message: r.message.into_owned(), data: r.data, detail: None };
                self.refused(&e);
                if let (Some((_, name)), true) = (target.tool, self.method == "tools/call") {
                    self.log_refused(target.app_id, name, named.get("arguments"), &e, 200);
                }
                return Err(e);
            }
        }
        to_app.extend(modern::param_header_values(declared, &arguments));
        Ok(())
    }

    /// A `tools/call` refused before it reached an app (an unknown tool, an app whose list
    /// failed, headers that disagree with the arguments, a bound of the caller's) is logged as
    /// the error it was answered with, under the HTTP `status` it was answered with, so that the
    /// log, analytics and metrics count it like any other failed call.
    fn log_refused(&self, app: &str, function: &str, arguments: Option<&RawValue>, e: &RpcErrorObject, status: u16) {
        let mut entry = EntryWriter::begin(self.gw, app, function, arguments.map_or("null", RawValue::get));
        entry.request_id(self.request_id.as_str());
        let outcome = Err(RpcErrorObject::new(e.code, e.message.clone()));
        self.mcp.reqlog.record(log_entry(entry, &outcome, true, status, self.started.elapsed()));
    }

    /// Whether a session client that takes SSE may start a call, whose answer may become a
    /// resumable stream: not while its key's or organisation's resumable buffers hold their
    /// bound (`mcp.resumable`). A client that takes JSON only is never buffered for.
    fn resumable_room(&self, ex: &Exchange<'_>, acc: &Accept) -> Result<(), Refused> {
        let Caller::Session(mcp_id) = self.caller else { return Ok(()) };
        if !acc.sse {
            return Ok(());
        }
        let who = holder(ex, self.gw, mcp_id);
        self.mcp.call_streams.refusal(who, &self.mcp.state.config().mcp.resumable)
    }

    /// The app's per-minute limit, which protects the upstream: its figure across every gateway
    /// and caller. A stateless request was already counted from its routing headers.
    fn admit(&self, app_id: &str) -> Result<(), quota::Spent> {
        let charged = matches!(self.caller, Caller::Stateless { app_charged: Some(a), .. } if a == app_id);
        if let Some(limit) = self.mcp.state.config().app(app_id).and_then(|a| a.rate_limit).filter(|_| !charged) {
            self.mcp.quotas.admit(&quota::app_bucket(app_id), limit)?;
        }
        Ok(())
    }

    /// Who may continue a stateless call: this credential, on this gateway, for this method and
    /// tool, prompt or resource.
    fn binding(&self, tool: Option<(&str, &str)>, params: Option<&RawJson>) -> Option<parked::Binding> {
        let Caller::Stateless { key_id, .. } = self.caller else { return None };
        Some(parked::Binding {
            key_id: key_id.to_string(),
            gateway_id: self.gw.id.clone(),
            method: self.method.to_string(),
            name: tool.map(|t| t.0.to_string()).unwrap_or_else(|| resource_uri(params).into_owned()),
        })
    }

    /// A stateless retry's params, copied (a continuation is rare) because the params go to the
    /// app before the continuation is used up.
    fn continuation_text(&self, params: Option<&RawJson>) -> Option<String> {
        match self.caller {
            Caller::Stateless { env, .. } if env.continues => params.map(|p| p.get().to_string()),
            _ => None,
        }
    }

    /// Calls the app. A session client that takes SSE gets a resumable stream once the app takes
    /// longer than EARLY_STREAM, and the call then goes on by itself; so its call owns what it
    /// needs from the start (one allocation), since a future cannot be moved once it is polled.
    async fn request(
        &self,
        ex: &mut Exchange<'_>,
        app_id: &str,
        params: Option<RawJson>,
        call_ctx: CallContext,
        acc: &Accept,
    ) -> pingora::Result<Requested> {
        match self.caller {
            Caller::Session(mcp_id) if acc.sse => {
                let (mcp, gw, who) = (Arc::clone(self.mcp), Arc::clone(self.gw), ex.ctx.filters.principal.clone());
                let (app_id, method) = (app_id.to_owned(), self.method.to_owned());
                let (content, guards) = (self.content.clone(), self.guards.clone());
                let call: AppCall = Box::pin(async move {
                    let reply = mcp.apps.request(&gw.org_id, who.as_deref(), &app_id, &method, params, &call_ctx).await;
                    crate::mcp::callout::guard_reply(checked(reply, content), guards).await
                });
                await_or_stream_early(self.mcp, ex, self.gw, mcp_id, call).await
            }
            _ => {
                let who = ex.ctx.filters.principal.as_deref();
                let reply = self.mcp.apps.request(&self.gw.org_id, who, app_id, self.method, params, &call_ctx).await;
                let reply = checked(reply, self.content.clone());
                Ok(Requested::Answered(crate::mcp::callout::guard_reply(reply, self.guards.clone()).await))
            }
        }
    }

    /// A `tools/call`'s log entry, begun with what was asked before the call goes upstream: the
    /// function's own name at its app (spec "Log entry"), not the gateway's prefixed one.
    fn begin_entry(
        &self,
        app_id: &str,
        tool: Option<(&str, &str)>,
        named: Option<&NamedParams>,
    ) -> Option<EntryWriter> {
        (self.method == "tools/call").then(|| {
            let function = tool.map_or("", |t| t.1);
            let arguments = named.and_then(|c| c.get("arguments")).map_or("null", RawValue::get);
            let mut entry = EntryWriter::begin(self.gw, app_id, function, arguments);
            entry.request_id(self.request_id.as_str());
            entry
        })
    }
}

/// What continues a parked call: the caller's binding, the `requestState` naming the call, and
/// the answers sent with it.
struct Resume<'b> {
    binding: &'b parked::Binding,
    state: &'b str,
    given: Option<&'b HashMap<String, &'b RawValue>>,
}

/// The parked call a stateless request would continue, if it carries a `requestState`.
fn resuming<'b>(
    binding: Option<&'b parked::Binding>,
    continuation: Option<&'b Continuation<'b>>,
) -> Option<Resume<'b>> {
    let (binding, c) = binding.zip(continuation)?;
    Some(Resume { binding, state: c.request_state.as_deref()?, given: c.input_responses.as_ref() })
}

/// Puts the call in the trace `t`: to the app in the header and in `params._meta` (the client's
/// context came in its header or, as MCP's convention also allows, in its `params._meta`).
/// Returns the call's span id and start.
fn trace_call(
    t: &TraceContext,
    params: &mut Option<RawJson>,
    to_app: &mut Vec<(HeaderName, HeaderValue)>,
) -> ([u8; 8], SystemTime) {
    let span_id = t.call_span_id();
    let traceparent = t.traceparent(&span_id);
    if let Ok(v) = HeaderValue::from_str(&traceparent) {
        to_app.push((HeaderName::from_static("traceparent"), v));
    }
    if let Some(v) = t.state.as_deref().and_then(|s| HeaderValue::from_str(s).ok()) {
        to_app.push((HeaderName::from_static("tracestate"), v));
    }
    let traced = trace::with_meta(params.as_ref().map(RawJson::to_value).as_ref(), &traceparent, t.state.as_deref());
    if let Some(traced) = traced {
        *params = Some(RawJson::from_value(&traced));
    }
    (span_id, SystemTime::now())
}

/// The trace context a client put in `params._meta` (read only when the text names one).
fn trace_in_meta(params: &RawJson) -> Option<TraceContext> {
    if !params.get().contains("traceparent") {
        return None;
    }
    let p = params.to_value();
    let meta = p.get("_meta")?;
    TraceContext::start(meta.get("traceparent")?.as_str(), meta.get("tracestate").and_then(Value::as_str))
}

/// The app a tool name a client sent says it is of, and that app's own name for the tool: the
/// gateway's only app (whose tools keep their names), or the app whose `<app><separator>` prefix
/// the name carries; no app (empty) and the name as sent otherwise.
fn named_app<'a>(gw: &'a Gateway, name: &'a str) -> (&'a str, &'a str) {
    if let [only] = gw.servers.as_slice() {
        return (only.as_str(), name);
    }
    let sep = gw.configuration.tool_name_separator.as_str();
    gw.servers
        .iter()
        .find_map(|app| Some((app.as_str(), name.strip_prefix(app.as_str())?.strip_prefix(sep)?)))
        .unwrap_or(("", name))
}

#[cfg(test)]
mod tests;
