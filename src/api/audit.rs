//! `/audit`: the organisation's audit trail, paged and exported; and the trail's hook in the
//! dispatch ([`Trail`]): every management write answered 2xx becomes an entry (who, what, which
//! record, the record's stored JSON hashed before and after, and what the handler adds in
//! `Reply::audit`, such as a gateway's guards before and after) before the answer leaves.

use super::routes::{Mfa, Route};
use super::{ApiResult, Call, Reply};
use crate::data::audit::chain::record_hash;
use crate::data::audit::{Actor, AuditEvent, Filter, Target};
use crate::data::store::Kind;
use crate::edge::error::ApiError;
use http::Method;
use serde_json::{json, Value};
use toolgate_filters::Principal;

/// Who the record of a resource's writes names, and where its id comes from.
#[derive(Clone, Copy)]
enum Whose {
    /// The record the path's `{id}` names, or that a create returned (`id`, `client_id`).
    Path,
    /// The caller's organisation (its security settings and allowlist).
    Organisation,
    /// The caller's user (its profile, password, MFA, web sessions), or the one the body's
    /// `user_id` names (an MFA reset).
    User,
}

/// Per resource module: the target's kind, the store kind whose JSON is hashed before and after
/// (`None`: not read, the hashes are null), and whose record it is.
fn resource(module: &str) -> (&str, Option<Kind>, Whose) {
    match module {
        "gateways" => ("gateway", Some(Kind::Gateway), Whose::Path),
        "keys" => ("api_key", Some(Kind::ApiKey), Whose::Path),
        "service_accounts" => ("service_account", Some(Kind::ServiceAccount), Whose::Path),
        "webhooks" => ("webhook", Some(Kind::Webhook), Whose::Path),
        "alerts" => ("alert", Some(Kind::Alert), Whose::Path),
        "oauth_clients" => ("oauth_client", Some(Kind::OAuthClient), Whose::Path),
        "sessions" => ("session", Some(Kind::Session), Whose::Path),
        "account" => ("organization", Some(Kind::Organization), Whose::Organisation),
        "user" => ("user", Some(Kind::User), Whose::User),
        "team" => ("member", Some(Kind::User), Whose::Path),
        "mfa" => ("mfa", Some(Kind::Mfa), Whose::User),
        "admin" => ("configuration", None, Whose::Organisation),
        "apps" => ("app", None, Whose::Path),
        other => (other, None, Whose::Path),
    }
}

/// `gateways::update` -> `gateway.update`, `keys::revoke` -> `key.revoke`.
fn action(route: &Route) -> String {
    let (module, function) = route.handler_name.split_once("::").unwrap_or((route.handler_name, ""));
    format!("{}.{function}", module.strip_suffix('s').unwrap_or(module))
}

/// A write under way: what the trail read before the handler ran.
pub(super) struct Trail {
    before_hash: Option<String>,
}

impl Trail {
    /// Whether `route` is a write the trail records: every method but GET, except the batch
    /// itself (each of its operations is dispatched, and recorded, on its own).
    pub(super) fn records(route: &Route) -> bool {
        route.method != Method::GET && route.handler_name != "batch::run"
    }

    /// Reads the record's stored JSON before the write.
    pub(super) async fn before(call: &Call<'_>, route: &Route) -> Trail {
        let (_, store_kind, whose) = resource(module(route));
        let id = call.principal.as_deref().and_then(|who| target_id(call, who, whose, None));
        let before_hash = match (store_kind, id) {
            (Some(kind), Some(id)) => stored_hash(call, kind, &id).await,
            _ => None,
        };
        Trail { before_hash }
    }

    /// Appends the write's entry once it answered 2xx; the answer waits for it (Decision: a
    /// write is never acknowledged without its entry).
    pub(super) async fn after(self, call: &Call<'_>, route: &Route, reply: &Reply) -> Result<(), ApiError> {
        let Some(who) = call.principal.as_deref() else { return Ok(()) };
        let data = reply.data.as_ref();
        let created = data.and_then(|d| d.get("id").or_else(|| d.get("client_id"))).and_then(Value::as_str);
        let (kind_name, store_kind, whose) = resource(module(route));
        let id = target_id(call, who, whose, created);
        let after_hash = match (store_kind, &id) {
            (Some(kind), Some(id)) => stored_hash(call, kind, id).await,
            _ => None,
        };
        let mut detail = json!({ "status": reply.status, "user_id": who.user_id, "key_id": who.key_id });
        if let (Some(path_id), Whose::Organisation | Whose::User) = (call.id.as_deref(), whose) {
            detail["id"] = json!(path_id);
        }
        if let (Some(c), Some(path_id)) = (created, call.id.as_deref()) {
            if c != path_id {
                detail["created_id"] = json!(c);
            }
        }
        if route.mfa != Mfa::No {
            detail["mfa"] = json!(if route.mfa == Mfa::Always { "always" } else { "when" });
            detail["mfa_token"] = json!(call.headers.contains_key("x-mfa-token"));
        }
        if let (Some(Value::Object(more)), Value::Object(d)) = (&reply.audit, &mut detail) {
            d.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let event = AuditEvent::Write {
            action: action(route),
            target: Target { kind: kind_name.to_string(), id: id.unwrap_or_default() },
            before_hash: self.before_hash,
            after_hash,
            detail,
        };
        call.server.audit.append(&who.org_id, Actor::of(who), event).await.map(|_| ()).map_err(|e| {
            ApiError::Unavailable(format!("the change was made, but its audit entry is not written yet: {e}"))
        })
    }
}

impl Trail {
    /// A write refused to a caller of an organisation. At the MFA gate (a missing, wrong,
    /// expired or used `X-MFA-Token`) it becomes an entry `mfa.refused` that the answer waits
    /// for: who, which record, the route and its action, and whether a token was presented,
    /// never its value. A 403 (scope, role, authority) or a 409 becomes an entry
    /// `write.refused` written without the caller waiting, folded into a count past a share
    /// per minute (`Audit::refused`). Other refusals (400, 404, 429) are not recorded: nothing
    /// was attempted past a check on the request itself.
    pub(super) async fn refused(call: &Call<'_>, route: &Route, e: &ApiError) {
        let Some(who) = call.principal.as_deref() else { return };
        let (kind_name, _, whose) = resource(module(route));
        let target = Target { kind: kind_name.to_string(), id: target_id(call, who, whose, None).unwrap_or_default() };
        let route_name = format!("{} /v1{}", route.method, route.path);
        if !matches!(e, ApiError::MfaRequired { .. }) {
            if matches!(e.status(), 403 | 409) {
                let detail = json!({
                    "outcome": "refused", "status": e.status(), "code": e.code(), "action": action(route),
                    "route": route_name, "user_id": who.user_id, "key_id": who.key_id,
                });
                call.server.audit.refused(&who.org_id, Actor::of(who), "write.refused", target, detail);
            }
            return;
        }
        if route.mfa == Mfa::No {
            return;
        }
        let detail = json!({
            "outcome": "mfa_refused", "status": e.status(), "action": action(route),
            "route": route_name,
            "mfa_token": call.headers.contains_key("x-mfa-token"),
            "user_id": who.user_id, "key_id": who.key_id,
        });
        let event =
            AuditEvent::Write { action: "mfa.refused".into(), target, before_hash: None, after_hash: None, detail };
        if let Err(e) = call.server.audit.append(&who.org_id, Actor::of(who), event).await {
            tracing::warn!(error = %e, "the audit entry of a refused protected action is not written yet");
        }
    }
}

fn module(route: &Route) -> &'static str {
    route.handler_name.split("::").next().unwrap_or_default()
}

/// The id of the record a write changes (`created`: the id a create returned).
fn target_id(call: &Call<'_>, who: &Principal, whose: Whose, created: Option<&str>) -> Option<String> {
    match whose {
        Whose::Path => call.id.as_deref().or(created).map(str::to_string),
        Whose::Organisation => Some(who.org_id.clone()),
        // `/auth/mfa/reset` names the user it resets in its body.
        Whose::User => Some(
            serde_json::from_slice::<Value>(&call.body)
                .ok()
                .and_then(|b| b.get("user_id").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| who.user_id.clone()),
        ),
    }
}

/// SHA-256 of a record's stored JSON; `None` when there is none (or the store cannot say).
async fn stored_hash(call: &Call<'_>, kind: Kind, id: &str) -> Option<String> {
    match call.server.state.store.get(kind, id).await {
        Ok(json) => json.map(|j| record_hash(&j)),
        Err(e) => {
            tracing::warn!(error = %e, kind = kind.as_str(), "cannot read a record for its audit hash");
            None
        }
    }
}

#[utoipa::path(get, path = "/v1/audit", tag = "audit",
    params(("after_seq" = Option<u64>, Query, description = "entries after this sequence number (default 0)"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 100),
           ("action" = Option<String>, Query, description = "only this action, e.g. gateway.update, or mfa.refused for the protected actions refused at the MFA gate"),
           ("actor" = Option<String>, Query, description = "only this actor's id (key, service account)")),
    responses((status = 200, description = "entries in chain order and the cursor of the next page", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let after_seq = match call.query("after_seq") {
        None => 0,
        Some(s) => s.parse::<u64>().map_err(|_| ApiError::validation("after_seq", "must be an integer >= 0"))?,
    };
    let (_, limit) = call.pagination()?;
    let filter =
        Filter { action: call.query("action").map(str::to_string), actor: call.query("actor").map(str::to_string) };
    let page = call.server.audit.page(&who.org_id, after_seq, limit, &filter).await.map_err(unavailable)?;
    Ok(Reply::ok(json!({
        "entries": page.entries,
        "pagination": {
            "after_seq": after_seq, "limit": limit,
            "next_after_seq": page.next_after_seq, "has_next": page.next_after_seq.is_some(),
        },
    })))
}

#[utoipa::path(get, path = "/v1/audit/export", tag = "audit",
    responses((status = 200, description = "JSON lines (application/x-ndjson): every entry in chain order, then every checkpoint (the head is signed first, so the export ends with a signed head); `toolgate audit verify --public-key` checks it", content_type = "application/x-ndjson", body = String),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn export(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let interval = call.server.state.config().audit.checkpoint_interval;
    let lines = call.server.audit.export(&who.org_id, interval).await.map_err(unavailable)?;
    Ok(Reply { bytes: Some(("application/x-ndjson", lines)), ..Reply::ok(Value::Null) })
}

#[utoipa::path(get, path = "/v1/audit/key", tag = "audit",
    description = "The Ed25519 public key the audit checkpoints are signed with (also logged at start), for `toolgate audit verify --public-key`: `algorithm`, `key_id` (the `key_id` each signature names), `public_key` (base64), `public_key_hex`, and `checkpoint_interval_secs`. Take it from here or the log, never from the export it is to verify.",
    responses((status = 200, description = "the public key", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn key(call: &Call<'_>) -> ApiResult {
    call.who()?;
    let mut data = call.server.audit.signer().public_key_json();
    data["checkpoint_interval_secs"] = json!(call.server.state.config().audit.checkpoint_interval.as_secs());
    Ok(Reply::ok(data))
}

fn unavailable(e: crate::data::audit::AuditError) -> ApiError {
    ApiError::Unavailable(e.to_string())
}
