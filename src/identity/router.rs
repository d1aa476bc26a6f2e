//! The router of the identity service's prefix (`{auth_url}`, `web.path`): the authorization
//! server's machine endpoints (`/oauth/token`, `/oauth/revoke`, `/oauth/register`, answered in
//! RFC 6749's form), its page (`/oauth/authorize`), and the sign-in's pages. Kept apart from
//! both, so that neither routes the other's requests.

use super::signin::{self, Page};
use super::{oauth_server, IdentityService};
use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;
use pingora::Result;

/// Paths the authorization server answers as a machine, in JSON, never with a page.
fn machine_endpoint(path: &str) -> bool {
    matches!(path, "/oauth/token" | "/oauth/revoke" | "/oauth/register")
}

/// Answers a request under the prefix (`prefix` is its length in the path).
pub(crate) async fn handle(identity: &IdentityService, ex: &mut Exchange<'_>, prefix: usize) -> Result<()> {
    let path = ex.request().uri.path()[prefix..].to_string();
    if machine_endpoint(&path) {
        return oauth_server::handle(identity, ex, &path).await;
    }
    let method = ex.request().method.clone();
    let page = match (method.as_str(), path.as_str()) {
        ("GET", "/oauth/authorize") => oauth_server::authorize::show(identity, ex).await,
        ("POST", "/oauth/authorize") => oauth_server::authorize::decide(identity, ex).await,
        (_, "/oauth/authorize") => Err(ApiError::MethodNotAllowed(method.to_string())),
        (m, p) => match signin::page(identity, ex, m, p).await {
            Some(page) => page,
            None => Err(ApiError::NoRoute(ex.request().uri.path().to_string())),
        },
    };
    page.unwrap_or_else(|e| Page::error(&e)).write(ex).await
}

/// A refusal at the identity service's edge (its filter chain, e.g. the address's bucket): an
/// OAuth error on the machine endpoints, a page elsewhere; `Retry-After` either way.
pub(crate) async fn refuse(ex: &mut Exchange<'_>, prefix: usize, e: ApiError) -> Result<()> {
    if machine_endpoint(&ex.request().uri.path()[prefix..]) {
        return oauth_server::refuse(ex, e).await;
    }
    Page::error(&e).write(ex).await
}
