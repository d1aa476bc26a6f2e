//! `/alerts`: an organisation's usage alerts (scope `admin`). Watching and notifying is
//! `events/alerts.rs`; the Slack URL is kept sealed and shown by its host only.

use super::{iso, ApiResult, Call, Reply};
use crate::data::model::{Alert, Delivery};
use crate::edge::error::ApiError;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

/// Alerts one organisation may hold: each is checked against every usage count taken.
const MAX_ALERTS: usize = 25;

/// Notifications listed with an alert.
const RECENT_NOTIFICATIONS: usize = 20;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Notification {
    /// Where an e-mail goes (needs `smtp:` in the configuration).
    #[schema(min_length = 3, max_length = 254)]
    pub email: Option<String>,
    /// A Slack incoming-webhook URL (https; the same egress rules as webhooks).
    #[schema(min_length = 1, max_length = 2048)]
    pub slack: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateAlert {
    /// `rate_limit`: a key of the organisation using `threshold` percent of a rate limit.
    #[serde(rename = "type")]
    pub kind: String,
    /// Percent of the limit, 1-100.
    #[schema(minimum = 1, maximum = 100)]
    pub threshold: i64,
    /// At least one of `email` and `slack`.
    pub notification: Notification,
}

fn view(a: &Alert) -> Value {
    json!({
        "id": a.id, "type": a.kind, "threshold": a.threshold,
        "notification": { "email": a.email, "slack": a.slack_host.as_ref().map(|h| format!("{h}/…")) },
        "created_at": iso(&a.created_at), "last_triggered_at": a.last_triggered_at.as_ref().map(iso),
    })
}

fn notification_view(d: &Delivery) -> Value {
    json!({
        "id": d.id, "channel": d.channel, "status": d.status, "attempts": d.attempts,
        "last_error": d.last_error, "next_attempt_at": d.next_attempt_at.as_ref().map(iso),
        "usage_percent": d.data.get("usage_percent"), "key_id": d.data.get("key_id"),
        "created_at": iso(&d.created_at), "delivered_at": d.delivered_at.as_ref().map(iso),
    })
}

async fn find(call: &Call<'_>) -> Result<Alert, ApiError> {
    let who = call.who()?;
    call.server.events.alert_of(&who.org_id, call.id()).await?.ok_or(ApiError::NotFound("alert"))
}

#[utoipa::path(get, path = "/v1/alerts", tag = "alerts",
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let alerts = call.server.events.watcher.alerts_of(&who.org_id).await?;
    Ok(Reply::ok(json!({ "alerts": alerts.iter().map(view).collect::<Vec<_>>() })))
}

#[utoipa::path(post, path = "/v1/alerts", tag = "alerts", request_body = CreateAlert,
    responses((status = 201, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: CreateAlert = call.json()?;
    if body.kind != "rate_limit" {
        let kind: String = body.kind.chars().take(64).collect();
        return Err(ApiError::validation("type", format!("`{kind}`: expected rate_limit")));
    }
    let threshold = u8::try_from(body.threshold)
        .ok()
        .filter(|t| (1..=100).contains(t))
        .ok_or_else(|| ApiError::validation("threshold", "a percentage between 1 and 100"))?;
    let events = &call.server.events;
    let Notification { email, slack } = body.notification;
    if email.is_none() && slack.is_none() {
        return Err(ApiError::validation("notification", "name an email, a slack URL, or both"));
    }
    if let Some(e) = &email {
        if e.len() > 254 || e.parse::<lettre::Address>().is_err() {
            return Err(ApiError::validation("notification.email", "not an e-mail address"));
        }
        if !events.can_email() {
            return Err(ApiError::validation(
                "notification.email",
                "this server sends no e-mail (no smtp: configured)",
            ));
        }
    }
    let slack_host = match &slack {
        Some(url) => {
            if url.len() > 2048 {
                return Err(ApiError::validation("notification.slack", "at most 2048 characters"));
            }
            let target = events
                .egress()
                .resolve(url)
                .await
                .map_err(|e| ApiError::validation("notification.slack", e.to_string()))?;
            Some(format!("{}://{}", target.url.scheme(), target.host))
        }
        None => None,
    };
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    if events.watcher.alerts_of(&who.org_id).await?.len() >= MAX_ALERTS {
        return Err(ApiError::Conflict(format!("an organisation holds at most {MAX_ALERTS} alerts")));
    }
    let alert = Alert {
        id: crate::base::secrets::new_id("alert"),
        org_id: who.org_id.clone(),
        kind: body.kind,
        threshold,
        email,
        sealed_slack: slack.map(|url| state.sealer.seal(url.as_bytes())),
        slack_host,
        created_at: Utc::now(),
        last_triggered_at: None,
    };
    events.save_alert(&alert).await?;
    Ok(Reply::created(view(&alert)))
}

#[utoipa::path(get, path = "/v1/alerts/{alert_id}", tag = "alerts", params(("alert_id" = String, Path)),
    responses((status = 200, description = "the alert and its latest notifications", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    let alert = find(call).await?;
    let sent = call.server.events.notifications(&alert.org_id, &alert.id).await?;
    let mut data = view(&alert);
    data["notifications"] = sent.iter().take(RECENT_NOTIFICATIONS).map(notification_view).collect();
    Ok(Reply::ok(data))
}

#[utoipa::path(delete, path = "/v1/alerts/{alert_id}", tag = "alerts", params(("alert_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let _guard = call.server.state.lock_writes(&who.org_id).await?;
    let alert = find(call).await?;
    call.server.events.delete_alert(&alert).await?;
    Ok(Reply::message(format!("Alert {} deleted", alert.id)))
}
