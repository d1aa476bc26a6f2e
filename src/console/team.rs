//! The team: the organisation's members and their roles (`/team/members`), for the Owners whose
//! role holds `team:manage`: add a member, change a role, remove a member (each behind the MFA
//! gate). Anyone else sees why there is nothing here for them.

use super::html;
use super::{data, field, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use serde_json::{json, Value};
use toolgate_filters::Scope;

const ROLES: [(&str, &str); 4] =
    [("viewer", "Viewer"), ("developer", "Developer"), ("admin", "Admin"), ("owner", "Owner")];

/// A row's forms: its role changed (with the MFA code), or the member removed.
fn row_forms(ctx: &Ctx<'_>, id: &str, role: Option<&str>) -> String {
    format!(
        "{}{}{}<button type=\"submit\">Change role</button></form>{}",
        html::form_open(ctx, &format!("/team/{}/role", seg(id)), "inline"),
        html::select("Role", "role", &ROLES, role),
        html::mfa_field(),
        html::button(ctx, &format!("/team/{}/remove", seg(id)), ("Remove", id), true, true)
    )
}

pub(super) async fn page(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    if !ctx.can(Scope::TeamManage) {
        let body = "<p>Team members and roles are managed by the organisation's Owners (the <code>team:manage</code> \
                    scope, which your role does not hold).</p>";
        return Ok(ctx.page("Team", "/team", body));
    }
    let got = ctx.get("/team/members").await?;
    let mut members = got["members"].as_array().cloned().unwrap_or_default();
    for m in &mut members {
        m["mfa"] = Value::String(if m["mfa_enabled"] == json!(true) { "on" } else { "off" }.into());
    }
    let roles: std::collections::HashMap<String, String> =
        members.iter().map(|m| (html::text(&m["id"]), html::text(&m["role"]))).collect();
    let columns = [
        ("E-mail", "email"),
        ("Name", "name"),
        ("Role", "role"),
        ("MFA", "mfa"),
        ("Since", "created_at"),
        ("Id", "id"),
    ];
    let forms = |id: &str| row_forms(ctx, id, roles.get(id).map(String::as_str));
    let mut body = html::table_with("Members", &members, &columns, true, forms);
    body.push_str(
        "<p>The organisation always keeps an Owner; nobody removes themself. Removing a member revokes their API \
         keys and ends their web sessions and OAuth grants; the service accounts they made stay, now yours.</p>",
    );
    body.push_str("<h2>Add a member</h2>");
    body.push_str(&html::form_open(ctx, "/team", "create"));
    body.push_str(&html::input("E-mail", "email", "", "type=\"email\" required maxlength=\"254\""));
    body.push_str(&html::input("Name", "name", "", "required maxlength=\"100\""));
    body.push_str(&html::select("Role", "role", &ROLES, Some("developer")));
    body.push_str(&html::mfa_field());
    body.push_str(
        "<p>The member has no password: they sign in with your organisation's single sign-on.</p>\
         <button type=\"submit\">Add member</button></form>",
    );
    Ok(ctx.page("Team", "/team", &body))
}

pub(super) async fn post(ctx: &Ctx<'_>, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mfa = Some(field(fields, "mfa_code"));
    match rest {
        [] => {
            let body = json!({ "email": field(fields, "email"), "name": field(fields, "name"), "role": field(fields, "role") });
            let m = data(ctx.api(Method::POST, "/team/members", Some(body), mfa).await?);
            Ok(ctx.done("/team", &format!("{} added as {}.", html::text(&m["email"]), html::text(&m["role"]))))
        }
        [id, "role"] => {
            let body = json!({ "role": field(fields, "role") });
            let m = data(ctx.api(Method::PATCH, &format!("/team/members/{}", seg(id)), Some(body), mfa).await?);
            Ok(ctx.done("/team", &format!("{} is now {}.", html::text(&m["email"]), html::text(&m["role"]))))
        }
        [id, "remove"] => {
            ctx.api(Method::DELETE, &format!("/team/members/{}", seg(id)), None, mfa).await?;
            Ok(ctx.done("/team", &format!("Member {id} removed.")))
        }
        _ => Err(super::no_route(ctx, "team", rest)),
    }
}
