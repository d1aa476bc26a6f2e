//! `/gateway/{id}/mcp`: the MCP Streamable HTTP endpoint of one gateway.
//!
//! POST carries one JSON-RPC message; GET opens a server-to-client SSE stream; DELETE ends the
//! session. The rules (credentials, `Accept`, sessions, versions, errors) are listed in
//! `README.md` beside this file.

use crate::error::ApiError;
use crate::mcp::catalogue::Catalogue;
use crate::mcp::jsonrpc::{self, ErrorObject, Id, Incoming, Message, RawJson, Response};
use crate::mcp::quota::Spent;
use crate::mcp::sessions::CreateError;
use crate::mcp::upstream::{CallContext, UpstreamError, UpstreamReply};
use crate::model::{ClientCapabilities, Gateway, McpSession};
use crate::proxy::{response_head, Proxy, RequestCtx};
use crate::reqlog::{Answer, EntryWriter};
use crate::secrets;
use crate::store::LogRecord;
use bytes::Bytes;
use chrono::Utc;
use http::{HeaderName, HeaderValue, Method};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_filters::{CredentialKind, RouteClass, Scope};

use crate::mcp::protocol::VERSIONS as SUPPORTED_VERSIONS;

/// Cookie that carries the session (the spec's mechanism), beside `Mcp-Session-Id`.
pub const SESSION_COOKIE: &str = "mcp_session";
/// JSON-RPC code of "no valid session": the client must initialize (again).
pub const NOT_INITIALIZED: i64 = -32000;
/// JSON-RPC code of "session not found".
pub const SESSION_NOT_FOUND: i64 = -32001;
/// MCP 2026-07-28 `UNSUPPORTED_PROTOCOL_VERSION`, answered to `server/discover` (see `post`).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// JSON-RPC code of a refusal over a limit (HTTP 429): a rate limit, or too many sessions.
pub const LIMIT_EXCEEDED: i64 = -32029;
/// How often an idle GET stream gets a keep-alive comment.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The version answered to an `initialize` that asked for `requested`.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested.and_then(|r| SUPPORTED_VERSIONS.iter().find(|v| **v == r).copied()).unwrap_or(SUPPORTED_VERSIONS[0])
}

struct Accept {
    json: bool,
    sse: bool,
}

fn accept(headers: &http::HeaderMap) -> Accept {
    let mut a = Accept { json: false, sse: false };
    for v in headers.get_all(http::header::ACCEPT) {
        let Ok(v) = v.to_str() else { continue };
        for part in v.split(',') {
            let mime = part.split(';').next().unwrap_or_default().trim();
            match mime {
                "application/json" => a.json = true,
                "text/event-stream" => a.sse = true,
                "*/*" => {
                    a.json = true;
                    a.sse = true;
                }
                "application/*" => a.json = true,
                "text/*" => a.sse = true,
                _ => {}
            }
        }
    }
    a
}

/// A request refused on its headers alone. These checks run before the session is looked at,
/// as the official SDKs' servers order them, so a client with a wrong header hears about that
/// header whether or not its session is still known (instead of initializing again in vain).
#[derive(Debug, PartialEq, Eq)]
struct HeaderRefusal {
    status: u16,
    code: i64,
    message: Cow<'static, str>,
}

/// POST: every answer is JSON except a call whose app streams, so `application/json` must be
/// acceptable; a client that takes `text/event-stream` only would be sent JSON it refused.
fn post_headers(headers: &http::HeaderMap) -> Result<Accept, HeaderRefusal> {
    let acc = accept(headers);
    if !acc.json {
        let message =
            "Not Acceptable: Accept must include application/json (and text/event-stream for streamed replies)";
        return Err(HeaderRefusal { status: 406, code: NOT_INITIALIZED, message: message.into() });
    }
    let ct = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !ct.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json") {
        let message = "Unsupported Media Type: Content-Type must be application/json";
        return Err(HeaderRefusal { status: 415, code: NOT_INITIALIZED, message: message.into() });
    }
    Ok(acc)
}

/// GET opens the server-to-client stream, which only `text/event-stream` can carry.
fn get_headers(headers: &http::HeaderMap) -> Result<(), HeaderRefusal> {
    if !accept(headers).sse {
        let message = "Not Acceptable: Accept must include text/event-stream";
        return Err(HeaderRefusal { status: 406, code: NOT_INITIALIZED, message: message.into() });
    }
    protocol_version(headers)
}

/// A later request's `MCP-Protocol-Version`, when present, must be one toolgate speaks.
fn protocol_version(headers: &http::HeaderMap) -> Result<(), HeaderRefusal> {
    let Some(v) = headers.get("mcp-protocol-version") else { return Ok(()) };
    let v = v.to_str().unwrap_or_default();
    if SUPPORTED_VERSIONS.contains(&v) {
        return Ok(());
    }
    let message =
        format!("Bad Request: unsupported MCP-Protocol-Version `{v}` (supported: {})", SUPPORTED_VERSIONS.join(", "));
    Err(HeaderRefusal { status: 400, code: jsonrpc::INVALID_REQUEST, message: message.into() })
}

fn header<'s>(session: &'s Session, name: &str) -> Option<&'s str> {
    session.req_header().headers.get(name).and_then(|v| v.to_str().ok())
}

/// The session id from `Mcp-Session-Id`, else from the session cookie.
fn session_id(session: &Session) -> Option<String> {
    if let Some(id) = header(session, "mcp-session-id") {
        return Some(id.trim().to_string());
    }
    for v in session.req_header().headers.get_all(http::header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            if let Some((k, val)) = pair.trim().split_once('=') {
                if k == SESSION_COOKIE {
                    return Some(val.to_string());
                }
            }
        }
    }
    None
}

fn rpc_error_body(id: &Id, code: i64, message: &str) -> Vec<u8> {
    jsonrpc::error_bytes(id, code, message, None)
}

/// Writes a JSON-RPC error with an HTTP status.
async fn reply_error(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    status: u16,
    id: &Id,
    code: i64,
    message: &str,
) -> pingora::Result<()> {
    let body = rpc_error_body(id, code, message);
    proxy.respond(session, ctx, status, "application/json", body, &[]).await
}

/// Answers a [`HeaderRefusal`]: a JSON-RPC error under its HTTP status.
async fn refuse(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    id: &Id,
    r: HeaderRefusal,
) -> pingora::Result<()> {
    reply_error(proxy, session, ctx, r.status, id, r.code, &r.message).await
}

/// Maps a management-style error (from the filters) to its JSON-RPC form, keeping the status.
async fn reply_api_error(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    err: ApiError,
) -> pingora::Result<()> {
    let mut extra = Vec::new();
    if let ApiError::Rejected { retry_after: Some(r), .. } = &err {
        extra.push((http::header::RETRY_AFTER, HeaderValue::from(*r)));
    }
    let code = match err.status() {
        401 | 403 => -32001,
        404 => SESSION_NOT_FOUND,
        413 => jsonrpc::INVALID_REQUEST,
        429 => LIMIT_EXCEEDED,
        _ => jsonrpc::INTERNAL_ERROR,
    };
    let data = json!({ "code": err.code() });
    let body = jsonrpc::error_bytes(&Id::NULL, code, &err.to_string(), Some(&data));
    proxy.respond(session, ctx, err.status(), "application/json", body, &extra).await
}

/// 429 with `Retry-After` and a JSON-RPC error naming the exhausted quota, whose own figures
/// (bucket `bucket`) replace the caller's in the `X-RateLimit-*` headers.
async fn quota_exceeded(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    spent: Spent,
    bucket: &str,
    what: &str,
) -> pingora::Result<()> {
    let retry_after = spent.retry_after;
    spent.write_headers(bucket, &mut ctx.filters.response_headers);
    let data = json!({ "code": "RATE_LIMITED", "retry_after": retry_after, "bucket": bucket });
    let body = jsonrpc::error_bytes(
        &Id::NULL,
        LIMIT_EXCEEDED,
        &format!("{what} exceeded; retry in {retry_after} s"),
        Some(&data),
    );
    let extra = [(http::header::RETRY_AFTER, HeaderValue::from(retry_after))];
    proxy.respond(session, ctx, 429, "application/json", body, &extra).await
}

/// Handles one request to a gateway's MCP endpoint.
pub async fn handle(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gateway_id: &str,
) -> pingora::Result<()> {
    let server = proxy.server.clone();
    // The method is kept (standard methods are inline, no allocation); path and query are only
    // borrowed for the chain.
    let method = session.req_header().method.clone();
    let chained = {
        let r = session.req_header();
        proxy.run_chain(session, ctx, RouteClass::Gateway, &r.method, r.uri.path(), r.uri.query())
    };
    if let Err(e) = chained {
        return reply_api_error(proxy, session, ctx, e).await;
    }
    // Origin (DNS-rebinding protection): a browser request from a page not on the allow-list,
    // after the chain so that the refusal is counted and carries the rate-limit headers.
    if let Some(origin) = header(session, "origin") {
        if !server.state.config.mcp.allowed_origins.iter().any(|o| o == origin || o == "*") {
            let msg = format!("Origin `{origin}` is not allowed");
            return reply_api_error(proxy, session, ctx, ApiError::Forbidden(msg)).await;
        }
    }
    let Some(principal) = ctx.filters.principal.clone() else {
        return reply_api_error(proxy, session, ctx, ApiError::Unauthorized("missing credentials".into())).await;
    };
    // An account key needs `gateways:read`; a gateway key was already bound to this gateway.
    if !matches!(principal.credential, CredentialKind::GatewayKey { .. })
        && !principal.scopes.contains(Scope::GatewaysRead)
    {
        return reply_api_error(proxy, session, ctx, ApiError::InsufficientScope(Scope::GatewaysRead.as_str())).await;
    }
    let Some(gw) = server.state.gateway_of(&principal.org_id, gateway_id) else {
        return reply_api_error(proxy, session, ctx, ApiError::NotFound("gateway")).await;
    };
    if method == Method::POST {
        // The gateway's own per-minute figure, all callers together (Decision 3).
        if let Err(spent) = server.quotas.admit(&gw.id, gw.configuration.rate_limit) {
            let (bucket, what) = (format!("gateway:{}", gw.id), format!("gateway {} rate limit", gw.id));
            return quota_exceeded(proxy, session, ctx, spent, &bucket, &what).await;
        }
    }
    match method {
        Method::POST => post(proxy, session, ctx, &gw, &principal.key_id).await,
        Method::GET => get_stream(proxy, session, ctx, &gw, &principal.key_id).await,
        Method::DELETE => delete(proxy, session, ctx, &gw, &principal.key_id).await,
        _ => {
            let allow = [(http::header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"))];
            let body = rpc_error_body(&Id::NULL, jsonrpc::INVALID_REQUEST, "Method not allowed");
            proxy.respond(session, ctx, 405, "application/json", body, &allow).await
        }
    }
}

/// Resolves the request's session, answering the not-initialized errors itself.
async fn require_session(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Gateway,
    key_id: &str,
    id: &Id,
) -> pingora::Result<Option<String>> {
    let Some(sid) = session_id(session) else {
        reply_error(
            proxy,
            session,
            ctx,
            400,
            id,
            NOT_INITIALIZED,
            "Bad Request: Server not initialized; send initialize first",
        )
        .await?;
        return Ok(None);
    };
    match proxy.server.sessions.touch(&sid, &gw.id, key_id) {
        Ok(()) => Ok(Some(sid)),
        Err(e) => {
            let msg = format!("Session not found ({e}); send initialize to start a new session");
            reply_error(proxy, session, ctx, 404, id, SESSION_NOT_FOUND, &msg).await?;
            Ok(None)
        }
    }
}

async fn post(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Arc<Gateway>,
    key_id: &str,
) -> pingora::Result<()> {
    let acc = match post_headers(&session.req_header().headers) {
        Ok(acc) => acc,
        Err(r) => return refuse(proxy, session, ctx, &Id::NULL, r).await,
    };
    let body = match proxy.read_body(session).await {
        Ok(b) => b,
        Err(ApiError::PayloadTooLarge(limit)) => {
            let msg = format!("Request body exceeds the limit of {limit} bytes (server.max_body_bytes)");
            return reply_error(proxy, session, ctx, 413, &Id::NULL, jsonrpc::INVALID_REQUEST, &msg).await;
        }
        Err(e) => return reply_api_error(proxy, session, ctx, e).await,
    };
    let message = match jsonrpc::parse(&body) {
        Ok(Incoming::Single(m)) => m,
        Ok(Incoming::Batch(_)) => {
            let msg = "Batch requests are not supported: send one JSON-RPC message per POST";
            return reply_error(proxy, session, ctx, 400, &Id::NULL, jsonrpc::INVALID_REQUEST, msg).await;
        }
        Err(e) => {
            let body = e.to_response().to_bytes();
            return proxy.respond(session, ctx, 400, "application/json", body, &[]).await;
        }
    };
    // 2026-07-28 clients (the Python SDK's default mode) probe with `server/discover` first. This
    // server speaks the initialize handshake only: say so with UNSUPPORTED_PROTOCOL_VERSION naming
    // the handshake versions, which those clients take as the cue to fall back to `initialize`.
    if let Message::Request(req) = &message {
        if req.method == "server/discover" {
            let params = req.params.as_ref().map(RawJson::to_value).unwrap_or_default();
            let requested = params
                .pointer("/_meta/io.modelcontextprotocol~1protocolVersion")
                .and_then(Value::as_str)
                .or_else(|| header(session, "mcp-protocol-version"))
                .unwrap_or_default()
                .to_string();
            let mut supported: Vec<&str> = SUPPORTED_VERSIONS.to_vec();
            supported.reverse();
            let e = ErrorObject::new(
                UNSUPPORTED_PROTOCOL_VERSION,
                format!(
                    "Unsupported protocol version: this server negotiates versions with initialize ({})",
                    supported.join(", ")
                ),
            )
            .with_data(json!({ "supported": supported, "requested": requested }));
            let body = Response::error(req.id.clone(), e).to_bytes();
            return proxy.respond(session, ctx, 400, "application/json", body, &[]).await;
        }
    }
    let message_id = match &message {
        Message::Request(r) => r.id.clone(),
        _ => Id::NULL,
    };
    // Read after the body only because `server/discover` (above) may carry a version this
    // server does not speak; still before the session.
    if let Err(r) = protocol_version(&session.req_header().headers) {
        return refuse(proxy, session, ctx, &message_id, r).await;
    }
    match message {
        Message::Request(req) if req.method == "initialize" => initialize(proxy, session, ctx, gw, key_id, req).await,
        Message::Request(req) => {
            let Some(mcp_id) = require_session(proxy, session, ctx, gw, key_id, &req.id).await? else { return Ok(()) };
            request(proxy, session, ctx, gw, &mcp_id, req, acc).await
        }
        Message::Notification(n) => {
            if require_session(proxy, session, ctx, gw, key_id, &Id::NULL).await?.is_none() {
                return Ok(());
            }
            if n.method == "notifications/cancelled" || n.method.starts_with("notifications/roots") {
                proxy.server.forward_notification(gw, &n.method, n.params).await;
            }
            proxy.respond(session, ctx, 202, "application/json", Vec::new(), &[]).await
        }
        Message::Response(r) => {
            let Some(mcp_id) = require_session(proxy, session, ctx, gw, key_id, &Id::NULL).await? else {
                return Ok(());
            };
            proxy.server.relay_client_response(&mcp_id, gw, r).await;
            proxy.respond(session, ctx, 202, "application/json", Vec::new(), &[]).await
        }
    }
}

/// The server->client requests a client said it takes (`sampling`, `elicitation` objects in its
/// `initialize` capabilities).
fn declared_capabilities(declared: Option<&Value>) -> ClientCapabilities {
    let has = |name: &str| declared.and_then(|c| c.get(name)).is_some_and(Value::is_object);
    ClientCapabilities { sampling: has("sampling"), elicitation: has("elicitation") }
}

/// Why the calling client cannot be sent this server->client request, if it cannot: it did not
/// declare the capability, or it takes JSON answers only (no stream to carry a request).
fn refusal(method: &str, caps: ClientCapabilities, sse: bool) -> Option<ErrorObject> {
    let needs = match method {
        "sampling/createMessage" => Some(("sampling", caps.sampling)),
        "elicitation/create" => Some(("elicitation", caps.elicitation)),
        _ => None,
    };
    match needs {
        Some((capability, false)) => Some(ErrorObject::new(
            jsonrpc::METHOD_NOT_FOUND,
            format!("the gateway's client did not declare the {capability} capability ({method})"),
        )),
        _ if !sse => Some(ErrorObject::new(
            jsonrpc::METHOD_NOT_FOUND,
            format!("the gateway's client takes JSON answers only and cannot receive {method}"),
        )),
        _ => None,
    }
}

async fn initialize(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Arc<Gateway>,
    key_id: &str,
    req: jsonrpc::Request,
) -> pingora::Result<()> {
    let params = req.params.as_ref().map(RawJson::to_value).unwrap_or_default();
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = negotiate(requested);
    let client = params.get("clientInfo");
    let now = Utc::now();
    let mcp = McpSession {
        id: secrets::new_session_id(),
        org_id: gw.org_id.clone(),
        gateway_id: gw.id.clone(),
        key_id: key_id.to_string(),
        protocol_version: version.to_string(),
        client_type: client
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .chars()
            .take(100)
            .collect(),
        client_version: client
            .and_then(|c| c.get("version"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(50)
            .collect(),
        client_ip: ctx.client_ip.to_string(),
        started_at: now,
        last_activity: now,
        requests_count: 1,
        status: "active".into(),
        capabilities: declared_capabilities(params.get("capabilities")),
    };
    match proxy.server.sessions.create(mcp.clone()).await {
        Ok(()) => {}
        Err(CreateError::Store(e)) => return reply_api_error(proxy, session, ctx, e.into()).await,
        Err(e @ (CreateError::KeyCap(limit) | CreateError::OrgCap(limit))) => {
            // Not a rate: no Retry-After, since only an ended or expired session frees a place.
            let data = json!({ "code": "TOO_MANY_SESSIONS", "limit": limit });
            let body = jsonrpc::error_bytes(&req.id, LIMIT_EXCEEDED, &e.to_string(), Some(&data));
            return proxy.respond(session, ctx, 429, "application/json", body, &[]).await;
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
        "serverInfo": { "name": "toolgate", "title": format!("toolgate: {}", gw.name), "version": env!("CARGO_PKG_VERSION") },
        "instructions": format!("Gateway `{}`: tools of its apps {}.", gw.name, gw.servers.join(", ")),
    });
    let secure = if proxy.server.state.config.server.public_url.starts_with("https://") { "; Secure" } else { "" };
    let cookie = format!("{SESSION_COOKIE}={}; Path=/gateway/{}/; HttpOnly; SameSite=Strict{secure}", mcp.id, gw.id);
    let headers = [
        (HeaderName::from_static("mcp-session-id"), HeaderValue::from_str(&mcp.id).expect("hex id is a valid header")),
        (http::header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("cookie is a valid header")),
    ];
    let body = jsonrpc::response_bytes(&req.id, &result);
    proxy.respond(session, ctx, 200, "application/json", body, &headers).await
}

/// A cursor is the offset into the gateway's list, opaque to clients.
fn page(items: &[Value], params: Option<&RawJson>, key: &str, page_size: usize) -> Result<Value, ErrorObject> {
    #[derive(serde::Deserialize)]
    struct Paging {
        #[serde(default)]
        cursor: Option<Value>,
    }
    let cursor = params.and_then(|p| p.read::<Paging>().ok()).and_then(|p| p.cursor);
    let start = match cursor {
        None => 0,
        Some(Value::String(c)) => c.parse::<usize>().map_err(|_| ErrorObject::invalid_params("invalid cursor"))?,
        Some(_) => return Err(ErrorObject::invalid_params("cursor must be a string")),
    };
    if start > items.len() {
        return Err(ErrorObject::invalid_params("invalid cursor"));
    }
    let end = (start + page_size).min(items.len());
    let mut out = json!({ key: items[start..end] });
    if end < items.len() {
        out["nextCursor"] = Value::String(end.to_string());
    }
    Ok(out)
}

async fn request(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Arc<Gateway>,
    mcp_id: &str,
    req: jsonrpc::Request,
    acc: Accept,
) -> pingora::Result<()> {
    let server = proxy.server.clone();
    let params = req.params.as_ref();
    let page_size = server.state.config.mcp.page_size;
    let list = |cat: &Catalogue, key: &str| match key {
        "tools" => page(&cat.tools, params, key, page_size),
        "prompts" => page(&cat.prompts, params, key, page_size),
        "resources" => page(&cat.resources, params, key, page_size),
        _ => page(&cat.templates, params, key, page_size),
    };
    let outcome: Result<Value, ErrorObject> = match req.method.as_str() {
        "ping" => Ok(json!({})),
        "logging/setLevel" => Ok(json!({})),
        "tools/list" => list(&*server.catalogue(gw).await, "tools"),
        "prompts/list" => list(&*server.catalogue(gw).await, "prompts"),
        "resources/list" => list(&*server.catalogue(gw).await, "resources"),
        "resources/templates/list" => list(&*server.catalogue(gw).await, "resourceTemplates"),
        "resources/subscribe" | "resources/unsubscribe" => {
            // The app's one upstream session serves every client: the gateway keeps who is
            // subscribed to what, tells the app of the first subscriber and the last to leave,
            // and delivers updates to each subscriber's own GET stream.
            let uri = resource_uri(params);
            let app = server.catalogue(gw).await.resource_app(&uri).map(str::to_string);
            if let Some(app) = app {
                let subscription = (server.apps.owner_of(&gw.org_id, &app), app, uri.into_owned());
                if req.method == "resources/subscribe" {
                    server.subscriptions.add(subscription, mcp_id);
                } else if !server.subscriptions.remove(&subscription, mcp_id) {
                    // Others still want the updates: the app keeps sending them.
                    let body = jsonrpc::response_bytes(&req.id, &json!({}));
                    return proxy.respond(session, ctx, 200, "application/json", body, &[]).await;
                }
            }
            return forward(proxy, session, ctx, gw, mcp_id, req, acc).await;
        }
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete" => {
            return forward(proxy, session, ctx, gw, mcp_id, req, acc).await;
        }
        other => Err(ErrorObject::method_not_found(other)),
    };
    let body = match outcome {
        Ok(result) => jsonrpc::response_bytes(&req.id, &result),
        Err(e) => Response::error(req.id.clone(), e).to_bytes(),
    };
    proxy.respond(session, ctx, 200, "application/json", body, &[]).await
}

/// The `uri` of a resource request's params; empty when absent (no resource has that uri).
fn resource_uri(params: Option<&RawJson>) -> Cow<'_, str> {
    #[derive(serde::Deserialize)]
    struct Uri<'a> {
        #[serde(borrow, default)]
        uri: Option<Cow<'a, str>>,
    }
    params.and_then(|p| p.read::<Uri>().ok()).and_then(|u| u.uri).unwrap_or_default()
}

/// Sends a call to the app that owns the named tool, prompt or resource, and relays its answer.
async fn forward(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Arc<Gateway>,
    mcp_id: &str,
    mut req: jsonrpc::Request,
    acc: Accept,
) -> pingora::Result<()> {
    let server = proxy.server.clone();
    let started = Instant::now();
    let params = req.params.take();
    let catalogue = server.catalogue(gw).await;
    // The app that serves the call; `tools/call` and `prompts/get` also get the app's own name for
    // the tool or prompt (`named`), the other members of their params relayed as they came.
    let (target, named) = match req.method.as_str() {
        "tools/call" | "prompts/get" => {
            let Some(call) = params.as_ref().and_then(|p| p.read::<NamedParams>().ok()).filter(|n| n.name.is_some())
            else {
                let e = ErrorObject::invalid_params(format!("{} needs params.name (string)", req.method));
                return json_reply(proxy, session, ctx, Response::error(req.id, e)).await;
            };
            let name = call.name.as_deref().unwrap_or_default();
            let found = if req.method == "tools/call" { catalogue.tool(name) } else { catalogue.prompt(name) };
            let Some(t) = found else {
                let mut e = if req.method == "tools/call" {
                    ErrorObject::unknown_tool(name)
                } else {
                    ErrorObject::invalid_params(format!("Unknown prompt: {name}"))
                };
                // The name may belong to one of the gateway's apps that is down. When the name
                // says which (the only app, or its `<app><sep>` prefix), that app's failure is
                // the answer; otherwise the unavailable apps ride along as data.
                let sep = &gw.configuration.tool_name_separator;
                let owner = catalogue.failures.iter().find(|(app, _)| {
                    gw.servers.len() == 1
                        || name.strip_prefix(app.as_str()).is_some_and(|r| r.starts_with(sep.as_str()))
                });
                if let Some((app, reason)) = owner {
                    e = ErrorObject::new(-32002, format!("App `{app}` is unavailable: {reason}"));
                } else if !catalogue.failures.is_empty() {
                    e = e.with_data(json!({ "unavailable_apps": catalogue.failures }));
                }
                return json_reply(proxy, session, ctx, Response::error(req.id, e)).await;
            };
            (Some(t.app_id.as_str()), Some((call, t.name.as_str())))
        }
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            let uri = resource_uri(params.as_ref());
            match catalogue.resource_app(&uri) {
                Some(app) => (Some(app), None),
                None => {
                    let e = ErrorObject::new(-32002, format!("Resource not found: {uri}"));
                    return json_reply(proxy, session, ctx, Response::error(req.id, e)).await;
                }
            }
        }
        _ => {
            // completion/complete: the app of the referenced prompt.
            let name = params.as_ref().map(RawJson::to_value).unwrap_or_default();
            let name = name.pointer("/ref/name").and_then(Value::as_str).unwrap_or_default();
            (catalogue.prompt(name).map(|t| t.app_id.as_str()), None)
        }
    };
    let Some(app_id) = target else {
        return json_reply(proxy, session, ctx, Response::success(req.id, json!({ "completion": { "values": [] } })))
            .await;
    };
    let call_ctx = CallContext { client_request_id: req.id.clone(), headers: vec![] };
    if let Some(limit) = server.state.config.app(app_id).and_then(|a| a.rate_limit) {
        // Protects the upstream: its per-minute figure across every gateway and caller.
        let bucket = format!("app:{app_id}");
        if let Err(spent) = server.quotas.admit(&bucket, limit) {
            return quota_exceeded(proxy, session, ctx, spent, &bucket, &format!("app {app_id} rate limit")).await;
        }
    }
    // `tools/call` is logged; what was asked is written before the call goes upstream.
    let mut entry = (req.method == "tools/call").then(|| {
        let call = named.as_ref().map(|(call, _)| call);
        let function = call.and_then(|c| c.name.as_deref()).unwrap_or_default();
        let arguments = call.and_then(|c| c.get("arguments")).map_or("null", RawValue::get);
        EntryWriter::begin(gw, app_id, function, arguments)
    });
    let params = match named {
        Some((call, name)) => Some(call.renamed(name)),
        None => params,
    };
    let reply = server.apps.request(&gw.org_id, app_id, &req.method, params, &call_ctx).await;
    let mut log = |outcome: &Result<RawJson, ErrorObject>, status: u16| {
        if let Some(entry) = entry.take() {
            server.reqlog.record(log_entry(entry, outcome, status, started.elapsed()));
        }
    };
    match reply {
        Ok(UpstreamReply::Response(r)) => {
            log(&r.outcome, 200);
            json_reply(proxy, session, ctx, r.with_id(req.id)).await
        }
        Ok(UpstreamReply::Stream(mut stream)) => {
            if !acc.sse {
                // The client takes JSON only: wait for the response, dropping notifications and
                // refusing the app's requests (nothing could carry them to the client).
                let r = loop {
                    match stream.next().await {
                        Some(Ok(Message::Response(r))) => break Ok(r),
                        // A liveness check needs no client: the gateway answers it.
                        Some(Ok(Message::Request(r))) if r.method == "ping" => {
                            server.answer_app(&gw.org_id, app_id, Response::success(r.id, json!({}))).await;
                        }
                        Some(Ok(Message::Request(r))) => {
                            let caps = server.sessions.capabilities(mcp_id);
                            // Without a stream there is always a reason to refuse.
                            let e = refusal(&r.method, caps, false)
                                .unwrap_or_else(|| ErrorObject::method_not_found(&r.method));
                            server.answer_app(&gw.org_id, app_id, Response::error(r.id, e)).await;
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => break Err(e),
                        None => break Err(UpstreamError::Closed),
                    }
                };
                let r = r.unwrap_or_else(|e| upstream_error_response(&req.id, app_id, &e));
                log(&r.outcome, 200);
                return json_reply(proxy, session, ctx, r.with_id(req.id)).await;
            }
            start_sse(session, ctx).await?;
            while let Some(item) = stream.next().await {
                let msg = match item {
                    Ok(m) => m,
                    Err(e) => Message::Response(upstream_error_response(&req.id, app_id, &e)),
                };
                if let Message::Request(r) = &msg {
                    let caps = server.sessions.capabilities(mcp_id);
                    if let Some(e) = refusal(&r.method, caps, true) {
                        server.answer_app(&gw.org_id, app_id, Response::error(r.id.clone(), e)).await;
                        continue;
                    }
                    // Known before the client can see it, and answer it.
                    server.remember_relayed(mcp_id, &r.id, app_id, &gw.org_id);
                }
                let done = matches!(msg, Message::Response(_));
                let event = sse_event(&msg.to_bytes());
                // The response is the last event: it leaves with the end of the stream, in one
                // write and one wake-up of the client instead of two.
                let sent = session.write_response_body(Some(event), done).await;
                if let Message::Response(r) = &msg {
                    log(&r.outcome, 200);
                }
                if sent.is_err() {
                    // The client went away; dropping the stream cancels the call upstream.
                    break;
                }
                if done {
                    return Ok(());
                }
            }
            // Logged when the response went by; a stream that ended without one is an error.
            log(&Err(ErrorObject::internal("stream ended without a response")), 200);
            session.write_response_body(None, true).await?;
            Ok(())
        }
        Err(e) => {
            let r = match &e {
                crate::mcp::apps::AppError::Upstream { error, .. } => {
                    if app_unreachable(error) {
                        // Forget the app's cached lists so that the catalogue and the gateway
                        // detail show it failing (and list_changed reaches open streams) instead
                        // of serving its tools until the caches expire.
                        server.app_changed(&gw.org_id, app_id);
                    }
                    upstream_error_response(&req.id, app_id, error)
                }
                other => Response::error(req.id.clone(), ErrorObject::internal(other.to_string())),
            };
            log(&r.outcome, 502);
            json_reply(proxy, session, ctx, r).await
        }
    }
}

/// The params of a `tools/call` or `prompts/get`, read without building a tree: `name`, and every
/// other member (`arguments`, `_meta`, ...) as its text, relayed to the app unchanged.
struct NamedParams<'a> {
    name: Option<Cow<'a, str>>,
    others: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl NamedParams<'_> {
    fn get(&self, key: &str) -> Option<&RawValue> {
        self.others.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The same params naming the app's own tool or prompt.
    fn renamed(&self, name: &str) -> RawJson {
        struct Renamed<'a>(&'a str, &'a [(Cow<'a, str>, &'a RawValue)]);
        impl serde::Serialize for Renamed<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(1 + self.1.len()))?;
                m.serialize_entry("name", self.0)?;
                for (k, v) in self.1 {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
        RawJson::from_value(&Renamed(name, &self.others))
    }
}

impl<'de> serde::Deserialize<'de> for NamedParams<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NamedParams<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object with a string `name`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = NamedParams { name: None, others: Vec::with_capacity(2) };
                while let Some(Text(key)) = map.next_key::<Text>()? {
                    if key == "name" {
                        out.name = Some(map.next_value::<Text>()?.0);
                    } else {
                        out.others.push((key, map.next_value()?));
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON string, borrowed from the input unless it had escapes (serde's `Cow<str>` borrows
/// only when marked `borrow`).
#[derive(serde::Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// The app itself is gone (not merely slow or answering an error).
fn app_unreachable(e: &UpstreamError) -> bool {
    matches!(e, UpstreamError::Connect(_) | UpstreamError::Spawn(_) | UpstreamError::Exited(_) | UpstreamError::Closed)
}

fn upstream_error_response(id: &Id, app_id: &str, e: &UpstreamError) -> Response {
    let code = match e {
        UpstreamError::Timeout { .. } => -32003,
        _ => -32002,
    };
    Response::error(id.clone(), ErrorObject::new(code, format!("App `{app_id}` failed: {e}")))
}

/// Starts a `text/event-stream` answer (a relayed call's events, or the GET stream): status 200,
/// the request id and the filters' headers, moved like [`Proxy::respond`] moves them.
async fn start_sse(session: &mut Session, ctx: &mut RequestCtx) -> pingora::Result<()> {
    let mut h = response_head(200, 2, ctx)?;
    h.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    ctx.status = 200;
    session.write_response_header(Box::new(ResponseHeader::from(h)), false).await
}

fn sse_event(data: &[u8]) -> Bytes {
    const HEAD: &[u8] = b"event: message\ndata: ";
    // Sized exactly: a `Vec` whose length is its capacity becomes a `Bytes` without another
    // allocation.
    let mut out = Vec::with_capacity(HEAD.len() + data.len() + 2);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

async fn json_reply(proxy: &Proxy, session: &mut Session, ctx: &mut RequestCtx, r: Response) -> pingora::Result<()> {
    proxy.respond(session, ctx, 200, "application/json", r.to_bytes(), &[]).await
}

/// Ends a call's log entry with its outcome: a tool result with `isError` is an error, and a
/// JSON-RPC error gets the HTTP status that says where it came from.
fn log_entry(
    entry: EntryWriter,
    outcome: &Result<RawJson, ErrorObject>,
    transport_status: u16,
    elapsed: Duration,
) -> LogRecord {
    let ms = elapsed.as_millis() as u64;
    match outcome {
        Ok(result) => {
            // Only `isError` is read; the rest of the result is skipped, not built.
            #[derive(serde::Deserialize)]
            struct ToolResult {
                #[serde(rename = "isError", default)]
                is_error: Option<bool>,
            }
            let error = result.read::<ToolResult>().is_ok_and(|r| r.is_error == Some(true));
            entry.finish(ms, error, 200, Answer::Result(result))
        }
        Err(e) => {
            let status = match e.code {
                -32602 => 400,
                -32003 => 504,
                _ if transport_status >= 500 => transport_status,
                _ => 502,
            };
            entry.finish(ms, true, status, Answer::Error { code: e.code, message: &e.message })
        }
    }
}

async fn delete(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Arc<Gateway>,
    key_id: &str,
) -> pingora::Result<()> {
    if let Err(r) = protocol_version(&session.req_header().headers) {
        return refuse(proxy, session, ctx, &Id::NULL, r).await;
    }
    let Some(mcp_id) = require_session(proxy, session, ctx, gw, key_id, &Id::NULL).await? else { return Ok(()) };
    match proxy.server.sessions.end(&mcp_id).await {
        Ok(_) => proxy.respond(session, ctx, 200, "application/json", Vec::new(), &[]).await,
        Err(e) => reply_api_error(proxy, session, ctx, e.into()).await,
    }
}

/// GET: the server-to-client stream. Carries `notifications/*/list_changed` when the gateway or
/// one of its apps changes, and keep-alive comments.
///
/// A stream is not a request in flight: it holds no `concurrent` slot (the rate-limit filter
/// takes none for it). It ends as soon as the client goes (read side closed), or its session
/// ends: DELETE, expiry, its key revoked or its gateway deleted.
async fn get_stream(
    proxy: &Proxy,
    session: &mut Session,
    ctx: &mut RequestCtx,
    gw: &Arc<Gateway>,
    key_id: &str,
) -> pingora::Result<()> {
    if let Err(r) = get_headers(&session.req_header().headers) {
        return refuse(proxy, session, ctx, &Id::NULL, r).await;
    }
    let Some(mcp_id) = require_session(proxy, session, ctx, gw, key_id, &Id::NULL).await? else { return Ok(()) };
    let Some(mut closed) = proxy.server.sessions.closed(&mcp_id) else { return Ok(()) };
    let mut rx = proxy.server.subscribe(&gw.id);
    start_sse(session, ctx).await?;
    session.write_response_body(Some(Bytes::from_static(b": stream open\n\n")), false).await?;
    loop {
        let body_done = session.is_body_done();
        let chunk = tokio::select! {
            m = rx.recv() => match m {
                // Another session's resource update.
                Ok(m) if m.to.as_deref().is_some_and(|to| to != mcp_id) => continue,
                Ok(m) => sse_event(&m.bytes),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            },
            _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keepalive\n\n"),
            // Ended, expired or removed (the sender dropped): the stream ends with it.
            _ = closed.wait_for(|c| *c) => break,
            // Waits for the client to close its side (there is no body to read after a GET);
            // without it a gone client would be noticed only when a write fails, up to two
            // keep-alives later.
            read = session.read_body_or_idle(body_done) => match read {
                Ok(_) => continue,
                Err(_) => return Ok(()),
            },
        };
        if session.write_response_body(Some(chunk), false).await.is_err() {
            return Ok(());
        }
    }
    session.write_response_body(None, true).await.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_requests_are_relayed_only_to_clients_that_can_take_them() {
        let caps = |v: Value| declared_capabilities(Some(&v));
        assert_eq!(caps(json!({})), ClientCapabilities::default());
        assert_eq!(declared_capabilities(None), ClientCapabilities::default());
        // Only an object declares a capability (`"sampling": true` is not one).
        assert_eq!(
            caps(json!({"sampling": true, "elicitation": {}})),
            ClientCapabilities { sampling: false, elicitation: true }
        );
        let both = caps(json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}}));
        assert_eq!(both, ClientCapabilities { sampling: true, elicitation: true });

        assert!(refusal("sampling/createMessage", both, true).is_none());
        assert!(refusal("elicitation/create", both, true).is_none());
        assert!(refusal("ping", ClientCapabilities::default(), true).is_none());
        let e = refusal("sampling/createMessage", ClientCapabilities::default(), true).unwrap();
        assert_eq!(e.code, jsonrpc::METHOD_NOT_FOUND);
        assert!(e.message.contains("sampling capability"), "{}", e.message);
        let e = refusal("elicitation/create", ClientCapabilities { sampling: true, elicitation: false }, true).unwrap();
        assert!(e.message.contains("elicitation capability"), "{}", e.message);
        // Without a stream nothing can reach the client, whatever it declared (`ping` the
        // gateway answers itself before asking).
        for method in ["sampling/createMessage", "roots/list", "elicitation/create"] {
            let e = refusal(method, both, false).unwrap();
            assert!(e.message.contains("JSON answers only") && e.message.contains(method), "{}", e.message);
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs.iter().map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn a_post_must_accept_json_and_send_json() {
        let status = |pairs: &[(&'static str, &'static str)]| post_headers(&headers(pairs)).err().map(|r| r.status);
        let json = ("content-type", "application/json; charset=utf-8");
        assert_eq!(status(&[("accept", "application/json, text/event-stream"), json]), None);
        assert_eq!(status(&[("accept", "application/json"), json]), None, "a JSON-only client");
        assert_eq!(status(&[("accept", "*/*"), json]), None);
        assert_eq!(status(&[json]), Some(406), "no Accept");
        assert_eq!(status(&[("accept", "text/event-stream"), json]), Some(406), "answers are JSON");
        assert_eq!(status(&[("accept", "text/html"), json]), Some(406));
        assert_eq!(status(&[("accept", "application/json")]), Some(415), "no Content-Type");
        assert_eq!(status(&[("accept", "application/json"), ("content-type", "text/plain")]), Some(415));
        let r = post_headers(&headers(&[("accept", "text/event-stream")])).err().unwrap();
        assert!(r.message.contains("application/json") && r.message.contains("text/event-stream"), "{r:?}");
        // Accept is named first when both are wrong.
        assert_eq!(status(&[("content-type", "text/plain")]), Some(406));
    }

    #[test]
    fn a_get_must_accept_the_stream_and_speak_a_known_version() {
        let status = |pairs: &[(&'static str, &'static str)]| get_headers(&headers(pairs)).err().map(|r| r.status);
        assert_eq!(status(&[("accept", "text/event-stream")]), None);
        assert_eq!(status(&[("accept", "text/event-stream"), ("mcp-protocol-version", "2025-06-18")]), None);
        assert_eq!(status(&[("accept", "application/json")]), Some(406));
        assert_eq!(status(&[("accept", "text/event-stream"), ("mcp-protocol-version", "1999-01-01")]), Some(400));
        let r = protocol_version(&headers(&[("mcp-protocol-version", "1999-01-01")])).unwrap_err();
        assert_eq!(r.code, jsonrpc::INVALID_REQUEST);
        assert!(r.message.contains("1999-01-01"), "{r:?}");
        assert!(protocol_version(&headers(&[])).is_ok(), "the header is optional");
    }

    /// The entry `log_entry` makes of `outcome`: its `error` flag and its `response`.
    fn logged(outcome: Result<Value, ErrorObject>, transport_status: u16) -> (bool, Value) {
        let gw = Arc::new(Gateway::for_tests("gw_1", "org_1"));
        let entry = EntryWriter::begin(&gw, "app", "f", "null");
        let outcome = outcome.map(|v| RawJson::from_value(&v));
        let record = log_entry(entry, &outcome, transport_status, Duration::from_millis(5));
        let body: Value = serde_json::from_str(&record.body).unwrap();
        (record.error, body["response"].clone())
    }

    fn params_of(text: &str) -> RawJson {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{text}}}"#);
        let Ok(Message::Request(r)) = jsonrpc::parse_message(body.as_bytes()) else { panic!("{body}") };
        r.params.expect("params")
    }

    #[test]
    fn a_call_is_renamed_and_every_other_member_relayed_as_sent() {
        let p = params_of(r#"{"name":"gw__echo", "arguments": {"message" : "hi é"}, "_meta":{"progressToken":1}}"#);
        let call = p.read::<NamedParams>().unwrap();
        assert_eq!(call.name.as_deref(), Some("gw__echo"));
        assert!(matches!(call.name, Some(Cow::Borrowed(_))), "read in place, not copied");
        assert_eq!(call.get("arguments").map(RawValue::get), Some(r#"{"message" : "hi é"}"#));
        assert_eq!(
            call.renamed("echo").get(),
            r#"{"name":"echo","arguments":{"message" : "hi é"},"_meta":{"progressToken":1}}"#
        );
        // An escaped name is read (and copied); a new name with quotes is escaped.
        let p = params_of(r#"{"name":"a_b"}"#);
        let call = p.read::<NamedParams>().unwrap();
        assert_eq!(call.name.as_deref(), Some("a_b"));
        assert_eq!(call.renamed("say \"hi\"").to_value(), json!({ "name": "say \"hi\"" }));
        // No name, or one that is not a string, or params that are not an object: no call.
        assert_eq!(params_of(r#"{"arguments":{}}"#).read::<NamedParams>().unwrap().name, None);
        assert!(params_of(r#"{"name":5}"#).read::<NamedParams>().is_err());
        assert!(params_of(r#"["echo"]"#).read::<NamedParams>().is_err());
    }

    #[test]
    fn a_list_is_paged_from_the_cursor_in_the_raw_params() {
        let items: Vec<Value> = (0..5).map(|i| json!(i)).collect();
        let page_of = |params: Option<&str>| {
            let raw = params.map(params_of);
            page(&items, raw.as_ref(), "tools", 2)
        };
        let first = json!({ "tools": [0, 1], "nextCursor": "2" });
        assert_eq!(page_of(None).unwrap(), first);
        assert_eq!(page_of(Some(r#"{"cursor":null}"#)).unwrap(), first, "a null cursor is no cursor");
        assert_eq!(page_of(Some("[1]")).unwrap(), first, "params that are not an object have no cursor");
        assert_eq!(page_of(Some(r#"{"cursor":"4"}"#)).unwrap(), json!({ "tools": [4] }), "the last page");
        let err = |params: &str| page_of(Some(params)).unwrap_err().message;
        assert_eq!(err(r#"{"cursor":2}"#), "cursor must be a string");
        assert_eq!(err(r#"{"cursor":"x"}"#), "invalid cursor");
        assert_eq!(err(r#"{"cursor":"6"}"#), "invalid cursor");
    }

    #[test]
    fn a_log_entry_says_what_came_back() {
        let ok = json!({ "content": [] });
        assert_eq!(logged(Ok(ok.clone()), 200), (false, json!({ "status": 200, "data": ok })));
        let tool_error = json!({ "content": [], "isError": true });
        assert_eq!(logged(Ok(tool_error.clone()), 200), (true, json!({ "status": 200, "data": tool_error })));
        // A result that is not an object has no `isError`: a success.
        assert!(!logged(Ok(json!([1])), 200).0);
        assert!(!logged(Ok(json!([true])), 200).0);
        let status =
            |code: i64, transport: u16| logged(Err(ErrorObject::new(code, "m")), transport).1["status"].clone();
        assert_eq!(status(-32602, 200), 400, "bad arguments");
        assert_eq!(status(-32003, 200), 504, "the app timed out");
        assert_eq!(status(-32002, 503), 503, "the transport's own 5xx");
        assert_eq!(status(-32002, 200), 502, "any other failure of the app");
        let (error, response) = logged(Err(ErrorObject::new(-32002, "App `a` failed")), 502);
        assert!(error);
        assert_eq!(response["data"], json!({ "code": -32002, "message": "App `a` failed" }));
    }
}
