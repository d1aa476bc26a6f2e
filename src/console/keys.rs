//! API keys and service accounts: listed (never a secret: the API's lists hold none), created
//! (the secret shown once), rotated and revoked from their row or by id, usage.

use super::html::{self, escape};
use super::{data, field, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use serde_json::{json, Value};
use toolgate_filters::Scope;

/// Checkboxes of the scopes the user's role holds (a key never gets more: the API refuses it).
fn scopes_field(ctx: &Ctx<'_>) -> String {
    let mut out = String::from("<fieldset><legend>Scopes</legend>");
    for s in Scope::ALL.into_iter().filter(|s| ctx.can(*s)) {
        out.push_str(&format!(
            "<label><input type=\"checkbox\" name=\"scopes\" value=\"{0}\"> {0}</label>",
            s.as_str()
        ));
    }
    out.push_str("</fieldset>");
    out
}

fn scopes(fields: &[(String, String)]) -> Vec<&str> {
    fields.iter().filter(|(k, _)| k == "scopes").map(|(_, v)| v.as_str()).collect()
}

pub(super) async fn page(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let mut body = String::new();
    if let Some(id) = ctx.query("usage") {
        let u = ctx.get(&format!("/api-keys/{}/usage", seg(id))).await?;
        body.push_str(&format!(
            "<h2>Usage of <code>{}</code></h2><dl><dt>Last used</dt><dd>{}</dd><dt>From</dt><dd>{}</dd>\
             <dt>Requests today</dt><dd>{}</dd><dt>This month</dt><dd>{}</dd></dl>",
            escape(id),
            escape(&html::text(&u["last_used"])),
            escape(&html::text(&u["last_ip"])),
            escape(&html::text(&u["requests_today"])),
            escape(&html::text(&u["requests_this_month"]))
        ));
    }
    if !ctx.can(Scope::Admin) {
        body.push_str("<p>Keys are managed with the <code>admin</code> scope, which your role does not hold.</p>");
        return Ok(ctx.page("API keys", "/keys", &body));
    }
    body.push_str(&key_list(ctx).await?);
    body.push_str(&format!(
        "<h2>Usage</h2><form method=\"get\" action=\"{}\">{}<button type=\"submit\">Show usage</button></form>",
        ctx.href("/keys"),
        html::input("Key id", "usage", "", "required")
    ));
    body.push_str("<h2>New key</h2>");
    body.push_str(&html::form_open(ctx, "/keys", "create"));
    body.push_str(&html::input("Name", "name", "", "required maxlength=\"100\""));
    body.push_str(&html::input(
        "Expires (ISO 8601, optional)",
        "expires_at",
        "",
        "placeholder=\"2027-01-01T00:00:00Z\"",
    ));
    body.push_str(&scopes_field(ctx));
    body.push_str(
        "<label><input type=\"checkbox\" name=\"bypass_ip_whitelist\" value=\"true\"> Skips the IP allowlist</label>",
    );
    body.push_str(&html::mfa_field());
    body.push_str("<button type=\"submit\">Create key</button></form>");
    body.push_str("<h2>Rotate</h2>");
    body.push_str(&html::form_open(ctx, "/keys/-/rotate", "rotate"));
    body.push_str(&html::input("Key id", "key_id", "", "required"));
    body.push_str(&html::input(
        "Grace period (hours)",
        "grace_period_hours",
        "0",
        "type=\"number\" min=\"0\" max=\"720\"",
    ));
    body.push_str(&html::mfa_field());
    body.push_str("<button type=\"submit\">Rotate key</button></form>");
    body.push_str("<h2>Revoke</h2>");
    body.push_str(&html::form_open(ctx, "/keys/-/revoke", "revoke"));
    body.push_str(&html::input("Key id", "key_id", "", "required"));
    body.push_str(&html::mfa_field());
    body.push_str("<button type=\"submit\" class=\"danger\">Revoke key</button></form>");
    Ok(ctx.page("API keys", "/keys", &body))
}

/// A page of the organisation's keys (50), each row with its rotate and revoke forms (the MFA
/// code with each: the API's gate decides whether it is needed).
async fn key_list(ctx: &Ctx<'_>) -> Result<String, ApiError> {
    let page = ctx.query("page").and_then(|p| p.parse::<u32>().ok()).unwrap_or(1);
    let got = ctx.get(&format!("/api-keys?page={page}&limit=50")).await?;
    let mut keys = got["api_keys"].as_array().cloned().unwrap_or_default();
    for k in &mut keys {
        let owner = if k["service_account_id"].is_string() { &k["service_account_id"] } else { &k["user_id"] };
        k["owner"] = owner.clone();
        k["scope_list"] = Value::String(
            k["scopes"].as_array().map_or(String::new(), |s| s.iter().map(html::text).collect::<Vec<_>>().join(" ")),
        );
    }
    let columns = [
        ("Id", "id"),
        ("Name", "name"),
        ("Owner", "owner"),
        ("Scopes", "scope_list"),
        ("State", "state"),
        ("Created", "created_at"),
        ("Expires", "expires_at"),
        ("Last used", "last_used_at"),
    ];
    let actions = |id: &str| {
        format!(
            "{}{}{}<button type=\"submit\">Rotate</button></form>{}",
            html::form_open(ctx, &format!("/keys/{}/rotate", seg(id)), "inline"),
            html::input("Grace (hours)", "grace_period_hours", "0", "type=\"number\" min=\"0\" max=\"720\""),
            html::mfa_field(),
            html::button(ctx, &format!("/keys/{}/revoke", seg(id)), ("Revoke", id), true, true)
        )
    };
    let mut out = html::table_with("API keys", &keys, &columns, true, actions);
    out.push_str(&html::pager(ctx, "/keys", &got["pagination"], ""));
    Ok(out)
}

/// The page that shows a new key, once: the POST's own answer.
fn shown_once(ctx: &Ctx<'_>, title: &str, key: &Value) -> Page {
    let body = format!(
        "{}<dl><dt>Id</dt><dd><code>{}</code></dd><dt>Name</dt><dd>{}</dd><dt>Scopes</dt><dd>{}</dd>\
         <dt>Expires</dt><dd>{}</dd></dl><p><a href=\"{}\">Back</a></p>",
        html::secret("Key", &html::text(&key["key"])),
        escape(&html::text(&key["id"])),
        escape(&html::text(&key["name"])),
        escape(&html::text(&key["scopes"])),
        escape(&html::text(&key["expires_at"])),
        ctx.href("/keys")
    );
    ctx.page(title, "/keys", &body)
}

pub(super) async fn create(ctx: &Ctx<'_>, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mut body = json!({
        "name": field(fields, "name"),
        "scopes": scopes(fields),
        "bypass_ip_whitelist": field(fields, "bypass_ip_whitelist") == "true",
    });
    if !field(fields, "expires_at").is_empty() {
        body["expires_at"] = json!(field(fields, "expires_at"));
    }
    let key = data(ctx.api(Method::POST, "/api-keys", Some(body), Some(field(fields, "mfa_code"))).await?);
    Ok(shown_once(ctx, "Key created", &key))
}

/// Rotate or revoke: the key is the path's id, or the form's `key_id` when the path says `-`.
pub(super) async fn act(ctx: &Ctx<'_>, id: &str, action: &str, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let id = if id == "-" { field(fields, "key_id") } else { id };
    let mfa = Some(field(fields, "mfa_code"));
    let path = format!("/api-keys/{}", seg(id));
    match action {
        "rotate" => {
            let hours: i64 = field(fields, "grace_period_hours").parse().unwrap_or(0);
            let body = json!({ "grace_period_hours": hours });
            let key = data(ctx.api(Method::POST, &format!("{path}/rotate"), Some(body), mfa).await?);
            Ok(shown_once(ctx, "Key rotated", &key))
        }
        "revoke" => {
            ctx.api(Method::DELETE, &path, None, mfa).await?;
            Ok(ctx.done("/keys", &format!("Key {id} revoked.")))
        }
        _ => Err(ApiError::NoRoute(format!("/keys/{id}/{action}"))),
    }
}

pub(super) async fn accounts(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    if !ctx.can(Scope::Admin) {
        let body =
            "<p>Service accounts are managed with the <code>admin</code> scope, which your role does not hold.</p>";
        return Ok(ctx.page("Service accounts", "/service-accounts", body));
    }
    let got = ctx.get("/service-accounts?limit=100").await?;
    let accounts = got["service_accounts"].as_array().cloned().unwrap_or_default();
    let columns = [
        ("Id", "id"),
        ("Name", "name"),
        ("Scopes", "scopes"),
        ("Multiplier", "rate_limit_multiplier"),
        ("Usable keys", "key_count"),
        ("Created by", "created_by"),
        ("Created", "created_at"),
    ];
    let mut body = html::table("Service accounts", &accounts, &columns, None);
    body.push_str("<h2>New service account</h2>");
    body.push_str(&html::form_open(ctx, "/service-accounts", "create"));
    body.push_str(&html::input("Name", "name", "", "required maxlength=\"100\""));
    body.push_str(&html::input("Description", "description", "", "maxlength=\"1000\""));
    body.push_str(&scopes_field(ctx));
    body.push_str(&html::input(
        "Rate-limit multiplier",
        "rate_limit_multiplier",
        "",
        "type=\"number\" step=\"any\" min=\"0\"",
    ));
    body.push_str(&html::mfa_field());
    body.push_str("<button type=\"submit\">Create service account</button></form>");
    body.push_str("<h2>New key of an account</h2>");
    body.push_str(&html::form_open(ctx, "/service-accounts/-/keys", "account-key"));
    body.push_str(&html::input("Account id", "account_id", "", "required"));
    body.push_str(&html::input("Key name", "name", "", "required maxlength=\"100\""));
    body.push_str(&html::input("Expires in (days)", "expires_in_days", "", "type=\"number\" min=\"1\" max=\"3650\""));
    body.push_str("<button type=\"submit\">Create key</button></form>");
    Ok(ctx.page("Service accounts", "/service-accounts", &body))
}

pub(super) async fn create_account(ctx: &Ctx<'_>, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mut body = json!({
        "name": field(fields, "name"),
        "description": field(fields, "description"),
        "scopes": scopes(fields),
    });
    if let Ok(m) = field(fields, "rate_limit_multiplier").parse::<f64>() {
        body["rate_limit_multiplier"] = json!(m);
    }
    let a = data(ctx.api(Method::POST, "/service-accounts", Some(body), Some(field(fields, "mfa_code"))).await?);
    let text = format!("Service account {} ({}) created.", html::text(&a["name"]), html::text(&a["id"]));
    Ok(ctx.done("/service-accounts", &text))
}

pub(super) async fn account_key(ctx: &Ctx<'_>, id: &str, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let id = if id == "-" { field(fields, "account_id") } else { id };
    let mut body = json!({ "name": field(fields, "name") });
    if let Ok(days) = field(fields, "expires_in_days").parse::<i64>() {
        body["expires_in_days"] = json!(days);
    }
    let key = data(ctx.api(Method::POST, &format!("/service-accounts/{}/keys", seg(id)), Some(body), None).await?);
    Ok(shown_once(ctx, "Service account key created", &key))
}
