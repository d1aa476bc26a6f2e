//! Who is calling and how they prove it: credential resolution, MFA, OAuth for the gateways' MCP
//! clients, OAuth toward the apps, toolgate's own authorization server and the web sign-in.
//!
//! The web sign-in (`signin/`) and the authorization server (`oauth_server/`) answer under the
//! same prefix (`{auth_url}`); what they share lives here, so neither reaches into the other:
//! the router of the prefix (`router.rs`), the guessing bounds and their window, and the
//! authorization server's kept clients. The authorization server's page sits on the web
//! sessions (`oauth_server/authorize.rs` uses `signin`); `signin` uses nothing of it.

pub(crate) mod app_oauth;
pub(crate) mod credentials;
pub(crate) mod gateway_oauth;
pub(crate) mod mfa;
pub(crate) mod oauth_server;
pub(crate) mod revocation;
mod router;
pub(crate) mod signin;
pub(crate) mod token_exchange;

pub(crate) use router::{handle, refuse};

use crate::data::limiter::Guesses;
use crate::data::model::User;
use crate::data::state::{State, WriteGuard};
use crate::edge::error::ApiError;
use dashmap::DashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The window of the identity service's per-address bounds (password checks, sign-ins started,
/// registrations).
pub(crate) const ADDRESS_WINDOW: Duration = Duration::from_secs(10 * 60);
/// OAuth clients one address block (/24, /56) may register per window (each is a stored record).
pub(crate) const BLOCK_REGISTRATIONS: u32 = 20;

/// What the identity service's handlers (the sign-in pages, the consent page, the authorization
/// server's endpoints) work with: the state, MFA, the guessing bounds, the sign-in's sessions
/// and the authorization server's kept clients. Held by the running server and handed to them
/// alone, as the MCP routes get the MCP runtime, so that the identity area depends on nothing
/// above it.
pub struct IdentityService {
    pub state: Arc<State>,
    /// The MFA service, shared with the management API's MFA routes.
    pub mfa: Arc<mfa::Mfa>,
    /// Web sessions and the sign-in's lockouts.
    pub signin: signin::SignIn,
    /// The trail that sign-ins and consents are recorded in.
    pub audit: Arc<crate::data::audit::Audit>,
    /// Per-address bounds (password checks, sign-ins started, registrations, documents
    /// fetched) and wrong guesses in a row, shared by the instances on Redis; MFA counts its
    /// wrong codes in the same.
    pub(crate) guesses: Arc<Guesses>,
    /// Self-registered OAuth clients and when this instance last extended their life
    /// (`oauth_server`: a client unused for `web.registration_unused_secs` expires).
    pub(crate) registrations_kept: DashMap<String, Instant>,
    /// Client metadata documents fetched and kept (`oauth_server`); a reload of `web` forgets them.
    pub client_documents: oauth_server::ClientDocuments,
}

/// What removing a user ended besides its record.
pub(crate) struct Removed {
    /// The OAuth grants the user had given, now revoked.
    pub grants: usize,
    /// The user's own app connections, ended: their tokens are the caller's to revoke at the
    /// apps' providers (`server::connections_ended`, which this area cannot reach).
    pub connections: Vec<Arc<crate::data::model::Connection>>,
}

impl IdentityService {
    pub fn new(state: Arc<State>, mfa: Arc<mfa::Mfa>, audit: Arc<crate::data::audit::Audit>) -> IdentityService {
        // One set of guessing bounds for MFA's wrong codes and the sign-in's.
        let guesses = mfa.guesses().clone();
        let signin = signin::SignIn::new(state.store.clone(), state.changes.clone(), &state.config(), guesses.clone());
        IdentityService {
            state,
            mfa,
            signin,
            audit,
            guesses,
            registrations_kept: DashMap::new(),
            client_documents: Default::default(),
        }
    }

    /// Drops the guessing bounds' closed windows and forgotten streaks from memory (the
    /// server's minute sweep); a window is dropped once the longest of them has passed.
    pub fn sweep(&self) {
        let longest = ADDRESS_WINDOW.max(mfa::USER_WINDOW).max(oauth_server::FETCH_WINDOW);
        self.guesses.sweep(longest);
    }

    /// Removes `user`: its record, then every way it had in (web sessions, the OAuth grants it
    /// gave and their waiting codes, its MFA enrolment, its password, its own app connections). The caller decided under
    /// the organisation's write lock that the user may go (`lock`); the record is deleted under
    /// it, and the lock is let go before the grants are revoked, which take it themselves.
    /// With the record gone nothing resolves to the user any more; ending the rest frees it.
    pub(crate) async fn remove_user(&self, user: &User, lock: WriteGuard<'_>) -> Result<Removed, ApiError> {
        self.state.delete_user(user).await?;
        drop(lock);
        // Their own app connections end with them (and their upstreams, on every instance).
        let connections = self.state.delete_connections_of(&user.org_id, &user.id).await?;
        self.signin.sessions.end_all(&user.id).await?;
        let grants = oauth_server::revoke_user(&self.state, user).await?;
        self.mfa.remove(&user.id).await?;
        signin::passwords::remove(&self.state, user).await?;
        Ok(Removed { grants, connections })
    }
}

/// Counts one more `what` from `ip` (by address, IPv6 by /64) against `limit` per
/// [`ADDRESS_WINDOW`]: a 429 with `Retry-After` when the address has had its share.
pub(crate) async fn count_per_address(guesses: &Guesses, what: &str, ip: IpAddr, limit: u32) -> Result<(), ApiError> {
    let key = format!("{what}:{}", crate::data::limiter::address_block(ip, false));
    guesses.count(&key, limit, ADDRESS_WINDOW).await.map_err(|wait| ApiError::too_many(what, wait))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
