//! MCP sessions (`/sessions`): the clients' sessions on the organisation's gateways, live,
//! ended or all, and ending one (for a role holding `sessions:manage`).

use super::html;
use super::{encode, rows, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use toolgate_filters::Scope;

pub(super) async fn page(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
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
    let end = |id: &str| html::button(ctx, &format!("/sessions/{}/end", seg(id)), ("End", id), false, true);
    body.push_str(&html::table_with("MCP sessions", &items, &columns, ctx.can(Scope::SessionsManage), end));
    Ok(ctx.page("Sessions", "/sessions", &body))
}

/// A form of an MCP session posted to `sessions/...` (`rest`).
pub(super) async fn post(ctx: &Ctx<'_>, rest: &[&str], _fields: &[(String, String)]) -> Result<Page, ApiError> {
    match rest {
        [id, "end"] => {
            ctx.api(Method::DELETE, &format!("/sessions/{}", seg(id)), None, None).await?;
            Ok(ctx.done("/sessions", "Session ended."))
        }
        _ => Err(super::no_route(ctx, "sessions", rest)),
    }
}
