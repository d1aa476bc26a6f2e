//! `/gateways/{id}/tool-changes`: the tool definitions of a gateway's apps that await an admin's
//! decision under its `tool_policy` (`docs/governance.md`), and the approve and reject actions.

use super::{iso, ApiResult, Call, Reply};
use crate::data::model::{Gateway, PendingReason, PinnedDefinition, ToolOverride, ToolPin};
use crate::data::tool_pins;
use crate::edge::error::ApiError;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;
use utoipa::ToSchema;

/// One pending change of a tool definition.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ToolChange {
    /// `tch_...`: what approve and reject name.
    pub id: String,
    /// The app whose tool it is.
    pub app: String,
    /// The tool's name as the app lists it.
    pub tool: String,
    /// `changed` (another definition than the approved one), `added` (none approved yet) or
    /// `hidden_text` (text a reader does not see).
    pub kind: String,
    /// What a `hidden_text` change found, one finding each (the field, the class, the first
    /// character, its position); empty otherwise.
    pub findings: Vec<String>,
    /// The classes of hidden text a `hidden_text` change carries (`tag`, `zero_width`, `bidi`,
    /// `ansi_escape`, `control`, `variation_selector`, `private_use`), each once; empty
    /// otherwise.
    pub classes: Vec<String>,
    /// Field by field (`name`, `title`, `description`, `inputSchema`, `outputSchema`,
    /// `annotations`), each changed one as `{"old": ..., "new": ...}`.
    #[schema(value_type = Object)]
    pub diff: Value,
    /// The definition waiting, as the app sent it.
    #[schema(value_type = Object)]
    pub definition: Value,
    /// SHA-256 of its canonical JSON.
    pub hash: String,
    pub detected_at: String,
    /// The gateway's override of the tool (`tool_overrides`), which clients see in place of
    /// the app's name, title and description once the change is approved: what the app's old
    /// and new text are read beside. Absent when the gateway does not shape the tool.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub shaped_by: Option<ToolOverride>,
}

/// The gateway's override of `app_id`'s tool `tool`, if it has one.
fn override_of(g: &Gateway, app_id: &str, tool: &str) -> Option<ToolOverride> {
    if g.tool_overrides.is_empty() {
        return None;
    }
    let sep = &g.configuration.tool_name_separator;
    let exposed = crate::mcp::catalogue::exposed_name(app_id, tool, sep, g.servers.len() == 1);
    g.tool_overrides.iter().find(|o| o.tool == exposed).cloned()
}

fn view(g: &Gateway, pin: &ToolPin) -> Option<ToolChange> {
    let p = pin.pending.as_ref()?;
    let (findings, classes) = match &p.reason {
        PendingReason::HiddenText { findings, classes } => (findings.clone(), classes.clone()),
        _ => (Vec::new(), Vec::new()),
    };
    Some(ToolChange {
        id: p.id.clone(),
        app: pin.app_id.clone(),
        tool: pin.tool.clone(),
        kind: p.reason.kind().to_string(),
        findings,
        classes,
        diff: tool_pins::diff(pin.approved.as_ref().map(|a| &a.definition), &p.definition),
        definition: p.definition.clone(),
        hash: p.hash.clone(),
        detected_at: iso(&p.detected_at),
        shaped_by: override_of(g, &pin.app_id, &pin.tool),
    })
}

fn gateway(call: &Call<'_>) -> Result<Arc<Gateway>, ApiError> {
    let who = call.who()?;
    call.server.state.gateway_of(&who.org_id, call.id()).ok_or(ApiError::NotFound("gateway"))
}

#[utoipa::path(get, path = "/v1/gateways/{gateway_id}/tool-changes", tag = "gateways",
    params(("gateway_id" = String, Path)),
    responses((status = 200, description = "`tool_changes`: the pending changes, oldest first", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let g = gateway(call)?;
    let pins = call.server.state.tool_pins_of(&g.org_id, &g.id).await?;
    let mut changes: Vec<ToolChange> = pins.iter().filter_map(|p| view(&g, p)).collect();
    changes.sort_by(|a, b| a.detected_at.cmp(&b.detected_at).then_with(|| a.id.cmp(&b.id)));
    Ok(Reply::ok(json!({ "tool_changes": changes, "tool_policy": g.configuration.tool_policy })))
}

/// The pin whose pending change the path names, as the store holds it now (404 when the gateway
/// is another organisation's, or the change is not pending).
async fn pending_pin(call: &Call<'_>, g: &Gateway) -> Result<ToolPin, ApiError> {
    let change_id = call.sub_id();
    let pins = call.server.state.tool_pins_of(&g.org_id, &g.id).await?;
    pins.into_iter()
        .find(|p| p.pending.as_ref().is_some_and(|d| d.id == change_id))
        .ok_or(ApiError::NotFound("tool change"))
}

/// Approve or reject, after the MFA gate: the change's pin, read again under the organisation's
/// write lock, with the decision applied and saved.
async fn decide(call: &Call<'_>, g: &Gateway, approve: bool) -> ApiResult {
    let state = &call.server.state;
    let _guard = state.lock_writes(&g.org_id).await?;
    let mut pin = pending_pin(call, g).await?;
    let pending = pin.pending.take().ok_or(ApiError::NotFound("tool change"))?;
    let view = view(g, &ToolPin { pending: Some(pending.clone()), ..pin.clone() });
    if approve {
        pin.approved =
            Some(PinnedDefinition { hash: pending.hash, definition: pending.definition, at: chrono::Utc::now() });
        pin.rejected = None;
    } else {
        pin.rejected = Some(pending.hash);
    }
    state.save_tool_pins(&g.org_id, &g.id, std::slice::from_ref(&pin), true).await?;
    drop(_guard);
    let decision = if approve { "approved" } else { "rejected" };
    Ok(Reply::ok(json!({ "decision": decision, "change": view })))
}

#[utoipa::path(post, path = "/v1/gateways/{gateway_id}/tool-changes/{change_id}/approve", tag = "gateways",
    params(("gateway_id" = String, Path), ("change_id" = String, Path)),
    responses((status = 200, description = "the definition is pinned; the gateway's clients are told its list changed", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn approve(call: &Call<'_>) -> ApiResult {
    let g = gateway(call)?;
    pending_pin(call, &g).await?;
    super::mfa::gate(call).await?;
    decide(call, &g, true).await
}

#[utoipa::path(post, path = "/v1/gateways/{gateway_id}/tool-changes/{change_id}/reject", tag = "gateways",
    params(("gateway_id" = String, Path), ("change_id" = String, Path)),
    responses((status = 200, description = "the old pin stays; the tool stays hidden while the app lists the rejected definition", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn reject(call: &Call<'_>) -> ApiResult {
    let g = gateway(call)?;
    pending_pin(call, &g).await?;
    super::mfa::gate(call).await?;
    decide(call, &g, false).await
}
