//! A gateway's external guards on the call path (`docs/governance.md`, "External guards"): the
//! guards of a `tools/call` are asked, in their order, before the call reaches its app
//! (`request`) and before its result reaches the client (`response`); each answers `allow`,
//! `deny` with a reason, or `replace` with new arguments or a new result. A replacement is
//! checked again as the gateway checks what it relays: arguments against the tool's input
//! schema (`answer.rs`), a result by the gateway's content checks (`mcp/content/`).
//!
//! A guard that cannot answer (a time-out, a refused connection, an HTTP error, an answer that
//! is not one of the three, or its bounds full) follows its `failure`: `closed` refuses the
//! call, `open` lets it go on. `mode: log` asks and records but acts on nothing, so a company
//! can try a guard on live traffic first. Every call of a guard is counted
//! (`toolgate_guard_calls_total{gateway,outcome}`) and timed; every decision is on the call's
//! request log entry (`guards`); a `deny` and a `replace` acted on are in the audit trail.
//!
//! Guards are a tenant's own services, so one organisation's slow guard must not slow another's
//! calls: at most `mcp.guards.concurrency_per_gateway` calls of one gateway's guards and
//! `concurrency_per_organization` of one organisation's are in flight at once (`slots.rs`), and a
//! call past them is not queued but follows `failure` (outcome `busy`). The signed HTTP call
//! itself is `outbound/guard_client.rs`.

mod answer;
mod slots;
mod task;
#[cfg(test)]
mod tests;

use crate::base::quick::{self, Quick};
use crate::data::audit::{Actor, Target as AuditTarget};
use crate::data::model::{Callout, CalloutFailure, CalloutMode, CalloutPhase, Gateway};
use crate::mcp::content::ContentCheck;
use crate::mcp::jsonrpc::{put, RawJson, Response, RpcErrorObject};
use crate::mcp::protocol::RpcCode;
use crate::mcp::runtime::McpRuntime;
use crate::mcp::shaped::Shape;
use crate::mcp::upstream::{ReplyStream, UpstreamReply};
use crate::observe::metrics;
use crate::outbound::egress::Egress;
use crate::outbound::guard_client::{GuardClient, SignedPost};
use answer::{Action, Answer};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_filters::Principal;

pub(crate) use answer::schema_misfit;
pub(crate) use slots::Slots;
pub(crate) use task::{guard_task_answer, TaskFacts};

/// The longest `timeout_ms` a guard may have: a guard is asked on the call's path, twice per
/// call at most, and a client waits for both.
pub(crate) const MAX_TIMEOUT_MS: u32 = 10_000;
/// The longest `reason` of a deny passed on to the client, in characters.
const MAX_REASON_CHARS: usize = 500;

/// The running parts of the guards: the HTTP client and the bounds on calls in flight.
#[derive(Default)]
pub(crate) struct Callouts {
    http: GuardClient,
    slots: Slots,
}

/// Who calls, as a guard is told (never a credential).
struct CallerFacts {
    kind: &'static str,
    user_id: String,
    org_id: String,
    actor: Actor,
}

/// A `tools/call`'s guards: what they are asked about, and what they decided (for the log entry).
pub(crate) struct CallGuards {
    mcp: Arc<McpRuntime>,
    gw: Arc<Gateway>,
    caller: CallerFacts,
    /// The tool by its name at the gateway, its app, and the app's name for it.
    tool: String,
    app: String,
    function: String,
    request_id: String,
    /// The arguments the app was sent (after the request guards), for the response guards.
    arguments: Mutex<Option<Box<RawValue>>>,
    /// The content checks a replaced result passes.
    content: Option<Arc<ContentCheck>>,
    decisions: Mutex<Vec<Value>>,
    /// The task whose result this is (toolgate's id for it), when the guards are asked about a
    /// task's result as `tasks/*` relays it (`task.rs`); the guard is told (`task.id`).
    task_id: Option<String>,
}

/// The tool a call names and what its arguments must fit, for [`CallGuards::on_request`].
pub(crate) struct ToolFacts<'a> {
    /// The tool's input schema as the gateway lists it.
    pub schema: Option<&'a Value>,
    pub shape: Option<&'a Shape>,
}

/// What a guard's call came to, before `mode` and `failure` are applied.
enum Said {
    Answered(Answer),
    /// No usable answer: `timeout`, `error` or `busy`, and why in words.
    Failed(&'static str, String),
}

impl CallGuards {
    /// The guards of a `tools/call` of `tool` (its name at the gateway) when the gateway has
    /// any that apply to it; `None` otherwise, which is what a gateway without guards pays.
    pub(crate) fn for_call(
        mcp: &Arc<McpRuntime>,
        gw: &Arc<Gateway>,
        principal: Option<&Principal>,
        (tool, app, function): (&str, &str, &str),
        request_id: &str,
        content: Option<Arc<ContentCheck>>,
    ) -> Option<CallGuards> {
        if gw.guards.is_empty() {
            return None;
        }
        let applies = |phase| gw.guards.iter().any(|g| g.applies(phase, tool));
        if !applies(CalloutPhase::Request) && !applies(CalloutPhase::Response) {
            return None;
        }
        let p = principal?;
        let caller = CallerFacts {
            kind: p.credential.as_str(),
            user_id: p.user_id.clone(),
            org_id: p.org_id.clone(),
            actor: Actor::of(p),
        };
        Some(CallGuards {
            mcp: Arc::clone(mcp),
            gw: Arc::clone(gw),
            caller,
            tool: tool.to_owned(),
            app: app.to_owned(),
            function: function.to_owned(),
            request_id: request_id.to_owned(),
            arguments: Mutex::new(None),
            content,
            decisions: Mutex::new(Vec::new()),
            task_id: None,
        })
    }

    /// Whether a guard is asked about results.
    pub(crate) fn on_response_too(&self) -> bool {
        self.gw.guards.iter().any(|g| g.applies(CalloutPhase::Response, &self.tool))
    }

    /// What the guards decided, for the log entry's `guards`.
    pub(crate) fn decisions(&self) -> Option<Value> {
        let d = self.decisions.lock();
        (!d.is_empty()).then(|| Value::Array(d.clone()))
    }

    /// Asks the request guards about `arguments`: `Ok(None)` lets the call go on as it is,
    /// `Ok(Some(a))` with the arguments `a` instead (checked against the tool's schema), `Err`
    /// refuses it with the error the client gets.
    pub(crate) async fn on_request(
        &self,
        arguments: Option<&RawValue>,
        facts: ToolFacts<'_>,
    ) -> Result<Option<Box<RawValue>>, RpcErrorObject> {
        let mut current: Option<Box<RawValue>> = None;
        for g in self.gw.guards.iter().filter(|g| g.applies(CalloutPhase::Request, &self.tool)) {
            let args = current.as_deref().or(arguments).map_or("{}", RawValue::get);
            let check = |new: &RawValue| schema_misfit(facts.schema, facts.shape, new);
            let said = self.ask(g, CalloutPhase::Request, (args, None), &check).await;
            if let Some(Action::Replace(new)) = self.act(g, CalloutPhase::Request, said)? {
                current = Some(new);
            }
        }
        if self.on_response_too() {
            *self.arguments.lock() = current.clone().or_else(|| arguments.map(ToOwned::to_owned));
        }
        Ok(current)
    }

    /// Asks the response guards about the app's response `r` (a result; an error goes by): the
    /// result as it came, replaced (then checked as the app's was), or an error saying that
    /// the tool already ran. A task the app made instead (`resultType: "task"`) has no result
    /// yet: its result is guarded where `tasks/*` relays it (`task.rs`), and here only if the
    /// app put one in the task's answer already.
    pub(crate) async fn on_response(&self, r: Response) -> Response {
        let Ok(result) = &r.outcome else { return r };
        if result.get().contains("\"task\"") {
            let v = result.to_value();
            if v.get("resultType").and_then(Value::as_str) == Some("task") {
                return self.on_task_answer(r, v).await;
            }
        }
        self.on_result(r).await
    }

    /// The response guards, in their order, on the tool's result `r`.
    async fn on_result(&self, mut r: Response) -> Response {
        // A task's arguments are not kept (toolgate keeps no table of tasks): `null` for a guard.
        let unknown = if self.task_id.is_some() { "null" } else { "{}" };
        let arguments = self.arguments.lock().as_ref().map_or_else(|| unknown.to_owned(), |a| a.get().to_owned());
        for g in self.gw.guards.iter().filter(|g| g.applies(CalloutPhase::Response, &self.tool)) {
            let Ok(result) = &r.outcome else { return r };
            let said =
                self.ask(g, CalloutPhase::Response, (&arguments, Some(result.get())), &answer::result_misfit).await;
            match self.act(g, CalloutPhase::Response, said) {
                Err(e) => return Response::error(r.id, e),
                Ok(Some(Action::Replace(new))) => {
                    r.outcome =
                        Ok(RawJson::from_text(new.get().to_owned()).unwrap_or_else(|| RawJson::from_value(&())));
                    if let Some(check) = &self.content {
                        r = check.response(r);
                    }
                }
                Ok(_) => {}
            }
        }
        r
    }

    /// Calls guard `g` about this call in `phase` (its arguments and, on `response`, its
    /// result), within its bounds and time-out. A replacement that `check` finds fault with
    /// (why, in words) is an error of the guard's, as a malformed answer is.
    async fn ask(
        &self,
        g: &Callout,
        phase: CalloutPhase,
        (arguments, result): (&str, Option<&str>),
        check: &(dyn Fn(&RawValue) -> Option<String> + Sync),
    ) -> Said {
        let runtime = &self.mcp.callouts;
        let limits = self.mcp.state.config().mcp.guards;
        let Some(_slot) = runtime.slots.take(&self.gw.id, &self.gw.org_id, &limits) else {
            metrics::guard_call(&self.gw.id, "busy", None);
            return Said::Failed("busy", "its gateway's or organisation's guard calls are all in flight".into());
        };
        let sealer = &self.mcp.state.sealer;
        let open = || sealer.open(&g.sealed_secret).ok().and_then(|s| String::from_utf8(s).ok());
        let Some(key) = runtime.http.key(&g.sealed_secret, open) else {
            metrics::guard_call(&self.gw.id, "error", None);
            return Said::Failed("error", "its secret cannot be opened".into());
        };
        let id = format!("{}.{}.{}", self.request_id, g.id, phase.as_str());
        let body = self.payload(&id, phase, arguments, result);
        let egress = || {
            let config = self.mcp.state.config();
            Egress {
                allowed_hosts: config.webhooks.allowed_hosts.clone(),
                allow_http: config.environment.allows_http(),
            }
        };
        let timeout = Duration::from_millis(u64::from(g.timeout_ms));
        let started = Instant::now();
        let post = SignedPost { url: &g.url, key: &key, id: &id, body, timeout };
        let said = match runtime.http.post(egress, post).await {
            Ok(bytes) => match Answer::parse(&bytes, phase) {
                Ok(a) => match &a.action {
                    Action::Replace(new) => match check(new) {
                        Some(why) => Said::Failed("error", format!("its replacement {why}")),
                        None => Said::Answered(a),
                    },
                    _ => Said::Answered(a),
                },
                Err(why) => Said::Failed("error", format!("its answer is malformed: {why}")),
            },
            Err(e) => Said::Failed(e.outcome(), crate::edge::error::chain(&e)),
        };
        let outcome = match &said {
            Said::Answered(a) => a.action.label(),
            Said::Failed(outcome, _) => outcome,
        };
        metrics::guard_call(&self.gw.id, outcome, Some(started.elapsed()));
        said
    }

    /// The JSON a guard is sent: the gateway, the caller, the tool, the arguments and, on
    /// `response`, the result (both as the app got and gave them), written once as the bytes
    /// that are signed and sent: the arguments and the result are JSON text already (read and
    /// checked when they came) and are copied in as they are, not parsed again into a tree.
    fn payload(&self, id: &str, phase: CalloutPhase, arguments: &str, result: Option<&str>) -> Vec<u8> {
        let size = 320 + id.len() + arguments.len() + result.map_or(0, str::len);
        let mut b = Vec::with_capacity(size);
        let member = |b: &mut Vec<u8>, name: &str, v: &str| {
            b.extend_from_slice(name.as_bytes());
            put(b, v);
        };
        member(&mut b, "{\"id\":", id);
        member(&mut b, ",\"phase\":", phase.as_str());
        member(&mut b, ",\"request_id\":", &self.request_id);
        member(&mut b, ",\"gateway\":{\"id\":", &self.gw.id);
        member(&mut b, ",\"name\":", &self.gw.name);
        member(&mut b, "},\"caller\":{\"kind\":", self.caller.kind);
        member(&mut b, ",\"user_id\":", &self.caller.user_id);
        member(&mut b, ",\"organization_id\":", &self.caller.org_id);
        member(&mut b, "},\"tool\":{\"name\":", &self.tool);
        member(&mut b, ",\"app\":", &self.app);
        member(&mut b, ",\"function\":", &self.function);
        b.extend_from_slice(b"},\"arguments\":");
        b.extend_from_slice(arguments.as_bytes());
        if let Some(result) = result {
            b.extend_from_slice(b",\"result\":");
            b.extend_from_slice(result.as_bytes());
        }
        if let Some(task) = &self.task_id {
            member(&mut b, ",\"task\":{\"id\":", task);
            b.push(b'}');
        }
        b.push(b'}');
        b
    }

    /// What guard `g`'s answer does to the call under its `mode` and `failure`, recorded:
    /// `Err` refuses it, `Ok(Some(Replace))` replaces, anything else lets it go on.
    fn act(&self, g: &Callout, phase: CalloutPhase, said: Said) -> Result<Option<Action>, RpcErrorObject> {
        let enforce = g.mode == CalloutMode::Enforce;
        let mut decision = json!({ "guard": g.id, "phase": phase.as_str(), "mode": g.mode });
        let acted = match said {
            Said::Answered(a) => {
                decision["action"] = json!(a.action.label());
                if let Action::Deny(reason) = &a.action {
                    decision["reason"] = json!(reason);
                }
                a.action
            }
            Said::Failed(outcome, why) => {
                decision["action"] = json!(outcome);
                decision["error"] = json!(why);
                decision["failure"] = json!(g.failure);
                if !enforce || g.failure == CalloutFailure::Open {
                    self.decisions.lock().push(decision);
                    return Ok(None);
                }
                self.decisions.lock().push(decision);
                return Err(self.unavailable(g, phase, outcome, &why));
            }
        };
        self.decisions.lock().push(decision);
        if !enforce {
            return Ok(None);
        }
        match acted {
            Action::Allow => Ok(None),
            Action::Deny(reason) => {
                self.audit(g, phase, "tool_call.guard_denied", json!({ "reason": reason }));
                Err(self.denied(g, phase, &reason))
            }
            Action::Replace(new) => {
                self.audit(g, phase, "tool_call.guard_replaced", json!({}));
                Ok(Some(Action::Replace(new)))
            }
        }
    }

    /// A `deny` or `replace` in the audit trail (folded past a share per minute, as other
    /// refusals of a caller are: a guard that denies every call does not flood the trail).
    fn audit(&self, g: &Callout, phase: CalloutPhase, action: &str, mut detail: Value) {
        detail["guard"] = json!(g.id);
        detail["phase"] = json!(phase.as_str());
        detail["tool"] = json!(self.tool);
        detail["request_id"] = json!(self.request_id);
        let target = AuditTarget { kind: "gateway".into(), id: self.gw.id.clone() };
        self.mcp.audit.refused(&self.gw.org_id, self.caller.actor.clone(), action, target, detail);
    }

    /// The error of a call a guard denied: before the call, a denial of the call (-32012, as a
    /// rule's); on the result, a refusal of the answer saying that the tool ran (-32013).
    fn denied(&self, g: &Callout, phase: CalloutPhase, reason: &str) -> RpcErrorObject {
        let reason: String = reason.chars().filter(|c| !c.is_control()).collect();
        let data = |why: &str| json!({ "guard": g.id, "reason": why, "detail": reason, "tool_ran": phase == CalloutPhase::Response });
        match phase {
            CalloutPhase::Request => {
                RpcErrorObject::new(RpcCode::DeniedByRule.code(), format!("The gateway's guard denied the call: {reason}"))
                    .with_data(data("guard_denied"))
            }
            CalloutPhase::Response => RpcErrorObject::new(
                RpcCode::ContentRefused.code(),
                format!(
                    "The gateway's guard denied the result: {reason}; the tool already ran, and calling it again runs it again"
                ),
            )
            .with_data(data("guard_denied")),
        }
    }

    /// The error of a call whose guard could not answer under `failure: closed`.
    fn unavailable(&self, g: &Callout, phase: CalloutPhase, outcome: &str, why: &str) -> RpcErrorObject {
        let ran = phase == CalloutPhase::Response;
        let what = if ran { "result" } else { "call" };
        let mut message = format!("The gateway's guard could not be asked ({outcome}), so the {what} is refused");
        if ran {
            message.push_str("; the tool already ran");
        }
        let code = if ran { RpcCode::ContentRefused } else { RpcCode::DeniedByRule };
        RpcErrorObject::new(code.code(), message)
            .with_data(json!({ "guard": g.id, "reason": format!("guard_{outcome}"), "tool_ran": ran }))
            .with_detail(why.to_owned())
    }
}

/// The app's reply with the response guards on it: a response asked about now, a stream's at
/// its end (`ReplyStream::guarded`).
///
/// Not an `async fn`: without response guards (most calls) the reply is ready in a future of its
/// own size, and only a guard's round trip is boxed; an `async fn` would hold the reply and the
/// guard's future (near 3 KB) in every call's future.
pub(crate) fn guard_reply<E: Send + 'static>(
    reply: Result<UpstreamReply, E>,
    guards: Option<Arc<CallGuards>>,
) -> Quick<'static, Result<UpstreamReply, E>> {
    let Some(g) = guards.filter(|g| g.on_response_too()) else { return quick::now(reply) };
    match reply {
        Ok(UpstreamReply::Response(r)) => {
            quick::later(async move { Ok(UpstreamReply::Response(g.on_response(r).await)) })
        }
        Ok(UpstreamReply::Stream(s)) => quick::now(Ok(UpstreamReply::Stream(s.guarded(g)))),
        Err(e) => quick::now(Err(e)),
    }
}

/// A stream (a continued call's) with the response guards on its end.
pub(crate) fn guard_stream(stream: ReplyStream, guards: Option<&Arc<CallGuards>>) -> ReplyStream {
    match guards.filter(|g| g.on_response_too()) {
        Some(g) => stream.guarded(Arc::clone(g)),
        None => stream,
    }
}
