//! Content checks on everything an app sends that a model reads (`docs/governance.md`, "What the
//! apps answer"): a call's result (`text` content, `structuredContent` at any depth, resource
//! links, embedded resources), its errors, `resources/read` contents, `prompts/get` messages,
//! `completion/complete` values, the requests and notifications an app sends on a call's
//! stream (sampling, elicitation, progress, logging), event by event, and what a task tells its
//! client (`tasks/get`, `tasks/update`, `tasks/cancel` answers: status message, result). The gateway's
//! `content_policy` says what happens to hidden text (`strip`, `block`, `log`, `off`), its
//! `redact` what happens to secrets, and `max_result_bytes` how large a result may be.
//!
//! The check is made once per message, on the app's JSON text: a text of printable ASCII with
//! no escape that could spell a hidden character (`\u`, `\b`, `\f`), no secret and within its
//! bound is passed on as it came, without a copy or a parse. Only a message that needs a closer
//! look is parsed, walked (`walk.rs`) and, when something was removed, written anew.

mod walk;

use crate::base::hidden_text::Hit;
use crate::data::model::{ContentPolicy, Gateway, RedactMode};
use crate::mcp::jsonrpc::{Message, RawJson, Response, RpcErrorObject};
use crate::mcp::protocol::RpcCode;
use crate::mcp::redact;
use crate::observe::metrics;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;
use walk::{Found, Rewrite};

/// The checks of one call's answer, built from its gateway's settings; `None` from
/// [`ContentCheck::for_call`] when there is nothing to check.
pub struct ContentCheck {
    policy: ContentPolicy,
    redact: Option<RedactMode>,
    max_bytes: Option<u64>,
    /// A `tools/call`, or a `tasks/*` request following one: its answer means the tool ran (or
    /// runs), and its size is bounded by `max_result_bytes`.
    tool_call: bool,
    /// What the call's result is, for the `where` of a finding.
    place: &'static str,
    /// Named in the log lines of findings; shared, not copied: most calls find nothing.
    gateway: Arc<Gateway>,
    /// What the log entry is marked with (only written to when something is found).
    marks: Mutex<Vec<Value>>,
}

/// What a message is, for the `where` of a finding.
fn place(method: &str) -> &'static str {
    match method {
        "tools/call" => "result",
        "resources/read" => "resource",
        "prompts/get" => "prompt",
        "completion/complete" => "completion",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "task",
        _ => "result",
    }
}

impl ContentCheck {
    /// The checks of a call of `method` (and `tool`, its name at the gateway) on `gw`.
    pub fn for_call(gw: &Arc<Gateway>, method: &str, tool: Option<&str>) -> Option<Arc<ContentCheck>> {
        let c = &gw.configuration;
        let exempt = tool.is_some_and(|t| c.redact.exempt_tools.iter().any(|e| e == t));
        let redact = (!c.redact.is_off() && !exempt).then_some(c.redact.mode);
        let place = place(method);
        let of_tool = method == "tools/call" || place == "task";
        let by_tool = tool.and_then(|t| c.max_result_bytes_by_tool.get(t).copied());
        let max_bytes = if of_tool { by_tool.or(c.max_result_bytes) } else { None };
        if c.content_policy == ContentPolicy::Off && redact.is_none() && max_bytes.is_none() {
            return None;
        }
        Some(Arc::new(ContentCheck {
            policy: c.content_policy,
            redact,
            max_bytes,
            tool_call: of_tool,
            place,
            gateway: Arc::clone(gw),
            marks: Mutex::new(Vec::new()),
        }))
    }

    /// What the call's log entry is marked with, if anything was found.
    pub fn marks(&self) -> Option<Value> {
        let marks = self.marks.lock();
        (!marks.is_empty()).then(|| Value::Array(marks.clone()))
    }

    fn rewrite(&self) -> Rewrite {
        Rewrite {
            hidden: self.policy != ContentPolicy::Off,
            strip: self.policy == ContentPolicy::Strip,
            redact: self.redact.is_some(),
            replace: self.redact == Some(RedactMode::Redact),
        }
    }

    /// The app's response to a call of `method`, checked; an error replaces it when it is
    /// blocked or too large.
    pub fn response(&self, mut r: Response) -> Response {
        let ran = self.tool_call;
        match &mut r.outcome {
            Ok(result) => {
                let len = result.get().len() as u64;
                if let Some(max) = self.max_bytes.filter(|max| len > *max) {
                    return Response::error(r.id, self.too_large(len, max));
                }
                // A tool's own error (`isError`) is an error message the model reads.
                let place =
                    if self.place == "result" && ran && is_error_result(result.get()) { "error" } else { self.place };
                match self.raw(result, place) {
                    Ok(Some(clean)) => *result = clean,
                    Ok(None) => {}
                    Err(e) => return Response::error(r.id, self.blocked(e, place, ran)),
                }
            }
            Err(e) => {
                if let Err(blocked) = self.error(e) {
                    return Response::error(r.id, self.blocked(blocked, "error", ran));
                }
            }
        }
        r
    }

    /// A message on a call's stream other than its response (a request or notification of the
    /// app's): checked as the response is; `Err` when it is blocked, with the error the call is
    /// answered with instead.
    pub fn message(&self, m: Message) -> Result<Message, RpcErrorObject> {
        match m {
            Message::Response(r) => Ok(Message::Response(self.response(r))),
            Message::Request(mut req) => {
                let place = if req.method.starts_with("elicitation/") { "elicitation" } else { "sampling" };
                if let Some(params) = req.params.as_mut() {
                    match self.raw(params, place) {
                        Ok(Some(clean)) => *params = clean,
                        Ok(None) => {}
                        Err(hit) => return Err(self.blocked(hit, place, false)),
                    }
                }
                Ok(Message::Request(req))
            }
            Message::Notification(mut n) => {
                if let Some(params) = n.params.as_mut() {
                    match self.raw(params, "notification") {
                        Ok(Some(clean)) => *params = clean,
                        Ok(None) => {}
                        Err(hit) => return Err(self.blocked(hit, "notification", false)),
                    }
                }
                Ok(Message::Notification(n))
            }
        }
    }

    /// Checks one JSON text: `Ok(None)` to pass it on as it came, `Ok(Some)` rewritten, `Err`
    /// blocked by the first finding.
    fn raw(&self, json: &RawJson, place: &'static str) -> Result<Option<RawJson>, (Hit, String)> {
        let rw = self.rewrite();
        let text = json.get();
        let look = (rw.hidden && !plain_json(text)) || (rw.redact && redact::any(text));
        if !look {
            return Ok(None);
        }
        let mut value = json.to_value();
        let mut found = Found::default();
        walk::walk(&mut value, &mut String::new(), false, rw, &mut found);
        if !found.any() {
            return Ok(None);
        }
        self.report(&found, place);
        let block = match self.policy {
            ContentPolicy::Block => found.hidden.first().or(found.identifier.first()),
            ContentPolicy::Strip => found.identifier.first(),
            ContentPolicy::Log | ContentPolicy::Off => None,
        };
        if let Some(first) = block {
            return Err(first.clone());
        }
        Ok(found.changed.then(|| RawJson::from_value(&value)))
    }

    /// A JSON-RPC error of the app's: its message and data checked.
    fn error(&self, e: &mut RpcErrorObject) -> Result<(), (Hit, String)> {
        let mut value = json!({ "message": e.message, "data": e.data });
        let raw = RawJson::from_value(&value);
        if let Some(clean) = self.raw(&raw, "error")? {
            value = clean.to_value();
            if let Some(m) = value["message"].as_str() {
                e.message = m.to_string();
            }
            e.data = value.get("data").filter(|d| !d.is_null()).cloned();
        }
        Ok(())
    }

    /// Counts, logs (where and what, never the text) and marks what was found.
    fn report(&self, found: &Found, place: &'static str) {
        let action = match self.policy {
            ContentPolicy::Strip => "stripped",
            ContentPolicy::Block => "blocked",
            _ => "logged",
        };
        let mut mark = json!({ "where": place });
        if !found.hidden.is_empty() || !found.identifier.is_empty() {
            let mut classes = Vec::new();
            for (hit, at) in &found.hidden {
                metrics::hidden_text(hit.class.as_str(), action, place);
                classes.push(json!({ "class": hit.class.as_str(), "at": at, "action": action }));
            }
            for (hit, at) in &found.identifier {
                let action = if self.policy == ContentPolicy::Log { "logged" } else { "blocked" };
                metrics::hidden_text(hit.class.as_str(), action, place);
                classes.push(json!({ "class": hit.class.as_str(), "at": at, "action": action, "identifier": true }));
            }
            let findings = Value::Array(classes.clone());
            tracing::warn!(gateway = %self.gateway.id, r#where = place, %findings, "hidden text in an app's answer");
            mark["hidden_text"] = Value::Array(classes);
        }
        if !found.secrets.is_empty() {
            let action = if self.redact == Some(RedactMode::Redact) { "redacted" } else { "logged" };
            let mut kinds = serde_json::Map::new();
            for (kind, n) in &found.secrets {
                metrics::redacted(kind, action, *n as u64);
                kinds.insert((*kind).to_string(), json!(n));
            }
            let found = Value::Object(kinds.clone());
            tracing::info!(gateway = %self.gateway.id, r#where = place, action, kinds = %found, "secrets in an app's answer");
            mark["secrets"] = json!({ "action": action, "kinds": kinds });
        }
        self.marks.lock().push(mark);
    }

    fn blocked(&self, (hit, at): (Hit, String), place: &str, ran: bool) -> RpcErrorObject {
        let mut message = format!("the app's {place} was blocked: its {at} carries {hit} (content_policy)");
        if ran {
            message.push_str("; the tool ran, and calling it again runs it again");
        }
        RpcErrorObject::new(RpcCode::ContentRefused.code(), message).with_data(json!({
            "reason": "hidden_text", "class": hit.class.as_str(), "where": place, "at": at, "tool_ran": ran,
        }))
    }

    fn too_large(&self, len: u64, max: u64) -> RpcErrorObject {
        self.marks.lock().push(json!({ "where": self.place, "too_large": { "bytes": len, "max": max } }));
        let what = if self.place == "task" { "task's answer" } else { "result" };
        let message = format!(
            "the tool ran, but its {what} of {len} bytes is larger than this gateway allows ({max} bytes, \
             max_result_bytes); calling it again runs it again"
        );
        RpcErrorObject::new(RpcCode::ContentRefused.code(), message).with_data(json!({
            "reason": "too_large", "bytes": len, "max_bytes": max, "tool_ran": true,
        }))
    }
}

/// Whether `gw`'s clients may be given an identifier an app sent outside any call: the `uri`
/// of a resource update on the app's GET stream (`at` names it). Hidden text in it cannot be
/// removed without changing what it names, so under `strip` and `block` the message is dropped
/// (counted and logged as blocked); `log` passes it and reports it; `off` does not look.
pub(crate) fn identifier_passes(gw: &Gateway, at: &str, value: &str) -> bool {
    let policy = gw.configuration.content_policy;
    if policy == ContentPolicy::Off || (value.is_ascii() && plain_json(value)) {
        return true;
    }
    let (_, hits) = crate::base::hidden_text::strip(value);
    let Some(first) = hits.first() else { return true };
    let action = if policy == ContentPolicy::Log { "logged" } else { "blocked" };
    for hit in &hits {
        metrics::hidden_text(hit.class.as_str(), action, "notification");
    }
    let class = first.class.as_str();
    tracing::warn!(gateway = %gw.id, r#where = "notification", at, class, action, "hidden text in an app's identifier");
    policy == ContentPolicy::Log
}

fn is_error_result(text: &str) -> bool {
    text.contains("\"isError\":true") || text.contains("\"isError\": true")
}

/// JSON text in which no hidden character can be: printable ASCII (with the line breaks and
/// tabs of a pretty-printed text) and no escape that spells another character than a quote, a
/// backslash, a slash, a tab or a line break. One pass over the bytes, no copy.
pub(crate) fn plain_json(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                if matches!(b.get(i + 1), Some(b'u' | b'b' | b'f')) {
                    return false;
                }
                i += 2;
                continue;
            }
            0x20..=0x7E | b'\t' | b'\n' | b'\r' => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests;
