//! Who is calling and how they prove it: credential resolution, MFA, OAuth for the gateways' MCP
//! clients, OAuth toward the apps, toolgate's own authorization server and the web sign-in.

pub mod app_oauth;
pub mod credentials;
pub mod gateway_oauth;
pub mod mfa;
pub mod oauth_server;
pub mod signin;

use crate::data::state::State;
use std::sync::Arc;

/// What the identity service's handlers (the sign-in pages, the consent page, the authorization
/// server's endpoints) work with: the state, MFA, and the sign-in's own bounds, sessions and
/// client documents. Held by the running server and handed to them alone, as the MCP routes
/// get the MCP runtime, so that the identity area depends on nothing above it.
pub struct IdentityService {
    pub state: Arc<State>,
    /// The MFA service, shared with the management API's MFA routes.
    pub mfa: Arc<mfa::Mfa>,
    /// Web sessions, guessing bounds, self-registered clients and client documents.
    pub signin: signin::SignIn,
    /// The trail that sign-ins and consents are recorded in.
    pub audit: Arc<crate::data::audit::Audit>,
}

impl IdentityService {
    pub fn new(state: Arc<State>, mfa: Arc<mfa::Mfa>, audit: Arc<crate::data::audit::Audit>) -> IdentityService {
        // One set of guessing bounds for MFA's wrong codes and the sign-in's.
        let guesses = mfa.guesses().clone();
        let signin = signin::SignIn::new(state.store.clone(), state.changes.clone(), &state.config(), guesses);
        IdentityService { state, mfa, signin, audit }
    }

    /// Drops the guessing bounds' closed windows and forgotten streaks from memory (the
    /// server's minute sweep); a window is dropped once the longest of them has passed.
    pub fn sweep(&self) {
        let longest = signin::ADDRESS_WINDOW.max(mfa::USER_WINDOW).max(oauth_server::FETCH_WINDOW);
        self.signin.guesses.sweep(longest);
    }
}
