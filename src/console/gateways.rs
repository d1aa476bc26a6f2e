//! Gateways: the list (search, sort, pages), create (the key shown once), a gateway's page
//! (endpoint, client set-up), edit (MFA when an app is added: it widens what the gateway
//! serves) and delete (MFA).

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

pub(super) async fn list(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let q = ctx.query("q").unwrap_or("");
    let sort = ctx.query("sort").unwrap_or("created_at");
    let order = ctx.query("order").unwrap_or("desc");
    let page = ctx.query("page").unwrap_or("1");
    let kept = format!("q={}&sort={}&order={}", encode(q), encode(sort), encode(order));
    let got = ctx.get(&format!("/gateways?{kept}&page={}&limit=50", encode(page))).await?;
    let mut rows = got["gateways"].as_array().cloned().unwrap_or_default();
    // The apps by name (the catalogue's), not as the API's list of ids.
    for row in &mut rows {
        let names: Vec<String> = (row["servers"].as_array().into_iter().flatten())
            .map(|id| {
                let id = html::text(id);
                ctx.server.state.app(&id).map_or(id, |a| a.name.clone())
            })
            .collect();
        row["servers"] = Value::String(names.join(", "));
    }
    let mut body = format!(
        "<form method=\"get\" action=\"{}\" role=\"search\">{}{}{}<button type=\"submit\">Search</button></form>",
        ctx.href("/gateways"),
        html::input("Search", "q", q, "type=\"search\""),
        html::select(
            "Sort by",
            "sort",
            &[("created_at", "Created"), ("updated_at", "Updated"), ("name", "Name")],
            Some(sort)
        ),
        html::select("Order", "order", &[("desc", "Descending"), ("asc", "Ascending")], Some(order)),
    );
    let columns = [
        ("Name", "name"),
        ("Id", "id"),
        ("Apps", "servers"),
        ("Functions", "functions_count"),
        ("Status", "status"),
        ("Created", "created_at"),
    ];
    body.push_str(&html::table("Gateways", &rows, &columns, Some((ctx, "/gateways/"))));
    body.push_str(&html::pager(ctx, "/gateways", &got["pagination"], &kept));
    if ctx.can(Scope::GatewaysWrite) {
        body.push_str("<h2>New gateway</h2>");
        body.push_str(&html::form_open(ctx, "/gateways", "create"));
        body.push_str(&html::input("Name", "name", "", "required maxlength=\"100\""));
        body.push_str(&html::input("Description", "description", "", "maxlength=\"1000\""));
        body.push_str(&apps_field(ctx, &[]).await);
        body.push_str("<button type=\"submit\">Create gateway</button></form>");
    }
    Ok(ctx.page("Gateways", "/gateways", &body))
}

/// The apps a gateway serves: a checkbox per app of the catalogue (when the role reads it),
/// else a text field of ids.
async fn apps_field(ctx: &Ctx<'_>, chosen: &[&str]) -> String {
    let apps = match ctx.can(Scope::AppsRead) {
        true => ctx.get("/apps").await.ok().and_then(|d| d["apps"].as_array().cloned()).unwrap_or_default(),
        false => Vec::new(),
    };
    if apps.is_empty() {
        return html::input("Apps (ids, separated by commas)", "servers", &chosen.join(","), "");
    }
    let mut out = String::from("<fieldset><legend>Apps</legend>");
    for a in &apps {
        let id = html::text(&a["id"]);
        let checked = if chosen.contains(&id.as_str()) { " checked" } else { "" };
        out.push_str(&format!(
            "<label><input type=\"checkbox\" name=\"servers\" value=\"{}\"{checked}> {} <small>({})</small></label>",
            escape(&id),
            escape(&html::text(&a["name"])),
            escape(&html::text(&a["status"]))
        ));
    }
    out.push_str("</fieldset>");
    out
}

/// The apps of a form: the checked boxes, or the ids of the text field.
fn servers(fields: &[(String, String)]) -> Vec<String> {
    fields
        .iter()
        .filter(|(k, _)| k == "servers")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) async fn create(ctx: &Ctx<'_>, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let body = json!({
        "name": field(fields, "name"),
        "description": field(fields, "description"),
        "servers": servers(fields),
    });
    let created = data(ctx.api(Method::POST, "/gateways", Some(body), None).await?);
    let id = html::text(&created["id"]);
    // The key is in this answer only: the page that shows it is the POST's own answer.
    let page = format!(
        "{}<p>Gateway <a href=\"{}\">{}</a> is ready; its endpoint:</p>{}{}",
        html::secret("Gateway key", &html::text(&created["api_key"])),
        ctx.href(&format!("/gateways/{}", seg(&id))),
        escape(&html::text(&created["name"])),
        html::copyable("endpoint", &html::text(&created["endpoint"])),
        setup(&html::text(&created["endpoint"]), &html::text(&created["name"]), &html::text(&created["api_key"])),
    );
    Ok(ctx.page("Gateway created", "/gateways", &page))
}

/// Ready-to-paste client set-up for a gateway's endpoint, from the one source of every client's
/// snippet ([`super::snippets`]); `key` is the real key on the page that shows it once.
fn setup(endpoint: &str, name: &str, key: &str) -> String {
    let mut out = String::from("<h2>Connect a client</h2>");
    for s in super::snippets::render(endpoint, name, key) {
        out.push_str(&format!("<h3>{}</h3><p class=\"hint\">{}</p>", s.title, escape(s.place)));
        out.push_str(&html::copyable(&format!("setup-{}", s.id), &s.text));
    }
    out
}

pub(super) async fn show(ctx: &Ctx<'_>, id: &str) -> Result<Page, ApiError> {
    let g = ctx.get(&format!("/gateways/{}", seg(id))).await?;
    let endpoint = html::text(&g["endpoint"]);
    let name = html::text(&g["name"]);
    let apps: Vec<String> =
        g["servers"].as_array().into_iter().flatten().map(|s| html::text(&s["id"])).collect::<Vec<_>>();
    let mut body = format!(
        "<dl><dt>Id</dt><dd><code>{}</code></dd><dt>Status</dt><dd>{}</dd><dt>Description</dt><dd>{}</dd>\
         <dt>Apps</dt><dd>{}</dd><dt>Requests today</dt><dd>{}</dd><dt>Errors today</dt><dd>{}</dd></dl>\
         <h2>Endpoint</h2>{}{}",
        escape(&html::text(&g["id"])),
        escape(&html::text(&g["status"])),
        escape(&html::text(&g["description"])),
        escape(&apps.join(", ")),
        escape(&html::text(&g["metrics"]["requests_today"])),
        escape(&html::text(&g["metrics"]["errors_today"])),
        html::copyable("endpoint", &endpoint),
        setup(&endpoint, &name, "<your gateway key>"),
    );
    body.push_str(&format!(
        "<p><a href=\"{}\">Logs of this gateway</a> · <a href=\"{}\">Analytics</a> · <a href=\"{}\">Tool changes</a></p>",
        ctx.href(&format!("/logs?gateway_id={}", encode(id))),
        ctx.href(&format!("/analytics?gateway_id={}", encode(id))),
        ctx.href(&format!("/tool-changes?gateway_id={}", encode(id))),
    ));
    body.push_str(&super::shaping::overrides(&g));
    body.push_str(&super::shaping::limits(&g));
    body.push_str(&super::shaping::guards(&g));
    body.push_str(&match super::playground::section(ctx, id).await {
        Ok(section) => section,
        Err(e) => {
            format!("<p class=\"error\" role=\"alert\">The playground is not available: {}</p>", escape(&e.to_string()))
        }
    });
    let path = format!("/gateways/{}", seg(id));
    if ctx.can(Scope::GatewaysWrite) {
        body.push_str("<h2>Edit</h2>");
        body.push_str(&html::form_open(ctx, &path, "edit"));
        body.push_str(&html::input("Name", "name", &name, "required maxlength=\"100\""));
        body.push_str(&html::input("Description", "description", &html::text(&g["description"]), "maxlength=\"1000\""));
        let chosen: Vec<&str> = apps.iter().map(String::as_str).collect();
        body.push_str(&apps_field(ctx, &chosen).await);
        // Adding an app widens what the gateway serves: a loosened guard asks for the code.
        body.push_str(&html::mfa_field());
        body.push_str("<button type=\"submit\">Save</button></form>");
    }
    if ctx.can(Scope::GatewaysDelete) {
        body.push_str("<h2>Delete</h2>");
        body.push_str(&html::form_open(ctx, &format!("{path}/delete"), "delete"));
        body.push_str(&html::mfa_field());
        body.push_str("<button type=\"submit\" class=\"danger\">Delete gateway</button></form>");
    }
    Ok(ctx.page(&name, "/gateways", &body))
}

pub(super) async fn update(ctx: &Ctx<'_>, id: &str, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let body: Value = json!({
        "name": field(fields, "name"),
        "description": field(fields, "description"),
        "servers": servers(fields),
    });
    let mfa = field(fields, "mfa_code");
    ctx.api(Method::PATCH, &format!("/gateways/{}", seg(id)), Some(body), Some(mfa)).await?;
    Ok(ctx.done(&format!("/gateways/{}", seg(id)), "Gateway saved."))
}

pub(super) async fn delete(ctx: &Ctx<'_>, id: &str, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mfa = field(fields, "mfa_code");
    ctx.api(Method::DELETE, &format!("/gateways/{}", seg(id)), None, Some(mfa)).await?;
    Ok(ctx.done("/gateways", "Gateway deleted."))
}

/// The organisation's gateways, id and name, by name (the first 100: the API's largest page);
/// none when the role does not read gateways or the read fails (a page then shows ids alone).
async fn listed(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    if !ctx.can(Scope::GatewaysRead) {
        return Vec::new();
    }
    let got = ctx.get("/gateways?sort=name&order=asc&limit=100").await.unwrap_or(Value::Null);
    (got["gateways"].as_array().into_iter().flatten()).map(|g| (html::text(&g["id"]), html::text(&g["name"]))).collect()
}

/// Gateway names by id, for pages that show a gateway id (the logs): `name (id)`.
pub(super) async fn names(ctx: &Ctx<'_>) -> std::collections::HashMap<String, String> {
    listed(ctx).await.into_iter().collect()
}

/// A form's gateway field (`gateway_id`): a `<select>` of the organisation's gateways by name,
/// `chosen` selected, with "All gateways" unless `required`; a text field of the id for a role
/// that does not read gateways. A chosen id not in the list stays an option (its id alone).
pub(super) async fn picker(ctx: &Ctx<'_>, chosen: Option<&str>, required: bool) -> String {
    let chosen = chosen.unwrap_or("");
    let gateways = listed(ctx).await;
    if gateways.is_empty() && !ctx.can(Scope::GatewaysRead) {
        return html::input("Gateway id", "gateway_id", chosen, if required { "required" } else { "" });
    }
    let mut out = format!("<label>Gateway <select name=\"gateway_id\"{}>", if required { " required" } else { "" });
    out.push_str(if required {
        "<option value=\"\">Choose a gateway</option>"
    } else {
        "<option value=\"\">All gateways</option>"
    });
    let known = gateways.iter().any(|(id, _)| id == chosen);
    let stray = (!chosen.is_empty() && !known).then(|| (chosen.to_string(), String::new()));
    for (id, name) in gateways.iter().chain(stray.iter()) {
        let sel = if id == chosen { " selected" } else { "" };
        let label = if name.is_empty() { id.clone() } else { format!("{name} ({id})") };
        out.push_str(&format!("<option value=\"{}\"{sel}>{}</option>", escape(id), escape(&label)));
    }
    out.push_str("</select></label>");
    out
}
