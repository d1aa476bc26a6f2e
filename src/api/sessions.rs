//! `/sessions`: the MCP protocol sessions of the caller's organisation.

use super::{iso, ApiResult, Call, Reply};
use crate::data::model::McpSession;
use crate::edge::error::ApiError;
use crate::mcp::sessions::Selects;
use serde_json::{json, Value};

fn view(call: &Call<'_>, s: &McpSession) -> Value {
    json!({
        "id": s.id,
        "gateway_id": s.gateway_id,
        "client": { "type": s.client_type, "version": s.client_version, "ip": s.client_ip },
        "protocol_version": s.protocol_version,
        "started_at": iso(&s.started_at),
        "last_activity": iso(&s.last_activity),
        "requests_count": s.requests_count,
        "status": call.server.mcp.sessions.status_of(s),
    })
}

/// Matches `client_type` loosely: `claude` matches `claude-ai`, `Claude Desktop`, ...
fn client_matches(client: &str, wanted: &str) -> bool {
    client.to_lowercase().contains(&wanted.to_lowercase())
}

#[utoipa::path(get, path = "/v1/sessions", tag = "sessions",
    params(("gateway_id" = Option<String>, Query), ("client_type" = Option<String>, Query, description = "e.g. claude, cursor"),
           ("active" = Option<bool>, Query), ("page" = Option<u32>, Query, minimum = 1), ("limit" = Option<u32>, Query, minimum = 1, maximum = 100)),
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (page, limit) = call.pagination()?;
    let active = match call.query("active") {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(ApiError::validation("active", "must be true or false")),
    };
    let gateway = call.query("gateway_id");
    let client = call.query("client_type");
    // The organisation's own index: no other organisation's session is read or copied, of its
    // own only the page's, and without a filter only the page's are read.
    let skip = (page as usize - 1).saturating_mul(limit as usize);
    let keep = |s: &McpSession| {
        gateway.is_none_or(|g| s.gateway_id == g)
            && client.is_none_or(|c| client_matches(&s.client_type, c))
            && active.is_none_or(|a| (call.server.mcp.sessions.status_of(s) == "active") == a)
    };
    let filtered = gateway.is_some() || client.is_some() || active.is_some();
    let (sessions, total) = call.server.mcp.sessions.page_of_org(
        &who.org_id,
        filtered.then_some(&keep as Selects<'_>),
        skip,
        limit as usize,
    );
    let items: Vec<Value> = sessions.iter().map(|s| view(call, s)).collect();
    Ok(Reply::ok(json!({ "sessions": items, "pagination": super::pagination_json(page, limit, total) })))
}

fn find(call: &Call<'_>) -> Result<McpSession, ApiError> {
    let who = call.who()?;
    call.server.mcp.sessions.get(call.id()).filter(|s| s.org_id == who.org_id).ok_or(ApiError::NotFound("session"))
}

#[utoipa::path(get, path = "/v1/sessions/{session_id}", tag = "sessions", params(("session_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    let s = find(call)?;
    Ok(Reply::ok(view(call, &s)))
}

#[utoipa::path(delete, path = "/v1/sessions/{session_id}", tag = "sessions", params(("session_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let s = find(call)?;
    if !call.server.mcp.sessions.end(&s.id).await? {
        return Err(ApiError::NotFound("session"));
    }
    Ok(Reply::message(format!("Session {} ended", s.id)))
}
