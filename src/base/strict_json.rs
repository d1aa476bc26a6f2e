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
//!
//! Most messages are plain: no `\u` escape, no escaped key, no number with an exponent, shallow
//! and narrow. [`plainly_one_way`] finds such a text sound in one scan of its bytes that builds
//! nothing (a fifth of the walk's cost on a `tools/call`); whatever it is not sure of, every
//! ambiguous text included, goes to the walk, which alone names what is wrong.

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
    if plainly_one_way(text) {
        return Ok(());
    }
    walked(text)
}

/// [`check`] by the walk alone.
fn walked(text: &[u8]) -> Result<(), Ambiguous> {
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

/// Keys of the open objects the quick scan holds at most (their bytes' bounds), and how deep it
/// goes: a text beyond either goes to the walk.
const PLAIN_KEYS: usize = 64;
const PLAIN_DEPTH: usize = 32;
/// Longer numbers may be out of an `f64`'s range (from 310 digits): the walk reads them.
const PLAIN_NUMBER: usize = 300;

/// Whether `text` surely reads one way, found in one scan: valid UTF-8, no `\u` escape (the only
/// way to spell a lone surrogate, or a key two ways), no escape in a key, every number short and
/// without an exponent, at most [`PLAIN_DEPTH`] deep, and no object with a key twice. `false`
/// says nothing: the walk decides. Relies on `text` being JSON; a byte out of place gives `false`.
fn plainly_one_way(text: &[u8]) -> bool {
    if std::str::from_utf8(text).is_err() {
        return false;
    }
    // Each open container's first key in `keys`, or `ARRAY`.
    const ARRAY: u8 = u8::MAX;
    let mut open = [0u8; PLAIN_DEPTH];
    let mut depth = 0usize;
    let mut keys = [(0u32, 0u32); PLAIN_KEYS];
    let mut held = 0usize;
    let mut at_key = false;
    let Ok(len) = u32::try_from(text.len()) else { return false };
    let mut i = 0usize;
    while i < text.len() {
        match text[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b':' => {}
            b'{' | b'[' => {
                if depth == PLAIN_DEPTH {
                    return false;
                }
                at_key = text[i] == b'{';
                // `held` < PLAIN_KEYS < ARRAY, so the two never meet.
                open[depth] = if at_key { held as u8 } else { ARRAY };
                depth += 1;
            }
            b'}' | b']' => {
                let Some(d) = depth.checked_sub(1) else { return false };
                depth = d;
                if open[d] != ARRAY {
                    let first = usize::from(open[d]);
                    if twice(text, &mut keys[first..held]) {
                        return false;
                    }
                    held = first;
                }
                at_key = false;
            }
            b',' => at_key = depth > 0 && open[depth - 1] != ARRAY,
            b'"' => {
                let start = i + 1;
                let mut j = start;
                loop {
                    match text.get(j) {
                        Some(b'"') => break,
                        Some(b'\\') if !at_key && text.get(j + 1) != Some(&b'u') => j += 2,
                        Some(b'\\') | None => return false,
                        Some(_) => j += 1,
                    }
                }
                if at_key {
                    if held == PLAIN_KEYS {
                        return false;
                    }
                    // Both within `len`, which fits a u32.
                    keys[held] = (start as u32, (j as u32).min(len));
                    held += 1;
                    at_key = false;
                }
                i = j;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i + 1 < text.len() && matches!(text[i + 1], b'0'..=b'9' | b'.' | b'-' | b'+') {
                    i += 1;
                }
                if i + 1 - start > PLAIN_NUMBER || matches!(text.get(i + 1), Some(b'e' | b'E')) {
                    return false;
                }
            }
            b't' | b'f' | b'n' => {
                while i + 1 < text.len() && text[i + 1].is_ascii_lowercase() {
                    i += 1;
                }
            }
            _ => return false,
        }
        i += 1;
    }
    depth == 0
}

/// Whether one object's keys (bounds in `text`, which it may reorder) hold a name twice.
fn twice(text: &[u8], keys: &mut [(u32, u32)]) -> bool {
    let name = |k: &(u32, u32)| &text[k.0 as usize..k.1 as usize];
    if keys.len() <= PAIRWISE {
        return keys.iter().enumerate().any(|(i, k)| keys[..i].iter().any(|o| name(o) == name(k)));
    }
    keys.sort_unstable_by(|a, b| name(a).cmp(name(b)));
    keys.windows(2).any(|w| name(&w[0]) == name(&w[1]))
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
    fn a_plain_message_is_found_sound_by_the_quick_scan() {
        let call = br#"{"jsonrpc":"2.0","id":"7","method":"tools/call","params":{"name":"echo","arguments":{"message":"a \"b\" \n","n":-1.25,"on":true,"x":null,"list":[{"a":1},{"a":2}]}}}"#;
        assert!(plainly_one_way(call));
        // Left to the walk: a `\u` escape, an escaped key, an exponent, a key twice, deep nesting.
        for text in [
            r#"{"a":"\u00e9"}"#,
            r#"{"a\"b":1}"#,
            r#"{"a":1e5}"#,
            r#"{"a":1,"b":{"c":1,"c":2}}"#,
            &format!("{}{}", "[".repeat(40), "]".repeat(40)),
        ] {
            assert!(!plainly_one_way(text.as_bytes()), "{text}");
        }
    }

    /// Random texts, many of them ambiguous: whatever the quick scan passes, the walk passes.
    #[test]
    fn the_quick_scan_passes_only_what_the_walk_passes() {
        use rand::{Rng, SeedableRng};
        fn value(rng: &mut rand::rngs::StdRng, depth: u32, out: &mut String) {
            let pick = if depth > 6 { rng.gen_range(0..4) } else { rng.gen_range(0..7) };
            match pick {
                0 => out.push_str(["1", "-0.5", "12345678901234567890123", "1e999", "2E3", "0"][rng.gen_range(0..6)]),
                1 => out.push_str(["\"x\"", "\"\\ud800\"", "\"\\n\\\"\"", "\"é\"", "\"\\u0041\""][rng.gen_range(0..5)]),
                2 => out.push_str(["true", "false", "null"][rng.gen_range(0..3)]),
                3 => out.push_str("{}"),
                4 | 5 => {
                    out.push('{');
                    for i in 0..rng.gen_range(1..5) {
                        if i > 0 {
                            out.push(',');
                        }
                        let key = ["\"a\"", "\"b\"", "\"c\"", "\"\\u0061\"", "\"a\\n\""][rng.gen_range(0..5)];
                        out.push_str(key);
                        out.push(':');
                        value(rng, depth + 1, out);
                    }
                    out.push('}');
                }
                _ => {
                    out.push('[');
                    for i in 0..rng.gen_range(0..4) {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        value(rng, depth + 1, out);
                    }
                    out.push(']');
                }
            }
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(59);
        let (mut quick, mut ambiguous) = (0, 0);
        for _ in 0..20_000 {
            let mut text = String::new();
            value(&mut rng, 0, &mut text);
            let walk = walked(text.as_bytes());
            ambiguous += usize::from(walk.is_err());
            if plainly_one_way(text.as_bytes()) {
                quick += 1;
                assert_eq!(walk, Ok(()), "the quick scan passed {text}");
            }
            assert_eq!(check(text.as_bytes()), walk, "{text}");
        }
        assert!(
            quick > 2_000 && ambiguous > 2_000,
            "the texts must exercise both: {quick} quick, {ambiguous} ambiguous"
        );
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
