//! The Streamable HTTP transport of `/gateway/{id}/mcp`: which HTTP method does what, the header
//! checks (before the session is looked at, as the official SDKs' servers order them), the
//! session from `Mcp-Session-Id` or its cookie, and the GET stream. What a message asks for is
//! `dispatch`'s business.

use crate::base::quick::{self, Quick};
use crate::data::model::Gateway;
use crate::edge::error::ApiError;
use crate::edge::exchange::{EventSink, EventSource, Exchange};
use crate::mcp::bounds::{Holder, StreamSlot};
use crate::mcp::dispatch::{self, Caller};
use crate::mcp::jsonrpc::{self, Id, Incoming, Message};
use crate::mcp::modern;
use crate::mcp::protocol::{Accept, RpcCode, SESSION_COOKIE, VERSIONS};
use crate::mcp::resumable::{Following, KEEPALIVE};
use crate::mcp::rpc_errors;
use crate::mcp::runtime::{McpRuntime, StreamMessage};
use crate::mcp::sessions::SessionError;
use crate::mcp::stateless;
use bytes::Bytes;
use http::{HeaderValue, Method};
use std::borrow::Cow;
use std::sync::Arc;
use tokio::sync::{broadcast, watch};
use toolgate_filters::{CredentialKind, Principal, Scope};

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
    code: RpcCode,
    message: Cow<'static, str>,
}

/// POST: every answer is JSON except a call whose app streams, so `application/json` must be
/// acceptable; a client that takes `text/event-stream` only would be sent JSON it refused.
fn post_headers(headers: &http::HeaderMap) -> Result<Accept, HeaderRefusal> {
    let acc = accept(headers);
    if !acc.json {
        let message =
            "Not Acceptable: Accept must include application/json (and text/event-stream for streamed replies)";
        return Err(HeaderRefusal { code: RpcCode::NotAcceptable, message: message.into() });
    }
    let ct = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !ct.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json") {
        let message = "Unsupported Media Type: Content-Type must be application/json";
        return Err(HeaderRefusal { code: RpcCode::UnsupportedMediaType, message: message.into() });
    }
    Ok(acc)
}

/// GET opens the server-to-client stream, which only `text/event-stream` can carry.
fn get_headers(headers: &http::HeaderMap) -> Result<(), HeaderRefusal> {
    if !accept(headers).sse {
        let message = "Not Acceptable: Accept must include text/event-stream";
        return Err(HeaderRefusal { code: RpcCode::NotAcceptable, message: message.into() });
    }
    protocol_version(headers)
}

/// A later request's `MCP-Protocol-Version`, when present, must be one toolgate speaks.
fn protocol_version(headers: &http::HeaderMap) -> Result<(), HeaderRefusal> {
    let Some(v) = headers.get("mcp-protocol-version") else { return Ok(()) };
    let v = v.to_str().unwrap_or_default();
    if VERSIONS.contains(&v) {
        return Ok(());
    }
    let message = format!("Bad Request: unsupported MCP-Protocol-Version `{v}` (supported: {})", VERSIONS.join(", "));
    Err(HeaderRefusal { code: RpcCode::InvalidRequest, message: message.into() })
}

/// The session id from `Mcp-Session-Id`, else from the session cookie.
fn session_id(headers: &http::HeaderMap) -> Option<String> {
    if let Some(id) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        return Some(id.trim().to_string());
    }
    for v in headers.get_all(http::header::COOKIE) {
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

/// Answers a [`HeaderRefusal`]: a JSON-RPC error under its code's HTTP status.
async fn refuse(ex: &mut Exchange<'_>, id: &Id, r: HeaderRefusal) -> pingora::Result<()> {
    rpc_errors::error(ex, id, r.code, &r.message).await
}

/// Handles one request to a gateway's MCP endpoint, after the proxy ran the gateway routes'
/// filter chain (address, credential, rate limit, Origin).
pub(crate) async fn handle(mcp: &Arc<McpRuntime>, ex: &mut Exchange<'_>, gateway_id: &str) -> pingora::Result<()> {
    // The method is kept (standard methods are inline, no allocation).
    let method = ex.request().method.clone();
    let Some((gw, principal)) = admit(mcp, ex, gateway_id).await? else { return Ok(()) };
    if method == Method::POST {
        // The gateway's own per-minute figure, all callers together (Decision 3).
        if let Err(spent) = mcp.quotas.admit_gateway(&gw.id, gw.configuration.rate_limit) {
            let (bucket, what) = (format!("gateway:{}", gw.id), format!("gateway {} rate limit", gw.id));
            return rpc_errors::quota_exceeded(ex, spent, &bucket, &what).await;
        }
    }
    match method {
        Method::POST => post(mcp, ex, &gw, &principal.key_id).await,
        Method::GET => get_stream(mcp, ex, &gw, &principal.key_id).await,
        Method::DELETE => delete(mcp, ex, &gw, &principal.key_id).await,
        _ => {
            let allow = [(http::header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"))];
            // -32600 under 405 (not its status of the table): the HTTP method is what is wrong.
            let body = jsonrpc::error_bytes(&Id::NULL, RpcCode::InvalidRequest.code(), "Method not allowed", None);
            ex.respond(405, "application/json", body, &allow).await
        }
    }
}

/// A GET to a gateway's MCP endpoint: what [`handle`] does for it, in a future of its own. An
/// open stream holds its request's future for its whole life, and `handle`'s is as large as a
/// `tools/call`'s (some 11 KB); this one is the GET's alone (`BENCHMARKS.md`, "Streams").
pub(crate) async fn listen(mcp: &McpRuntime, ex: &mut Exchange<'_>, gateway_id: &str) -> pingora::Result<()> {
    let Some((gw, principal)) = admit(mcp, ex, gateway_id).await? else { return Ok(()) };
    get_stream(mcp, ex, &gw, &principal.key_id).await
}

/// The caller's gateway and principal, or `None` once the refusal is answered: the credential must
/// reach the gateway (an account key needs `gateways:read`) of the caller's organisation.
async fn admit(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    gateway_id: &str,
) -> pingora::Result<Option<(Arc<Gateway>, Arc<Principal>)>> {
    let Some(principal) = ex.ctx.filters.principal.clone() else {
        rpc_errors::api_error(ex, ApiError::Unauthorized("missing credentials".into())).await?;
        return Ok(None);
    };
    // An account key needs `gateways:read`; a gateway key or a gateway's OAuth access token
    // was already bound to this gateway.
    if !matches!(principal.credential, CredentialKind::GatewayKey { .. } | CredentialKind::GatewayToken { .. })
        && !principal.scopes.contains(Scope::GatewaysRead)
    {
        rpc_errors::api_error(ex, ApiError::InsufficientScope(Scope::GatewaysRead.as_str())).await?;
        return Ok(None);
    }
    let Some(gw) = mcp.state.gateway_of(&principal.org_id, gateway_id) else {
        // Written by a newer toolgate: served only by an instance that reads all of it, never
        // here as if what this build does not know were absent (503: retry elsewhere).
        let e = match mcp.state.newer_gateway_of(&principal.org_id, gateway_id) {
            Some(newer) => {
                crate::observe::metrics::newer_record_refused("gateway");
                ApiError::Unavailable(newer.refusal("gateway"))
            }
            None => ApiError::NotFound("gateway"),
        };
        rpc_errors::api_error(ex, e).await?;
        return Ok(None);
    };
    Ok(Some((gw, principal)))
}

/// Resolves the request's session, answering the not-initialized errors itself.
///
/// Not an `async fn`: a live session of this instance is ready in a future of a few bytes; only
/// the rest (a session to adopt from the store, a refusal to answer) is boxed, so that every
/// call's future does not hold theirs.
fn require_session<'a>(
    mcp: &'a McpRuntime,
    ex: &'a mut Exchange<'_>,
    gw: &'a Gateway,
    key_id: &'a str,
    id: &'a Id,
) -> Quick<'a, pingora::Result<Option<String>>> {
    let refused = match session_id(ex.headers()) {
        Some(sid) => match mcp.sessions.touch(&sid, &gw.id, key_id) {
            Ok(()) => return quick::now(Ok(Some(sid))),
            Err(e) => Some((sid, e)),
        },
        None => None,
    };
    quick::later(require_session_slowly(mcp, ex, gw, key_id, id, refused))
}

/// [`require_session`] past its quick case: `refused` is the session the request named and why
/// this instance does not hold it (`None`: it named none).
async fn require_session_slowly(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    gw: &Gateway,
    key_id: &str,
    id: &Id,
    refused: Option<(String, SessionError)>,
) -> pingora::Result<Option<String>> {
    let Some((sid, e)) = refused else {
        let message = "Bad Request: Server not initialized; send initialize first";
        rpc_errors::error(ex, id, RpcCode::NotInitialized, message).await?;
        return Ok(None);
    };
    let mut touched = Err(e);
    // Several instances on one store (or a process being replaced by this one, `--upgrade`): a
    // session created by another is read from the store once.
    if touched == Err(SessionError::Unknown)
        && (mcp.state.config().storage.is_shared() || mcp.sessions.adopts_unknown())
        && mcp.sessions.adopt(&sid).await
    {
        touched = mcp.sessions.touch(&sid, &gw.id, key_id);
    }
    match touched {
        Ok(()) => Ok(Some(sid)),
        Err(e) => {
            let msg = format!("Session not found ({e}); send initialize to start a new session");
            rpc_errors::error(ex, id, RpcCode::SessionNotFound, &msg).await?;
            Ok(None)
        }
    }
}

async fn post(mcp: &Arc<McpRuntime>, ex: &mut Exchange<'_>, gw: &Arc<Gateway>, key_id: &str) -> pingora::Result<()> {
    let acc = match post_headers(ex.headers()) {
        Ok(acc) => acc,
        Err(r) => return refuse(ex, &Id::NULL, r).await,
    };
    let app_charged = match app_quota_from_headers(mcp, ex, gw).await {
        Ok(app) => app,
        Err((spent, app)) => return rpc_errors::app_quota_exceeded(ex, spent, &app).await,
    };
    let body = match ex.read_body().await {
        Ok(b) => b,
        Err(ApiError::PayloadTooLarge(limit)) => {
            let msg = format!("Request body exceeds the limit of {limit} bytes (server.max_body_bytes)");
            // -32600 under 413 (not its status of the table): the body's size is what is wrong.
            return rpc_errors::error_under(ex, 413, &Id::NULL, RpcCode::InvalidRequest, &msg).await;
        }
        Err(e) => return rpc_errors::api_error(ex, e).await,
    };
    let message = match jsonrpc::parse_from_client(&body) {
        Ok(Incoming::Single(m)) => m,
        Ok(Incoming::Batch(_)) => {
            let msg = "Batch requests are not supported: send one JSON-RPC message per POST";
            return rpc_errors::error(ex, &Id::NULL, RpcCode::InvalidRequest, msg).await;
        }
        Err(e) => {
            let status = RpcCode::from_code(e.code()).map_or(400, RpcCode::status);
            return ex.respond(status, "application/json", e.to_response().to_bytes(), &[]).await;
        }
    };
    // A stateless (2026-07-28) request carries its own envelope: no session; its header checks
    // are the revision's own.
    if modern::is_stateless(ex.headers(), message.method()) {
        return post_stateless(mcp, ex, gw, key_id, message, acc, app_charged.as_deref()).await;
    }
    let message_id = match &message {
        Message::Request(r) => r.id.clone(),
        _ => Id::NULL,
    };
    // Read after the body only because the stateless revision (above) checks its versions
    // itself; still before the session.
    if let Err(r) = protocol_version(ex.headers()) {
        return refuse(ex, &message_id, r).await;
    }
    match message {
        Message::Request(req) if req.method == "initialize" => dispatch::initialize(mcp, ex, gw, key_id, req).await,
        Message::Request(req) => {
            let Some(mcp_id) = require_session(mcp, ex, gw, key_id, &req.id).await? else { return Ok(()) };
            dispatch::request(mcp, ex, gw, Caller::Session(&mcp_id), req, acc).await
        }
        Message::Notification(n) => {
            if require_session(mcp, ex, gw, key_id, &Id::NULL).await?.is_none() {
                return Ok(());
            }
            if n.method == "notifications/cancelled" || n.method.starts_with("notifications/roots") {
                let who = ex.ctx.filters.principal.as_deref();
                let bearer = crate::identity::token_exchange::bearer(ex.headers());
                Box::pin(mcp.forward_notification(gw, who, bearer, &n.method, n.params)).await;
            }
            ex.respond(202, "application/json", Vec::new(), &[]).await
        }
        Message::Response(r) => {
            let Some(mcp_id) = require_session(mcp, ex, gw, key_id, &Id::NULL).await? else {
                return Ok(());
            };
            Box::pin(mcp.relay_client_response(&mcp_id, gw, r)).await;
            ex.respond(202, "application/json", Vec::new(), &[]).await
        }
    }
}

/// A stateless `tools/call` names its tool in `Mcp-Name`, which is all the app's per-minute limit
/// needs: it is counted from the headers, before the body is read, so a caller over an app's
/// limit costs no body read or parse. The body is checked against the headers afterwards (a
/// request whose body names another tool is refused, its charge spent). `Ok(Some(app))`: counted
/// against that app's limit; `Err`: over it.
///
/// Not an `async fn`: most deployments limit no app, and then the answer is ready (nothing looked
/// up) in a future of a few bytes; only a look at the catalogue is boxed.
fn app_quota_from_headers<'a>(mcp: &'a McpRuntime, ex: &Exchange<'_>, gw: &'a Gateway) -> Quick<'a, QuotaCharge> {
    let limited = mcp.state.config().apps.iter().any(|a| a.rate_limit.is_some());
    let h = ex.headers();
    if !limited
        || !modern::is_stateless(h, None)
        || h.get("mcp-method").map(|v| v.as_bytes()) != Some(b"tools/call".as_slice())
    {
        return quick::now(Ok(None));
    }
    let Some(name) = h.get("mcp-name").and_then(|v| v.to_str().ok()).and_then(modern::decode_header_value) else {
        return quick::now(Ok(None));
    };
    quick::later(app_quota_of(mcp, gw, name.into_owned()))
}

/// What [`app_quota_from_headers`] answers: the app charged, or the app over its limit.
type QuotaCharge = Result<Option<String>, (crate::mcp::quota::Spent, String)>;

/// The limit of the app whose tool is `name`, charged.
async fn app_quota_of(mcp: &McpRuntime, gw: &Gateway, name: String) -> QuotaCharge {
    let catalogue = mcp.catalogue(gw).await;
    let Some((_, target)) = catalogue.entry(name.trim(), false) else { return Ok(None) };
    let Some(limit) = mcp.state.config().app(&target.app_id).and_then(|a| a.rate_limit) else { return Ok(None) };
    match mcp.quotas.admit(&crate::mcp::quota::app_bucket(&target.app_id), limit) {
        Ok(()) => Ok(Some(target.app_id.clone())),
        Err(spent) => Err((spent, target.app_id.clone())),
    }
}

/// A stateless (2026-07-28) POST: its envelope and headers checked, then what it asks.
async fn post_stateless(
    mcp: &Arc<McpRuntime>,
    ex: &mut Exchange<'_>,
    gw: &Arc<Gateway>,
    key_id: &str,
    message: Message,
    acc: Accept,
    app_charged: Option<&str>,
) -> pingora::Result<()> {
    let Message::Request(req) = message else { return stateless::not_a_request(ex, &message).await };
    let Some(env) = stateless::envelope(ex, &req).await? else { return Ok(()) };
    match req.method.as_str() {
        "server/discover" => stateless::discover(mcp, ex, gw, &req.id).await,
        "subscriptions/listen" => stateless::listen(mcp, ex, gw, key_id, req).await,
        m if modern::removed(m) => {
            let e = jsonrpc::RpcErrorObject::method_not_found(m);
            stateless::answer(ex, jsonrpc::Response::error(req.id, e), "", false).await
        }
        _ => {
            let caller = Caller::Stateless { env: &env, key_id, app_charged, via_call_tool: false };
            dispatch::request(mcp, ex, gw, caller, req, acc).await
        }
    }
}

async fn delete(mcp: &McpRuntime, ex: &mut Exchange<'_>, gw: &Arc<Gateway>, key_id: &str) -> pingora::Result<()> {
    if let Err(r) = protocol_version(ex.headers()) {
        return refuse(ex, &Id::NULL, r).await;
    }
    let Some(mcp_id) = require_session(mcp, ex, gw, key_id, &Id::NULL).await? else { return Ok(()) };
    match mcp.sessions.end(&mcp_id).await {
        Ok(_) => ex.respond(200, "application/json", Vec::new(), &[]).await,
        Err(e) => rpc_errors::api_error(ex, e.into()).await,
    }
}

/// GET: the server-to-client stream. Carries `notifications/*/list_changed` when the gateway or
/// one of its apps changes, and keep-alive comments.
///
/// A stream is not a request in flight: it holds no `concurrent` slot (the rate-limit filter
/// takes none for it). It ends as soon as the client goes (read side closed), or its session
/// ends: DELETE, expiry, its key revoked or its gateway deleted.
async fn get_stream(mcp: &McpRuntime, ex: &mut Exchange<'_>, gw: &Arc<Gateway>, key_id: &str) -> pingora::Result<()> {
    if let Err(r) = get_headers(ex.headers()) {
        return refuse(ex, &Id::NULL, r).await;
    }
    let Some(mcp_id) = require_session(mcp, ex, gw, key_id, &Id::NULL).await? else { return Ok(()) };
    // Every GET stream of the session counts, listening or resuming a call: each holds a
    // connection for as long as its client listens (Decision 23).
    let who = Holder { org_id: &gw.org_id, key_id, session_id: Some(&mcp_id) };
    let slot = match mcp.stream_slot(who) {
        Ok(slot) => slot,
        Err(refused) => return rpc_errors::bound_refused(ex, &Id::NULL, refused).await,
    };
    // The resumption of one of this session's call streams; any other id (unknown, expired,
    // another session's, or whose events are no longer all buffered) opens the listening stream.
    if let Some(last) = ex.header("last-event-id") {
        let found =
            mcp.call_streams.find(last).filter(|(cs, seq)| cs.session_id() == mcp_id && cs.after(*seq).is_some());
        if let Some((cs, seq)) = found {
            ex.start_sse().await?;
            ex.stream_on(Following { cs, seen: seq, _slot: Some(slot) }).await;
            return Ok(());
        }
    }
    let Some(closed) = mcp.sessions.closed(&mcp_id) else { return Ok(()) };
    let rx = mcp.subscribe(&gw.id);
    ex.start_sse().await?;
    ex.write(Some(Bytes::from_static(b": stream open\n\n")), false).await?;
    ex.stream_on(Listening { mcp_id, rx, closed, _slot: slot }).await;
    Ok(())
}

/// An open GET stream: the session's messages and the gateway's changes, until the session or
/// the client goes.
struct Listening {
    mcp_id: String,
    rx: broadcast::Receiver<Arc<StreamMessage>>,
    closed: watch::Receiver<bool>,
    /// Its place under `mcp.streams`, given back when the stream ends.
    _slot: StreamSlot,
}

impl EventSource for Listening {
    async fn run<S: EventSink>(mut self, out: &mut S) {
        loop {
            let chunk = tokio::select! {
                m = self.rx.recv() => match m {
                    // Another session's resource update.
                    Ok(m) if m.to.as_deref().is_some_and(|to| to != self.mcp_id) => continue,
                    Ok(m) => m.event.clone(),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => break,
                },
                _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keepalive\n\n"),
                // Ended, expired or removed (the sender dropped): the stream ends with it.
                _ = self.closed.wait_for(|c| *c) => break,
                // Waits for the client to close its side (there is no body to read after a GET);
                // without it a gone client would be noticed only when a write fails, up to two
                // keep-alives later.
                gone = out.client_gone() => match gone {
                    Ok(()) => continue,
                    Err(_) => return,
                },
            };
            if out.send(chunk).await.is_err() {
                return;
            }
        }
        out.end(None).await.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs.iter().map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn a_post_must_accept_json_and_send_json() {
        let status =
            |pairs: &[(&'static str, &'static str)]| post_headers(&headers(pairs)).err().map(|r| r.code.status());
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
        let status =
            |pairs: &[(&'static str, &'static str)]| get_headers(&headers(pairs)).err().map(|r| r.code.status());
        assert_eq!(status(&[("accept", "text/event-stream")]), None);
        assert_eq!(status(&[("accept", "text/event-stream"), ("mcp-protocol-version", "2025-06-18")]), None);
        assert_eq!(status(&[("accept", "application/json")]), Some(406));
        assert_eq!(status(&[("accept", "text/event-stream"), ("mcp-protocol-version", "1999-01-01")]), Some(400));
        let r = protocol_version(&headers(&[("mcp-protocol-version", "1999-01-01")])).unwrap_err();
        assert_eq!(r.code, RpcCode::InvalidRequest);
        assert!(r.message.contains("1999-01-01"), "{r:?}");
        assert!(protocol_version(&headers(&[])).is_ok(), "the header is optional");
    }
}
