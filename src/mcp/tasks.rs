//! The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for stateless clients: an app
//! of the stateless revision may answer a `tools/call` with a task (`resultType: "task"`) that
//! the client then follows with `tasks/get`, `tasks/update` and `tasks/cancel`.
//!
//! toolgate keeps no table of tasks. The task id the client sees is toolgate's own: `tgt1.` and,
//! sealed (AES-256-GCM, the credential sealing key), the gateway, the credential that created it,
//! the app and the app's own task id. So any instance holding the key routes a `tasks/*` request
//! to its app without state, a task is followed only by the credential that created it, on the
//! gateway it was created through, and an app's task ids never reach clients (nor can a client
//! name another app's task). The decisions are in `README.md` ("Tasks").
//!
//! What a task carries to the client (its status message, its result, the questions it asks)
//! is an app's answer that a model reads: it gets the gateway's content checks (`mcp/content/`)
//! as the call's own answer does, under the tool's name sealed in the id (so that a tool's
//! exemption from redaction and its size bound hold for its tasks too); the result a task
//! carries gets the gateway's external guards on `response` as a call's result does
//! (`mcp/callout/task.rs`), on every instance that relays it.

use crate::base::secrets::Sealer;
use crate::data::model::Gateway;
use crate::mcp::apps::AppError;
use crate::mcp::callout::{self, TaskFacts};
use crate::mcp::content::ContentCheck;
use crate::mcp::jsonrpc::{self, RawJson, RawMembers, Response, RpcErrorObject};
use crate::mcp::modern::{self, Envelope};
use crate::mcp::protocol::RpcCode;
use crate::mcp::rpc_errors;
use crate::mcp::runtime::McpRuntime;
use crate::mcp::upstream::{CallContext, ClientEra};
use crate::observe::metrics::{self, ErrorType};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use toolgate_filters::Principal;

use modern::TASKS_EXTENSION as EXTENSION;

/// Prefix of the task ids toolgate issues (the rest is sealed).
const PREFIX: &str = "tgt1.";

/// The methods of the extension a client sends: those that name a task in `params.taskId`.
pub(crate) fn is_task_method(method: &str) -> bool {
    modern::name_field(method) == Some("taskId")
}

/// What a task id of toolgate's seals.
#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Sealed<'a> {
    #[serde(rename = "g", borrow)]
    gateway_id: Cow<'a, str>,
    #[serde(rename = "k", borrow)]
    key_id: Cow<'a, str>,
    #[serde(rename = "a", borrow)]
    app_id: Cow<'a, str>,
    #[serde(rename = "t", borrow)]
    task: Cow<'a, str>,
    /// The tool the task runs, by its name at the gateway (empty in ids issued before it was
    /// sealed in).
    #[serde(rename = "n", borrow, default)]
    tool: Cow<'a, str>,
}

/// What one of toolgate's task ids names: the app, the app's own task id, and the tool.
#[derive(PartialEq, Debug)]
struct Opened {
    app_id: String,
    task: String,
    tool: String,
}

/// Who follows tasks: the credential, on the gateway.
#[derive(Clone, Copy)]
pub(crate) struct Owner<'a> {
    pub gateway_id: &'a str,
    pub key_id: &'a str,
}

/// toolgate's task id for `app_id`'s task `task` of `tool`, created by `owner`.
fn issue(sealer: &Sealer, owner: Owner<'_>, app_id: &str, tool: &str, task: &str) -> String {
    let sealed = Sealed {
        gateway_id: owner.gateway_id.into(),
        key_id: owner.key_id.into(),
        app_id: app_id.into(),
        task: task.into(),
        tool: tool.into(),
    };
    format!("{PREFIX}{}", sealer.seal(&serde_json::to_vec(&sealed).unwrap_or_default()))
}

/// What one of toolgate's task ids names; `None` for an id toolgate did not issue, one altered,
/// or one issued to another credential or gateway.
fn open(sealer: &Sealer, owner: Owner<'_>, id: &str) -> Option<Opened> {
    let opened = sealer.open(id.strip_prefix(PREFIX)?).ok()?;
    let s: Sealed = serde_json::from_slice(&opened).ok()?;
    (s.gateway_id == owner.gateway_id && s.key_id == owner.key_id).then(|| Opened {
        app_id: s.app_id.into_owned(),
        task: s.task.into_owned(),
        tool: s.tool.into_owned(),
    })
}

/// An app's answer to a `tools/call` of `tool` (its name at the gateway), with the task id of a
/// task it created (`resultType: "task"`) replaced by toolgate's. Every other answer is returned
/// as it is, unread beyond a search of its text.
pub(crate) fn claim_created(mcp: &McpRuntime, owner: Owner<'_>, app_id: &str, tool: &str, r: Response) -> Response {
    let Ok(result) = &r.outcome else { return r };
    if !result.get().contains("\"task\"") {
        return r;
    }
    let mut v = result.to_value();
    if v.get("resultType").and_then(Value::as_str) != Some("task") {
        return r;
    }
    let Some(task) = v.get("taskId").and_then(Value::as_str) else { return r };
    let id = issue(&mcp.state.sealer, owner, app_id, tool, task);
    v["taskId"] = Value::String(id);
    Response { id: r.id, outcome: Ok(RawJson::from_value(&v)) }
}

/// `params` as the app takes them: its own task id, `_meta` translated as for any call (the
/// envelope's keys are the upstream's to write), every other member (`inputResponses`) as sent.
fn for_app(params: &RawJson, task: &str) -> RawJson {
    let Ok(RawMembers(members)) = params.read::<RawMembers>() else { return params.clone() };
    let task = RawJson::from_value(&Value::String(task.to_string()));
    let mut meta = None;
    let mut kept: Vec<(Cow<str>, &RawValue)> = Vec::with_capacity(members.len());
    for (k, v) in members {
        match k.as_ref() {
            "taskId" => kept.push((k, task.as_raw())),
            "_meta" => meta = modern::translate_meta(v),
            _ => kept.push((k, v)),
        }
    }
    if let Some(meta) = meta.as_ref() {
        kept.push((Cow::Borrowed("_meta"), meta.as_raw()));
    }
    RawJson::from_value(&RawMembers(kept))
}

/// The error of a `tasks/*` request from a client that did not declare the extension.
fn undeclared(method: &str) -> RpcErrorObject {
    RpcErrorObject::new(
        RpcCode::MissingRequiredClientCapability.code(),
        format!("{method} needs the client capability extensions[\"{EXTENSION}\"], which this request did not declare"),
    )
    .with_data(json!({ "requiredCapabilities": { "extensions": { EXTENSION: {} } } }))
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` from a stateless client: relayed to the app whose
/// task it names (the app's own id in place of toolgate's); the answer, to be given back, names
/// the task by the client's id for it and has had the gateway's content checks, and the
/// result in it (if any) its response guards, asked for `who`.
pub(crate) async fn follow(
    mcp: &Arc<McpRuntime>,
    gw: &Arc<Gateway>,
    env: &Envelope,
    (key_id, who): (&str, Option<&Principal>),
    req: &jsonrpc::Request,
    request_id: &str,
) -> Response {
    let started = Instant::now();
    let outcome = relay(mcp, gw, env, (key_id, who), req, request_id).await;
    let (r, app_id) = match outcome {
        Ok((r, opened, id)) => {
            let task = TaskFacts { id: &id, app: &opened.app_id, tool: &opened.tool, method: &req.method };
            (callout::guard_task_answer(mcp, gw, who, task, request_id, r).await, Some(opened.app_id))
        }
        Err(e) => (Response::error(req.id.clone(), e), None),
    };
    let error = r.outcome.as_ref().map_or_else(|e| ErrorType::Code(e.code), |_| ErrorType::None);
    if let Some(app_id) = &app_id {
        metrics::mcp_client_operation(&req.method, None, error, app_id, started.elapsed());
    }
    metrics::mcp_server_operation(&req.method, None, error, &gw.id, started.elapsed());
    r
}

/// `key_id` binds the task to its caller; `who` is that caller, whose own connection a per-user
/// app is called with.
async fn relay(
    mcp: &McpRuntime,
    gw: &Arc<Gateway>,
    env: &Envelope,
    (key_id, who): (&str, Option<&Principal>),
    req: &jsonrpc::Request,
    request_id: &str,
) -> Result<(Response, Opened, String), RpcErrorObject> {
    if !env.caps.tasks {
        return Err(undeclared(&req.method));
    }
    #[derive(Deserialize)]
    struct Named<'a> {
        #[serde(rename = "taskId", borrow, default)]
        task_id: Option<Cow<'a, str>>,
    }
    let params = req.params.as_ref();
    let id = params.and_then(|p| p.read::<Named>().ok()).and_then(|n| n.task_id);
    let Some(id) = id else {
        return Err(RpcErrorObject::invalid_params(format!("{} needs params.taskId (string)", req.method)));
    };
    let owner = Owner { gateway_id: &gw.id, key_id };
    let target = open(&mcp.state.sealer, owner, &id).filter(|o| gw.servers.contains(&o.app_id));
    let Some(opened) = target else {
        return Err(RpcErrorObject::invalid_params(format!("unknown task {id}")).with_data(json!({ "taskId": id })));
    };
    let (app_id, tool) = (&opened.app_id, &opened.tool);
    let params = params.map(|p| for_app(p, &opened.task));
    let ctx = CallContext {
        client_request_id: req.id.clone(),
        headers: vec![],
        client_era: ClientEra::Stateless,
        caller_upstream: None,
    };
    let answer = match mcp.apps.request(&gw.org_id, who, app_id, &req.method, params, &ctx).await {
        Ok(reply) => match reply.into_response().await {
            Ok(r) => r,
            Err(e) => rpc_errors::app_failure(&req.id, app_id, &e, request_id),
        },
        Err(AppError::Upstream { error, .. }) => rpc_errors::app_failure(&req.id, app_id, &error, request_id),
        Err(other) => rpc_errors::app_refusal(&req.id, &other, rpc_errors::ConnectLink::Url),
    };
    // The task is named to the client by toolgate's id, as it asked.
    let answer = match answer.outcome {
        Ok(result) if result.get().contains("\"taskId\"") => {
            let mut v = result.to_value();
            if v.get("taskId").is_some() {
                v["taskId"] = Value::String(id.to_string());
            }
            Response { id: req.id.clone(), outcome: Ok(RawJson::from_value(&v)) }
        }
        outcome => Response { id: req.id.clone(), outcome },
    };
    let tool = Some(tool.as_str()).filter(|t| !t.is_empty());
    let answer = match ContentCheck::for_call(gw, &req.method, tool) {
        Some(check) => check.response(answer),
        None => answer,
    };
    Ok((answer, opened, id.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::from_key([7u8; 32])
    }

    #[test]
    fn a_task_id_opens_only_for_the_credential_and_gateway_it_was_issued_to() {
        let s = sealer();
        let owner = Owner { gateway_id: "gw_1", key_id: "key_1" };
        let id = issue(&s, owner, "app", "report", "task-42");
        assert!(id.starts_with(PREFIX), "{id}");
        assert!(!id.contains("task-42"), "the app's id is sealed: {id}");
        let opened = Opened { app_id: "app".into(), task: "task-42".into(), tool: "report".into() };
        assert_eq!(open(&s, owner, &id), Some(opened));
        assert_eq!(open(&s, Owner { gateway_id: "gw_1", key_id: "key_2" }, &id), None);
        assert_eq!(open(&s, Owner { gateway_id: "gw_2", key_id: "key_1" }, &id), None);
        // Altered, foreign or plain ids name no task.
        let mut altered = id.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(open(&s, owner, &String::from_utf8(altered).unwrap()), None);
        assert_eq!(open(&Sealer::from_key([8u8; 32]), owner, &id), None);
        assert_eq!(open(&s, owner, "task-42"), None);
    }

    #[test]
    fn an_id_sealed_before_the_tool_was_opens_with_no_tool() {
        let s = sealer();
        let owner = Owner { gateway_id: "gw_1", key_id: "key_1" };
        let id = format!("{PREFIX}{}", s.seal(br#"{"g":"gw_1","k":"key_1","a":"app","t":"task-42"}"#));
        let opened = Opened { app_id: "app".into(), task: "task-42".into(), tool: String::new() };
        assert_eq!(open(&s, owner, &id), Some(opened));
    }

    #[test]
    fn the_app_gets_its_own_task_id_and_every_other_member_as_sent() {
        let params = RawJson::from_text(
            r#"{"taskId":"tgt1.x","inputResponses":{"k":{"action":"accept"}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{}},"trace":1}}"#
                .into(),
        )
        .unwrap();
        let v = for_app(&params, "task-42").to_value();
        assert_eq!(v["taskId"], "task-42");
        assert_eq!(v["inputResponses"]["k"]["action"], "accept");
        assert_eq!(v["_meta"]["trace"], 1);
        assert!(v["_meta"].get("io.modelcontextprotocol/protocolVersion").is_none(), "{v}");
        assert!(v["_meta"].get(modern::META_TOOLGATE_CLIENT_CAPABILITIES).is_some(), "{v}");
    }
}
