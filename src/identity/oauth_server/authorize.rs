//! The authorization server's authorization endpoint (`{auth_url}/oauth/authorize`, RFC 6749
//! section 3.1), whole: a signed-in user sees what a client asks for and allows or denies it.
//! The request's checks are the authorization server's (`mod.rs`); this file is the endpoint on
//! a web session (`signin`'s, whose CSRF-protected forms it uses), its page, its audit entry and
//! the redirects back to the client.

use crate::data::audit::{AuditEvent, Target};
use crate::data::model::{Gateway, User};
use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;
use crate::identity::oauth_server::{self, AuthorizationRequest};
use crate::identity::signin::pages::{escape, page};
use crate::identity::signin::{csrf, current, field, form, prefix, session_token, trail, Page};
use crate::identity::IdentityService;
use serde_json::{json, Value};
use std::sync::Arc;
use toolgate_filters::ip_allowlist::IpPolicySource;

/// The request's parameters the decision form carries back.
const CARRIED: [&str; 8] = [
    "client_id",
    "redirect_uri",
    "response_type",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
];

/// `GET {auth_url}/oauth/authorize`: the consent page, or the sign-in page first.
pub(crate) async fn show(identity: &IdentityService, ex: &Exchange<'_>) -> Result<Page, ApiError> {
    let query = ex.request().uri.query().unwrap_or("");
    let params = crate::edge::forms::parse_query(Some(query));
    let path = prefix(identity);
    let Some(session) = current(identity, ex).await? else {
        // Only a well-formed request is worth signing in for.
        oauth_server::check_client(identity, &params, None, ex.ctx.client_ip).await?;
        let here = format!("{path}/oauth/authorize?{query}");
        let next: String = url::form_urlencoded::byte_serialize(here.as_bytes()).collect();
        return Ok(Page::redirect(&format!("{path}/signin?next={next}")));
    };
    let user = identity.state.user(&session.user_id).ok_or(ApiError::NotFound("user"))?;
    let (request, gateway) = match checked(identity, &params, &user.org_id, ex.ctx.client_ip).await? {
        Ok(r) => r,
        Err(refusal) => return Ok(refusal),
    };
    let csrf = csrf::issue(&identity.state, csrf::Binding::Session(session_token(identity, ex).unwrap_or_default()));
    let carried: Vec<(&str, &str)> = CARRIED
        .iter()
        .filter_map(|name| params.iter().find(|(k, _)| k == name).map(|(_, v)| (*name, v.as_str())))
        .collect();
    let scopes = oauth_server::granted(&request, &user).each_name();
    let gateway = gateway.as_ref().map(|g| g.name.as_str());
    let page = consent_page(&path, &csrf, &request.client.name, &user.email, &scopes, gateway, &carried);
    Ok(Page::html(200, page).cookie(csrf::cookie(&identity.state.config(), &csrf)))
}

/// `POST {auth_url}/oauth/authorize`: the user's decision, on the same checks again.
pub(crate) async fn decide(identity: &IdentityService, ex: &mut Exchange<'_>) -> Result<Page, ApiError> {
    let session = current(identity, ex).await?.ok_or_else(|| ApiError::Unauthorized("sign in first".into()))?;
    let token = session_token(identity, ex).unwrap_or_default().to_string();
    let fields = form(identity, ex, csrf::Binding::Session(&token)).await?;
    let user = identity.state.user(&session.user_id).ok_or(ApiError::NotFound("user"))?;
    let (request, _) = match checked(identity, &fields, &user.org_id, ex.ctx.client_ip).await? {
        Ok(r) => r,
        Err(refusal) => return Ok(refusal),
    };
    let state = request.state.as_deref();
    let allowed = field(&fields, "decision") == "allow";
    record_consent(identity, &user, &request.client.id, request.resource.as_deref(), allowed);
    if !allowed {
        let denied = [("error", "access_denied"), ("error_description", "the user denied the request")];
        return Ok(back_to_client(identity, &request.redirect_uri, state, &denied));
    }
    let lifetime = identity.state.config().web.authorization_code_lifetime;
    let code = oauth_server::issue_code(identity.state.store.as_ref(), &request, &user, lifetime).await?;
    tracing::info!(user = user.id, client = request.client.id, "OAuth client authorised");
    Ok(back_to_client(identity, &request.redirect_uri, state, &[("code", &code)]))
}

/// The browser sent back to the client's redirect URI with `pairs`, the state and the issuer.
fn back_to_client(identity: &IdentityService, redirect_uri: &str, state: Option<&str>, pairs: &[(&str, &str)]) -> Page {
    let issuer = identity.state.config().server.public_url.clone();
    Page::redirect(&oauth_server::redirect_with(redirect_uri, &issuer, state, pairs))
}

/// The request checked for a user of `org_id`, with the gateway it is for (a `resource`):
/// `Ok(Err(page))` when it is refused, to the user (an error page) or to the client (a redirect
/// with the error). An address the organisation's IP allowlist refuses gets `access_denied`
/// (RFC 6749 section 4.1.2.1) back at the client, whatever the request.
async fn checked(
    identity: &IdentityService,
    params: &[(String, String)],
    org_id: &str,
    ip: std::net::IpAddr,
) -> Result<Result<(AuthorizationRequest, Option<Arc<Gateway>>), Page>, ApiError> {
    let (client, redirect_uri) = oauth_server::check_client(identity, params, Some(org_id), ip).await?;
    if identity.state.refuses_address(org_id, ip) {
        let pairs = [
            ("error", "access_denied"),
            ("error_description", "the organisation's IP allowlist does not allow requests from this address"),
        ];
        return Ok(Err(back_to_client(identity, &redirect_uri, oauth_server::param(params, "state"), &pairs)));
    }
    let checked = oauth_server::check_request(client, redirect_uri.clone(), params).and_then(|r| {
        let gateway = match &r.resource {
            Some(resource) => Some(oauth_server::gateway_of_resource(&identity.state, resource, org_id)?),
            None => None,
        };
        Ok((r, gateway))
    });
    match checked {
        Ok(r) => Ok(Ok(r)),
        Err(e) => {
            let pairs = [("error", e.code), ("error_description", e.description.as_str())];
            let state = oauth_server::param(params, "state");
            Ok(Err(back_to_client(identity, &redirect_uri, state, &pairs)))
        }
    }
}

/// `user` allowed or denied an OAuth client on the consent page.
fn record_consent(identity: &IdentityService, user: &User, client_id: &str, resource: Option<&str>, allowed: bool) {
    let detail = json!({
        "client_id": client_id,
        "resource": resource.map_or(Value::Null, |r| json!(r)),
        "decision": if allowed { "allow" } else { "deny" },
    });
    let event = AuditEvent::Write {
        action: "oauth.consent".into(),
        target: Target { kind: "oauth_client".into(), id: client_id.to_string() },
        before_hash: None,
        after_hash: None,
        detail,
    };
    identity.audit.record(&user.org_id, trail::user_actor(user), event);
}

/// What a client asks of the signed-in user; `carried` are the request's parameters, sent back
/// with the decision.
fn consent_page(
    prefix: &str,
    csrf: &str,
    client: &str,
    email: &str,
    scopes: &[&str],
    gateway: Option<&str>,
    carried: &[(&str, &str)],
) -> String {
    let items: String = scopes.iter().map(|s| format!("<li class=\"scope\">{}</li>", escape(s))).collect();
    let hidden: String = carried
        .iter()
        .map(|(k, v)| format!("<input type=\"hidden\" name=\"{}\" value=\"{}\">", escape(k), escape(v)))
        .collect();
    let what = if let Some(gateway) = gateway {
        format!(
            "<p>It asks to use the tools of the gateway <strong id=\"gateway\">{}</strong> as you.</p>",
            escape(gateway)
        )
    } else if scopes.is_empty() {
        "<p>It asks for nothing that your role allows.</p>".to_string()
    } else {
        format!("<p>It asks to act for you with:</p><ul>{items}</ul>")
    };
    page(
        "Allow access",
        &format!(
            "<p><strong id=\"client\">{}</strong> wants to use toolgate as <strong>{}</strong>.</p>{what}\
             <form method=\"post\" action=\"{}/oauth/authorize\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">{hidden}\
             <button type=\"submit\" name=\"decision\" value=\"allow\">Allow</button> \
             <button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button></form>",
            escape(client),
            escape(email),
            escape(prefix),
            escape(csrf)
        ),
    )
}
