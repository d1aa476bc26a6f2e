//! A guard's answer read one way: `{"action": "allow"}`, `{"action": "deny", "reason": "..."}`,
//! or `{"action": "replace", "arguments": {...}}` on `request` and `{"action": "replace",
//! "result": {...}}` on `response`. Anything else (not JSON, another action, a deny without its
//! reason, a replacement of the other phase's member) is malformed, which the call counts as the
//! guard's error. And what a replacement must be: arguments that fit the tool's input schema
//! and keep what the gateway fixes, a result that is a tool result.

use crate::data::model::CalloutPhase;
use crate::mcp::shaped::{self, Shape};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// What a guard said to do.
#[derive(Debug)]
pub(super) enum Action {
    Allow,
    Deny(String),
    Replace(Box<RawValue>),
}

impl Action {
    /// The outcome label of `toolgate_guard_calls_total` and the log entry's `action`.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny(_) => "deny",
            Action::Replace(_) => "replace",
        }
    }
}

#[derive(Debug)]
pub(super) struct Answer {
    pub(super) action: Action,
}

#[derive(Deserialize)]
struct Wire {
    action: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    arguments: Option<Box<RawValue>>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
}

impl Answer {
    /// The answer in `bytes` to a call in `phase`, or why it is malformed.
    pub(super) fn parse(bytes: &[u8], phase: CalloutPhase) -> Result<Answer, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        crate::base::strict_json::check(bytes).map_err(|e| e.to_string())?;
        // serde would read the struct from an array too (`["allow"]`).
        if !text.trim_start().starts_with('{') {
            return Err("not a JSON object".into());
        }
        let wire: Wire = serde_json::from_str(text).map_err(|e| format!("not a guard's answer ({e})"))?;
        let action = match (wire.action.as_str(), phase) {
            ("allow", _) => Action::Allow,
            ("deny", _) => match wire.reason {
                // Cut to what the client, the log and the audit trail are given.
                Some(r) if !r.trim().is_empty() => Action::Deny(r.chars().take(super::MAX_REASON_CHARS).collect()),
                _ => return Err("a deny needs a reason".into()),
            },
            ("replace", CalloutPhase::Request) => {
                Action::Replace(wire.arguments.ok_or("a replace on request needs `arguments`")?)
            }
            ("replace", CalloutPhase::Response) => {
                Action::Replace(wire.result.ok_or("a replace on response needs `result`")?)
            }
            (other, _) => return Err(format!("unknown action `{}`", other.chars().take(40).collect::<String>())),
        };
        Ok(Answer { action })
    }
}

/// Why replaced arguments do not fit the tool: not an object, a required argument missing, a
/// value whose type, `enum` or `const` the schema refuses, an argument the schema does not take
/// (`additionalProperties: false`), or a value the gateway fixes changed (`tool_overrides`).
/// `schema` is the tool's input schema as the gateway lists it, which leaves out what the
/// gateway fixes or hides.
pub(crate) fn schema_misfit(schema: Option<&Value>, shape: Option<&Shape>, new: &RawValue) -> Option<String> {
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(new.get()) else {
        return Some("must be an object of arguments".into());
    };
    if let Some(shape) = shape {
        if let Some(k) = shape.fixed().iter().find(|(k, v)| args.get(k.as_str()) != Some(v)).map(|(k, _)| k) {
            return Some(format!("changes `{k}`, which the gateway sets"));
        }
    }
    let schema = schema?;
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if let Some(k) = required.iter().filter_map(Value::as_str).find(|k| !args.contains_key(*k)) {
        return Some(format!("lacks `{k}`, which the tool's schema requires"));
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (k, v) in &args {
        if shape.is_some_and(|s| s.fixed().contains_key(k)) {
            continue;
        }
        match props.and_then(|p| p.get(k)) {
            Some(p) => {
                if let Some(why) = shaped::misfit(p, v) {
                    return Some(format!("gives `{k}` a value that {why}"));
                }
            }
            None if closed => return Some(format!("adds `{k}`, which the tool's schema does not take")),
            None => {}
        }
    }
    None
}

/// Why a replaced result is not a tool result (an object whose `content` is a list).
pub(super) fn result_misfit(new: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct ToolResult {
        #[serde(rename = "content")]
        _content: Vec<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<ToolResult>(new.get()) {
        Ok(_) if new.get().trim_start().starts_with('{') => None,
        _ => Some("must be a tool result: an object with a `content` list".into()),
    }
}
