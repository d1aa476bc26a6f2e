//! toolgate: a high-performance MCP gateway on Cloudflare Pingora.
//!
//! `main.rs` only parses the command line; everything testable lives in these modules:
//! `config` (YAML -> validated runtime config), `store` (persistence), `state` (records in
//! memory), `api` (management handlers), `mcp` (the MCP endpoint and the apps), `proxy` (the
//! Pingora phases), `error` (errors -> HTTP/JSON-RPC), `metrics`.
#![forbid(unsafe_code)]

pub mod api;
pub mod changes;
pub mod config;
pub mod conn_limits;
pub mod error;
pub mod exchange;
pub mod jwt;
pub mod limiter;
pub mod mcp;
pub mod metrics;
pub mod mfa;
pub mod model;
pub mod proxy;
pub mod reqlog;
pub mod route;
pub mod run;
pub mod secrets;
pub mod server;
pub mod state;
pub mod store;
