//! What follows when users' own app connections end (a member removed, a password changed, a
//! service account deleted, a connection removed): their OAuth tokens are revoked at the apps'
//! providers (RFC 7009, `identity::revocation`), in the background, so that a removal never
//! waits for a provider nor fails with it. Each ended connection is counted in
//! `toolgate_token_revocations_total{app,outcome}`; a failure is logged, never with the token.
//! The other instances hear of each removal on the change feed and close the user's upstreams;
//! the revocation itself is made once, by the instance that ended the connection.

use crate::data::model::Connection;
use crate::data::state::State;
use crate::identity::app_oauth::Tokens;
use crate::identity::revocation::{revoke, Revoked};
use crate::observe::metrics;
use std::sync::Arc;

/// Revokes the tokens of `ended` (connections just removed) at their apps' providers, in a task
/// of its own. Connections without tokens (an API key, an authorization still pending, one that
/// failed its renewal) have nothing to revoke.
pub(crate) fn revoke_tokens(state: &Arc<State>, ended: Vec<Arc<Connection>>) {
    let with_tokens: Vec<(Arc<Connection>, Tokens)> =
        ended.into_iter().filter_map(|c| tokens_of(state, &c).map(|t| (c, t))).collect();
    if with_tokens.is_empty() {
        return;
    }
    let state = state.clone();
    tokio::spawn(async move {
        for (c, tokens) in with_tokens {
            revoke_one(&state, &c, &tokens).await;
        }
    });
}

/// The OAuth tokens a connected OAuth connection holds sealed.
fn tokens_of(state: &State, c: &Connection) -> Option<Tokens> {
    if c.auth_type != "oauth" || c.status != "connected" {
        return None;
    }
    let plain = state.sealer.open(c.sealed_credentials.as_ref()?).ok()?;
    serde_json::from_slice(&plain).ok()
}

async fn revoke_one(state: &State, c: &Connection, tokens: &Tokens) {
    let user = c.user_id.as_deref().unwrap_or("");
    let Some(app) = state.app(&c.app_id) else {
        tracing::info!(
            org = c.org_id,
            user,
            app = c.app_id,
            "an ended connection's app is gone: its tokens are not revoked"
        );
        return;
    };
    let allow_http = state.config().environment.allows_http();
    let said = match revoke(&app, allow_http, tokens).await {
        Ok(Revoked::Done) => ("revoked", "revoked an ended connection's tokens at the app's provider"),
        Ok(Revoked::Unsupported) => {
            ("unsupported", "the app's provider offers no revocation: an ended connection's tokens expire on their own")
        }
        Err(error) => {
            metrics::token_revocation(&app.id, "failed");
            tracing::warn!(org = c.org_id, user, app = app.id, %error, "an ended connection's tokens could not be revoked");
            return;
        }
    };
    metrics::token_revocation(&app.id, said.0);
    tracing::info!(org = c.org_id, user, app = app.id, "{}", said.1);
}
