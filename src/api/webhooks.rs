//! `/webhooks`: an organisation's outbound webhooks and their deliveries (scope `admin`). The
//! secret is shown once, when it is made; it is kept sealed. Delivery itself is `events/`.

use super::{iso, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::data::model::{Delivery, Webhook};
use crate::edge::error::ApiError;
use crate::events::EVENTS;
use crate::outbound::sign;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateWebhook {
    /// Where deliveries are POSTed: https (http only in development or for a host in
    /// `webhooks.allowed_hosts`), not resolving inside the network.
    #[schema(min_length = 1, max_length = 2048)]
    pub url: String,
    /// Event names (`gateway.created`, `gateway.updated`, `gateway.deleted`, `app.connected`,
    /// `app.disconnected`, `error.critical`, `usage.limit_warning`, `tool.changed`) or `*`.
    #[schema(min_items = 1, max_items = 8)]
    pub events: Vec<String>,
    /// Used for signing: the client's own string (32-256 printable ASCII characters, no spaces;
    /// the HMAC key is its bytes), or `whsec_` + base64 of 24-64 random bytes (the key is the
    /// decoded bytes, as Standard Webhooks reads it); made (`whsec_`) when absent. Shown once.
    #[schema(min_length = 32, max_length = 256)]
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateSecret {
    /// Hours the old secret keeps signing beside the new one (0-72, default 24).
    #[schema(minimum = 0, maximum = 72)]
    pub grace_period_hours: Option<i64>,
    /// The new secret, as `secret` on create; made when absent. Shown once.
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateWebhook {
    #[schema(min_length = 1, max_length = 2048)]
    pub url: Option<String>,
    #[schema(min_items = 1, max_items = 8)]
    pub events: Option<Vec<String>>,
    /// Enables or disables deliveries (re-enabling clears why toolgate disabled it).
    pub enabled: Option<bool>,
}

fn events(list: &[String]) -> Result<Vec<String>, ApiError> {
    if list.is_empty() || list.len() > 8 {
        return Err(ApiError::validation("events", "1-8 event names"));
    }
    if let Some(bad) = list.iter().find(|e| *e != "*" && !EVENTS.contains(&e.as_str())) {
        let bad: String = bad.chars().take(64).collect();
        return Err(ApiError::validation(
            "events",
            format!("unknown event `{bad}`; expected one of {} or *", EVENTS.join(", ")),
        ));
    }
    let mut out = list.to_vec();
    out.dedup();
    Ok(out)
}

async fn url(call: &Call<'_>, raw: &str) -> Result<String, ApiError> {
    if raw.len() > 2048 {
        return Err(ApiError::validation("url", "at most 2048 characters"));
    }
    call.server.events.egress().resolve(raw).await.map_err(|e| ApiError::validation("url", e.to_string()))?;
    Ok(raw.to_string())
}

fn view(w: &Webhook) -> Value {
    json!({
        "id": w.id, "url": w.url, "events": w.events, "enabled": w.enabled,
        "disabled_reason": w.disabled_reason, "failing_since": w.failing_since.as_ref().map(iso),
        "previous_secret_until": w.previous_secret_until.as_ref().map(iso),
        "created_at": iso(&w.created_at), "updated_at": iso(&w.updated_at),
    })
}

fn delivery_view(d: &Delivery) -> Value {
    json!({
        "id": d.id, "event": d.event, "status": d.status, "attempts": d.attempts,
        "status_code": d.last_status_code, "last_error": d.last_error, "latency_ms": d.latency_ms,
        "next_attempt_at": d.next_attempt_at.as_ref().map(iso),
        "created_at": iso(&d.created_at), "delivered_at": d.delivered_at.as_ref().map(iso),
    })
}

fn secret_of(given: Option<String>) -> Result<String, ApiError> {
    match given {
        Some(s) => match sign::key_of(&s) {
            Ok(_) => Ok(s),
            Err(e) => Err(ApiError::validation("secret", e.to_string())),
        },
        None => Ok(sign::new_secret()),
    }
}

fn find(call: &Call<'_>) -> Result<std::sync::Arc<Webhook>, ApiError> {
    let who = call.who()?;
    call.server.state.webhook_of(&who.org_id, call.id()).ok_or(ApiError::NotFound("webhook"))
}

#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks",
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let items: Vec<Value> = call.server.state.webhooks_of(&who.org_id).iter().map(|w| view(w)).collect();
    Ok(Reply::ok(json!({ "webhooks": items })))
}

#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", request_body = CreateWebhook,
    responses((status = 201, description = "the webhook and, once, its secret", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: CreateWebhook = call.json()?;
    let events = events(&body.events)?;
    let secret = secret_of(body.secret)?;
    let url = url(call, &body.url).await?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    super::quotas::check(state, &who.org_id, super::quotas::Quota::Webhooks)?;
    let now = Utc::now();
    let w = state
        .save_webhook(Webhook {
            id: secrets::new_id("wh"),
            org_id: who.org_id.clone(),
            url,
            events,
            sealed_secret: state.sealer.seal(secret.as_bytes()),
            enabled: true,
            disabled_reason: None,
            failing_since: None,
            sealed_previous_secret: None,
            previous_secret_until: None,
            created_at: now,
            updated_at: now,
        })
        .await?;
    let mut data = view(&w);
    data["secret"] = Value::String(secret);
    Ok(Reply::created(data))
}

#[utoipa::path(patch, path = "/v1/webhooks/{webhook_id}", tag = "webhooks", params(("webhook_id" = String, Path)),
    request_body = UpdateWebhook,
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn update(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    find(call)?;
    let body: UpdateWebhook = call.json()?;
    let events = body.events.as_deref().map(events).transpose()?;
    let url = match &body.url {
        Some(u) => Some(url(call, u).await?),
        None => None,
    };
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let mut w = find(call)?.as_ref().clone();
    if let Some(u) = url {
        w.url = u;
    }
    if let Some(e) = events {
        w.events = e;
    }
    if let Some(on) = body.enabled {
        w.enabled = on;
        if on {
            w.disabled_reason = None;
            w.failing_since = None;
        }
    }
    w.updated_at = Utc::now();
    let w = state.save_webhook(w).await?;
    Ok(Reply::ok(view(&w)))
}

#[utoipa::path(delete, path = "/v1/webhooks/{webhook_id}", tag = "webhooks", params(("webhook_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let w = find(call)?;
    state.delete_webhook(&w.id).await?;
    Ok(Reply::message(format!("Webhook {} deleted", w.id)))
}

#[utoipa::path(get, path = "/v1/webhooks/{webhook_id}/deliveries", tag = "webhooks",
    params(("webhook_id" = String, Path), ("page" = Option<u32>, Query, minimum = 1), ("limit" = Option<u32>, Query, minimum = 1, maximum = 100)),
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn deliveries(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let w = find(call)?;
    let (page, limit) = call.pagination()?;
    let all = call.server.events.deliveries(&who.org_id, &w.id).await?;
    let total = all.len();
    let items: Vec<Value> = super::page_of(all, page, limit).iter().map(delivery_view).collect();
    Ok(Reply::ok(json!({ "deliveries": items, "pagination": super::pagination_json(page, limit, total) })))
}

#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/rotate-secret", tag = "webhooks", params(("webhook_id" = String, Path)),
    request_body = RotateSecret,
    responses((status = 200, description = "the webhook and, once, its new secret", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn rotate(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    find(call)?;
    let body: RotateSecret = call.json()?;
    let hours = body.grace_period_hours.unwrap_or(24);
    if !(0..=72).contains(&hours) {
        return Err(ApiError::validation("grace_period_hours", "must be between 0 and 72"));
    }
    let secret = secret_of(body.secret)?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let mut w = find(call)?.as_ref().clone();
    let now = Utc::now();
    if hours > 0 {
        w.sealed_previous_secret = Some(std::mem::take(&mut w.sealed_secret));
        w.previous_secret_until = Some(now + chrono::Duration::hours(hours));
    } else {
        w.sealed_previous_secret = None;
        w.previous_secret_until = None;
    }
    w.sealed_secret = state.sealer.seal(secret.as_bytes());
    w.updated_at = now;
    let w = state.save_webhook(w).await?;
    let mut data = view(&w);
    data["secret"] = Value::String(secret);
    Ok(Reply::ok(data))
}

#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/test", tag = "webhooks", params(("webhook_id" = String, Path)),
    responses((status = 202, description = "a `webhook.test` delivery, queued", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope), (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn test(call: &Call<'_>) -> ApiResult {
    let w = find(call)?;
    if !w.enabled {
        return Err(ApiError::Conflict("the webhook is disabled: enable it first".into()));
    }
    let d = call.server.events.test(&w).await?;
    Ok(Reply { status: 202, ..Reply::ok(delivery_view(&d)) })
}
