//! The authorization server's page (`{auth_url}/oauth/authorize`): a signed-in user sees what
//! a client asks for and allows or denies it. The protocol's checks are `oauth_server`'s; this
//! file is the web session, the CSRF-protected form and the redirects.

use super::{csrf, current, form, pages, prefix, session_token, Page};
use crate::data::model::Gateway;
use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;
use crate::identity::oauth_server::{self, AuthorizationRequest};
use crate::identity::IdentityService;
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
pub(super) async fn authorize(identity: &IdentityService, ex: &Exchange<'_>) -> Result<Page, ApiError> {
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
    let page = pages::consent(&path, &csrf, &request.client.name, &user.email, &scopes, gateway, &carried);
    Ok(Page::html(200, page).cookie(csrf::cookie(&identity.state.config(), &csrf)))
}

/// `POST {auth_url}/oauth/authorize`: the user's decision, on the same checks again.
pub(super) async fn decide(identity: &IdentityService, ex: &mut Exchange<'_>) -> Result<Page, ApiError> {
    let session = current(identity, ex).await?.ok_or_else(|| ApiError::Unauthorized("sign in first".into()))?;
    let token = session_token(identity, ex).unwrap_or_default().to_string();
    let fields = form(identity, ex, csrf::Binding::Session(&token)).await?;
    let user = identity.state.user(&session.user_id).ok_or(ApiError::NotFound("user"))?;
    let (request, _) = match checked(identity, &fields, &user.org_id, ex.ctx.client_ip).await? {
        Ok(r) => r,
        Err(refusal) => return Ok(refusal),
    };
    let state = request.state.as_deref();
    let allowed = super::field(&fields, "decision") == "allow";
    super::trail::consent(identity, &user, &request.client.id, request.resource.as_deref(), allowed);
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
