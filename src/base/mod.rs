//! The ground floor: small pieces every other area may use and that use nothing of toolgate's
//! (ids and secrets, JWT verification, hidden text, JSON that reads one way, the maps read on every call, deadlines, the clock, where a
//! path goes, the well-known URIs).

pub mod deadline;
pub mod fast_map;
pub mod hidden_text;
pub mod jwt;
pub mod pair_key;
pub mod route;
pub mod secrets;
pub mod strict_json;
pub mod time;
pub mod well_known;
