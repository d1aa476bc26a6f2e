//! JSON that reads one way only.
//!
//! A gateway decides on what it reads of a message (a tool's name, the arguments a rule reads)
//! and forwards the message to an app that reads it again with its own parser. Where two JSON
//! parsers may disagree, what was checked is not what runs (Decision 22 of the design):
//!
//! - **A member written twice** (`{"name":"echo","name":"slow"}`, at any depth, also when one
//!   spelling has escapes: `"na\u006de"`). serde keeps the first or refuses, Python's, JavaScript's
//!   and Go's parsers keep the last.
//! - **A string that is not Unicode** (`"\ud800"`, a lone surrogate): serde refuses to read it,
//!   Python reads it, JavaScript keeps it; a reader that skips what it cannot read decides on less
//!   than the app gets.
//! - **A number no `f64` holds** (`1e999`), and **nesting deeper than serde's limit** (128): what
//!   a tree reader cannot build, a rule cannot read.
//!
//! [`check`] walks a whole JSON text once, builds nothing but the keys of the objects it is inside
//! (borrowed from the text unless they had escapes), and names the first member that reads two
//! ways (or cannot be read). The text is already known to be JSON (the envelope parse checked its
//! syntax), so this is the second and last pass over it.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Objects with more members than this are checked by sorting their keys, not pairwise.
const PAIRWISE: usize = 16;

/// The first place where a JSON text reads two ways, or cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguous {
    /// A member written twice in one object; `path` ends with the member's name.
    #[error("member \"{path}\" is written twice")]
    Duplicate { path: String },
    /// A value no reader can take as it is: a lone surrogate, a number out of range, nesting too
    /// deep. `path` names where it is (empty: the whole text); `why` is the parser's word for it.
    #[error("{} cannot be read: {why}", if path.is_empty() { "the message".to_string() } else { format!("member \"{path}\"") })]
    Unreadable { path: String, why: String },
}

impl Ambiguous {
    /// Where in the text (dot-separated members, array positions in brackets).
    pub fn path(&self) -> &str {
        match self {
            Ambiguous::Duplicate { path } | Ambiguous::Unreadable { path, .. } => path,
        }
    }
}

/// Checks that `text` reads one way: no object has a member twice, and every string and number
/// can be read. `text` must be JSON (an error of syntax is reported as unreadable).
pub(crate) fn check(text: &[u8]) -> Result<(), Ambiguous> {
    let mut walk = Walk { keys: Vec::new(), path: Vec::new(), duplicate: false };
    let mut de = serde_json::Deserializer::from_slice(text);
    match (Value { walk: &mut walk }).deserialize(&mut de) {
        Ok(()) => Ok(()),
        Err(e) => {
            walk.path.reverse();
            let path = walk.path.join("");
            let path = path.strip_prefix('.').unwrap_or(&path).to_string();
            if walk.duplicate {
                Err(Ambiguous::Duplicate { path })
            } else {
                Err(Ambiguous::Unreadable { path, why: without_position(&e.to_string()) })
            }
        }
    }
}

/// serde_json's message without its " at line 1 column 40": the path says where.
fn without_position(message: &str) -> String {
    message.find(" at line ").map_or(message, |i| &message[..i]).to_string()
}

/// The walk's state: the keys of every object it is inside (each object's after its parent's),
/// and on the way out of a failure, the path back to it (innermost first).
struct Walk<'de> {
    keys: Vec<Cow<'de, str>>,
    path: Vec<String>,
    duplicate: bool,
}

/// One value of the text, walked.
struct Value<'w, 'de> {
    walk: &'w mut Walk<'de>,
}

impl<'de> DeserializeSeed<'de> for Value<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            match seq.next_element_seed(Value { walk: &mut *self.walk }) {
                Ok(Some(())) => i += 1,
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.walk.path.push(format!("[{i}]"));
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let walk = self.walk;
        let start = walk.keys.len();
        loop {
            let key = match map.next_key_seed(Key) {
                Ok(Some(k)) => k,
                Ok(None) => break,
                Err(e) => return Err(e),
            };
            let at = walk.keys.len();
            walk.keys.push(key);
            if let Err(e) = map.next_value_seed(Value { walk: &mut *walk }) {
                walk.path.push(format!(".{}", walk.keys[at]));
                return Err(e);
            }
            // Nested objects leave the stack as they found it.
            walk.keys.truncate(at + 1);
        }
        if let Some(twice) = written_twice(&mut walk.keys[start..]) {
            walk.path.push(format!(".{twice}"));
            walk.duplicate = true;
            return Err(de::Error::custom("a member written twice"));
        }
        walk.keys.truncate(start);
        Ok(())
    }
}

/// The first key found twice among one object's keys (which it may reorder).
fn written_twice(keys: &mut [Cow<'_, str>]) -> Option<String> {
    if keys.len() <= PAIRWISE {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].contains(k) {
                return Some(k.to_string());
            }
        }
        return None;
    }
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0].to_string())
}

/// A member's name, borrowed from the text unless it had escapes (which are resolved, so
/// `"na\u006de"` is `name`).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(text: &str) -> String {
        match check(text.as_bytes()) {
            Err(Ambiguous::Duplicate { path }) => path,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn unreadable(text: &str) -> String {
        match check(text.as_bytes()) {
            Err(Ambiguous::Unreadable { path, .. }) => path,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn text_that_reads_one_way_passes() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":[1,{"a":2}]}}}"#,
            r#"{"a":{"b":1},"b":{"a":1},"c":[{"x":1},{"x":2}]}"#,
            r#"{"emoji":"\ud83d\ude00","n":12345678901234567890123,"f":1.5e300}"#,
            r#"[1,"two",null,true,{}]"#,
        ] {
            assert_eq!(check(text.as_bytes()), Ok(()), "{text}");
        }
    }

    #[test]
    fn a_member_written_twice_is_named_at_any_depth() {
        assert_eq!(dup(r#"{"params":{"name":"echo","arguments":{},"name":"slow"}}"#), "params.name");
        assert_eq!(dup(r#"{"params":{"arguments":{"repo":"acme"},"arguments":{"repo":"prod"}}}"#), "params.arguments");
        assert_eq!(dup(r#"{"params":{"arguments":{"list":[{"x":1},{"x":1,"x":2}]}}}"#), "params.arguments.list[1].x");
        assert_eq!(dup(r#"{"id":1,"id":2}"#), "id");
        // Escapes are resolved before comparing.
        assert_eq!(dup(r#"{"p":{"name":"echo","na\u006de":"slow"}}"#), "p.name");
    }

    #[test]
    fn a_wide_object_is_checked_by_sorting() {
        let mut members: Vec<String> = (0..1000).map(|i| format!("\"k{i}\":{i}")).collect();
        let ok = format!("{{{}}}", members.join(","));
        assert_eq!(check(ok.as_bytes()), Ok(()));
        members.push("\"k500\":0".into());
        assert_eq!(dup(&format!("{{\"a\":{{{}}}}}", members.join(","))), "a.k500");
    }

    #[test]
    fn what_cannot_be_read_is_named() {
        assert_eq!(unreadable(r#"{"params":{"arguments":{"repo":"prod","x":"\ud800"}}}"#), "params.arguments.x");
        assert_eq!(unreadable(r#"{"a":[0,1e999]}"#), "a[1]");
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(unreadable(&deep).starts_with("a[0]"));
        let e = check(br#"{"x":"\udc00"}"#).unwrap_err();
        assert!(e.to_string().contains("member \"x\" cannot be read"), "{e}");
    }
}
