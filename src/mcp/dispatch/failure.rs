//! The answer to a call the app could not take: the app's own failure (-32003, -32004), or a
//! refusal before it (a caller without a connection of a per-user app is sent to its connect
//! page as the client's era and capabilities allow: docs/identity.md "A missing connection is a
//! link").

use super::{Call, Caller};
use crate::mcp::apps::AppError;
use crate::mcp::jsonrpc::{Id, Response};
use crate::mcp::rpc_errors::{self, ConnectLink};
use crate::mcp::stateless;
use crate::mcp::upstream::UpstreamError;
use serde_json::value::RawValue;
use std::collections::HashMap;
use toolgate_filters::Principal;

impl Call<'_> {
    /// The answer to a call the app could not take. An app that is gone has its cached lists
    /// forgotten, so that the catalogue and the gateway detail show it failing (and
    /// list_changed reaches open streams) instead of serving its tools until the caches expire.
    pub(super) fn failure(
        &self,
        app_id: &str,
        id: &Id,
        e: &AppError,
        given: Option<&HashMap<String, &RawValue>>,
        who: Option<&Principal>,
    ) -> Response {
        match e {
            AppError::Upstream { error, .. } => {
                if app_unreachable(error) {
                    self.mcp.app_changed(&self.gw.org_id, app_id);
                }
                rpc_errors::app_failure(id, app_id, error, self.request_id.as_str())
            }
            other => rpc_errors::app_refusal(id, other, self.connect_link(app_id, other, given, who)),
        }
    }

    /// How the client is sent to an app's connect page: by its era's URL-mode elicitation when it
    /// declared one (a session at `initialize`, for which an elicitation is issued; a stateless
    /// request in its envelope, unless its answer `given` declined the page), else in `data.url`.
    fn connect_link(
        &self,
        app_id: &str,
        e: &AppError,
        given: Option<&HashMap<String, &RawValue>>,
        who: Option<&Principal>,
    ) -> ConnectLink {
        match self.caller {
            Caller::Session(s) => {
                self.mcp.url_elicitation(self.gw, s, who, e).map_or(ConnectLink::Url, ConnectLink::Elicitation)
            }
            Caller::Stateless { env, .. } if env.caps.elicitation_url => stateless::connect_link(app_id, given),
            Caller::Stateless { .. } => ConnectLink::Url,
        }
    }
}

/// The app itself is gone (not merely slow or answering an error).
fn app_unreachable(e: &UpstreamError) -> bool {
    matches!(e, UpstreamError::Connect(_) | UpstreamError::Spawn(_) | UpstreamError::Exited(_) | UpstreamError::Closed)
}
