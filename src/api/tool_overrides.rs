//! A gateway's `tool_overrides` as `POST` and `PATCH /v1/gateways` take them: checked against
//! the tools the gateway's apps list now, so that a saved override names a tool the gateway
//! serves, renames it to a name no other tool has, and fixes or defaults only arguments its
//! input schema has, with values of their type. The first fault is a 400 naming the member.

use super::Call;
use crate::data::model::{Gateway, ToolOverride};
use crate::edge::error::ApiError;
use crate::mcp::catalogue::{exposed_name, valid_name};
use crate::mcp::shaped;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};

/// Most overrides on one gateway.
pub(super) const MAX_TOOL_OVERRIDES: usize = 500;

/// The gateway's tools as its apps list them now, by their names at the gateway (without
/// overrides), and the apps that could not be asked, with why.
async fn exposed_tools(call: &Call<'_>, gw: &Gateway) -> (BTreeMap<String, Value>, Vec<String>) {
    let (mut tools, mut failed) = (BTreeMap::new(), Vec::new());
    let sep = &gw.configuration.tool_name_separator;
    let single = gw.servers.len() == 1;
    for app in &gw.servers {
        let listed = match call.server.mcp.apps.tools(&gw.org_id, app).await {
            Ok(listed) => listed,
            Err(e) => {
                failed.push(format!("{app} ({e})"));
                continue;
            }
        };
        for t in listed.iter() {
            let Some(name) = t.get("name").and_then(Value::as_str) else { continue };
            if gw.allowed_tools.get(app).is_none_or(|a| a.allows(name)) {
                tools.insert(exposed_name(app, name, sep, single), t.clone());
            }
        }
    }
    (tools, failed)
}

/// The overrides given for `gw` (its apps and allowlist as they will be saved), once each fits
/// the tools its apps list.
pub(super) async fn validate(
    call: &Call<'_>,
    gw: &Gateway,
    given: Vec<ToolOverride>,
) -> Result<Vec<ToolOverride>, ApiError> {
    if given.len() > MAX_TOOL_OVERRIDES {
        return Err(ApiError::validation("tool_overrides", format!("at most {MAX_TOOL_OVERRIDES} overrides")));
    }
    if given.is_empty() {
        return Ok(given);
    }
    let (tools, failed) = exposed_tools(call, gw).await;
    let aliases: Vec<&str> = given.iter().map(|o| o.name.as_deref().unwrap_or(&o.tool)).collect();
    let mut seen = HashSet::new();
    for (i, o) in given.iter().enumerate() {
        let field = |m: &str| format!("tool_overrides[{i}].{m}");
        let Some(def) = tools.get(&o.tool) else {
            let mut issue = format!("`{}` is not a tool of the gateway", o.tool);
            if !failed.is_empty() {
                issue.push_str(&format!(" (apps that could not be asked: {})", failed.join(", ")));
            }
            return Err(ApiError::validation(field("tool"), issue));
        };
        if !seen.insert(o.tool.as_str()) {
            return Err(ApiError::validation(field("tool"), "another override names this tool"));
        }
        if let Some(alias) = o.name.as_deref() {
            check_alias(o, alias, i, &tools, &aliases).map_err(|issue| ApiError::validation(field("name"), issue))?;
        }
        if let Some(t) = &o.title {
            super::description(&field("title"), t)?;
        }
        if let Some(d) = &o.description {
            super::description(&field("description"), d)?;
        }
        check_arguments(o, def, &field)?;
    }
    Ok(given)
}

/// Why `alias` cannot name the tool of override `i`, if it cannot.
fn check_alias(
    o: &ToolOverride,
    alias: &str,
    i: usize,
    tools: &BTreeMap<String, Value>,
    aliases: &[&str],
) -> Result<(), String> {
    if !valid_name(alias) {
        return Err("must be 1-64 characters of A-Z a-z 0-9 _ . -".into());
    }
    if alias != o.tool && tools.contains_key(alias) {
        return Err(format!("`{alias}` is the name of another tool of the gateway"));
    }
    if aliases[..i].contains(&alias) {
        return Err(format!("`{alias}` is the name another override gives its tool"));
    }
    Ok(())
}

/// The override's arguments against the tool's input schema: fixed and default ones are
/// properties of it, with values of their type; hidden ones are properties it does not require
/// (the app would refuse every call), and no argument is in two lists.
fn check_arguments(o: &ToolOverride, def: &Value, field: &dyn Fn(&str) -> String) -> Result<(), ApiError> {
    let empty = Map::new();
    let schema = def.get("inputSchema");
    let props = schema.and_then(|s| s.get("properties")).and_then(Value::as_object).unwrap_or(&empty);
    let required = |k: &str| {
        schema.and_then(|s| s.get("required")).and_then(Value::as_array).is_some_and(|r| r.iter().any(|x| x == k))
    };
    for (list, values) in [("fixed_arguments", &o.fixed_arguments), ("default_arguments", &o.default_arguments)] {
        for (k, v) in values {
            let member = field(&format!("{list}.{k}"));
            let Some(p) = props.get(k) else {
                return Err(ApiError::validation(member, format!("`{k}` is not an argument of the tool")));
            };
            if let Some(issue) = shaped::misfit(p, v) {
                return Err(ApiError::validation(member, issue));
            }
        }
    }
    if let Some(k) = o.default_arguments.keys().find(|k| o.fixed_arguments.contains_key(*k)) {
        return Err(ApiError::validation(field(&format!("default_arguments.{k}")), "is also a fixed argument"));
    }
    for (j, k) in o.hidden_arguments.iter().enumerate() {
        let member = field(&format!("hidden_arguments[{j}]"));
        let issue = if !props.contains_key(k) {
            format!("`{k}` is not an argument of the tool")
        } else if o.fixed_arguments.contains_key(k) || o.default_arguments.contains_key(k) {
            "is also a fixed or default argument".into()
        } else if required(k) {
            "is required by the tool: give it a value in fixed_arguments instead".into()
        } else {
            continue;
        };
        return Err(ApiError::validation(member, issue));
    }
    Ok(())
}
