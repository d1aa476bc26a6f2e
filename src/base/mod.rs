//! The ground floor: small pieces every other area may use and that use nothing of toolgate's
//! (ids and secrets, JWT verification, hidden text, JSON that reads one way, the maps read on every call, deadlines, the clock, where a
//! path goes, the well-known URIs).

pub(crate) mod deadline;
pub(crate) mod fast_map;
pub(crate) mod hidden_text;
pub(crate) mod jwt;
pub(crate) mod pair_key;
pub(crate) mod quick;
pub mod route;
pub mod secrets;
pub(crate) mod strict_json;
pub(crate) mod time;
pub(crate) mod well_known;
