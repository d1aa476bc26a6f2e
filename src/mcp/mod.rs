//! The MCP side of toolgate: JSON-RPC types, the apps behind the gateways (built-in, stdio,
//! Streamable HTTP) and the aggregation of their tools. See `README.md` beside this file for
//! the protocol decisions.

pub mod apps;
pub mod builtin;
pub mod catalogue;
pub mod endpoint;
pub mod jsonrpc;
pub mod protocol;
pub mod quota;
pub mod sessions;
pub mod subscriptions;
pub mod upstream;
