//! How the MCP endpoint answers with a JSON-RPC error: the one place where a refusal (a
//! management-style [`ApiError`], a spent quota, a protocol error) becomes a JSON-RPC error body
//! under its HTTP status, with the codes of [`RpcCode`].

use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;
use crate::mcp::bounds;
use crate::mcp::jsonrpc::{self, Id, Response, RpcErrorObject};
use crate::mcp::protocol::RpcCode;
use crate::mcp::quota::Spent;
use crate::mcp::rules::{self, Cause};
use crate::mcp::upstream::UpstreamError;
use http::HeaderValue;
use serde_json::json;

/// Writes a JSON-RPC error under its code's HTTP status ([`RpcCode::status`]).
pub(crate) async fn error(ex: &mut Exchange<'_>, id: &Id, code: RpcCode, message: &str) -> pingora::Result<()> {
    error_under(ex, code.status(), id, code, message).await
}

/// Writes a JSON-RPC error under another HTTP status than its code's, where the HTTP request
/// itself is what is wrong (its size: 413).
pub(crate) async fn error_under(
    ex: &mut Exchange<'_>,
    status: u16,
    id: &Id,
    code: RpcCode,
    message: &str,
) -> pingora::Result<()> {
    let body = jsonrpc::error_bytes(id, code.code(), message, None);
    ex.respond(status, "application/json", body, &[]).await
}

/// A management-style error (an edge filter's refusal, a missing scope, an unknown gateway) in
/// its JSON-RPC form, keeping the status; the envelope's code rides along as `data.code`.
pub(crate) async fn api_error(ex: &mut Exchange<'_>, err: ApiError) -> pingora::Result<()> {
    let mut extra = Vec::new();
    if let Some(r) = err.retry_after() {
        extra.push((http::header::RETRY_AFTER, HeaderValue::from(r)));
    }
    if err.status() >= 500 {
        tracing::error!(request_id = %ex.ctx.request_id, error = ?err, "MCP request failed");
    }
    let data = json!({ "code": err.code() });
    let code = RpcCode::for_status(err.status()).code();
    let body = jsonrpc::error_bytes(&Id::NULL, code, &err.to_string(), Some(&data));
    ex.respond(err.status(), "application/json", body, &extra).await
}

/// 429 with `Retry-After` and a JSON-RPC error naming the exhausted quota, whose own figures
/// (bucket `bucket`) replace the caller's in the `X-RateLimit-*` headers.
pub(crate) async fn quota_exceeded(
    ex: &mut Exchange<'_>,
    spent: Spent,
    bucket: &str,
    what: &str,
) -> pingora::Result<()> {
    let retry_after = spent.retry_after;
    spent.write_headers(bucket, &mut ex.ctx.filters.response_headers);
    let data = json!({ "code": "RATE_LIMITED", "retry_after": retry_after, "bucket": bucket });
    let code = RpcCode::LimitExceeded;
    let body = jsonrpc::error_bytes(
        &Id::NULL,
        code.code(),
        &format!("{what} exceeded; retry in {retry_after} s"),
        Some(&data),
    );
    let extra = [(http::header::RETRY_AFTER, HeaderValue::from(retry_after))];
    ex.respond(code.status(), "application/json", body, &extra).await
}

/// 429 for a call over its app's per-minute limit (`apps[].rate_limit`), bucket `app:<id>`.
pub(crate) async fn app_quota_exceeded(ex: &mut Exchange<'_>, spent: Spent, app_id: &str) -> pingora::Result<()> {
    quota_exceeded(ex, spent, &crate::mcp::quota::app_bucket(app_id), &format!("app {app_id} rate limit")).await
}

/// A tenant at one of its bounds (open streams, resumable bytes): HTTP 429 with -32010 naming the
/// bound (`data.scope`, `data.limit`, `data.setting`), in both eras. No `Retry-After`: it is not a
/// rate; only a stream that ends or a buffer that expires frees a place.
pub(crate) async fn bound_refused(ex: &mut Exchange<'_>, id: &Id, refused: bounds::Refused) -> pingora::Result<()> {
    let body = Response::error(id.clone(), refused.to_error()).to_bytes();
    ex.respond(RpcCode::LimitExceeded.status(), "application/json", body, &[]).await
}

/// A call the gateway's rules refused: denied by a rule (named in `data.rule`, with `reason`
/// when it was not the rule's match but its failure or the call's size), arguments the rules
/// cannot read (the call is invalid), or every slot of the organisation for dear rule sets
/// taken (retry shortly).
pub(crate) fn rules_refused(r: &rules::Refused) -> RpcErrorObject {
    match r {
        rules::Refused::Denied(d) => {
            let mut data = json!({ "rule": &*d.rule });
            data[d.named_as()] = json!(d.tool);
            if d.cause != Cause::Matched {
                data["reason"] = json!(d.cause.as_str());
            }
            RpcErrorObject::new(RpcCode::DeniedByRule.code(), d.message()).with_data(data)
        }
        rules::Refused::Unreadable { reason } => {
            RpcErrorObject::invalid_params(format!("The tool call's arguments cannot be read: {reason}"))
        }
        rules::Refused::Busy => RpcErrorObject::new(
            RpcCode::LimitExceeded.code(),
            "The organisation's rules are busy with other calls; retry shortly",
        )
        .with_data(json!({ "code": "RULES_BUSY" })),
    }
}

/// A JSON-RPC response (result or error) under HTTP 200.
pub(crate) async fn json(ex: &mut Exchange<'_>, r: Response) -> pingora::Result<()> {
    ex.respond(200, "application/json", r.to_bytes(), &[]).await
}

/// How a client whose caller has no connection of an app connected by each user is sent to
/// the app's connect page, by what the client declared (docs/identity.md "A missing
/// connection is a link").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectLink {
    /// No URL-mode elicitation: -32006 whose message and `data.url` say where to connect.
    Url,
    /// A 2025-11-25 session that declared URL-mode elicitation: -32042, the page in
    /// `data.elicitations`, with the id of the elicitation issued for the call
    /// (`mcp/elicitations.rs`), by which the page checks the person is the caller and the
    /// session is told of the connect.
    Elicitation(String),
    /// A 2026-07-28 request that declared it, where -32042 is no more: an input-required result
    /// whose `elicitation/create` (mode `url`) asks for the page; the client retries once the
    /// person is done ([`crate::mcp::stateless::connect_required`]).
    InputRequired,
}

/// The answer to a call the gateway did not send to its app ([`AppError`] other than the app's
/// own failure): for an app connected by each user, a gateway key or a token of no member is
/// -32006; a caller without a connection is sent to the connect page as `link` says (a service
/// account is told an administrator connects it): -32006 with `data.url`, -32042 whose URL
/// carries the elicitation's id (never a token), or a 2026-07-28 input-required result; the
/// app's sessions all busy is -32010.
pub(crate) fn app_refusal(id: &Id, e: &crate::mcp::apps::AppError, link: ConnectLink) -> Response {
    use crate::mcp::apps::AppError;
    let message = e.to_string();
    let error = match (e, link) {
        (AppError::NoCaller { app, .. }, _) => {
            RpcErrorObject::new(RpcCode::Forbidden.code(), message).with_data(json!({ "app": app }))
        }
        (AppError::NotConnectedByCaller { app, url, service_account: false }, ConnectLink::InputRequired) => {
            return Response {
                id: id.clone(),
                outcome: Ok(crate::mcp::stateless::connect_required(app, url, &message)),
            };
        }
        (
            AppError::NotConnectedByCaller { app, url, service_account: false },
            ConnectLink::Elicitation(elicitation_id),
        ) => {
            let url = format!("{url}&elicitation={elicitation_id}");
            let elicitation = json!({ "mode": "url", "elicitationId": elicitation_id, "url": url, "message": message });
            RpcErrorObject::new(RpcCode::UrlElicitationRequired.code(), message)
                .with_data(json!({ "app": app, "elicitations": [elicitation] }))
        }
        (AppError::NotConnectedByCaller { app, url, service_account }, _) => {
            let data = if *service_account { json!({ "app": app }) } else { json!({ "app": app, "url": url }) };
            RpcErrorObject::new(RpcCode::Forbidden.code(), message).with_data(data)
        }
        (AppError::UserSessionsFull { app, .. }, _) => {
            RpcErrorObject::new(RpcCode::LimitExceeded.code(), message).with_data(json!({ "app": app }))
        }
        _ => RpcErrorObject::internal(message),
    };
    Response::error(id.clone(), error)
}

/// The answer to a call whose app failed: -32003 when it timed out, -32004 otherwise. The client
/// is told one sentence, the app and the cause in words ([`unavailable`]), with the request id in
/// `data.request_id` (the `X-Request-Id` of the answer, the request log entry's `request_id`); the
/// error in full, which may carry Pingora's error chain and the app's address, goes to the
/// process log here and to the request log entry (`response.data.detail`).
pub(crate) fn app_failure(id: &Id, app_id: &str, e: &UpstreamError, request_id: &str) -> Response {
    let code = match e {
        UpstreamError::Timeout { .. } => RpcCode::UpstreamTimeout,
        _ => RpcCode::UpstreamFailure,
    }
    .code();
    tracing::warn!(request_id, app = app_id, error = %e, "app call failed");
    let cause = e.in_words();
    let error = RpcErrorObject::new(code, unavailable(app_id, &cause))
        .with_data(json!({ "request_id": request_id, "app": app_id, "cause": cause }))
        .with_detail(format!("App `{app_id}` failed: {e}"));
    Response::error(id.clone(), error)
}

/// What a client is told of an app that cannot answer: `app "spy" is unavailable (connection
/// refused)`.
pub(crate) fn unavailable(app_id: &str, cause: &str) -> String {
    format!("app \"{app_id}\" is unavailable ({cause})")
}

/// The answer to a call of a tool, prompt or resource withheld for the hidden text in its
/// definition: -32602, as for a name the gateway does not list, with the message naming the
/// first finding and `data.withheld` every finding (`clean::Withheld`).
/// The refusal of a `tools/call` of a tool held back by the gateway's `tool_policy`: -32011
/// naming the tool, why, and the hidden text it carries under `description_policy: block`.
pub(crate) fn tool_pending(name: &str, held: &crate::mcp::catalogue::Held) -> RpcErrorObject {
    let message = match held.findings.first() {
        Some(first) => format!("Tool `{name}` awaits approval: {first}"),
        None => format!("Tool `{name}` awaits approval: its definition is not approved on this gateway"),
    };
    let mut data = json!({ "tool": name, "reason": held.reason });
    if !held.findings.is_empty() {
        data["findings"] = serde_json::to_value(&held.findings).unwrap_or_default();
    }
    RpcErrorObject::new(RpcCode::ToolPending.code(), message).with_data(data)
}

pub(crate) fn withheld(w: &crate::mcp::clean::Withheld) -> RpcErrorObject {
    let data = serde_json::to_value(w).unwrap_or_default();
    RpcErrorObject::new(RpcCode::InvalidParams.code(), w.to_string()).with_data(json!({ "withheld": data }))
}
