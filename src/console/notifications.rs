//! Where usage is told: webhooks (`/webhooks`: the list, one's deliveries, a new one with its
//! signing secret shown once, deleting one) and usage alerts (`/alerts`).

use super::html::{self, escape};
use super::{data, field, rows, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use serde_json::json;

pub(super) async fn webhooks(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let got = ctx.get("/webhooks").await?;
    let items = rows(&got, "webhooks");
    let columns = [
        ("Id", "id"),
        ("URL", "url"),
        ("Events", "events"),
        ("Enabled", "enabled"),
        ("Failing since", "failing_since"),
    ];
    let delete = |id: &str| html::button(ctx, &format!("/webhooks/{}/delete", seg(id)), ("Delete", id), false, true);
    let mut body = html::table_with("Webhooks", &items, &columns, true, delete);
    if let Some(id) = ctx.query("deliveries") {
        let d = ctx.get(&format!("/webhooks/{}/deliveries?limit=50", seg(id))).await?;
        let columns = [
            ("Id", "id"),
            ("Event", "event"),
            ("Status", "status"),
            ("Attempts", "attempts"),
            ("HTTP", "status_code"),
            ("Error", "last_error"),
            ("Created", "created_at"),
        ];
        body.push_str(&html::table(&format!("Deliveries of {id}"), &rows(&d, "deliveries"), &columns, None));
    }
    body.push_str(&format!(
        "<form method=\"get\" action=\"{}\">{}<button type=\"submit\">Show deliveries</button></form>",
        ctx.href("/webhooks"),
        html::input("Webhook id", "deliveries", "", "required")
    ));
    body.push_str("<h2>New webhook</h2>");
    body.push_str(&html::form_open(ctx, "/webhooks", "create"));
    body.push_str(&html::input("URL", "url", "", "type=\"url\" required"));
    body.push_str(&html::input("Events (separated by commas, or *)", "events", "*", "required"));
    body.push_str("<button type=\"submit\">Create webhook</button></form>");
    Ok(ctx.page("Webhooks", "/webhooks", &body))
}

async fn webhook_created(ctx: &Ctx<'_>, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let events: Vec<&str> = field(fields, "events").split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    let body = json!({ "url": field(fields, "url"), "events": events });
    let w = data(ctx.api(Method::POST, "/webhooks", Some(body), None).await?);
    let page = format!(
        "{}<p>Webhook <code>{}</code> posts to {}.</p><p><a href=\"{}\">Back</a></p>",
        html::secret("Signing secret", &html::text(&w["secret"])),
        escape(&html::text(&w["id"])),
        escape(&html::text(&w["url"])),
        ctx.href("/webhooks")
    );
    Ok(ctx.page("Webhook created", "/webhooks", &page))
}

pub(super) async fn alerts(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let got = ctx.get("/alerts").await?;
    let mut items = rows(&got, "alerts");
    for a in &mut items {
        a["email"] = a["notification"]["email"].clone();
        a["slack"] = a["notification"]["slack"].clone();
    }
    let columns = [
        ("Id", "id"),
        ("Type", "type"),
        ("Threshold %", "threshold"),
        ("E-mail", "email"),
        ("Slack", "slack"),
        ("Last triggered", "last_triggered_at"),
    ];
    let delete = |id: &str| html::button(ctx, &format!("/alerts/{}/delete", seg(id)), ("Delete", id), false, true);
    let mut body = html::table_with("Alerts", &items, &columns, true, delete);
    body.push_str("<h2>New alert</h2>");
    body.push_str(&html::form_open(ctx, "/alerts", "create"));
    body.push_str(&html::input(
        "Threshold (% of a rate limit)",
        "threshold",
        "80",
        "type=\"number\" min=\"1\" max=\"100\"",
    ));
    body.push_str(&html::input("E-mail", "email", "", "type=\"email\""));
    body.push_str(&html::input("Slack webhook URL", "slack", "", "type=\"url\""));
    body.push_str("<button type=\"submit\">Create alert</button></form>");
    Ok(ctx.page("Alerts", "/alerts", &body))
}

/// A form of a webhook posted to `webhooks/...` (`rest`).
pub(super) async fn post_webhooks(ctx: &Ctx<'_>, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    match rest {
        [] => webhook_created(ctx, fields).await,
        [id, "delete"] => {
            ctx.api(Method::DELETE, &format!("/webhooks/{}", seg(id)), None, None).await?;
            Ok(ctx.done("/webhooks", "Webhook deleted."))
        }
        _ => Err(super::no_route(ctx, "webhooks", rest)),
    }
}

/// A form of an alert posted to `alerts/...` (`rest`).
pub(super) async fn post_alerts(ctx: &Ctx<'_>, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    match rest {
        [] => {
            let mut notification = json!({});
            for k in ["email", "slack"] {
                if !field(fields, k).is_empty() {
                    notification[k] = json!(field(fields, k));
                }
            }
            let threshold: i64 = field(fields, "threshold").parse().unwrap_or(0);
            let body = json!({ "type": "rate_limit", "threshold": threshold, "notification": notification });
            ctx.api(Method::POST, "/alerts", Some(body), None).await?;
            Ok(ctx.done("/alerts", "Alert created."))
        }
        [id, "delete"] => {
            ctx.api(Method::DELETE, &format!("/alerts/{}", seg(id)), None, None).await?;
            Ok(ctx.done("/alerts", "Alert deleted."))
        }
        _ => Err(super::no_route(ctx, "alerts", rest)),
    }
}
