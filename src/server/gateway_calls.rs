//! A call to a gateway's MCP endpoint made on the server's side as a signed-in user: the
//! console's tool playground. The console (which may not reach the MCP side or the proxy) asks
//! through [`GatewayCalls`]; the proxy, which owns the routes and the filter chains, installs
//! the one implementation at start (`proxy::InProcess`). That implementation serves the call
//! as an HTTP request to the gateway's endpoint over an in-memory connection, so it takes the
//! very path a client's call takes (the rate limit, the gateway's quotas, its rules, the
//! catalogue, the request-log entry and the access line) with the user's web session as the
//! caller. The endpoint itself still takes only its own credentials: no cookie is read there.

use crate::edge::error::ApiError;
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;
use toolgate_filters::Principal;

/// One MCP request of the playground (`tools/list` or `tools/call`), in the stateless revision.
pub(crate) struct GatewayCall<'a> {
    /// The signed-in user's caller (credential `web_session`).
    pub principal: Arc<Principal>,
    /// The browser's address, as the console's request had it.
    pub client_ip: IpAddr,
    pub gateway_id: &'a str,
    pub method: &'a str,
    /// The tool a `tools/call` names (its `Mcp-Name` header).
    pub name: Option<&'a str>,
    /// The request's `params` (toolgate adds the revision's `_meta`).
    pub params: Value,
}

/// What the endpoint answered: the HTTP status, the JSON-RPC message, and the request's id (as
/// its `X-Request-Id` and the log entry carry it).
pub(crate) struct GatewayAnswer {
    pub status: u16,
    pub body: Value,
    pub request_id: String,
}

/// Calls a gateway as a signed-in user (see the module's documentation).
pub(crate) trait GatewayCalls: Send + Sync {
    fn call<'a>(&'a self, call: GatewayCall<'a>) -> BoxFuture<'a, Result<GatewayAnswer, ApiError>>;
}
