//! Pinned tool definitions (`configuration.tool_policy`, `docs/governance.md`): a tool
//! definition's canonical hash, the ids of pins and of pending changes, the readable diff of a
//! change, and the verdict on one listed tool given a gateway's pins. The records are
//! [`ToolPin`]s, written through `State` (`save_tool_pins`) like every record; the MCP
//! catalogue applies the verdicts when it is built.

use crate::data::audit::chain::canonical;
use crate::data::model::{PendingReason, ToolPin, ToolPolicy};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The fields of a tool definition that are pinned, in the order a diff lists them. `_meta`
/// and `icons` change what a client shows (an MCP Apps `_meta.ui.resourceUri` is the page it
/// renders for the tool), so they are pinned whole.
pub(crate) const FIELDS: [&str; 8] =
    ["name", "title", "description", "inputSchema", "outputSchema", "annotations", "_meta", "icons"];

/// SHA-256 (hex) of the canonical JSON of `tool`'s pinned fields (absent ones omitted): keys
/// sorted at every depth, no whitespace. The definition as the app sent it, so text a reader
/// does not see is part of it.
///
/// A pin made before `_meta` and `icons` were pinned holds the hash of the other six fields;
/// for a tool without them the two hashes are one. Its stored definition is the whole tool as
/// the app sent it, so such a pin is judged by the hash of that definition ([`matches`]): a
/// tool whose `_meta` and `icons` are still those of the approved definition stays served, one
/// whose `_meta` or `icons` changed since is pending.
pub fn canonical_hash(tool: &Value) -> String {
    // The canonical JSON of an object of the pinned fields present, written from `tool` itself
    // (no copy): the fields in the byte order of their names, as `canonical` sorts keys.
    let mut out = String::with_capacity(512);
    out.push('{');
    let mut first = true;
    for field in SORTED_FIELDS {
        if let Some(v) = tool.get(field) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push('"');
            out.push_str(field);
            out.push_str("\":");
            canonical(v, &mut out);
        }
    }
    out.push('}');
    // `hex::encode` collects a `String` a char at a time: a tenth of the hash's cost.
    let mut digits = [0u8; 64];
    hex::encode_to_slice(Sha256::digest(out.as_bytes()), &mut digits).expect("64 digits for 32 bytes");
    String::from_utf8(digits.to_vec()).expect("hex digits are ASCII")
}

/// [`FIELDS`] in the byte order of their names (a unit test holds the two lists together).
const SORTED_FIELDS: [&str; 8] =
    ["_meta", "annotations", "description", "icons", "inputSchema", "name", "outputSchema", "title"];

/// Whether the definition hashed `hash` is the stored one (by its stored hash, or, for a pin
/// made before `_meta` and `icons` were pinned, by the hash of the stored definition now).
fn matches(stored_hash: &str, stored: &Value, hash: &str) -> bool {
    stored_hash == hash || canonical_hash(stored) == hash
}

fn short_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..12])
}

/// The id of the pin of `tool` of `app_id` on `gateway_id`: the same on every instance.
pub fn pin_id(gateway_id: &str, app_id: &str, tool: &str) -> String {
    format!("tpn_{}", short_hash(&[gateway_id, app_id, tool]))
}

/// The id of the pending change of a pin to the definition hashed `hash`.
pub(crate) fn change_id(pin_id: &str, hash: &str) -> String {
    format!("tch_{}", short_hash(&[pin_id, hash]))
}

/// The pinned fields that differ between `old` and `new` (`null` where absent), each as
/// `{"old": ..., "new": ...}`; with no `old`, every field `new` has.
pub fn diff(old: Option<&Value>, new: &Value) -> Value {
    let mut out = Map::new();
    for field in FIELDS {
        let (o, n) = (old.and_then(|o| o.get(field)), new.get(field));
        if o != n {
            let pair = serde_json::json!({ "old": o.cloned().unwrap_or(Value::Null), "new": n.cloned().unwrap_or(Value::Null) });
            out.insert(field.to_string(), pair);
        }
    }
    Value::Object(out)
}

/// What the catalogue does with one listed tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Its approved definition: served.
    Serve,
    /// Hidden, and already known as pending or rejected: nothing to record.
    Hide,
    /// The app's first list for the gateway under `pin`: served, and pinned now.
    PinNow,
    /// Hidden, and recorded as a new pending change.
    Pending(PendingReason),
}

/// A gateway's pins, as the catalogue reads them.
#[derive(Debug, Default)]
pub struct GatewayPins {
    /// App id -> tool -> pin: looked up by borrowed names, once per listed tool. An app is here
    /// once it has been listed for the gateway (at least one pin).
    by_app: HashMap<String, HashMap<String, ToolPin>>,
}

impl GatewayPins {
    pub fn new(pins: Vec<ToolPin>) -> GatewayPins {
        let mut by_app: HashMap<String, HashMap<String, ToolPin>> = HashMap::new();
        for p in pins {
            by_app.entry(p.app_id.clone()).or_default().insert(p.tool.clone(), p);
        }
        GatewayPins { by_app }
    }

    pub fn get(&self, app_id: &str, tool: &str) -> Option<&ToolPin> {
        self.by_app.get(app_id)?.get(tool)
    }

    /// The verdict on `tool` of `app_id`, listed with the definition hashed `hash`.
    pub(crate) fn judge(&self, policy: ToolPolicy, app_id: &str, tool: &str, hash: &str) -> Verdict {
        if policy == ToolPolicy::Off {
            return Verdict::Serve;
        }
        match self.get(app_id, tool) {
            Some(pin) => {
                if pin.approved.as_ref().is_some_and(|a| matches(&a.hash, &a.definition, hash)) {
                    Verdict::Serve
                } else if pin.pending.as_ref().is_some_and(|p| matches(&p.hash, &p.definition, hash))
                    || pin.rejected.as_deref() == Some(hash)
                {
                    Verdict::Hide
                } else if pin.approved.is_some() {
                    Verdict::Pending(PendingReason::Changed)
                } else {
                    Verdict::Pending(PendingReason::Added)
                }
            }
            None if policy == ToolPolicy::Pin && !self.by_app.contains_key(app_id) => Verdict::PinNow,
            None => Verdict::Pending(PendingReason::Added),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::{PendingDefinition, PinnedDefinition};
    use serde_json::json;

    #[test]
    fn the_hash_is_of_the_canonical_json_of_the_pinned_fields() {
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"b": {}, "a": {}}}});
        let b = json!({"inputSchema": {"properties": {"a": {}, "b": {}}, "type": "object"}, "description": "d", "name": "t"});
        assert_eq!(canonical_hash(&a), canonical_hash(&b), "key order does not count");
        let with_extra = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"b": {}, "a": {}}}, "execution": {"taskSupport": "optional"}});
        assert_eq!(canonical_hash(&a), canonical_hash(&with_extra), "unpinned fields do not count");
        for field in ["_meta", "icons"] {
            let mut with = a.clone();
            with[field] = json!({"ui": {"resourceUri": "ui://x"}});
            assert_ne!(canonical_hash(&a), canonical_hash(&with), "{field} is pinned");
        }
        let hidden = json!({"name": "t", "description": "d\u{200b}", "inputSchema": {"type": "object", "properties": {"b": {}, "a": {}}}});
        assert_ne!(canonical_hash(&a), canonical_hash(&hidden), "invisible text counts");
        // The canonical form itself: sorted keys, no whitespace.
        let expected = r#"{"description":"d","name":"t"}"#;
        assert_eq!(
            canonical_hash(&json!({"name": "t", "description": "d"})),
            hex::encode(Sha256::digest(expected.as_bytes()))
        );
    }

    #[test]
    fn the_sorted_fields_are_the_pinned_fields_in_byte_order() {
        let mut sorted = FIELDS;
        sorted.sort_unstable();
        assert_eq!(sorted, SORTED_FIELDS);
        // And the hash is that of the canonical JSON of an object of them.
        let tool = json!({"title": "T", "_meta": {"b": 1, "a": [2]}, "name": "n", "icons": [], "other": 1});
        let pinned: Map<String, Value> =
            FIELDS.iter().filter_map(|f| tool.get(*f).map(|v| (f.to_string(), v.clone()))).collect();
        let mut text = String::new();
        canonical(&Value::Object(pinned), &mut text);
        assert_eq!(canonical_hash(&tool), hex::encode(Sha256::digest(text.as_bytes())));
    }

    #[test]
    fn a_diff_names_each_changed_field() {
        let old = json!({"name": "t", "description": "a", "title": "T"});
        let new = json!({"name": "t", "description": "b", "annotations": {"readOnlyHint": true}});
        assert_eq!(
            diff(Some(&old), &new),
            json!({"title": {"old": "T", "new": null}, "description": {"old": "a", "new": "b"},
                   "annotations": {"old": null, "new": {"readOnlyHint": true}}})
        );
        assert_eq!(diff(None, &json!({"name": "t"})), json!({"name": {"old": null, "new": "t"}}));
    }

    fn pin(app: &str, tool: &str, approved: Option<&str>, pending: Option<&str>, rejected: Option<&str>) -> ToolPin {
        let now = chrono::Utc::now();
        ToolPin {
            id: pin_id("gw", app, tool),
            org_id: "org".into(),
            gateway_id: "gw".into(),
            app_id: app.into(),
            tool: tool.into(),
            approved: approved.map(|h| PinnedDefinition { hash: h.into(), definition: json!({}), at: now }),
            pending: pending.map(|h| PendingDefinition {
                id: change_id("p", h),
                hash: h.into(),
                definition: json!({}),
                reason: PendingReason::Changed,
                detected_at: now,
            }),
            rejected: rejected.map(str::to_string),
        }
    }

    /// A pin made before `_meta` and `icons` were pinned: its hash is of the six other fields,
    /// its definition the whole tool.
    #[test]
    fn a_pin_made_before_meta_was_pinned_is_judged_by_its_definition() {
        let approved = json!({"name": "t", "description": "d", "_meta": {"ui": {"resourceUri": "ui://a"}}, "icons": [{"src": "https://x/i.png"}]});
        let mut old = approved.clone();
        old.as_object_mut().unwrap().retain(|k, _| !matches!(k.as_str(), "_meta" | "icons"));
        let mut p = pin("a", "t", Some(&canonical_hash(&old)), None, None);
        p.approved.as_mut().unwrap().definition = approved.clone();
        let pins = GatewayPins::new(vec![p]);
        use ToolPolicy::*;
        assert_eq!(pins.judge(Pin, "a", "t", &canonical_hash(&approved)), Verdict::Serve, "unchanged: served");
        let mut moved = approved.clone();
        moved["_meta"]["ui"]["resourceUri"] = json!("ui://b");
        assert_eq!(pins.judge(Pin, "a", "t", &canonical_hash(&moved)), Verdict::Pending(PendingReason::Changed));
        let mut icon = approved;
        icon["icons"][0]["src"] = json!("https://x/j.png");
        assert_eq!(pins.judge(Pin, "a", "t", &canonical_hash(&icon)), Verdict::Pending(PendingReason::Changed));
    }

    #[test]
    fn verdicts() {
        let pins = GatewayPins::new(vec![
            pin("a", "ok", Some("h1"), None, None),
            pin("a", "waiting", Some("h1"), Some("h2"), None),
            pin("a", "refused", None, None, Some("h3")),
        ]);
        use ToolPolicy::*;
        assert_eq!(pins.judge(Off, "a", "anything", "x"), Verdict::Serve);
        assert_eq!(pins.judge(Pin, "a", "ok", "h1"), Verdict::Serve);
        assert_eq!(pins.judge(Pin, "a", "ok", "h9"), Verdict::Pending(PendingReason::Changed));
        assert_eq!(pins.judge(Pin, "a", "waiting", "h2"), Verdict::Hide, "already pending");
        assert_eq!(pins.judge(Pin, "a", "waiting", "h1"), Verdict::Serve, "the app serves the pin again");
        assert_eq!(pins.judge(Pin, "a", "refused", "h3"), Verdict::Hide, "rejected stays hidden");
        assert_eq!(pins.judge(Pin, "a", "refused", "h4"), Verdict::Pending(PendingReason::Added));
        assert_eq!(pins.judge(Pin, "a", "new", "h1"), Verdict::Pending(PendingReason::Added), "a known app's new tool");
        assert_eq!(pins.judge(Pin, "b", "first", "h1"), Verdict::PinNow, "an app's first list is trusted");
        assert_eq!(pins.judge(Approve, "b", "first", "h1"), Verdict::Pending(PendingReason::Added));
        assert_ne!(pin_id("gw", "a", "t"), pin_id("gw", "a", "u"));
        assert_ne!(change_id("p", "h1"), change_id("p", "h2"));
    }
}
