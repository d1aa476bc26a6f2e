//! The offline check of an export that `toolgate audit verify` runs, beyond the chain's own
//! arithmetic (`chain::verify`): the checkpoints chain (each names the one before it), each
//! signature verifies under a public key given out of band, no entry lies past the last
//! checkpoint by more than its interval, and every anchor (a checkpoint kept outside the store:
//! a process-log line, an `audit.checkpoint` webhook delivery) is in the export.
//!
//! What passing means, and what it cannot mean, is in docs/api.md ("Verifying"): a holder of the
//! master key can sign anything, and entries removed after the newest checkpoint one holds
//! (within its interval) leave no trace.

use super::chain::{self, Broken, Checkpoint, Verified, GENESIS};
use super::signing::{key_id_of, signature_valid};
use ed25519_dalek::VerifyingKey;
use serde_json::Value;

/// The interval assumed for a checkpoint that does not state its own (made before they did).
const DEFAULT_INTERVAL_MS: u64 = 60_000;

/// What to check an export against.
#[derive(Default)]
pub struct Options<'a> {
    /// The checkpoint HMAC key (a secret: who holds it can forge the MACs).
    pub mac_key: Option<&'a [u8]>,
    /// The public keys the signatures must verify under.
    pub public_keys: &'a [VerifyingKey],
    /// Checkpoints kept outside the store; those of the export's organisation must be in it.
    pub anchors: &'a [Checkpoint],
}

/// An export that passed.
#[derive(Debug)]
pub struct Report {
    pub chain: Verified,
    /// Signatures checked under a given public key.
    pub signatures: u64,
    /// The last checkpoint, which vouches for the entries up to its seq.
    pub last: Checkpoint,
    /// Entries past the last checkpoint (within its interval).
    pub unsigned_tail: u64,
    /// Anchors of this organisation found in the export.
    pub anchors: usize,
    /// Whether a key vouched for the checkpoints: a public key, or the MAC key. Without one
    /// anyone able to edit the export could have re-hashed it.
    pub vouched: bool,
}

/// Checks `text`, an export of one organisation's trail; the first break is the error.
pub fn verify_export(text: &str, opts: &Options<'_>) -> Result<Report, Broken> {
    let v = chain::verify(text, opts.mac_key)?;
    let end = |reason: String| Broken { line: v.lines, seq: None, reason };
    let Some((_, last)) = v.checkpoint_lines.last().cloned() else {
        return Err(end("no checkpoint: nothing in this export is signed".into()));
    };
    let signatures = check_checkpoint_chain(&v, opts.public_keys)?;
    let interval = last.checkpoint.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS);
    let tail = v.entry_lines.get(last.checkpoint.seq as usize..).unwrap_or_default();
    for (i, (line, at)) in tail.iter().enumerate() {
        if at.saturating_sub(last.checkpoint.at) > interval as i64 {
            let seq = last.checkpoint.seq + i as u64 + 1;
            return Err(Broken {
                line: *line,
                seq: Some(seq),
                reason: format!(
                    "entry made {} ms after the last checkpoint (seq {}), more than its interval of {interval} ms: \
                     later checkpoints are missing (removed from the end?)",
                    at - last.checkpoint.at,
                    last.checkpoint.seq
                ),
            });
        }
    }
    let org = v.org_id.clone().unwrap_or_else(|| last.checkpoint.org_id.clone());
    let anchors = check_anchors(&v, &org, opts)?;
    Ok(Report {
        signatures,
        unsigned_tail: tail.len() as u64,
        anchors,
        vouched: !opts.public_keys.is_empty() || opts.mac_key.is_some(),
        last,
        chain: v,
    })
}

/// Each checkpoint names the one before it, in order, with seqs that never go back; with public
/// keys, each signed one verifies under the key its `key_id` names, and those made before
/// checkpoints chained may only come first. Returns the signatures checked.
fn check_checkpoint_chain(v: &Verified, keys: &[VerifyingKey]) -> Result<u64, Broken> {
    let mut previous: Option<&Checkpoint> = None;
    let mut signatures = 0;
    for (line, cp) in &v.checkpoint_lines {
        let head = &cp.checkpoint;
        let broken = |reason: String| Broken { line: *line, seq: Some(head.seq), reason };
        match (&head.prev_checkpoint, previous) {
            (Some(prev), before) => {
                let expected = before.map_or_else(|| GENESIS.to_string(), Checkpoint::hash);
                if *prev != expected {
                    return Err(broken(
                        "checkpoint does not follow the checkpoint before it (a checkpoint was removed or replaced)"
                            .into(),
                    ));
                }
            }
            (None, Some(before)) if before.checkpoint.prev_checkpoint.is_some() => {
                return Err(broken("an unchained checkpoint after chained ones".into()));
            }
            (None, _) => {}
        }
        if previous.is_some_and(|p| p.checkpoint.seq > head.seq) {
            return Err(broken("checkpoint signs an earlier seq than the one before it".into()));
        }
        if !keys.is_empty() {
            match (&cp.signature, &cp.key_id) {
                (Some(_), Some(id)) => {
                    let Some(key) = keys.iter().find(|k| key_id_of(k) == *id) else {
                        return Err(broken(format!("checkpoint signed by key {id}, which is not a given public key")));
                    };
                    if !signature_valid(cp, key) {
                        return Err(broken("checkpoint signature does not verify under the public key".into()));
                    }
                    signatures += 1;
                }
                _ if head.prev_checkpoint.is_some() => return Err(broken("chained checkpoint is not signed".into())),
                _ => {}
            }
        }
        previous = Some(cp);
    }
    if !keys.is_empty() && previous.is_some_and(|last| last.signature.is_none()) {
        let (line, cp) = v.checkpoint_lines.last().expect("a previous one is the last");
        return Err(Broken {
            line: *line,
            seq: Some(cp.checkpoint.seq),
            reason: "the last checkpoint is not signed".into(),
        });
    }
    Ok(signatures)
}

/// Every anchor of the organisation is one of the export's checkpoints, byte for byte in what
/// it signs (and its signature valid with public keys); an anchor file with none of the
/// organisation's is a break too (it was given to vouch for this export).
fn check_anchors(v: &Verified, org: &str, opts: &Options<'_>) -> Result<usize, Broken> {
    if opts.anchors.is_empty() {
        return Ok(0);
    }
    let end = |seq: Option<u64>, reason: String| Broken { line: v.lines, seq, reason };
    let ours: Vec<&Checkpoint> = opts.anchors.iter().filter(|a| a.checkpoint.org_id == org).collect();
    if ours.is_empty() {
        return Err(end(None, format!("no anchor of organisation {org} in the anchor file")));
    }
    for anchor in &ours {
        let seq = Some(anchor.checkpoint.seq);
        if !opts.public_keys.is_empty() && !opts.public_keys.iter().any(|k| signature_valid(anchor, k)) {
            return Err(end(seq, "an anchor's signature does not verify under the public key".into()));
        }
        let hash = anchor.hash();
        let found = v.checkpoint_lines.iter().any(|(_, cp)| cp.hash() == hash && cp.signature == anchor.signature);
        if !found {
            return Err(end(
                seq,
                format!(
                    "the anchor signing seq {} ({}) is not among the export's checkpoints: the chain does not contain it \
                     (checkpoints or entries were removed, or the chain was rewritten)",
                    anchor.checkpoint.seq,
                    anchor.checkpoint.head_hash
                ),
            ));
        }
    }
    Ok(ours.len())
}

/// The checkpoints in an anchor file: one a line, each line a checkpoint's JSON, an
/// `audit.checkpoint` webhook delivery's body, or a process-log line (JSON or text) that
/// carries one in its `checkpoint` field; lines without one are skipped.
pub fn read_anchors(text: &str) -> Vec<Checkpoint> {
    text.lines().filter_map(anchor_in_line).collect()
}

fn anchor_in_line(line: &str) -> Option<Checkpoint> {
    if let Ok(v) = serde_json::from_str::<Value>(line) {
        if let Some(cp) = find_checkpoint(&v, 0) {
            return Some(cp);
        }
    }
    // A text log line: `checkpoint={"checkpoint":...}` among other fields.
    let start = line.find("{\"checkpoint\"")?;
    let mut values = serde_json::Deserializer::from_str(&line[start..]).into_iter::<Value>();
    find_checkpoint(&values.next()?.ok()?, 0)
}

fn find_checkpoint(v: &Value, depth: usize) -> Option<Checkpoint> {
    if depth > 4 {
        return None;
    }
    match v {
        Value::Object(map) if map.get("checkpoint").is_some_and(Value::is_object) => {
            serde_json::from_value(v.clone()).ok()
        }
        Value::Object(map) => map.values().find_map(|x| find_checkpoint(x, depth + 1)),
        Value::String(s) if s.starts_with('{') => find_checkpoint(&serde_json::from_str(s).ok()?, depth + 1),
        _ => None,
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
