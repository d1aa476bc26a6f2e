//! What leaves toolgate for the outside world: where it may go (the egress rules), the one
//! builder of its HTTP clients, the keys fetched for JWT verifiers, and the messages to people
//! (e-mail and text messages).

pub mod client;
pub mod courier;
pub mod egress;
pub mod jwks;
