//! `discovery: search` (`docs/mcp.md`, "Search instead of a thousand tools"): the short list
//! (`search_tools`, and the tools a session found or `call_tool` without a session), the search
//! itself (ranked by `search_index.rs`, only over what the caller may call), and `call_tool`,
//! unwrapped into the call of the tool it names before anything is decided, so that every check
//! of a direct call is that tool's.

use super::lists::may_list;
use super::*;
use crate::mcp::runtime::StreamMessage;
use crate::mcp::search_index;
use std::sync::LazyLock;

/// The gateway's own tools in search mode.
pub(super) const SEARCH_TOOLS: &str = "search_tools";
pub(super) const CALL_TOOL: &str = "call_tool";
/// The tools a session keeps found, the oldest forgotten first.
const FOUND_PER_SESSION: usize = 100;
/// A search's results: at most, and unless it says.
const MOST_RESULTS: u64 = 50;
const DEFAULT_RESULTS: u64 = 10;
/// The longest query, in characters.
const LONGEST_QUERY: usize = 1000;
const LIST_CHANGED: &[&str] = &["notifications/tools/list_changed"];

fn search_definition(stateless: bool) -> Value {
    let found = if stateless {
        "Each result is the tool's whole definition (read its annotations: whether it changes or deletes \
         anything); call it with call_tool, or by its name."
    } else {
        "The tools found are added to your tool list: call them by their names."
    };
    json!({
        "name": SEARCH_TOOLS,
        "title": "Search the gateway's tools",
        "description": format!("Finds the tools of this gateway that fit a task, by the words of their names, titles \
            and descriptions, best first. {found}"),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "What the tool should do, in a few words.", "maxLength": LONGEST_QUERY },
                "limit": { "type": "integer", "minimum": 1, "maximum": MOST_RESULTS, "default": DEFAULT_RESULTS },
            },
            "required": ["query"],
        },
        "annotations": { "readOnlyHint": true, "openWorldHint": false },
    })
}

/// The definitions, made once.
static SEARCH_IN_SESSION: LazyLock<Value> = LazyLock::new(|| search_definition(false));
static SEARCH_STATELESS: LazyLock<Value> = LazyLock::new(|| search_definition(true));
static CALL: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "name": CALL_TOOL,
        "title": "Call a tool found by search_tools",
        "description": "Calls the tool `name` with `arguments`, exactly as a direct call of it: its own rules, \
            limits and confirmations apply. Read its definition in the search results first.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": { "type": "string", "description": "The tool's name, as search_tools gave it." },
                "arguments": { "type": "object", "description": "The tool's arguments, by its inputSchema." },
            },
            "required": ["name"],
        },
        // A call of any tool: as destructive as the worst of them, so clients confirm it.
        "annotations": { "destructiveHint": true, "openWorldHint": true },
    })
});

/// `tools/list` in search mode: `search_tools`, then the tools this session found that it may
/// still call (in the order found); without a session, `search_tools` and `call_tool`.
pub(super) async fn list(
    mcp: &McpRuntime,
    ex: &Exchange<'_>,
    gw: &Gateway,
    caller: Caller<'_>,
    cat: &Arc<Catalogue>,
) -> Result<Vec<Value>, RpcErrorObject> {
    let mcp_id = match caller {
        Caller::Stateless { .. } => return Ok(vec![SEARCH_STATELESS.clone(), CALL.clone()]),
        Caller::Session(id) => id,
    };
    let mut shown = vec![SEARCH_IN_SESSION.clone()];
    let found = mcp.sessions.found(mcp_id);
    if found.is_empty() {
        return Ok(shown);
    }
    let index = cat.search_index();
    let at: Vec<(u32, f32)> = found.iter().filter_map(|name| index.position(name)).map(|d| (d, 0.0)).collect();
    let kept = callable(mcp, ex, gw, cat, at).await?;
    shown.extend(kept.into_iter().map(|(doc, _)| cat.tools[doc as usize].clone()));
    Ok(shown)
}

/// A `tools/call` of a gateway in search mode: `search_tools` is answered here, `call_tool`
/// (without a session) becomes the call it wraps, and any other name is an ordinary call (a
/// tool the caller may call is callable whether or not it was found).
pub(super) async fn call(
    mcp: &Arc<McpRuntime>,
    ex: &mut Exchange<'_>,
    gw: &Arc<Gateway>,
    caller: Caller<'_>,
    mut req: jsonrpc::Request,
    acc: Accept,
) -> pingora::Result<()> {
    let named = req.params.as_ref().and_then(|p| p.read::<NamedParams>().ok());
    let name = named.as_ref().and_then(|n| n.name.as_deref());
    match (name, caller) {
        (Some(SEARCH_TOOLS), _) => {
            let arguments = named.as_ref().and_then(|n| n.get("arguments")).map(|a| a.get().to_string());
            drop(named);
            search(mcp, ex, gw, caller, req.id, arguments.as_deref(), acc.sse).await
        }
        (Some(CALL_TOOL), Caller::Stateless { env, key_id, app_charged, .. }) => {
            let unwrapped = named.as_ref().map(unwrap).unwrap_or_else(|| Err(call_tool_shape()));
            drop(named);
            match unwrapped {
                Ok(params) => {
                    req.params = Some(params);
                    let inner = Caller::Stateless { env, key_id, app_charged, via_call_tool: true };
                    forward(mcp, ex, gw, inner, req, acc).await
                }
                Err(e) => {
                    metrics::mcp_server_operation("tools/call", None, ErrorType::Code(e.code), &gw.id, Duration::ZERO);
                    respond(ex, caller, Response::error(req.id, e), "").await
                }
            }
        }
        _ => {
            drop(named);
            forward(mcp, ex, gw, caller, req, acc).await
        }
    }
}

fn call_tool_shape() -> RpcErrorObject {
    RpcErrorObject::invalid_params("call_tool takes arguments {\"name\": string, \"arguments\": object}")
}

/// The params of the call `call_tool` wraps: its `arguments.name` and `arguments.arguments`,
/// with every other member of the outer params (`_meta`, `task`, a continuation) as it came.
fn unwrap(outer: &NamedParams<'_>) -> Result<RawJson, RpcErrorObject> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(borrow, default)]
        arguments: Option<&'a RawValue>,
    }
    let raw = outer.get("arguments").ok_or_else(call_tool_shape)?;
    let inner: Inner = serde_json::from_str(raw.get()).map_err(|_| call_tool_shape())?;
    if inner.arguments.is_some_and(|a| !a.get().starts_with('{')) {
        return Err(call_tool_shape());
    }
    if inner.name == SEARCH_TOOLS || inner.name == CALL_TOOL {
        return Err(RpcErrorObject::invalid_params(format!("call_tool calls the gateway's tools, not {}", inner.name)));
    }
    let mut others: Vec<(Cow<str>, &RawValue)> =
        outer.others.iter().filter(|(k, _)| k != "arguments").map(|(k, v)| (k.clone(), *v)).collect();
    if let Some(a) = inner.arguments {
        others.push((Cow::Borrowed("arguments"), a));
    }
    Ok(NamedParams { name: None, others }.renamed(&inner.name, false))
}

/// What a search asks: `query`, and at most `limit` results.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    query: String,
    #[serde(default)]
    limit: Option<u64>,
}

impl Query {
    /// The query in `arguments`, or what is wrong with it, in words a model can act on.
    fn read(arguments: Option<&str>) -> Result<Query, String> {
        let shape = "search_tools takes {\"query\": string, \"limit\": integer 1-50}";
        let q: Query = serde_json::from_str(arguments.unwrap_or("{}")).map_err(|e| format!("{shape}: {e}"))?;
        if q.query.trim().is_empty() {
            return Err(format!("{shape}: the query is empty"));
        }
        if q.query.chars().count() > LONGEST_QUERY {
            return Err(format!("{shape}: the query is longer than {LONGEST_QUERY} characters"));
        }
        if q.limit.is_some_and(|l| !(1..=MOST_RESULTS).contains(&l)) {
            return Err(format!("{shape}: limit must be 1-{MOST_RESULTS}"));
        }
        Ok(q)
    }
}

/// Answers `search_tools`: the tools of the catalogue the caller may call that best match the
/// query. In a session they join its list, and the client is told its list changed: on the
/// call's own stream, before the result, when it takes SSE (so it holds whether or not the
/// session's GET stream is open yet), else on the GET stream.
async fn search(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    gw: &Gateway,
    caller: Caller<'_>,
    id: Id,
    arguments: Option<&str>,
    sse: bool,
) -> pingora::Result<()> {
    let started = Instant::now();
    let outcome = match Query::read(arguments) {
        Err(wrong) => Ok((json!({ "content": [{ "type": "text", "text": wrong }], "isError": true }), false)),
        Ok(q) => found(mcp, ex, gw, caller, &q).await,
    };
    let error = outcome.as_ref().map_or_else(|e| ErrorType::Code(e.code), |_| ErrorType::None);
    metrics::mcp_server_operation("tools/call", None, error, &gw.id, started.elapsed());
    let (r, changed) = match outcome {
        Ok((result, changed)) => (Response::success(id, result), changed),
        Err(e) => (Response::error(id, e), false),
    };
    match caller {
        Caller::Session(_) if changed && sse => {
            let mut body = sse_event(&jsonrpc::notification_bytes(LIST_CHANGED[0], None)).to_vec();
            body.extend_from_slice(&sse_event(&r.to_bytes()));
            ex.respond(200, "text/event-stream", body, &[]).await
        }
        Caller::Session(mcp_id) if changed => {
            tell_list_changed(mcp, &gw.id, mcp_id);
            respond(ex, caller, r, modern::COMPLETE).await
        }
        _ => respond(ex, caller, r, modern::COMPLETE).await,
    }
}

/// The result of a search: its matches, as the caller may see them; and whether they changed
/// the session's list.
async fn found(
    mcp: &McpRuntime,
    ex: &Exchange<'_>,
    gw: &Gateway,
    caller: Caller<'_>,
    q: &Query,
) -> Result<(Value, bool), RpcErrorObject> {
    let cat = mcp.catalogue(gw).await;
    let hits = cat.search_index().scores(&q.query);
    let hits = callable(mcp, ex, gw, &cat, hits).await?;
    let best = search_index::ranked(hits, q.limit.unwrap_or(DEFAULT_RESULTS) as usize);
    let tools: Vec<&Value> = best.iter().map(|d| &cat.tools[*d as usize]).collect();
    let names = || tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str));
    let (shown, note, changed): (Vec<Value>, &str, bool) = match caller {
        Caller::Session(mcp_id) => {
            let changed = mcp.sessions.add_found(mcp_id, names(), FOUND_PER_SESSION);
            let shown = tools.iter().map(|t| summary(t)).collect();
            (shown, "They are now in your tool list: call them by name.", changed)
        }
        Caller::Stateless { .. } => {
            let shown = tools.iter().map(|t| (*t).clone()).collect();
            (shown, "Call one with call_tool {\"name\", \"arguments\"}.", false)
        }
    };
    let text = match shown.len() {
        0 => format!("No tool of this gateway matches `{}`.", q.query),
        n => format!("{n} tools match. {note}\n{}", Value::Array(shown.clone())),
    };
    Ok((json!({ "content": [{ "type": "text", "text": text }], "structuredContent": { "tools": shown } }), changed))
}

/// What a session's search shows of a tool: enough to choose it; its list has the rest.
fn summary(t: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["name", "title", "description", "annotations"] {
        if let Some(v) = t.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// The `hits` (positions in the catalogue's tools) whose tools the gateway's rules let this
/// caller see: the list-time decision, made before ranking. A dear rule set decides many on the
/// blocking pool, in the organisation's slots, as a list does.
async fn callable(
    mcp: &McpRuntime,
    ex: &Exchange<'_>,
    gw: &Gateway,
    cat: &Arc<Catalogue>,
    hits: Vec<(u32, f32)>,
) -> Result<Vec<(u32, f32)>, RpcErrorObject> {
    let (Some(set), Some(p)) = (mcp.rules(gw), ex.ctx.filters.principal.as_deref()) else { return Ok(hits) };
    let who = subject(mcp, ex, &set, p);
    let keep = move |set: &RuleSet, cat: &Catalogue, hits: Vec<(u32, f32)>| -> Vec<(u32, f32)> {
        hits.into_iter().filter(|(doc, _)| may_list(set, &who, cat, &cat.tools[*doc as usize])).collect()
    };
    if set.lists_inline(hits.len()) {
        return Ok(keep(&set, cat, hits));
    }
    let cat = cat.clone();
    let kept = mcp.rule_slots.run(&p.org_id, move || keep(&set, &cat, hits)).await;
    kept.map_err(|_| {
        metrics::rule_refused("busy");
        rpc_errors::rules_refused(&rules::Refused::Busy)
    })
}

/// Tells the session's GET stream that its tool list changed (a search added to it).
fn tell_list_changed(mcp: &McpRuntime, gateway_id: &str, mcp_id: &str) {
    let Some(tx) = mcp.streams.get(gateway_id) else { return };
    let event = sse_event(&jsonrpc::notification_bytes(LIST_CHANGED[0], None));
    let message = StreamMessage { to: Some(mcp_id.to_string()), list_changed: LIST_CHANGED, event };
    let _ = tx.send(Arc::new(message));
}
