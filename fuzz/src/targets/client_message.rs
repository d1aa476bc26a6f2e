//! A client's message as the gateway reads it before deciding on it
//! (`jsonrpc::parse_from_client`, Decision 22 of the design): what it accepts must read one way.
//!
//! Properties beyond "no panic", for every accepted message:
//! - its whole text reads as a tree (what rules and lists read), and reads as the same tree
//!   whether an object keeps the first or the last of a member written twice (Python, JavaScript
//!   and Go keep the last, serde's structs the first): no reader can find another value;
//! - a `tools/call`'s, `prompts/get`'s or `resources/read`'s `name` / `uri` is what that tree
//!   holds;
//!
//! and every refusal is answered with a JSON-RPC response naming its place. The seeds in
//! `corpus/client_message/` are the crafted messages the differential test
//! (`tests/py/test_mcp_differential.py`) sends through a gateway to apps on the official SDKs.

use super::jsonrpc::show;
use super::{Features, Outcome};
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;
use toolgate::mcp::jsonrpc::{self, Incoming, Message};

pub fn run(data: &[u8]) -> Features {
    let mut out = Outcome::new();
    match jsonrpc::parse_from_client(data) {
        Ok(incoming) => {
            out.add("accepted");
            let last = serde_json::from_slice::<Value>(data).expect("accepted, yet not readable as a tree");
            let first = first_wins(data).expect("accepted, yet not readable keeping first members");
            assert_eq!(first, last, "accepted a message that reads two ways: {}", show(data));
            if let Incoming::Single(Message::Request(r)) = incoming {
                out.add("request");
                let params = r.params.as_ref().map(|p| p.to_value()).unwrap_or(Value::Null);
                for member in ["name", "uri"] {
                    if let Some(v) = params.get(member) {
                        assert_eq!(Some(v), last.get("params").and_then(|p| p.get(member)), "{}", show(data));
                        out.add(member);
                    }
                }
            }
        }
        Err(e) => super::jsonrpc::refused(&e, &mut out),
    }
    out.finish()
}

/// The text as a tree whose objects keep the first of a member written twice.
fn first_wins(data: &[u8]) -> Result<Value, serde_json::Error> {
    struct First;
    impl<'de> serde::de::DeserializeSeed<'de> for First {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(FirstVisitor)
        }
    }
    struct FirstVisitor;
    impl<'de> Visitor<'de> for FirstVisitor {
        type Value = Value;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(v.into())
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(v.into())
        }
        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_string()))
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::new();
            while let Some(v) = seq.next_element_seed(First)? {
                items.push(v);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut m = Map::new();
            while let Some(k) = map.next_key::<String>()? {
                let v = map.next_value_seed(First)?;
                m.entry(k).or_insert(v);
            }
            Ok(Value::Object(m))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(data);
    serde::de::DeserializeSeed::deserialize(First, &mut de)
}
