//! The response guards on a task's result. A `tools/call` that an app answers with a task
//! (`resultType: "task"`, the tasks extension) has no result yet; the tool's result comes later
//! in a task's answer (`tasks/get` of the completed task, or any `tasks/*` answer that carries a
//! `result`), which toolgate relays from the app without keeping it (`mcp/tasks.rs`: no table of
//! tasks, so that any instance follows any task). There is no moment at which toolgate holds a
//! finished task, so the guards on `response` are asked each time a task's answer with a result
//! passes through, on whichever instance relays it: no reader can get a task's result that the
//! guards did not see, with the semantics of a call's own result (allow, deny saying the tool
//! already ran, replace checked again by the content checks, `mode: log`), the decisions on a
//! request log entry of their own and a deny or replace in the audit trail.
//!
//! What a guard is told differs in two ways: `task.id` (toolgate's id of the task, the same on
//! every read, so that a guard can tell a result read again), and `arguments: null` (they are
//! not kept with the task).

use super::CallGuards;
use crate::data::model::Gateway;
use crate::data::reqlog::{Answer, EntryWriter};
use crate::mcp::content::ContentCheck;
use crate::mcp::jsonrpc::{RawJson, Response};
use crate::mcp::protocol::RpcCode;
use crate::mcp::runtime::McpRuntime;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;
use toolgate_filters::Principal;

/// The task a relayed answer is about, from its sealed id.
pub(crate) struct TaskFacts<'a> {
    /// toolgate's id of the task, as the client names it.
    pub id: &'a str,
    pub app: &'a str,
    /// The tool the task runs, by its name at the gateway.
    pub tool: &'a str,
    /// The `tasks/*` method whose answer this is.
    pub method: &'a str,
}

/// A task's answer `r`, relayed to `principal` (already content-checked) with the gateway's
/// response guards asked about the tool's result in it, if it carries one: as it came, with
/// the result a guard replaced, or the error the call's own result would have become.
pub(crate) async fn guard_task_answer(
    mcp: &Arc<McpRuntime>,
    gw: &Arc<Gateway>,
    principal: Option<&Principal>,
    task: TaskFacts<'_>,
    request_id: &str,
    r: Response,
) -> Response {
    if gw.guards.is_empty() {
        return r;
    }
    let Ok(answer) = &r.outcome else { return r };
    if !answer.get().contains("\"result\"") {
        return r;
    }
    let v = answer.to_value();
    if v.get("result").is_none() {
        return r;
    }
    let function = mcp.catalogue(gw).await.entry(task.tool, false).map(|(_, t)| t.name.clone());
    let function = function.as_deref().unwrap_or(task.tool);
    let content = ContentCheck::for_call(gw, task.method, Some(task.tool));
    let names = (task.tool, task.app, function);
    let Some(mut guards) = CallGuards::for_call(mcp, gw, principal, names, request_id, content.clone()) else {
        return r;
    };
    if !guards.on_response_too() {
        return r;
    }
    guards.task_id = Some(task.id.to_owned());
    let started = Instant::now();
    let r = guards.on_task_answer(r, v).await;
    let params = json!({ "taskId": task.id }).to_string();
    let mut entry = EntryWriter::begin(gw, task.app, function, &params);
    entry.request_id(request_id);
    if let Some(p) = principal {
        entry.caller(&p.key_id, &p.user_id);
    }
    if let Some(d) = guards.decisions() {
        entry.guards(&d);
    }
    if let Some(marks) = content.as_ref().and_then(|c| c.marks()) {
        entry.content(&marks);
    }
    let elapsed = started.elapsed();
    let record = match &r.outcome {
        Ok(result) => entry.finish(elapsed, false, 200, Answer::Result(result)),
        Err(e) => {
            let detail = e.detail.as_deref().map(String::as_str);
            let status = RpcCode::logged_status(e.code, 200);
            entry.finish(elapsed, true, status, Answer::Error { code: e.code, message: &e.message, detail })
        }
    };
    mcp.reqlog.record(record);
    r
}

impl CallGuards {
    /// A task's answer `r` (its text read as `v`) with the response guards asked about the
    /// `result` in it: unchanged when it has none or they let it be, with their replacement in
    /// its place, or the error that a denied result is (the whole answer: the client is told
    /// the tool already ran, and nothing of the result).
    pub(super) async fn on_task_answer(&self, r: Response, v: Value) -> Response {
        let Some(result) = v.get("result") else { return r };
        let asked = RawJson::from_value(result);
        let guarded = self.on_result(Response { id: r.id.clone(), outcome: Ok(asked) }).await;
        match guarded.outcome {
            Err(e) => Response::error(r.id, e),
            Ok(after) => Response { id: r.id, outcome: Ok(as_the_guards_read(v, &after)) },
        }
    }
}

/// The task's answer as the guards read it (`v`, the app's text parsed once) with `result` as
/// they left it: what the client gets, never the app's own text, in which a member written twice
/// would show a reader that keeps the first one a result no guard read.
pub(super) fn as_the_guards_read(mut v: Value, result: &RawJson) -> RawJson {
    v["result"] = result.to_value();
    RawJson::from_value(&v)
}
