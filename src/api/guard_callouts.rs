//! A gateway's `guards` as the API takes and shows them: the external services asked before and
//! after its tool calls (`docs/governance.md`, "External guards"; the call path is
//! `mcp/callout/`). Each guard has its own signing secret, made when the guard is added,
//! returned once in that answer (`guards[i].secret`) and stored sealed, as a webhook's is; an
//! update keeps a guard, and its secret, by naming its `id`. Setting or loosening guards is a
//! protected change of the gateway (`gateway_guards.rs`, the row `guards`).

use super::Call;
use crate::base::secrets;
use crate::data::model::{Callout, CalloutFailure, CalloutMode, CalloutPhase, Gateway};
use crate::edge::error::ApiError;
use crate::mcp::callout::MAX_TIMEOUT_MS;
use crate::outbound::sign;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

/// Most guards of one gateway: each may be asked twice per call, one after the other.
pub(crate) const MAX_GUARDS: usize = 8;
/// A guard's time-out when none is given.
const DEFAULT_TIMEOUT_MS: u32 = 2_000;
/// Longest `tools` glob, in characters.
const MAX_GLOB_CHARS: usize = 256;

/// One guard as a create or update gives it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GuardInput {
    /// The id of a guard the gateway has, to keep it and its secret; left out for a new guard,
    /// whose secret the answer carries once.
    #[serde(default)]
    pub id: Option<String>,
    /// Where the calls are POSTed: https (http in development or for a host in
    /// `webhooks.allowed_hosts`), not an address inside the network; at most 2048 characters.
    pub url: String,
    /// `request`, `response` or both.
    pub on: Vec<CalloutPhase>,
    /// The tools asked about, by their names at the gateway: a glob (`*`, `?`); default `*`.
    #[serde(default)]
    pub tools: Option<String>,
    /// 1-10000 (default 2000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    pub timeout_ms: Option<u32>,
    /// `closed` (default): a guard that cannot answer refuses the call; `open`: the call goes on.
    #[serde(default)]
    pub failure: CalloutFailure,
    /// `enforce` (default) acts on the answers; `log` records them and lets every call go on.
    #[serde(default)]
    pub mode: CalloutMode,
}

/// The guards as given, checked; each new one with its secret (shown once: [`shown_once`]).
pub(crate) async fn validate(
    call: &Call<'_>,
    kept: &[Callout],
    given: Vec<GuardInput>,
) -> Result<(Vec<Callout>, Vec<(String, String)>), ApiError> {
    if given.len() > MAX_GUARDS {
        return Err(ApiError::validation("guards", format!("at most {MAX_GUARDS} guards")));
    }
    let (mut out, mut secrets_made) = (Vec::with_capacity(given.len()), Vec::new());
    for (i, g) in given.into_iter().enumerate() {
        let field = |f: &str| format!("guards[{i}].{f}");
        let (id, sealed_secret) = match &g.id {
            Some(id) => match kept.iter().find(|k| &k.id == id) {
                Some(k) if !out.iter().any(|o: &Callout| &o.id == id) => (id.clone(), k.sealed_secret.clone()),
                _ => {
                    return Err(ApiError::validation(
                        field("id"),
                        "is not a guard of this gateway (leave it out for a new one)",
                    ))
                }
            },
            None => {
                let id = secrets::new_id("grd");
                let secret = sign::new_secret();
                let sealed = call.server.state.sealer.seal(secret.as_bytes());
                secrets_made.push((id.clone(), secret));
                (id, sealed)
            }
        };
        if g.url.len() > 2048 {
            return Err(ApiError::validation(field("url"), "at most 2048 characters"));
        }
        call.server
            .events
            .egress()
            .resolve(&g.url)
            .await
            .map_err(|e| ApiError::validation(field("url"), e.to_string()))?;
        let mut on = g.on;
        on.dedup();
        if on.is_empty() || on.len() > 2 {
            return Err(ApiError::validation(field("on"), "must name request, response or both, once each"));
        }
        let tools = g.tools.unwrap_or_else(|| "*".into());
        if tools.is_empty() || tools.chars().count() > MAX_GLOB_CHARS || !tools.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ApiError::validation(
                field("tools"),
                format!("must be 1-{MAX_GLOB_CHARS} printable ASCII characters"),
            ));
        }
        let timeout_ms = g.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(ApiError::validation(field("timeout_ms"), format!("must be between 1 and {MAX_TIMEOUT_MS}")));
        }
        out.push(Callout { id, url: g.url, on, tools, timeout_ms, failure: g.failure, mode: g.mode, sealed_secret });
    }
    Ok((out, secrets_made))
}

/// A guard as the API and the audit trail show it: everything but its secret.
pub(crate) fn shown(c: &Callout) -> Value {
    json!({
        "id": c.id, "url": c.url, "on": c.on, "tools": c.tools, "timeout_ms": c.timeout_ms,
        "failure": c.failure, "mode": c.mode,
    })
}

/// The gateway's guards as shown, each new one (`made`) with its secret: the one answer that
/// carries it.
pub(crate) fn shown_once(g: &Gateway, made: &[(String, String)]) -> Value {
    let with_secret = |c: &Callout| {
        let mut v = shown(c);
        if let Some((_, secret)) = made.iter().find(|(id, _)| *id == c.id) {
            v["secret"] = json!(secret);
        }
        v
    };
    Value::Array(g.guards.iter().map(with_secret).collect())
}

/// An update's answer (the gateway as `GET` shows it) with the secrets of the guards it added.
pub(crate) fn with_secrets(reply: &mut super::Reply, g: &Gateway, made: &[(String, String)]) {
    if let Some(data) = reply.data.as_mut() {
        data["guards"] = shown_once(g, made);
    }
}
