//! The call path's token exchange (RFC 8693, `oauth.token_exchange`): a call to an app that
//! exchanges goes on the caller's own upstream (`apps/exchanged.rs`), made with the token the
//! app's authorization server issued for the caller's own (`identity::token_exchange`). Asked
//! once a call is about to go to its app ([`caller_upstream`]); an app that does not exchange
//! costs one look at its settings, and the caller's token is read only for one that does.
//!
//! Refusals (JSON-RPC errors, counted in `toolgate_token_exchanges_total{app,outcome}`):
//! a credential that cannot be exchanged (an API key, a gateway key, a console session, a kind
//! the app does not take) is `-32006` saying what to call with; a provider's refusal is `-32006`
//! naming its `error` (`invalid_grant`, `invalid_target`, ...); a provider that cannot be reached
//! or answers nonsense is `-32004`. The subject token is in none of them, nor in the log.

use crate::base::quick::{self, Quick};
use crate::edge::exchange::Exchange;
use crate::identity::app_oauth::AppOAuthError;
use crate::identity::token_exchange::{self, Unexchangeable};
use crate::mcp::apps::AppError;
use crate::mcp::jsonrpc::RpcErrorObject;
use crate::mcp::protocol::RpcCode;
use crate::mcp::runtime::McpRuntime;
use crate::mcp::upstream::Upstream;
use crate::observe::metrics;
use serde_json::json;
use std::sync::Arc;

/// What [`caller_upstream`] answers.
type Answer = Result<Option<Arc<Upstream>>, RpcErrorObject>;

/// The upstream `org_id`'s call to `app_id` must go on: the caller's own when the app exchanges
/// tokens (none otherwise: the organisation's), or the error the call is refused with.
///
/// Not an `async fn`: every call asks, and the answer for an app that does not exchange is ready
/// in a future of a few bytes; only an exchange is boxed.
pub(crate) fn caller_upstream<'a>(
    mcp: &'a McpRuntime,
    ex: &'a Exchange<'_>,
    org_id: &'a str,
    app_id: &'a str,
) -> Quick<'a, Answer> {
    let Some(app) = mcp.state.app(app_id) else { return quick::now(Ok(None)) };
    let Some(settings) = app.oauth.as_ref().and_then(|o| o.token_exchange.as_ref()) else {
        return quick::now(Ok(None));
    };
    let token = token_exchange::bearer(ex.headers());
    let kind = match ex.ctx.filters.principal.as_deref() {
        Some(p) => token_exchange::subject_of(&p.credential, token, settings),
        None => Err(Unexchangeable::NotAToken("a call without a credential")),
    };
    let (kind, token) = match (kind, token) {
        (Ok(kind), Some(token)) => (kind, token),
        (Err(e), _) => return quick::now(Err(unexchangeable(app_id, &e))),
        (Ok(_), None) => {
            let e = Unexchangeable::NotAToken("a call without a bearer token");
            return quick::now(Err(unexchangeable(app_id, &e)));
        }
    };
    quick::later(exchanged(mcp, org_id, app, app_id, token, kind))
}

/// The caller's own upstream to an app that exchanges `token`.
async fn exchanged(
    mcp: &McpRuntime,
    org_id: &str,
    app: Arc<crate::config::AppConfig>,
    app_id: &str,
    token: &str,
    kind: crate::config::SubjectTokenType,
) -> Answer {
    match mcp.apps.caller_upstream(org_id, &app, token, kind).await {
        Ok(up) => Ok(Some(up)),
        Err(AppError::Authorization { error, .. }) => Err(exchange_failed(app_id, &error)),
        // Every one of the app's per-caller upstreams in use: -32010, as for per-user apps.
        Err(e @ AppError::UserSessionsFull { .. }) => {
            Err(RpcErrorObject::new(RpcCode::LimitExceeded.code(), e.to_string()).with_data(json!({ "app": app_id })))
        }
        Err(e) => {
            Err(RpcErrorObject::new(RpcCode::UpstreamFailure.code(), e.to_string()).with_data(json!({ "app": app_id })))
        }
    }
}

fn unexchangeable(app_id: &str, e: &Unexchangeable) -> RpcErrorObject {
    metrics::token_exchange(app_id, "unexchangeable");
    let message = format!("`{app_id}` is called with each caller's own token (token exchange): {e}");
    RpcErrorObject::new(RpcCode::Forbidden.code(), message)
        .with_data(json!({ "app": app_id, "reason": "credential_not_exchangeable" }))
}

/// The error of a failed exchange (already counted and logged where it was made).
fn exchange_failed(app_id: &str, e: &AppOAuthError) -> RpcErrorObject {
    match e {
        AppOAuthError::Refused { error, description } => RpcErrorObject::new(
            RpcCode::Forbidden.code(),
            format!(
                "`{app_id}`'s authorization server refused to exchange the caller's token: {error}{}",
                description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
            ),
        )
        .with_data(json!({ "app": app_id, "error": error, "error_description": description })),
        _ => RpcErrorObject::new(
            RpcCode::UpstreamFailure.code(),
            format!("`{app_id}`: the caller's token could not be exchanged: {e}"),
        )
        .with_data(json!({ "app": app_id })),
    }
}
