//! The HTTP edge: connections and their bounds, TLS, one exchange's body and answer, and the
//! typed API errors' one mapping to HTTP.

pub mod conn_limits;
pub mod error;
pub mod exchange;
pub mod tls;
