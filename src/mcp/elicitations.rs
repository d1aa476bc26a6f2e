//! The URL-mode elicitations toolgate issues itself (MCP 2025-11-25): a caller without a
//! connection of an app connected by each user, whose client declared URL-mode elicitation, is
//! sent to the console's connect page with an elicitation id (`-32042`, `rpc_errors::app_refusal`).
//! Each id is remembered here with who made the call, in which session, for which app, for
//! [`ELICITATION_TTL`]: the connect page checks that the signed-in person is that caller (the URL
//! is not pre-authenticated and carries no token), and once the connect succeeds the session is
//! sent `notifications/elicitation/complete` on its GET stream, so its client retries.
//!
//! Several instances: an id is issued and completed as a [`Change`] (`ElicitationIssued`,
//! `ElicitationCompleted`), which the change feed carries to every instance on Redis. Each
//! instance remembers what it heard of, so the page works on any of them, and the completion is
//! checked (the organisation and the user must be the call's) and sent by every instance that
//! holds a GET stream of the session. An instance that has not heard of an id yet (the page
//! opened within the feed's delay) lets the person connect and names no caller; the instances
//! that heard of it still refuse a completion by another user. Kept in memory only, bounded per
//! instance ([`MOST`]): an id lost to a restart completes nothing, and the person still connects.

use crate::data::changes::Change;
use crate::data::model::Gateway;
use crate::edge::exchange::sse_event;
use crate::mcp::apps::AppError;
use crate::mcp::jsonrpc::{self, RawJson};
use crate::mcp::runtime::{McpRuntime, StreamMessage};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_filters::Principal;

/// How long an issued elicitation can be completed: long enough to sign in and run an OAuth
/// flow, short enough that a link found later completes nothing.
pub(crate) const ELICITATION_TTL: Duration = Duration::from_secs(600);

/// Elicitations remembered at once per instance; past it the expired ones go, then the oldest.
const MOST: usize = 10_000;

/// The call an elicitation was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlElicitation {
    pub(crate) org_id: String,
    /// The member who made the call: the only one who may complete it.
    pub(crate) user_id: String,
    pub(crate) gateway_id: String,
    /// The MCP session the completion is sent to.
    pub(crate) session_id: String,
    pub(crate) app_id: String,
}

/// What the connect page finds of an elicitation id for the person signed in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Their own call's, for this app.
    Theirs { app_id: String },
    /// Another member's call (or another organisation's): they may not complete it.
    Another,
    /// Expired, unknown or never issued: connecting still works, and completes nothing.
    Unknown,
}

/// The elicitations this instance heard of, each until it expires or is completed. Touched only
/// when a call is refused for want of a connection and when a connect page is used, never on a
/// call that goes through.
#[derive(Default)]
pub(crate) struct UrlElicitations {
    held: parking_lot::Mutex<HashMap<String, (UrlElicitation, Instant)>>,
}

impl Found {
    /// The app of the person's own call.
    pub(crate) fn theirs(&self) -> Option<&str> {
        match self {
            Found::Theirs { app_id } => Some(app_id),
            _ => None,
        }
    }

    /// Whether the call was another's: the page refuses, nothing is completed.
    pub(crate) fn another(&self) -> bool {
        *self == Found::Another
    }
}

impl UrlElicitations {
    fn remember(&self, id: &str, e: UrlElicitation) {
        let now = Instant::now();
        let mut held = self.held.lock();
        if held.len() >= MOST {
            held.retain(|_, (_, expires)| *expires > now);
        }
        if held.len() >= MOST {
            let oldest = held.iter().min_by_key(|(_, (_, expires))| *expires).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                held.remove(&k);
            }
        }
        held.insert(id.to_string(), (e, now + ELICITATION_TTL));
    }

    /// Takes out the elicitation `id` names if `user_id` of `org_id` made its call; leaves
    /// another's in place (a wrong user's attempt does not spend the caller's link).
    fn take_for(&self, id: &str, org_id: &str, user_id: &str) -> Option<UrlElicitation> {
        let mut held = self.held.lock();
        let (e, expires) = held.get(id)?;
        if *expires <= Instant::now() {
            held.remove(id);
            return None;
        }
        if e.org_id != org_id || e.user_id != user_id {
            return None;
        }
        held.remove(id).map(|(e, _)| e)
    }

    /// What `user_id` of `org_id` may do with the elicitation `id`.
    pub(crate) fn found(&self, id: &str, org_id: &str, user_id: &str) -> Found {
        let held = self.held.lock();
        match held.get(id).filter(|(_, expires)| *expires > Instant::now()) {
            Some((e, _)) if e.org_id == org_id && e.user_id == user_id => Found::Theirs { app_id: e.app_id.clone() },
            Some(_) => Found::Another,
            None => Found::Unknown,
        }
    }
}

impl McpRuntime {
    /// An elicitation for a call refused for want of the caller's own connection, when the
    /// session's client declared URL-mode elicitation: its id (for the -32042 and its URL), the
    /// call remembered on every instance. None for a service account (an administrator connects
    /// it) or a client that cannot take one.
    pub(crate) fn url_elicitation(
        &self,
        gw: &Gateway,
        session_id: &str,
        who: Option<&Principal>,
        e: &AppError,
    ) -> Option<String> {
        let AppError::NotConnectedByCaller { app, service_account: false, .. } = e else { return None };
        let who = who?;
        if !self.sessions.capabilities(session_id).elicitation_url {
            return None;
        }
        let elicitation_id = crate::base::secrets::new_id("elicit");
        self.state.changes.publish(Change::ElicitationIssued {
            org_id: gw.org_id.clone(),
            elicitation_id: elicitation_id.clone(),
            user_id: who.user_id.clone(),
            gateway_id: gw.id.clone(),
            session_id: session_id.to_string(),
            app_id: app.clone(),
        });
        Some(elicitation_id)
    }

    /// The person signed in as `user_id` of `org_id` connected for the elicitation `id`: every
    /// instance that heard of it, and finds it theirs, sends its completion to the session.
    pub(crate) fn complete_url_elicitation(&self, id: &str, org_id: &str, user_id: &str) {
        self.state.changes.publish(Change::ElicitationCompleted {
            org_id: org_id.to_string(),
            elicitation_id: id.to_string(),
            user_id: user_id.to_string(),
        });
    }

    /// The change feed's part of it (a listener, on every instance): an issued elicitation is
    /// remembered, a completed one checked and sent to the session's GET streams here.
    pub(crate) fn on_elicitation_change(&self, change: &Change) {
        match change {
            Change::ElicitationIssued { org_id, elicitation_id, user_id, gateway_id, session_id, app_id } => {
                let e = UrlElicitation {
                    org_id: org_id.clone(),
                    user_id: user_id.clone(),
                    gateway_id: gateway_id.clone(),
                    session_id: session_id.clone(),
                    app_id: app_id.clone(),
                };
                self.elicitations.remember(elicitation_id, e);
            }
            Change::ElicitationCompleted { org_id, elicitation_id, user_id } => {
                if let Some(e) = self.elicitations.take_for(elicitation_id, org_id, user_id) {
                    self.send_elicitation_complete(elicitation_id, &e);
                }
            }
            _ => {}
        }
    }

    /// `notifications/elicitation/complete` to the session's GET streams on this instance (as
    /// a resource update goes: its gateway's channel, addressed to the one session). Without an
    /// open stream it is not kept: the client's retry works all the same.
    fn send_elicitation_complete(&self, id: &str, e: &UrlElicitation) {
        let params = RawJson::from_value(&serde_json::json!({ "elicitationId": id }));
        let event = sse_event(&jsonrpc::notification_bytes("notifications/elicitation/complete", Some(&params)));
        tracing::info!(app = %e.app_id, session = %e.session_id, "URL elicitation completed");
        if let Some(tx) = self.streams.get(&e.gateway_id) {
            let _ = tx.send(Arc::new(StreamMessage { to: Some(e.session_id.clone()), list_changed: &[], event }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(user: &str) -> UrlElicitation {
        UrlElicitation {
            org_id: "org_a".into(),
            user_id: user.into(),
            gateway_id: "gw_1".into(),
            session_id: "mcp_1".into(),
            app_id: "crm".into(),
        }
    }

    #[test]
    fn only_the_caller_completes_and_only_once() {
        let held = UrlElicitations::default();
        held.remember("elicit_1", call("usr_alice"));
        assert_eq!(held.found("elicit_1", "org_a", "usr_alice"), Found::Theirs { app_id: "crm".into() });
        assert_eq!(held.found("elicit_1", "org_a", "usr_bob"), Found::Another);
        assert_eq!(held.found("elicit_1", "org_b", "usr_alice"), Found::Another);
        assert_eq!(held.found("elicit_2", "org_a", "usr_alice"), Found::Unknown);
        // Another's attempt takes nothing and leaves the caller's in place.
        assert!(held.take_for("elicit_1", "org_a", "usr_bob").is_none());
        assert_eq!(held.take_for("elicit_1", "org_a", "usr_alice"), Some(call("usr_alice")));
        assert!(held.take_for("elicit_1", "org_a", "usr_alice").is_none(), "completed once");
        assert_eq!(held.found("elicit_1", "org_a", "usr_alice"), Found::Unknown);
    }

    #[test]
    fn the_bound_holds_and_the_oldest_goes_first() {
        let held = UrlElicitations::default();
        for i in 0..MOST + 5 {
            held.remember(&format!("elicit_{i}"), call("usr_alice"));
        }
        assert_eq!(held.held.lock().len(), MOST);
        assert_eq!(
            held.found(&format!("elicit_{}", MOST + 4), "org_a", "usr_alice"),
            Found::Theirs { app_id: "crm".into() }
        );
    }

    #[test]
    fn an_expired_one_is_unknown() {
        let held = UrlElicitations::default();
        held.remember("elicit_1", call("usr_alice"));
        held.held.lock().get_mut("elicit_1").unwrap().1 = Instant::now() - Duration::from_secs(1);
        assert_eq!(held.found("elicit_1", "org_a", "usr_alice"), Found::Unknown);
        assert!(held.take_for("elicit_1", "org_a", "usr_alice").is_none());
    }
}
