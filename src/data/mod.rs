//! The records and everything that keeps them: the model, the in-memory state and its change
//! feed, the store behind it, the peers that carry changes between instances, the rate-limit
//! backend, the request log and the audit trail.

pub mod audit;
pub(crate) mod changes;
pub(crate) mod limiter;
pub mod model;
pub(crate) mod peers;
pub(crate) mod rekey;
pub mod reqlog;
pub(crate) mod state;
pub mod store;
pub mod tool_pins;
