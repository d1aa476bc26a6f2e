//! What toolgate tells its operators: Prometheus series, trace spans and their export, the
//! process's own log, and the request log's rollups.

pub mod logging;
pub(crate) mod metrics;
pub mod rollup;
pub(crate) mod trace;
