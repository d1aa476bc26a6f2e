//! Apps (`/apps`): the catalogue with each app's health and sign-in, and connecting one (an API
//! key, or OAuth through the app's authorization server and back), testing and disconnecting it.
//! An app connected by each user offers every member their own connection (`connect.rs`).

use super::connect::{self, Asked, Whose};
use super::html::{self, escape};
use super::{data, field, rows, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use serde_json::{json, Value};
use toolgate_filters::Scope;

pub(super) async fn page(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let asked = Asked::of(ctx)?;
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
        ("Your connection", "own_connection_status"),
    ];
    let admin = ctx.can(Scope::AppsWrite);
    let app = |id: &str| items.iter().find(|a| a["id"] == id);
    let accepts = |id: &str, auth: &str| {
        app(id).and_then(|a| a["auth_types"].as_array()).is_some_and(|t| t.iter().any(|x| x == auth))
    };
    // A member's own connection of a per-user app, for everyone; the organisation's, and the
    // test, for administrators.
    let act = |id: &str, elicitation: Option<&str>| {
        let ways = (accepts(id, "api_key"), accepts(id, "oauth"));
        let per_user = connect::per_user(app(id));
        let mut out = String::new();
        if per_user {
            let own = app(id).and_then(|a| a["own_connection_status"].as_str()).is_some_and(|s| s != "none");
            out.push_str(&connect::forms(ctx, id, ways, (Whose::Own, true), elicitation, own));
        }
        if admin {
            out.push_str(&connect::forms(ctx, id, ways, (Whose::Organization, per_user), None, true));
            out.push_str(&html::button(ctx, &format!("/apps/{}/test", seg(id)), ("Test", id), false, false));
        }
        out
    };
    let mut body = match &asked {
        Some(a) => a.section(app(&a.app).is_some(), &act(&a.app, a.elicitation.as_deref())),
        None => String::new(),
    };
    let writable = admin || items.iter().any(|a| connect::per_user(Some(a)));
    body.push_str(&html::table_with("Apps", &items, &columns, writable, |id| act(id, None)));
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
async fn oauth_start(ctx: &Ctx<'_>, id: &str, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let whose = Whose::of(fields);
    let elicitation = connect::elicitation_of(ctx, fields)?;
    let body = json!({ "auth_type": "oauth", "redirect_uri": oauth_back_url(ctx, id) });
    let path = format!("/apps/{}/connect{}", seg(id), whose.query(per_user(ctx, id)));
    let started = data(ctx.api(Method::POST, &path, Some(body), None).await?);
    let to = started["authorization_url"]
        .as_str()
        .ok_or_else(|| ApiError::Internal("the OAuth connect answered no authorization_url".into()))?;
    let body = format!(
        "<p>Sign in at the app's authorization server and allow the connection: \
         <a id=\"authorize\" href=\"{}\">continue</a>.</p>",
        escape(to)
    );
    let page = Page::html(200, html::frame_going(ctx, &format!("Connect {id}"), "/apps", &body, to));
    Ok(page.cookie(connect::oauth_cookie(ctx, whose, elicitation.as_deref())))
}

/// Whether app `id` is connected by each user (its own connections are named apart from the
/// organisation's in the management paths).
fn per_user(ctx: &Ctx<'_>, id: &str) -> bool {
    ctx.server.state.app(id).is_some_and(|a| a.per_user.is_some())
}

/// The authorization server sent the browser back (`code` and `state`, or `error`): the API
/// finishes the connect (its `state` must be the organisation's pending one, once: that is this
/// GET's CSRF protection) and the apps page says how it went.
pub(super) async fn oauth_back(ctx: &Ctx<'_>, id: &str, cookie: Option<&str>) -> Result<Page, ApiError> {
    let (whose, elicitation) = connect::from_cookie(cookie);
    let mut body = json!({ "state": ctx.query("state").unwrap_or("") });
    for name in ["code", "error", "error_description", "iss"] {
        if let Some(v) = ctx.query(name) {
            body[name] = json!(v);
        }
    }
    let path = format!("/apps/{}/connect/callback{}", seg(id), whose.query(per_user(ctx, id)));
    let notice = match ctx.api(Method::POST, &path, Some(body), None).await {
        Ok(_) => connect::connected(ctx, id, elicitation.as_deref()),
        Err(e) => format!("App {id} was not connected: {} {}: {e}", e.status(), e.code()),
    };
    Ok(ctx.done_with("/apps", &notice, "Lax").cookie(connect::oauth_cookie_gone(ctx)))
}

/// A form of an app posted to `apps/...` (`rest`).
pub(super) async fn post(ctx: &Ctx<'_>, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    match rest {
        [id, "connect"] => {
            let elicitation = connect::elicitation_of(ctx, fields)?;
            let body = json!({ "auth_type": "api_key", "credentials": { "api_key": field(fields, "api_key") } });
            let path = format!("/apps/{}/connect{}", seg(id), Whose::of(fields).query(per_user(ctx, id)));
            ctx.api(Method::POST, &path, Some(body), None).await?;
            Ok(ctx.done("/apps", &connect::connected(ctx, id, elicitation.as_deref())))
        }
        [id, "oauth"] => oauth_start(ctx, id, fields).await,
        [id, "disconnect"] => {
            let path = format!("/apps/{}/connection{}", seg(id), Whose::of(fields).query(per_user(ctx, id)));
            ctx.api(Method::DELETE, &path, None, None).await?;
            Ok(ctx.done("/apps", &format!("App {id} disconnected.")))
        }
        [id, "test"] => {
            let r = data(ctx.api(Method::POST, &format!("/apps/{}/test", seg(id)), None, None).await?);
            let text = format!("Test of {id}: {} ({}).", html::text(&r["status"]), html::text(&r["message"]));
            Ok(ctx.done("/apps", &text))
        }
        _ => Err(super::no_route(ctx, "apps", rest)),
    }
}
