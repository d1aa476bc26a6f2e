//! The HTTP edge: connections and their bounds, TLS, one exchange's body and answer, query and
//! form parsing, content negotiation, and the typed errors' one mapping to HTTP (the API's and the OAuth endpoints').

pub(crate) mod conn_limits;
pub(crate) mod error;
pub(crate) mod exchange;
pub(crate) mod forms;
pub(crate) mod negotiate;
pub mod tls;
