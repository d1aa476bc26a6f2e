//! What leaves toolgate for the outside world: where it may go (the egress rules) and the
//! messages to people (e-mail and text messages).

pub mod courier;
pub mod egress;
