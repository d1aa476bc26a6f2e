//! The lists a gateway answers: its catalogue paged by an opaque cursor, and the tools a
//! caller may see once the gateway's rules have hidden those they deny.

use super::subject;
use crate::edge::exchange::Exchange;
use crate::mcp::catalogue::Catalogue;
use crate::mcp::jsonrpc::{RawJson, RpcErrorObject};
use crate::mcp::rpc_errors;
use crate::mcp::rules::{self, CallFacts, RuleSet, Subject};
use crate::mcp::runtime::McpRuntime;
use crate::observe::metrics;
use serde_json::{json, Value};
use std::sync::Arc;

/// A cursor is the offset into the gateway's list, opaque to clients.
pub(super) fn page(
    items: &[Value],
    params: Option<&RawJson>,
    key: &str,
    page_size: usize,
) -> Result<Value, RpcErrorObject> {
    #[derive(serde::Deserialize)]
    struct Paging {
        #[serde(default)]
        cursor: Option<Value>,
    }
    let cursor = params.and_then(|p| p.read::<Paging>().ok()).and_then(|p| p.cursor);
    let start = match cursor {
        None => 0,
        Some(Value::String(c)) => c.parse::<usize>().map_err(|_| RpcErrorObject::invalid_params("invalid cursor"))?,
        Some(_) => return Err(RpcErrorObject::invalid_params("cursor must be a string")),
    };
    if start > items.len() {
        return Err(RpcErrorObject::invalid_params("invalid cursor"));
    }
    let end = (start + page_size).min(items.len());
    let mut out = json!({ key: items[start..end] });
    if end < items.len() {
        out["nextCursor"] = Value::String(end.to_string());
    }
    Ok(out)
}

/// The catalogue's tools this caller may see: those the gateway's rules do not deny before a
/// rule that reads the arguments (`RuleSet::listed`). A dear rule set decides a long list on
/// the blocking pool, in the organisation's slots, as it decides a call.
pub(super) async fn listed_tools(
    mcp: &McpRuntime,
    ex: &Exchange<'_>,
    set: Arc<RuleSet>,
    cat: &Arc<Catalogue>,
) -> Result<Vec<Value>, RpcErrorObject> {
    let Some(p) = ex.ctx.filters.principal.as_deref() else { return Ok(cat.tools.clone()) };
    let who = subject(mcp, ex, &set, p);
    if set.lists_inline(cat.tools.len()) {
        return Ok(shown_tools(&set, &who, cat));
    }
    let cat = cat.clone();
    let shown = mcp.rule_slots.run(&p.org_id, move || shown_tools(&set, &who, &cat)).await;
    shown.map_err(|_| {
        metrics::rule_refused("busy");
        rpc_errors::rules_refused(&rules::Refused::Busy)
    })
}

/// The catalogue's tools the rules do not hide from `who`.
fn shown_tools(set: &RuleSet, who: &Subject, cat: &Catalogue) -> Vec<Value> {
    cat.tools.iter().filter(|t| may_list(set, who, cat, t)).cloned().collect()
}

/// Whether the rules show `who` the catalogue's tool `t` (a list, a search).
pub(super) fn may_list(set: &RuleSet, who: &Subject, cat: &Catalogue, t: &Value) -> bool {
    let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
    cat.entry(name, false).is_none_or(|(tool, target)| {
        let facts = CallFacts::tool(tool, &target.app_id, &target.name).renamed(target.renamed_from());
        set.listed(who, facts)
    })
}
