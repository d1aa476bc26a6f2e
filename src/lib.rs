//! toolgate: a high-performance MCP gateway on Cloudflare Pingora.
//!
//! `main.rs` only parses the command line; everything testable lives in these modules. A
//! request goes `proxy` (routing, the filter chains of `toolgate-filters`) -> `api` (management)
//! or `mcp` (a gateway's endpoint), which answer through `exchange`; `state` holds the records
//! and publishes their changes on `changes`; `store` persists them; `peers` carries them between instances sharing one Redis. `ARCHITECTURE.md` has the
//! whole map and its rules.
#![forbid(unsafe_code)]

pub mod api;
pub mod base;
pub mod config;
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
