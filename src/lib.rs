//! toolgate: a high-performance MCP gateway on Cloudflare Pingora.
//!
//! `main.rs` only parses the command line; everything testable lives in these modules. A
//! request goes `proxy` (routing, the filter chains of `toolgate-filters`) -> `api` (management)
//! or `mcp` (a gateway's endpoint), which answer through `exchange`; `state` holds the records
//! and publishes their changes on `changes`; `store` persists them; `peers` carries them between instances sharing one Redis. `ARCHITECTURE.md` has the
//! whole map and its rules.
#![forbid(unsafe_code)]

pub mod api;
pub mod app_oauth;
pub mod changes;
pub mod config;
pub mod conn_limits;
pub mod courier;
pub mod deadline;
pub mod error;
pub mod events;
pub mod exchange;
pub mod fast_map;
pub mod gateway_oauth;
pub mod jwt;
pub mod limiter;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod mfa;
pub mod model;
pub mod oauth_server;
pub mod pair_key;
pub mod peers;
pub mod proxy;
pub mod reload;
pub mod reqlog;
pub mod rollup;
pub mod route;
pub mod run;
pub mod secrets;
pub mod server;
pub mod signin;
pub mod state;
pub mod store;
pub mod tls;
pub mod trace;
pub mod upgrade;
pub mod well_known;
