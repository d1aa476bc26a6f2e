//! Server-to-client messages, relayed: an app's requests (sampling, elicitation, roots) go to the
//! client that caused them and the client's answers come back to that app, on the upstream the
//! call went on (the caller's own for an app called as each caller); client notifications that
//! concern the apps (cancellation, roots) go to the apps, on the caller's own upstream likewise; an app's
//! `notifications/resources/updated` goes to the subscribed sessions' GET streams (with the
//! gateway's content check on its `uri`; the rest of what an app sends on its GET stream reaches
//! no client: list changes are the gateway's own messages, log messages go to the process log).

use crate::data::model::Gateway;
use crate::edge::exchange::sse_event;
use crate::mcp::content;
use crate::mcp::jsonrpc::{self, Id, RawJson, Response};
use crate::mcp::runtime::{McpRuntime, StreamMessage};
use crate::mcp::upstream::{AppNotice, CallContext, Upstream};
use std::sync::{Arc, Weak};
use toolgate_filters::Principal;

/// Where a client's answer to a relayed request goes: the app, in the organisation, on the
/// caller's own upstream when the call went on one.
pub(crate) struct Relayed {
    org_id: String,
    app_id: String,
    via: Option<Weak<Upstream>>,
}

impl McpRuntime {
    /// Delivers an app's `notifications/resources/updated` to the GET streams of the sessions
    /// subscribed to it through that upstream; ended sessions are forgotten on the way.
    pub(super) fn resource_updated(&self, notice: &AppNotice, uri: &str) {
        let key = (notice.owner.clone(), notice.app_id.clone(), uri.to_string());
        let sessions = self.subscriptions.sessions(&key);
        if sessions.is_empty() {
            return;
        }
        let params = RawJson::from_value(&serde_json::json!({ "uri": uri }));
        let event = sse_event(&jsonrpc::notification_bytes("notifications/resources/updated", Some(&params)));
        let mut decided: Vec<(String, bool)> = Vec::new();
        for session_id in sessions {
            let gateway = self.sessions.get(&session_id).filter(|s| s.status == "active").map(|s| s.gateway_id);
            let Some(gateway) = gateway else {
                self.subscriptions.remove(&key, &session_id);
                continue;
            };
            // The uri is an identifier: hidden text in it drops the update (`mcp/content/`),
            // decided once per gateway.
            let passes = match decided.iter().find(|(g, _)| *g == gateway) {
                Some((_, passes)) => *passes,
                None => {
                    let passes =
                        self.state.gateway(&gateway).is_none_or(|gw| content::identifier_passes(&gw, "uri", uri));
                    decided.push((gateway.clone(), passes));
                    passes
                }
            };
            if !passes {
                continue;
            }
            // Without an open stream the update is not kept: MCP does not ask a server to.
            if let Some(tx) = self.streams.get(&gateway) {
                let _ =
                    tx.send(Arc::new(StreamMessage { to: Some(session_id), list_changed: &[], event: event.clone() }));
            }
        }
    }

    /// Remembers which app sent a server->client request, and on which upstream (`via`: the
    /// caller's own, when the call went on one), so the client's answer goes back there.
    pub(crate) fn remember_relayed(
        &self,
        session_id: &str,
        id: &Id,
        app_id: &str,
        org_id: &str,
        via: Option<&Weak<Upstream>>,
    ) {
        let relayed = Relayed { org_id: org_id.to_string(), app_id: app_id.to_string(), via: via.cloned() };
        self.relayed.insert((session_id.to_string(), id.to_string()), relayed);
    }

    /// A client answered a relayed server->client request (sampling, elicitation, roots).
    pub(crate) async fn relay_client_response(&self, session_id: &str, _gw: &Gateway, r: Response) {
        let Some((_, to)) = self.relayed.remove(&(session_id.to_string(), r.id.to_string())) else {
            tracing::debug!("response from client matches no relayed request; ignored");
            return;
        };
        self.answer_on(to.via.as_ref(), &to.org_id, &to.app_id, r).await;
    }

    /// Delivers an answer to an app's server->client request (the client's, or the gateway's
    /// refusal on its behalf) on the upstream the call went on: the caller's own (`via`), or,
    /// for a call on the organisation's, that one. An answer for a caller's upstream that has
    /// closed meanwhile is dropped, never sent on another.
    pub(crate) async fn answer_on(&self, via: Option<&Weak<Upstream>>, org_id: &str, app_id: &str, r: Response) {
        let up = match via {
            Some(via) => via.upgrade().ok_or_else(|| "the caller's upstream closed before it".to_string()),
            None => self.apps.upstream(org_id, app_id).map_err(|e| format!("the app is gone: {e}")),
        };
        let delivered = match up {
            Ok(up) => up.respond(r, &CallContext::default()).await.map_err(|e| e.to_string()),
            Err(why) => Err(why),
        };
        if let Err(error) = delivered {
            tracing::warn!(app = app_id, %error, "cannot deliver an answer to the app's request");
        }
    }

    /// Client notifications that concern the apps (cancellation, roots) go to every app of the
    /// gateway that has an upstream session: the caller's own, for an app called as each caller
    /// (`who` the notification's credential, `bearer` its token), which the caller's calls went on.
    pub(crate) async fn forward_notification(
        &self,
        gw: &Gateway,
        who: Option<&Principal>,
        bearer: Option<&str>,
        method: &str,
        params: Option<RawJson>,
    ) {
        for app in &gw.servers {
            if let Some(up) = self.apps.upstream_for_notification(&gw.org_id, who, bearer, app) {
                let _ = up.notify(method, params.clone(), &CallContext::default()).await;
            }
        }
    }
}
