//! What leaves toolgate for the outside world: where it may go (the egress rules), the one
//! builder of its HTTP clients, the signatures of what it sends to receivers of a tenant's
//! (webhooks, the gateways' external guards), the keys fetched for JWT verifiers, and the
//! messages to people (e-mail and text messages).

pub(crate) mod client;
pub(crate) mod courier;
pub(crate) mod egress;
pub(crate) mod guard_client;
pub(crate) mod jwks;
pub(crate) mod sign;
