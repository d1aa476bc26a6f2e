//! The HTTP edge: connections and their bounds, TLS, one exchange's body and answer, query and
//! form parsing, content negotiation, and the typed errors' one mapping to HTTP (the API's and the OAuth endpoints').

pub mod conn_limits;
pub mod error;
pub mod exchange;
pub mod forms;
pub mod negotiate;
pub mod tls;
