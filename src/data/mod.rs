//! The records and everything that keeps them: the model, the in-memory state and its change
//! feed, the store behind it, the peers that carry changes between instances, the rate-limit
//! backend, the request log and the audit trail.

pub mod audit;
pub mod changes;
pub mod limiter;
pub mod model;
pub mod peers;
pub mod rekey;
pub mod reqlog;
pub mod state;
pub mod store;
pub mod tool_pins;
