//! toolgate: a high-performance MCP gateway on Cloudflare Pingora.
//!
//! `main.rs` only parses the command line; everything testable lives in these areas, whose floors
//! (which may use which) ARCHITECTURE.md gives. A request goes
//! `proxy` (routing, the filter chains of `toolgate-filters`) -> `api` (management), `identity`
//! (sign-in and the OAuth endpoints) or `mcp` (a gateway's endpoint), which answer through
//! `edge::exchange`; `data::state` holds the records and publishes their changes on
//! `data::changes`. An area uses only the areas below it (`tests/integration/layers.rs`).
#![forbid(unsafe_code)]
// Private by default: an item is `pub` only when a binary, bench, fuzz target or test outside
// `src/` names it, so that the compiler reports dead code again.
#![warn(unreachable_pub)]

pub mod api;
pub mod base;
pub mod config;
pub(crate) mod console;
pub mod data;
pub mod edge;
pub(crate) mod events;
pub(crate) mod identity;
pub mod mcp;
pub mod observe;
pub(crate) mod outbound;
pub(crate) mod proxy;
pub mod run;
pub mod server;
