//! Security: the signed-in user's MFA (`/mfa`: set up an authenticator app with its QR code,
//! turn it on, turn it off) and the organisation's IP allowlist (`/ip-allowlist`), each change
//! of which passes the MFA gate.

use super::html;
use super::{data, field, rows, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use http::Method;
use serde_json::json;

pub(super) fn mfa(ctx: &Ctx<'_>) -> Page {
    let body = format!(
        "<p>A second factor from an authenticator app: set it up, then confirm with a code.</p>\
         <h2>Set up</h2>{}<h2>Confirm</h2>{}<label>Code <input name=\"code\" inputmode=\"numeric\" \
         autocomplete=\"one-time-code\" required></label><button type=\"submit\">Turn MFA on</button></form>\
         <h2>Turn off</h2>{}",
        html::button(ctx, "/mfa/enroll", ("Set up an authenticator app", ""), false, false),
        html::form_open(ctx, "/mfa/activate", "activate"),
        html::button(ctx, "/mfa/disable", ("Turn MFA off", ""), true, true)
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
        super::chart::qr_svg(&uri),
        html::secret("Secret", &html::text(&e["secret"])),
        html::copyable("backup-codes", &codes.join("\n")),
        html::form_open(ctx, "/mfa/activate", "activate"),
    );
    Ok(ctx.page("Set up MFA", "/mfa", &body))
}

pub(super) async fn allowlist(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let got = ctx.get("/account/whitelist").await?;
    let items = rows(&got, "whitelist");
    let columns = [
        ("Id", "id"),
        ("Address", "ip"),
        ("Multiplier", "rate_limit_multiplier"),
        ("Description", "description"),
        ("Added", "created_at"),
    ];
    let delete = |id: &str| html::button(ctx, &format!("/ip-allowlist/{}/delete", seg(id)), ("Remove", id), true, true);
    let mut body = html::table_with("IP allowlist", &items, &columns, true, delete);
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

/// A form of MFA posted to `mfa/...` (`rest`).
pub(super) async fn post_mfa(ctx: &Ctx<'_>, rest: &[&str], fields: &[(String, String)]) -> Result<Page, ApiError> {
    let mfa = Some(field(fields, "mfa_code"));
    match rest {
        ["enroll"] => mfa_enrolled(ctx).await,
        ["activate"] => {
            let body = json!({ "code": field(fields, "code") });
            ctx.api(Method::POST, "/auth/mfa/activate", Some(body), None).await?;
            Ok(ctx.done("/mfa", "MFA is on."))
        }
        ["disable"] => {
            ctx.api(Method::DELETE, "/auth/mfa", None, mfa).await?;
            Ok(ctx.done("/mfa", "MFA is off."))
        }
        _ => Err(super::no_route(ctx, "mfa", rest)),
    }
}

/// A form of the IP allowlist posted to `ip-allowlist/...` (`rest`).
pub(super) async fn post_allowlist(
    ctx: &Ctx<'_>,
    rest: &[&str],
    fields: &[(String, String)],
) -> Result<Page, ApiError> {
    let mfa = Some(field(fields, "mfa_code"));
    match rest {
        [] => {
            let mut body = json!({ "ip": field(fields, "ip"), "description": field(fields, "description") });
            if let Ok(m) = field(fields, "rate_limit_multiplier").parse::<f64>() {
                body["rate_limit_multiplier"] = json!(m);
            }
            ctx.api(Method::POST, "/account/whitelist", Some(body), mfa).await?;
            Ok(ctx.done("/ip-allowlist", "Address added."))
        }
        [id, "delete"] => {
            ctx.api(Method::DELETE, &format!("/account/whitelist/{}", seg(id)), None, mfa).await?;
            Ok(ctx.done("/ip-allowlist", "Address removed."))
        }
        _ => Err(super::no_route(ctx, "ip-allowlist", rest)),
    }
}
