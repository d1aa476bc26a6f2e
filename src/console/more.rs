//! The smaller pages, each over its API: MCP sessions, apps, tool changes, MFA, webhooks and
//! their deliveries, alerts and the IP allowlist (the team has its own file, `team.rs`).

use super::chart;
use super::html::{self, escape};
use super::{data, field, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use serde_json::{json, Value};
use toolgate_filters::Scope;

fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn rows(v: &Value, key: &str) -> Vec<Value> {
    v[key].as_array().cloned().unwrap_or_default()
}

/// One small form with a button (and the MFA code when `mfa`), posting to `to`. A row's button
/// (`of` its record's id) is named for a screen reader with the record: "End ses_1", not "End".
pub(super) fn button(ctx: &Ctx<'_>, to: &str, (label, of): (&str, &str), mfa: bool, danger: bool) -> String {
    let named = if of.is_empty() { String::new() } else { format!(" aria-label=\"{label} {}\"", escape(of)) };
    format!(
        "{}{}<button type=\"submit\"{}{named}>{label}</button></form>",
        html::form_open(ctx, to, "inline"),
        if mfa { html::mfa_field() } else { String::new() },
        if danger { " class=\"danger\"" } else { "" }
    )
}

/// A table whose last column holds a form per row (`action` of the row's id), shown when
/// `writable`.
pub(super) fn table_with(
    caption: &str,
    items: &[Value],
    columns: &[(&str, &str)],
    writable: bool,
    action: impl Fn(&str) -> String,
) -> String {
    if !writable {
        return html::table(caption, items, columns, None);
    }
    let mut items = items.to_vec();
    for item in &mut items {
        item["_action"] = Value::String(String::new());
    }
    let mut cols = columns.to_vec();
    cols.push(("", "_action"));
    let table = html::table(caption, &items, &cols, None);
    // The action cells are empty in the table; each is filled with its row's form in order.
    let mut out = String::with_capacity(table.len() + items.len() * 400);
    let mut rest = table.as_str();
    for item in &items {
        let Some(at) = rest.find("<td></td></tr>") else { break };
        out.push_str(&rest[..at]);
        out.push_str(&format!("<td>{}</td></tr>", action(&html::text(&item["id"]))));
        rest = &rest[at + "<td></td></tr>".len()..];
    }
    out.push_str(rest);
    out
}

pub async fn get(ctx: &Ctx<'_>, page: &str) -> Result<Page, ApiError> {
    match page {
        "sessions" => sessions(ctx).await,
        "apps" => apps(ctx).await,
        "tool-changes" => tool_changes(ctx).await,
        "mfa" => Ok(mfa(ctx)),
        "webhooks" => webhooks(ctx).await,
        "alerts" => alerts(ctx).await,
        "ip-allowlist" => allowlist(ctx).await,
        "team" => super::team::page(ctx).await,
        _ => Err(ApiError::NoRoute(format!("{}/console/{page}", ctx.prefix))),
    }
}

pub async fn post(ctx: &Ctx<'_>, page: &str, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mfa = Some(field(fields, "mfa_code"));
    match (page, rest) {
        ("sessions", [id, "end"]) => {
            ctx.api(Method::DELETE, &format!("/sessions/{}", seg(id)), None, None).await?;
            Ok(ctx.done("/sessions", "Session ended."))
        }
        ("apps", [id, "connect"]) => {
            let body = json!({ "auth_type": "api_key", "credentials": { "api_key": field(fields, "api_key") } });
            ctx.api(Method::POST, &format!("/apps/{}/connect", seg(id)), Some(body), None).await?;
            Ok(ctx.done("/apps", &format!("App {id} connected.")))
        }
        ("apps", [id, "oauth"]) => oauth_start(ctx, id).await,
        ("apps", [id, "disconnect"]) => {
            ctx.api(Method::DELETE, &format!("/apps/{}/connection", seg(id)), None, None).await?;
            Ok(ctx.done("/apps", &format!("App {id} disconnected.")))
        }
        ("apps", [id, "test"]) => {
            let r = data(ctx.api(Method::POST, &format!("/apps/{}/test", seg(id)), None, None).await?);
            let text = format!("Test of {id}: {} ({}).", html::text(&r["status"]), html::text(&r["message"]));
            Ok(ctx.done("/apps", &text))
        }
        ("tool-changes", [gateway, change, decision @ ("approve" | "reject")]) => {
            let path = format!("/gateways/{}/tool-changes/{}/{decision}", seg(gateway), seg(change));
            ctx.api(Method::POST, &path, None, mfa).await?;
            Ok(ctx.done(&format!("/tool-changes?gateway_id={}", encode(gateway)), &format!("Change {decision}d.")))
        }
        ("mfa", ["enroll"]) => mfa_enrolled(ctx).await,
        ("mfa", ["activate"]) => {
            let body = json!({ "code": field(fields, "code") });
            ctx.api(Method::POST, "/auth/mfa/activate", Some(body), None).await?;
            Ok(ctx.done("/mfa", "MFA is on."))
        }
        ("mfa", ["disable"]) => {
            ctx.api(Method::DELETE, "/auth/mfa", None, mfa).await?;
            Ok(ctx.done("/mfa", "MFA is off."))
        }
        ("webhooks", []) => webhook_created(ctx, fields).await,
        ("webhooks", [id, "delete"]) => {
            ctx.api(Method::DELETE, &format!("/webhooks/{}", seg(id)), None, None).await?;
            Ok(ctx.done("/webhooks", "Webhook deleted."))
        }
        ("alerts", []) => {
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
        ("alerts", [id, "delete"]) => {
            ctx.api(Method::DELETE, &format!("/alerts/{}", seg(id)), None, None).await?;
            Ok(ctx.done("/alerts", "Alert deleted."))
        }
        ("ip-allowlist", []) => {
            let mut body = json!({ "ip": field(fields, "ip"), "description": field(fields, "description") });
            if let Ok(m) = field(fields, "rate_limit_multiplier").parse::<f64>() {
                body["rate_limit_multiplier"] = json!(m);
            }
            ctx.api(Method::POST, "/account/whitelist", Some(body), mfa).await?;
            Ok(ctx.done("/ip-allowlist", "Address added."))
        }
        ("ip-allowlist", [id, "delete"]) => {
            ctx.api(Method::DELETE, &format!("/account/whitelist/{}", seg(id)), None, mfa).await?;
            Ok(ctx.done("/ip-allowlist", "Address removed."))
        }
        _ => Err(ApiError::NoRoute(format!("{}/console/{page}/{}", ctx.prefix, rest.join("/")))),
    }
}

async fn sessions(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let active = ctx.query("active");
    let mut query = String::from("limit=50");
    if let Some(a) = active {
        query.push_str(&format!("&active={}", encode(a)));
    }
    let got = ctx.get(&format!("/sessions?{query}")).await?;
    let mut items = rows(&got, "sessions");
    for s in &mut items {
        s["client_type"] = s["client"]["type"].clone();
    }
    let columns = [
        ("Id", "id"),
        ("Gateway", "gateway_id"),
        ("Client", "client_type"),
        ("Started", "started_at"),
        ("Last activity", "last_activity"),
        ("Requests", "requests_count"),
        ("Status", "status"),
    ];
    let filter = html::select("Show", "active", &[("", "All"), ("true", "Live"), ("false", "Ended")], active);
    let mut body = format!(
        "<form method=\"get\" action=\"{}\">{filter}<button type=\"submit\">Show</button></form>",
        ctx.href("/sessions")
    );
    let end = |id: &str| button(ctx, &format!("/sessions/{}/end", seg(id)), ("End", id), false, true);
    body.push_str(&table_with("MCP sessions", &items, &columns, ctx.can(Scope::SessionsManage), end));
    Ok(ctx.page("Sessions", "/sessions", &body))
}

async fn apps(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let got = ctx.get("/apps").await?;
    let mut items = rows(&got, "apps");
    for a in &mut items {
        let ways: Vec<String> = a["auth_types"].as_array().into_iter().flatten().map(html::text).collect();
        a["sign_in"] = Value::String(ways.join(", "));
        a["health_text"] = Value::String(health_text(&a["health"]));
    }
    let columns = [
        ("Id", "id"),
        ("Name", "name"),
        ("Category", "category"),
        ("Status", "status"),
        ("Functions", "functions_count"),
        ("Health", "health_text"),
        ("Sign-in", "sign_in"),
    ];
    let accepts = |id: &str, auth: &str| {
        let app = items.iter().find(|a| a["id"] == id);
        app.and_then(|a| a["auth_types"].as_array()).is_some_and(|t| t.iter().any(|x| x == auth))
    };
    let act = |id: &str| {
        let mut connect = String::new();
        if accepts(id, "api_key") {
            connect.push_str(&format!(
                "{}<label>API key <input name=\"api_key\" type=\"password\" autocomplete=\"off\" \
                 aria-label=\"API key of {id}\"></label><button type=\"submit\" aria-label=\"Connect {id}\">Connect</button></form>",
                html::form_open(ctx, &format!("/apps/{}/connect", seg(id)), "inline"),
                id = escape(id)
            ));
        }
        if accepts(id, "oauth") {
            connect.push_str(&button(
                ctx,
                &format!("/apps/{}/oauth", seg(id)),
                ("Connect with OAuth", id),
                false,
                false,
            ));
        }
        format!(
            "{connect}{}{}",
            button(ctx, &format!("/apps/{}/test", seg(id)), ("Test", id), false, false),
            button(ctx, &format!("/apps/{}/disconnect", seg(id)), ("Disconnect", id), false, true)
        )
    };
    let body = table_with("Apps", &items, &columns, ctx.can(Scope::AppsWrite), act);
    Ok(ctx.page("Apps", "/apps", &body))
}

/// An app's health in one cell: `up`, or `down: connection refused`, with when it was checked.
fn health_text(h: &Value) -> String {
    let mut text = h["state"].as_str().unwrap_or("unknown").to_string();
    if let Some(e) = h["last_error"].as_str() {
        text.push_str(": ");
        text.push_str(e);
    }
    if let Some(at) = h["checked_at"].as_str() {
        text.push_str(&format!(" (checked {at})"));
    }
    text
}

/// Where the app's authorization server sends the browser back: the console's page that finishes
/// the connect (`GET .../apps/{id}/oauth/back`), on the server's public URL.
fn oauth_back_url(ctx: &Ctx<'_>, id: &str) -> String {
    let public_url = ctx.server.state.config().server.public_url.clone();
    format!("{}{}{}/apps/{}/oauth/back", public_url.trim_end_matches('/'), ctx.prefix, super::PATH, seg(id))
}

/// "Connect with OAuth": the API starts the authorization (PKCE, a fresh single-use `state` kept
/// with the pending connection) and the browser goes to the app's authorization server. Not with
/// a 303: browsers apply the page's `form-action 'self'` to the redirects of a form's navigation
/// too, so the answer is a page that goes on by itself (`<meta http-equiv="refresh">`, which the
/// CSP leaves alone) and with a link.
async fn oauth_start(ctx: &Ctx<'_>, id: &str) -> Result<Page, ApiError> {
    let body = json!({ "auth_type": "oauth", "redirect_uri": oauth_back_url(ctx, id) });
    let started = data(ctx.api(Method::POST, &format!("/apps/{}/connect", seg(id)), Some(body), None).await?);
    let to = started["authorization_url"]
        .as_str()
        .ok_or_else(|| ApiError::Internal("the OAuth connect answered no authorization_url".into()))?;
    let body = format!(
        "<p>Sign in at the app's authorization server and allow the connection: \
         <a id=\"authorize\" href=\"{}\">continue</a>.</p>",
        escape(to)
    );
    Ok(Page::html(200, html::frame_going(ctx, &format!("Connect {id}"), "/apps", &body, to)))
}

/// The authorization server sent the browser back (`code` and `state`, or `error`): the API
/// finishes the connect (its `state` must be the organisation's pending one, once: that is this
/// GET's CSRF protection) and the apps page says how it went.
pub async fn oauth_back(ctx: &Ctx<'_>, id: &str) -> Result<Page, ApiError> {
    let mut body = json!({ "state": ctx.query("state").unwrap_or("") });
    for name in ["code", "error", "error_description", "iss"] {
        if let Some(v) = ctx.query(name) {
            body[name] = json!(v);
        }
    }
    let path = format!("/apps/{}/connect/callback", seg(id));
    let notice = match ctx.api(Method::POST, &path, Some(body), None).await {
        Ok(_) => format!("App {id} connected."),
        Err(e) => format!("App {id} was not connected: {} {}: {e}", e.status(), e.code()),
    };
    Ok(ctx.done_with("/apps", &notice, "Lax"))
}

async fn tool_changes(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let gateway = ctx.query("gateway_id").unwrap_or("");
    let mut body = format!(
        "<form method=\"get\" action=\"{}\">{}<button type=\"submit\">Show</button></form>",
        ctx.href("/tool-changes"),
        html::input("Gateway id", "gateway_id", gateway, "required")
    );
    if !gateway.is_empty() {
        let got = ctx.get(&format!("/gateways/{}/tool-changes", seg(gateway))).await?;
        let items = rows(&got, "tool_changes");
        let columns = [
            ("Id", "id"),
            ("App", "app"),
            ("Tool", "tool"),
            ("Kind", "kind"),
            ("Detected", "detected_at"),
            ("Diff", "diff"),
        ];
        let decide = |id: &str| {
            let base = format!("/tool-changes/{}/{}", seg(gateway), seg(id));
            format!(
                "{}{}",
                button(ctx, &format!("{base}/approve"), ("Approve", id), true, false),
                button(ctx, &format!("{base}/reject"), ("Reject", id), true, true)
            )
        };
        body.push_str(&table_with("Pending tool changes", &items, &columns, ctx.can(Scope::GatewaysWrite), decide));
    }
    Ok(ctx.page("Tool changes", "/tool-changes", &body))
}

fn mfa(ctx: &Ctx<'_>) -> Page {
    let body = format!(
        "<p>A second factor from an authenticator app: set it up, then confirm with a code.</p>\
         <h2>Set up</h2>{}<h2>Confirm</h2>{}<label>Code <input name=\"code\" inputmode=\"numeric\" \
         autocomplete=\"one-time-code\" required></label><button type=\"submit\">Turn MFA on</button></form>\
         <h2>Turn off</h2>{}",
        button(ctx, "/mfa/enroll", ("Set up an authenticator app", ""), false, false),
        html::form_open(ctx, "/mfa/activate", "activate"),
        button(ctx, "/mfa/disable", ("Turn MFA off", ""), true, true)
    );
    ctx.page("MFA", "/mfa", &body)
}

/// The enrolment's answer: the QR code, the secret and the backup codes, shown once.
async fn mfa_enrolled(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let e = data(ctx.api(Method::POST, "/auth/mfa/enroll", Some(json!({ "method": "totp" })), None).await?);
    let uri = html::text(&e["otpauth_uri"]);
    let codes: Vec<String> = e["backup_codes"].as_array().into_iter().flatten().map(html::text).collect();
    let body = format!(
        "<p>Scan this with an authenticator app, then confirm with a code below.</p>{}{}\
         <h2>Backup codes</h2>{}<h2>Confirm</h2>{}<label>Code <input name=\"code\" inputmode=\"numeric\" \
         autocomplete=\"one-time-code\" required></label><button type=\"submit\">Turn MFA on</button></form>",
        chart::qr_svg(&uri),
        html::secret("Secret", &html::text(&e["secret"])),
        html::copyable("backup-codes", &codes.join("\n")),
        html::form_open(ctx, "/mfa/activate", "activate"),
    );
    Ok(ctx.page("Set up MFA", "/mfa", &body))
}

async fn webhooks(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let got = ctx.get("/webhooks").await?;
    let items = rows(&got, "webhooks");
    let columns = [
        ("Id", "id"),
        ("URL", "url"),
        ("Events", "events"),
        ("Enabled", "enabled"),
        ("Failing since", "failing_since"),
    ];
    let delete = |id: &str| button(ctx, &format!("/webhooks/{}/delete", seg(id)), ("Delete", id), false, true);
    let mut body = table_with("Webhooks", &items, &columns, true, delete);
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

async fn alerts(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
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
    let delete = |id: &str| button(ctx, &format!("/alerts/{}/delete", seg(id)), ("Delete", id), false, true);
    let mut body = table_with("Alerts", &items, &columns, true, delete);
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

async fn allowlist(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let got = ctx.get("/account/whitelist").await?;
    let items = rows(&got, "whitelist");
    let columns = [
        ("Id", "id"),
        ("Address", "ip"),
        ("Multiplier", "rate_limit_multiplier"),
        ("Description", "description"),
        ("Added", "created_at"),
    ];
    let delete = |id: &str| button(ctx, &format!("/ip-allowlist/{}/delete", seg(id)), ("Remove", id), true, true);
    let mut body = table_with("IP allowlist", &items, &columns, true, delete);
    body.push_str("<h2>Add an address</h2>");
    body.push_str(&html::form_open(ctx, "/ip-allowlist", "create"));
    body.push_str(&html::input("Address or network", "ip", "", "required"));
    body.push_str(&html::input("Description", "description", "", ""));
    body.push_str(&html::input(
        "Rate-limit multiplier",
        "rate_limit_multiplier",
        "",
        "type=\"number\" step=\"any\" min=\"0\"",
    ));
    body.push_str(&html::mfa_field());
    body.push_str("<button type=\"submit\">Add</button></form>");
    Ok(ctx.page("IP allowlist", "/ip-allowlist", &body))
}
