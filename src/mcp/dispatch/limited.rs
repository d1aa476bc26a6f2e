//! A `tools/call` against its gateway's `tool_limits` (`mcp/tool_limits.rs`): admitted (holding
//! its in-flight slots with the request's own), or answered here with a tool result marked
//! `isError` that the model reads, or with -32010 when the gateway asks for the protocol error.
//! Either way the refusal is counted (`toolgate_tool_limited_total`) and logged (-32010, 429).

use super::{respond, Call, Target};
use crate::data::model::ToolLimitAnswer;
use crate::edge::exchange::Exchange;
use crate::mcp::jsonrpc::{Id, RawJson, Response, RpcErrorObject};
use crate::mcp::modern;
use crate::mcp::protocol::RpcCode;
use crate::mcp::tool_limits::hold_with;
use crate::observe::metrics::{self, ErrorType};

/// `None` when the call goes on (always, for a gateway without limits: one branch); else the
/// refusal, answered.
pub(super) async fn check(
    call: &Call<'_>,
    ex: &mut Exchange<'_>,
    target: &Target<'_, '_>,
    id: &Id,
) -> Option<pingora::Result<()>> {
    if call.gw.tool_limits.is_empty() || call.method != "tools/call" {
        return None;
    }
    let (tool, function) = target.tool?;
    let who = ex.ctx.filters.principal.clone()?;
    let refusal = match call.mcp.tool_limits.admit(call.gw, tool, &who).await {
        Ok(held) => {
            hold_with(&mut ex.ctx.filters.concurrency, held);
            return None;
        }
        Err(r) => r,
    };
    metrics::tool_limited(&call.gw.id, tool);
    let error = RpcErrorObject::new(RpcCode::LimitExceeded.code(), refusal.message()).with_data(refusal.data());
    let args = target.named.as_ref().and_then(|n| n.get("arguments"));
    call.log_refused(target.app_id, function, args, &error, RpcCode::LimitExceeded.status());
    tracing::info!(gateway = %call.gw.id, tool, key = %who.key_id, window = refusal.span.as_str(),
        limit = refusal.limit, "tool call refused by a tool limit");
    let answer = match refusal.answer {
        ToolLimitAnswer::Result => {
            metrics::mcp_server_operation(call.method, None, ErrorType::ToolError, &call.gw.id, call.started.elapsed());
            Response { id: id.clone(), outcome: Ok(RawJson::from_value(&refusal.result())) }
        }
        ToolLimitAnswer::Error => {
            call.refused(&error);
            Response::error(id.clone(), error)
        }
    };
    Some(respond(ex, call.caller, answer, modern::COMPLETE).await)
}
