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

pub mod apps;
pub mod bounds;
pub mod builtin;
pub mod catalogue;
pub mod clean;
pub mod content;
pub mod dispatch;
pub mod failures;
pub mod forwarding;
pub mod health;
pub mod jsonrpc;
pub mod modern;
pub mod parked;
pub mod protocol;
pub mod quota;
pub mod redact;
pub mod resumable;
pub mod rpc_errors;
pub mod rules;
pub mod runtime;
mod session_writer;
pub mod sessions;
pub mod stateless;
pub mod subscriptions;
pub mod tasks;
pub mod transport;
pub mod upstream;
