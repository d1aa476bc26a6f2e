//! Tool changes (`/tool-changes`): a gateway's pending changes of its apps' tool definitions
//! (`docs/governance.md`), each approved or rejected behind the MFA gate.

use super::html;
use super::{encode, rows, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use toolgate_filters::Scope;

pub(super) async fn page(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let gateway = ctx.query("gateway_id").unwrap_or("");
    let picker = super::gateways::picker(ctx, Some(gateway), true).await;
    let mut body = format!(
        "<form method=\"get\" action=\"{}\">{}<button type=\"submit\">Show</button></form>",
        ctx.href("/tool-changes"),
        picker
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
                html::button(ctx, &format!("{base}/approve"), ("Approve", id), true, false),
                html::button(ctx, &format!("{base}/reject"), ("Reject", id), true, true)
            )
        };
        body.push_str(&html::table_with(
            "Pending tool changes",
            &items,
            &columns,
            ctx.can(Scope::GatewaysWrite),
            decide,
        ));
    }
    Ok(ctx.page("Tool changes", "/tool-changes", &body))
}

/// A form of a tool change posted to `tool-changes/...` (`rest`).
pub(super) async fn post(ctx: &Ctx<'_>, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mfa = Some(super::field(fields, "mfa_code"));
    match rest {
        [gateway, change, decision @ ("approve" | "reject")] => {
            let path = format!("/gateways/{}/tool-changes/{}/{decision}", seg(gateway), seg(change));
            ctx.api(Method::POST, &path, None, mfa).await?;
            Ok(ctx.done(&format!("/tool-changes?gateway_id={}", encode(gateway)), &format!("Change {decision}d.")))
        }
        _ => Err(super::no_route(ctx, "tool-changes", rest)),
    }
}
