//! The console's home: the overview an operator opens first. Each figure is read through the
//! management API as the signed-in user (so within their organisation and role: a figure whose
//! scope the role lacks is left out, never computed on the side) and links to the page that
//! shows it whole.

use super::html::escape;
use super::{rows, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use toolgate_filters::Scope;

/// Gateways whose pending tool changes the home counts (one API read each): the first page of
/// the list, newest first.
const CHANGES_OF: usize = 25;
/// A key expiring within this many days is shown on the home.
const EXPIRING_DAYS: i64 = 14;

/// One figure of the overview: its id (a test reads `#home-<id>`), label, value, the page it
/// links to, and whether it calls for attention.
struct Card {
    id: &'static str,
    label: &'static str,
    value: String,
    to: String,
    alert: bool,
}

pub(super) async fn page(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let mut cards = Vec::new();
    if ctx.can(Scope::GatewaysRead) {
        gateway_cards(ctx, &mut cards).await?;
    }
    if ctx.can(Scope::LogsRead) {
        let got = ctx.get("/logs/analytics?period=24h").await?;
        let (calls, errors) = (&got["summary"]["total_requests"], &got["summary"]["error_count"]);
        let errors_n = errors.as_u64().unwrap_or(0);
        cards.push(card("calls", "Calls, last 24 h", calls.to_string(), "/analytics?period=24h", false));
        cards.push(card("errors", "Errors, last 24 h", errors.to_string(), "/logs?status=error", errors_n > 0));
    }
    if ctx.can(Scope::AppsRead) {
        let apps = rows(&ctx.get("/apps").await?, "apps");
        let down = apps.iter().filter(|a| a["health"]["state"] == "down").count();
        cards.push(card("apps-down", "Apps down", down.to_string(), "/apps", down > 0));
    }
    let mut expiring = Vec::new();
    if ctx.can(Scope::Admin) {
        expiring = expiring_keys(ctx).await?;
        let n = expiring.len();
        cards.push(card("keys-expiring", "Keys expiring within 14 days", n.to_string(), "/keys", n > 0));
    }
    Ok(ctx.page("Overview", "", &render(ctx, &cards, &expiring)))
}

fn card(id: &'static str, label: &'static str, value: String, to: &str, alert: bool) -> Card {
    Card { id, label, value, to: to.to_string(), alert }
}

/// The gateways' count and their pending tool changes (of the first [`CHANGES_OF`]).
async fn gateway_cards(ctx: &Ctx<'_>, cards: &mut Vec<Card>) -> Result<(), ApiError> {
    let got = ctx.get(&format!("/gateways?limit={CHANGES_OF}")).await?;
    let total = got["pagination"]["total"].as_u64().unwrap_or(0);
    cards.push(card("gateways", "Gateways", total.to_string(), "/gateways", false));
    let mut pending = 0;
    let mut first_with = None;
    for g in rows(&got, "gateways") {
        let id = super::html::text(&g["id"]);
        let changes = ctx.get(&format!("/gateways/{}/tool-changes", seg(&id))).await?;
        let n = rows(&changes, "tool_changes").len();
        if n > 0 && first_with.is_none() {
            first_with = Some(id);
        }
        pending += n;
    }
    let to =
        first_with.map_or("/tool-changes".to_string(), |id| format!("/tool-changes?gateway_id={}", super::encode(&id)));
    cards.push(card("tool-changes", "Pending tool changes", pending.to_string(), &to, pending > 0));
    Ok(())
}

/// The organisation's active keys that expire within [`EXPIRING_DAYS`] days, soonest first.
async fn expiring_keys(ctx: &Ctx<'_>) -> Result<Vec<Value>, ApiError> {
    let got = ctx.get("/api-keys?limit=100").await?;
    let now = Utc::now();
    let until = now + Duration::days(EXPIRING_DAYS);
    let ends = |k: &Value| k["expires_at"].as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok());
    let mut keys: Vec<Value> = rows(&got, "api_keys")
        .into_iter()
        .filter(|k| k["state"] == "active")
        .filter(|k| ends(k).is_some_and(|t| t > now && t <= until))
        .collect();
    keys.sort_by_key(|k| ends(k));
    Ok(keys)
}

fn render(ctx: &Ctx<'_>, cards: &[Card], expiring: &[Value]) -> String {
    let mut out = format!(
        "<p>Signed in as <strong id=\"email\">{}</strong>, <span id=\"role\">{}</span> of <span id=\"organization\">{}</span>.</p>\
         <ul class=\"cards\">",
        escape(&ctx.user.email),
        escape(ctx.principal.role.as_str()),
        escape(&ctx.principal.org_id),
    );
    for c in cards {
        out.push_str(&format!(
            "<li class=\"card{}\"><a href=\"{}\" id=\"home-{}\"><span class=\"figure\">{}</span> <span class=\"label\">{}</span></a></li>",
            if c.alert { " alert" } else { "" },
            ctx.href(&c.to),
            c.id,
            escape(&c.value),
            c.label
        ));
    }
    out.push_str("</ul>");
    if !expiring.is_empty() {
        out.push_str("<h2>Keys about to expire</h2><ul class=\"expiring\">");
        for k in expiring {
            out.push_str(&format!(
                "<li><span class=\"id\">{}</span> {} <time>{}</time></li>",
                escape(&super::html::text(&k["id"])),
                escape(&super::html::text(&k["name"])),
                escape(&super::html::text(&k["expires_at"]))
            ));
        }
        out.push_str("</ul>");
    }
    let scopes: Vec<String> =
        ctx.principal.scopes.names().iter().map(|s| format!("<code>{}</code>", escape(s))).collect();
    out.push_str(&format!(
        "<p class=\"hint\">Every page here acts through the management API with your role's scopes: {}.</p>",
        scopes.join(" ")
    ));
    out
}
