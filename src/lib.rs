//! toolgate: a high-performance MCP gateway on Cloudflare Pingora.
//!
//! `main.rs` only parses the command line; everything testable lives in these areas, whose floors
//! (which may use which) ARCHITECTURE.md gives. A request goes
//! `proxy` (routing, the filter chains of `toolgate-filters`) -> `api` (management), `identity`
//! (sign-in and the OAuth endpoints) or `mcp` (a gateway's endpoint), which answer through
//! `edge::exchange`; `data::state` holds the records and publishes their changes on
//! `data::changes`. An area uses only the areas below it (`tests/integration/layers.rs`).
#![forbid(unsafe_code)]

pub mod api;
pub mod base;
pub mod config;
pub mod console;
pub mod data;
pub mod edge;
pub mod events;
pub mod identity;
pub mod mcp;
pub mod observe;
pub mod outbound;
pub mod proxy;
pub mod run;
pub mod server;
