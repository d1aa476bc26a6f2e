//! The MCP side of toolgate: JSON-RPC types, the apps behind the gateways (built-in, stdio,
//! Streamable HTTP) and the aggregation of their tools. See `README.md` beside this file for
//! the protocol decisions.
//!
//! A request to `/gateway/{id}/mcp` goes `transport` (HTTP method, headers, session; or, for a
//! stateless 2026-07-28 request, `stateless` with the rules of `modern`) -> `dispatch` (what the
//! message asks) -> the apps (`apps`, `upstream`); `relay` carries what the apps send the
//! clients unasked; `tasks` follows the tasks apps create for stateless clients; `rules` decides
//! calls and lists by the gateway's per-tool rules; `reply` writes every JSON-RPC error; `health`
//! probes the apps in the background;
//! `runtime` holds the running parts they share.

pub(crate) mod apps;
pub(crate) mod bounds;
pub(crate) mod builtin;
pub(crate) mod callout;
pub mod catalogue;
pub(crate) mod clean;
pub mod content;
pub(crate) mod dispatch;
pub(crate) mod elicitations;
pub(crate) mod failures;
pub(crate) mod forwarding;
pub(crate) mod health;
pub mod jsonrpc;
pub(crate) mod modern;
pub(crate) mod parked;
pub(crate) mod protocol;
pub(crate) mod quota;
pub(crate) mod redact;
pub(crate) mod resumable;
pub(crate) mod rpc_errors;
pub mod rules;
pub(crate) mod runtime;
pub(crate) mod search_index;
pub(crate) mod session_writer;
pub(crate) mod sessions;
pub(crate) mod shaped;
pub(crate) mod stateless;
pub(crate) mod subscriptions;
pub(crate) mod tasks;
pub(crate) mod token_exchange;
pub mod tool_limits;
pub(crate) mod transport;
pub mod upstream;
