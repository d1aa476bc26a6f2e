//! The audit chain's arithmetic, with no store and no server: an entry's hash, a checkpoint's
//! MAC, and the check of an export (`toolgate audit verify`).
//!
//! An entry's `hash` is the SHA-256 (hex) of the canonical JSON of every other field of the
//! entry, `prev_hash` included: object keys sorted, no white space, strings escaped as
//! `serde_json` escapes them. The first entry of an organisation has seq 1 and a `prev_hash` of
//! 64 zeros ([`GENESIS`]). A checkpoint is `{"checkpoint": {org_id, seq, head_hash, at,
//! prev_checkpoint, interval_ms}, "mac": hex, "key_id", "signature"}` with `mac` the
//! HMAC-SHA256 of the canonical JSON of `checkpoint` under the checkpoint key, `prev_checkpoint`
//! the [`Checkpoint::hash`] of the organisation's checkpoint before it (so a deleted one shows)
//! and `signature` its Ed25519 signature (`signing.rs`). Checkpoints made before signing existed
//! have neither. An export is the entries in seq order, one JSON object a line, then the
//! checkpoints; `verify.rs` checks the checkpoints' chain, signatures and anchors.

use crate::base::secrets::{digests_equal, hash_from_hex, hmac_sha256};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The `prev_hash` of an organisation's first entry.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Who did it: `kind` is `api_key`, `service_account`, `jwt`, `oauth_token`, `gateway_key`,
/// `web_session` (the console), `user` or `system`; `id` the key's, account's, token's, web
/// session's (`web:ws_...`) or user's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub kind: String,
    pub id: String,
}

impl Actor {
    /// The caller a credential resolved to: a service account by its account id, any other
    /// credential by its key (or token) id.
    pub fn of(who: &toolgate_filters::Principal) -> Actor {
        let (kind, id) = match &who.credential {
            toolgate_filters::CredentialKind::ServiceAccount { account_id } => ("service_account", account_id.clone()),
            other => (other.as_str(), who.key_id.clone()),
        };
        Actor { kind: kind.into(), id }
    }
}

/// What it was done to: a record's kind (`gateway`, `key`, `webhook`, ...) and id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub kind: String,
    pub id: String,
}

/// One link of an organisation's chain, as stored and exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub org_id: String,
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    pub actor: Actor,
    pub action: String,
    pub target: Target,
    /// SHA-256 of the record's stored JSON before the write; `None` when there was none or the
    /// record is not one the trail reads.
    pub before_hash: Option<String>,
    pub after_hash: Option<String>,
    pub detail: Value,
    pub prev_hash: String,
    pub hash: String,
}

/// A signed head: the organisation's chain had `head_hash` at `seq` at time `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub org_id: String,
    pub seq: u64,
    pub head_hash: String,
    pub at: i64,
    /// The [`Checkpoint::hash`] of the organisation's previous checkpoint ([`GENESIS`] for the
    /// first); absent on checkpoints made before they chained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_checkpoint: Option<String>,
    /// The checkpoint interval in force when it was signed: entries later than `at` plus this
    /// should have a later checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub checkpoint: Head,
    pub mac: String,
    /// The id of the Ed25519 key that signed it (`signing.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The Ed25519 signature (base64) of the head; absent on checkpoints made before signing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Writes `v` canonically: keys sorted, no white space. Nothing is allocated but the list of
/// an object's members to sort: pinning hashes every tool of a gateway's first list with it.
pub fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(k, out);
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => json_string(s, out),
        scalar => {
            // `Display` writes the number or literal straight into `out`.
            let _ = write!(out, "{scalar}");
        }
    }
}

/// `s` as serde_json writes a JSON string: quoted, with `"`, `\` and control characters
/// escaped (and nothing else). A string with none of them, nearly every one, is copied as it is.
fn json_string(s: &str, out: &mut String) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::from(s).to_string());
    }
}

/// The hash of an entry given as JSON: SHA-256 over the canonical JSON of every field but `hash`.
pub(crate) fn hash_of(entry: &Map<String, Value>) -> String {
    let mut text = String::with_capacity(512);
    let mut fields = entry.clone();
    fields.remove("hash");
    canonical(&Value::Object(fields), &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// SHA-256 (hex) of a record's stored JSON, for `before_hash` and `after_hash`.
pub(crate) fn record_hash(json: &str) -> String {
    hex::encode(Sha256::digest(json.as_bytes()))
}

impl Entry {
    /// Sets `hash` from the other fields.
    pub(crate) fn seal(mut self) -> Entry {
        let Value::Object(map) = json!(&self) else { unreachable!("an entry is an object") };
        self.hash = hash_of(&map);
        self
    }
}

fn mac_of(head: &Head, key: &[u8]) -> [u8; 32] {
    let mut text = String::new();
    canonical(&json!(head), &mut text);
    hmac_sha256(key, text.as_bytes())
}

impl Checkpoint {
    /// The head with its MAC under `key` (not yet signed: see `signing.rs`).
    pub fn sign(head: Head, key: &[u8]) -> Checkpoint {
        let mac = hex::encode(mac_of(&head, key));
        Checkpoint { checkpoint: head, mac, key_id: None, signature: None }
    }

    /// SHA-256 (hex) of the canonical JSON of the head, which the next checkpoint names as its
    /// `prev_checkpoint`; the signature covers the head, so the hash names the signed content.
    pub fn hash(&self) -> String {
        let mut text = String::new();
        canonical(&json!(self.checkpoint), &mut text);
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    /// Whether `mac` is the head's under `key` (compared in constant time).
    pub fn valid(&self, key: &[u8]) -> bool {
        hash_from_hex(&self.mac).is_some_and(|m| digests_equal(&m, &mac_of(&self.checkpoint, key)))
    }
}

/// The label of the checkpoint key derived from the master key (`TOOLGATE_SECRET_KEY` or
/// `secret.key`) when `audit.checkpoint_key_env` names none: the key is HMAC-SHA256(master key,
/// this label), [`crate::base::secrets::Sealer::derive`].
pub(crate) const DERIVED_KEY_LABEL: &[u8] = b"toolgate audit checkpoint";

/// The checkpoint key derived from the master key, as the server derives it (for the offline
/// check of an export).
pub fn derived_key(master: &[u8]) -> [u8; 32] {
    hmac_sha256(master, DERIVED_KEY_LABEL)
}

/// Where an export breaks: its line (from 1), the entry's seq when it has one, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}{}: {reason}", .seq.map(|s| format!(" (seq {s})")).unwrap_or_default())]
pub struct Broken {
    pub line: usize,
    pub seq: Option<u64>,
    pub reason: String,
}

/// What an export holds when it verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub org_id: Option<String>,
    pub entries: u64,
    pub head_hash: String,
    pub checkpoints: u64,
    /// The highest seq a checkpoint signs (its MAC checked only with a key).
    pub signed_seq: u64,
    pub macs_checked: bool,
    /// The checkpoints in export order, each with its line.
    pub checkpoint_lines: Vec<(usize, Checkpoint)>,
    /// Each entry's line and `at`, by seq (index `seq - 1`).
    pub entry_lines: Vec<(usize, i64)>,
    /// The export's number of lines.
    pub lines: usize,
}

/// Checks an export: seq continuity from 1, each `prev_hash` link, each `hash`, then each
/// checkpoint's head against the chain, and its MAC when `key` is given. The first broken line
/// is the error.
pub fn verify(text: &str, key: Option<&[u8]>) -> Result<Verified, Broken> {
    let mut v = Verified {
        org_id: None,
        entries: 0,
        head_hash: GENESIS.to_string(),
        checkpoints: 0,
        signed_seq: 0,
        macs_checked: key.is_some(),
        checkpoint_lines: Vec::new(),
        entry_lines: Vec::new(),
        lines: 0,
    };
    let mut hashes: HashMap<u64, String> = HashMap::new();
    let mut in_checkpoints = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        v.lines = line_no;
        if line.trim().is_empty() {
            continue;
        }
        let broken = |seq: Option<u64>, reason: String| Broken { line: line_no, seq, reason };
        let value: Value = serde_json::from_str(line).map_err(|e| broken(None, format!("not JSON: {e}")))?;
        if value.get("checkpoint").is_some() {
            in_checkpoints = true;
            let cp: Checkpoint =
                serde_json::from_value(value).map_err(|e| broken(None, format!("not a checkpoint: {e}")))?;
            check_checkpoint(&cp, &v, &hashes, key).map_err(|reason| broken(Some(cp.checkpoint.seq), reason))?;
            v.checkpoints += 1;
            v.signed_seq = v.signed_seq.max(cp.checkpoint.seq);
            v.checkpoint_lines.push((line_no, cp));
            continue;
        }
        let seq = value.get("seq").and_then(Value::as_u64);
        if in_checkpoints {
            return Err(broken(seq, "an entry after the checkpoints".into()));
        }
        let entry: Entry =
            serde_json::from_value(value.clone()).map_err(|e| broken(seq, format!("not an entry: {e}")))?;
        let expected = v.entries + 1;
        if entry.seq != expected {
            return Err(broken(seq, format!("expected seq {expected}: an entry is missing or out of order")));
        }
        match &v.org_id {
            Some(org) if *org != entry.org_id => {
                return Err(broken(seq, format!("organisation {} in a chain of {org}", entry.org_id)))
            }
            _ => v.org_id = Some(entry.org_id.clone()),
        }
        if entry.prev_hash != v.head_hash {
            return Err(broken(seq, "prev_hash is not the previous entry's hash".into()));
        }
        let Value::Object(map) = value else { unreachable!("an entry parsed from an object") };
        if hash_of(&map) != entry.hash {
            return Err(broken(seq, "hash does not match the entry's content (edited)".into()));
        }
        v.entries = entry.seq;
        v.entry_lines.push((line_no, entry.at));
        v.head_hash = entry.hash.clone();
        hashes.insert(entry.seq, entry.hash);
    }
    Ok(v)
}

fn check_checkpoint(
    cp: &Checkpoint,
    v: &Verified,
    hashes: &HashMap<u64, String>,
    key: Option<&[u8]>,
) -> Result<(), String> {
    let head = &cp.checkpoint;
    if v.org_id.as_ref().is_some_and(|org| *org != head.org_id) {
        return Err(format!("checkpoint of organisation {} in a chain of another", head.org_id));
    }
    if let Some(key) = key {
        if !cp.valid(key) {
            return Err("checkpoint MAC does not verify under the key".into());
        }
    }
    match hashes.get(&head.seq) {
        Some(h) if *h == head.head_hash => Ok(()),
        Some(_) => Err("checkpoint's head hash is not the chain's hash at that seq".into()),
        None => Err(format!("checkpoint signs seq {} but the export has no such entry (entries removed)", head.seq)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical form as first written (a copy of each key and scalar through
    /// `to_string`): what every stored hash was made with.
    fn canonical_as_first_written(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical_as_first_written(&map[k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical_as_first_written(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }

    #[test]
    fn the_canonical_form_is_byte_for_byte_the_one_every_stored_hash_was_made_with() {
        let v = json!({
            "quote\"key": "a \"quoted\" \\ back\\slash",
            "ctl": "tab\there\nnew line \u{1} \u{1f} del \u{7f}",
            "uni": "é 日本語 🙂 \u{200b} \u{e0041}",
            "nums": [0, -0.0, 1.5, -7, 18446744073709551615u64, 1e300, -9223372036854775808i64],
            "lits": [true, false, null],
            "nested": {"b": {"d": [], "c": {}}, "a": [{"z": 1, "y": "x"}]},
            "": "empty key",
            "B": 1, "a": 2, "_": 3, "é": 4,
        });
        let (mut now, mut first) = (String::new(), String::new());
        canonical(&v, &mut now);
        canonical_as_first_written(&v, &mut first);
        assert_eq!(now, first);
    }

    fn chain(n: u64) -> Vec<Entry> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let e = Entry {
                    org_id: "org_1".into(),
                    seq,
                    at: 1_700_000_000_000 + seq as i64,
                    actor: Actor { kind: "api_key".into(), id: "key_1".into() },
                    action: "gateway.update".into(),
                    target: Target { kind: "gateway".into(), id: format!("gw_{seq}") },
                    before_hash: None,
                    after_hash: Some(record_hash("{}")),
                    detail: json!({ "status": 200, "z": [1, { "b": 2, "a": "é\"" }] }),
                    prev_hash: prev.clone(),
                    hash: String::new(),
                }
                .seal();
                prev = e.hash.clone();
                e
            })
            .collect()
    }

    fn export(entries: &[Entry], checkpoints: &[Checkpoint]) -> Vec<String> {
        let mut lines: Vec<String> = entries.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        lines.extend(checkpoints.iter().map(|c| serde_json::to_string(c).unwrap()));
        lines
    }

    fn head(e: &Entry) -> Head {
        Head {
            org_id: e.org_id.clone(),
            seq: e.seq,
            head_hash: e.hash.clone(),
            at: e.at,
            prev_checkpoint: None,
            interval_ms: None,
        }
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let mut out = String::new();
        canonical(&json!({ "b": 1, "a": { "d": [true, null], "c": "x" } }), &mut out);
        assert_eq!(out, r#"{"a":{"c":"x","d":[true,null]},"b":1}"#);
    }

    #[test]
    fn an_intact_export_verifies_and_its_checkpoints_with_the_key() {
        let entries = chain(5);
        let cp = Checkpoint::sign(head(&entries[4]), b"k");
        let text = export(&entries, &[cp]).join("\n");
        let v = verify(&text, Some(b"k")).unwrap();
        assert_eq!((v.entries, v.checkpoints, v.signed_seq, v.org_id.as_deref()), (5, 1, 5, Some("org_1")));
        assert_eq!(verify(&text, Some(b"other")).unwrap_err().reason, "checkpoint MAC does not verify under the key");
        assert!(verify(&text, None).is_ok(), "without a key the heads are still checked, not the MACs");
    }

    #[test]
    fn an_edited_a_deleted_and_two_swapped_lines_each_name_the_first_broken_entry() {
        let lines = export(&chain(5), &[]);
        let mut edited = lines.clone();
        edited[2] = edited[2].replace("gateway.update", "gateway.read");
        let b = verify(&edited.join("\n"), None).unwrap_err();
        assert_eq!((b.line, b.seq), (3, Some(3)), "{b}");
        assert!(b.reason.contains("edited"), "{b}");

        let mut deleted = lines.clone();
        deleted.remove(1);
        let b = verify(&deleted.join("\n"), None).unwrap_err();
        assert_eq!((b.line, b.seq), (2, Some(3)), "{b}");

        let mut swapped = lines.clone();
        swapped.swap(1, 2);
        let b = verify(&swapped.join("\n"), None).unwrap_err();
        assert_eq!((b.line, b.seq), (2, Some(3)), "{b}");

        // A re-hashed edit still breaks the next link.
        let mut entries = chain(3);
        entries[1].action = "key.revoke".into();
        entries[1] = entries[1].clone().seal();
        let b = verify(&export(&entries, &[]).join("\n"), None).unwrap_err();
        assert_eq!((b.line, b.seq), (3, Some(3)), "{b}");
        assert!(b.reason.contains("prev_hash"), "{b}");
    }

    #[test]
    fn a_truncated_export_fails_against_its_checkpoint() {
        let entries = chain(4);
        let cp = Checkpoint::sign(head(&entries[3]), b"k");
        let b = verify(&export(&entries[..3], &[cp]).join("\n"), Some(b"k")).unwrap_err();
        assert_eq!((b.line, b.seq), (4, Some(4)), "{b}");
    }
}
