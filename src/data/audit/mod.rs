//! The audit trail: per organisation, a hash chain of who did what to which record
//! ([`chain`] has the arithmetic and the offline check), appended through the store
//! ([`Store::audit_append`]: compare the head, append, atomically), and signed every
//! `audit.checkpoint_interval_secs` (and at each export) by a checkpoint that names the one
//! before it, with an HMAC and an Ed25519 signature under keys outside the store
//! ([`signing`]); [`checkpoints`] checks the store still extends what this instance signed
//! before it signs again, and lets each checkpoint leave the store; [`verify`] is the offline
//! check of an export.
//!
//! One instance serialises its own appends per organisation (one lock each, holding the head it
//! last wrote); another instance on the same Redis moves the head under it, which the store's
//! compare refuses, and the append reads the head again and retries: the chain is in Redis'
//! order. What is appended is [`AuditEvent`]s: management writes and protected actions (the API's
//! dispatch), tool-change decisions and denied tool calls.
//!
//! Nothing acknowledged is lost: [`Audit::append`] returns once the entry is durable, and the
//! API answers a write only after its entry is (`api::dispatch`). An entry the store refuses
//! (after a few tries) is kept in memory and tried again at each flush, and the caller gets the
//! error (the API answers 503 naming it).

pub mod chain;
pub(crate) mod checkpoints;
pub(crate) mod refusals;
pub mod signing;
pub mod verify;

pub(crate) use chain::{Actor, Entry, Target};
pub(crate) use checkpoints::Notice;

use crate::base::time::now_ms;
use crate::data::store::{AuditLink, Store, StoreError};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What happened, as it enters the trail.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditEvent {
    /// A management write answered 2xx (a protected action among them: `detail.mfa` says so).
    Write { action: String, target: Target, before_hash: Option<String>, after_hash: Option<String>, detail: Value },
    /// A tool call a gateway's rule refused; `reason` says how (`matched`, `failed`, or
    /// `input_too_large`: the call was larger than the rule's cost bound allows).
    /// A rule denied a call (`method`: `tools/call`, or a `prompts/get` or `resources/read`
    /// that the rule names; `tool` is then the prompt or the resource's URI).
    ToolCallDenied { gateway_id: String, method: &'static str, tool: String, rule: String, reason: &'static str },
    /// An admin approved or rejected a pending tool definition.
    ToolChangeDecided { gateway_id: String, tool: String, approved: bool, detail: Value },
}

impl AuditEvent {
    /// `action`, `target`, the before and after hashes and `detail` of the entry.
    fn into_parts(self) -> (String, Target, Option<String>, Option<String>, Value) {
        let gateway = |id: String| Target { kind: "gateway".into(), id };
        match self {
            AuditEvent::Write { action, target, before_hash, after_hash, detail } => {
                (action, target, before_hash, after_hash, detail)
            }
            AuditEvent::ToolCallDenied { gateway_id, method, tool, rule, reason } => {
                let detail = json!({ "method": method, "tool": tool, "rule": rule, "reason": reason });
                ("tool_call.denied".into(), gateway(gateway_id), None, None, detail)
            }
            AuditEvent::ToolChangeDecided { gateway_id, tool, approved, mut detail } => {
                let action = if approved { "tool_change.approve" } else { "tool_change.reject" };
                if let Value::Object(map) = &mut detail {
                    map.insert("tool".into(), json!(tool));
                } else {
                    detail = json!({ "tool": tool, "detail": detail });
                }
                (action.into(), gateway(gateway_id), None, None, detail)
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("the audit entry could not be written (it is kept and retried): {0}")]
    Store(#[from] StoreError),
    #[error("the audit chain's head kept moving; the entry is kept and retried")]
    Contended,
    /// An entry or a checkpoint that would not turn into JSON or back: the parser's reason kept.
    #[error("an audit {0} is not the JSON it should be")]
    Json(&'static str, #[source] serde_json::Error),
}

/// An entry waiting for its place in the chain.
#[derive(Debug, Clone)]
struct Pending {
    org_id: String,
    at: i64,
    actor: Actor,
    event: AuditEvent,
}

/// Entries kept in memory while the store refuses them.
const UNSAVED_CAP: usize = 100_000;
/// Appends that find the head moved before giving up (each reads the head again).
const MOVED_TRIES: usize = 64;
/// Entries read from the store per round trip by the pages and the export.
const CHUNK: u32 = 500;

type Chain = Arc<tokio::sync::Mutex<Option<(u64, String)>>>;

/// Where the trail's notices go (the server's webhooks).
type NoticeHook = Box<dyn Fn(Notice) + Send + Sync>;

/// The trail of every organisation; held by the server.
pub struct Audit {
    store: Arc<dyn Store>,
    /// The checkpoints' HMAC key.
    key: Vec<u8>,
    /// The checkpoints' Ed25519 key, derived from `key`.
    signer: signing::Signer,
    /// The last checkpoint this instance signed per organisation, outside the store.
    kept: checkpoints::Kept,
    /// One checkpoint at a time on this instance (the timer's and an export's).
    signing: tokio::sync::Mutex<()>,
    /// Organisations whose store no longer extends what this instance signed (raised once).
    tampered: Mutex<HashSet<String>>,
    notices: OnceLock<NoticeHook>,
    /// Per organisation: this instance's appends one at a time, and the head it last saw.
    chains: Mutex<HashMap<String, Chain>>,
    /// Organisations whose head this instance moved since its last checkpoint.
    moved: Mutex<HashSet<String>>,
    unsaved: Mutex<Vec<Pending>>,
    /// Refusals recorded so far per organisation and action, to fold a flood into counts.
    refusals: refusals::Refusals,
}

/// A page of `GET /v1/audit`: the entries and the seq to read after for the next.
pub struct Page {
    pub entries: Vec<Value>,
    pub next_after_seq: Option<u64>,
}

/// `GET /v1/audit`'s optional filters.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub action: Option<String>,
    pub actor: Option<String>,
}

impl Filter {
    fn keeps(&self, e: &Value) -> bool {
        self.action.as_deref().is_none_or(|a| e["action"] == a)
            && self.actor.as_deref().is_none_or(|a| e["actor"]["id"] == a)
    }
}

impl Audit {
    /// `key` MACs the checkpoints, and their Ed25519 key is derived from it
    /// (HMAC-SHA256(`key`, [`signing::SIGNING_KEY_LABEL`])). The last checkpoint signed per
    /// organisation is kept in memory; [`Audit::keeping_in`] keeps it in a file too.
    pub fn new(store: Arc<dyn Store>, key: Vec<u8>) -> Audit {
        let signer = signing::Signer::from_seed(crate::base::secrets::hmac_sha256(&key, signing::SIGNING_KEY_LABEL));
        Audit {
            store,
            key,
            signer,
            kept: checkpoints::Kept::in_memory(),
            signing: tokio::sync::Mutex::new(()),
            tampered: Mutex::default(),
            notices: OnceLock::new(),
            chains: Mutex::default(),
            moved: Mutex::default(),
            unsaved: Mutex::default(),
            refusals: refusals::Refusals::default(),
        }
    }

    /// Keeps the last checkpoint this instance signed per organisation in `file` (outside the
    /// store, beside the master key), read now so that a restart still knows it.
    pub(crate) fn keeping_in(mut self, file: PathBuf) -> Audit {
        self.kept = checkpoints::Kept::in_file(file);
        self
    }

    /// Calls `hook` with each notice (`audit.checkpoint`, `audit.tampered`); set once.
    pub(crate) fn on_notice(&self, hook: impl Fn(Notice) + Send + Sync + 'static) {
        let _ = self.notices.set(Box::new(hook));
    }

    /// The checkpoints' signing key (its public half, for `GET /v1/audit/key` and the log).
    pub(crate) fn signer(&self) -> &signing::Signer {
        &self.signer
    }

    fn chain(&self, org_id: &str) -> Chain {
        self.chains.lock().entry(org_id.to_string()).or_default().clone()
    }

    /// Appends `event` to the organisation's chain and returns the entry once it is durable. On
    /// failure the entry is kept and retried at each [`Audit::retry_unsaved`].
    pub async fn append(&self, org_id: &str, actor: Actor, event: AuditEvent) -> Result<Entry, AuditError> {
        let pending = Pending { org_id: org_id.to_string(), at: now_ms(), actor, event };
        match self.write(&pending).await {
            Ok(entry) => Ok(entry),
            Err(e) => {
                tracing::warn!(error = %e, org_id, "cannot write an audit entry; it is kept and retried");
                self.keep(vec![pending]);
                Err(e)
            }
        }
    }

    /// [`Audit::append`] without waiting: for callers on a call's path (a denied tool call).
    pub fn record(self: &Arc<Self>, org_id: &str, actor: Actor, event: AuditEvent) {
        let audit = self.clone();
        let org_id = org_id.to_string();
        tokio::spawn(async move {
            let _ = audit.append(&org_id, actor, event).await;
        });
    }

    /// A refusal of a caller of `org_id` (a write answered 403 or 409, a call to a pending or
    /// withheld tool, a failed sign-in): an entry `action` without the caller waiting for it,
    /// or, past [`refusals::PER_WINDOW`] of one action in a minute, a count in the entry
    /// `refusals.folded` written when the minute is over (at a flush).
    pub fn refused(self: &Arc<Self>, org_id: &str, actor: Actor, action: &str, target: Target, detail: Value) {
        if self.refusals.admit(org_id, action, &actor, std::time::Instant::now(), now_ms()) {
            let event =
                AuditEvent::Write { action: action.into(), target, before_hash: None, after_hash: None, detail };
            self.record(org_id, actor, event);
        }
    }

    /// Writes the counts of the refusals folded over the windows that have closed.
    async fn write_folded(&self) {
        for f in self.refusals.take_closed(std::time::Instant::now(), now_ms()) {
            let detail = json!({
                "action": f.action, "count": f.count, "from_ms": f.from_ms, "to_ms": f.to_ms,
                "last_actor": { "kind": f.last.kind, "id": f.last.id },
            });
            let target = Target { kind: "organization".into(), id: f.org_id.clone() };
            let event = AuditEvent::Write {
                action: "refusals.folded".into(),
                target,
                before_hash: None,
                after_hash: None,
                detail,
            };
            let _ = self.append(&f.org_id, f.last, event).await;
        }
    }

    fn keep(&self, mut entries: Vec<Pending>) {
        let mut unsaved = self.unsaved.lock();
        unsaved.append(&mut entries);
        if unsaved.len() > UNSAVED_CAP {
            let over = unsaved.len() - UNSAVED_CAP;
            tracing::error!(entries = over, "dropped audit entries the store did not take");
            unsaved.drain(..over);
        }
    }

    /// Writes the entries the store refused before, in their order (those it refuses again are
    /// kept), then the counts of refusals folded over the minutes that ended.
    pub(crate) async fn retry_unsaved(&self) {
        let waiting = std::mem::take(&mut *self.unsaved.lock());
        let mut failed = Vec::new();
        for p in waiting {
            // After one failure the rest wait too, so the order holds.
            if !failed.is_empty() || self.write(&p).await.is_err() {
                failed.push(p);
            }
        }
        if !failed.is_empty() {
            self.keep(failed);
        }
        self.write_folded().await;
    }

    async fn write(&self, p: &Pending) -> Result<Entry, AuditError> {
        let chain = self.chain(&p.org_id);
        let mut head = chain.lock().await;
        let (action, target, before_hash, after_hash, detail) = p.event.clone().into_parts();
        let mut store_errors = 0;
        for _ in 0..MOVED_TRIES {
            let (seq, prev_hash) = match head.clone() {
                Some(h) => h,
                None => match self.store.audit_head(&p.org_id).await {
                    Ok(h) => h.unwrap_or((0, chain::GENESIS.to_string())),
                    Err(e) if store_errors < 2 => {
                        store_errors += 1;
                        tracing::debug!(error = %e, "audit head read failed; trying again");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            let entry = Entry {
                org_id: p.org_id.clone(),
                seq: seq + 1,
                at: p.at,
                actor: p.actor.clone(),
                action: action.clone(),
                target: target.clone(),
                before_hash: before_hash.clone(),
                after_hash: after_hash.clone(),
                detail: detail.clone(),
                prev_hash,
                hash: String::new(),
            }
            .seal();
            let json = serde_json::to_string(&entry).map_err(|e| AuditError::Json("entry", e))?;
            let link = AuditLink {
                org_id: entry.org_id.clone(),
                seq: entry.seq,
                prev_hash: entry.prev_hash.clone(),
                hash: entry.hash.clone(),
                json,
            };
            match self.store.audit_append(link).await {
                Ok(true) => {
                    *head = Some((entry.seq, entry.hash.clone()));
                    self.moved.lock().insert(p.org_id.clone());
                    return Ok(entry);
                }
                // Another instance appended: read the head again.
                Ok(false) => *head = None,
                Err(e) if store_errors < 2 => {
                    store_errors += 1;
                    *head = None;
                    tracing::debug!(error = %e, "audit append failed; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    *head = None;
                    return Err(e.into());
                }
            }
        }
        Err(AuditError::Contended)
    }

    /// Up to `limit` entries after `after_seq` that `filter` keeps (reading at most a few
    /// thousand entries per page when the filter keeps few).
    pub async fn page(&self, org_id: &str, after_seq: u64, limit: u32, filter: &Filter) -> Result<Page, AuditError> {
        const MOST_READ: u64 = 10 * CHUNK as u64;
        let mut entries = Vec::new();
        let mut cursor = after_seq;
        let mut read = 0u64;
        loop {
            let chunk = self.store.audit_entries(org_id, cursor, CHUNK).await?;
            let last_chunk = chunk.len() < CHUNK as usize;
            for json in chunk {
                let e: Value = serde_json::from_str(&json).map_err(|e| AuditError::Json("entry", e))?;
                read += 1;
                cursor = e["seq"].as_u64().unwrap_or(cursor + 1);
                if filter.keeps(&e) {
                    entries.push(e);
                    if entries.len() == limit as usize {
                        return Ok(Page { entries, next_after_seq: Some(cursor) });
                    }
                }
            }
            if last_chunk {
                return Ok(Page { entries, next_after_seq: None });
            }
            if read >= MOST_READ {
                return Ok(Page { entries, next_after_seq: Some(cursor) });
            }
        }
    }

    /// The organisation's chain as JSON lines: every entry in order, then every checkpoint. The
    /// head is signed first (unless a checkpoint already signs it), so that an export ends with
    /// a signed head and only the entries appended while it is read come after its last
    /// checkpoint.
    pub async fn export(&self, org_id: &str, interval: Duration) -> Result<Vec<u8>, AuditError> {
        if let Err(e) = self.checkpoint_org(org_id, interval).await {
            tracing::warn!(error = %e, org_id, "cannot sign the audit head before an export; exporting as stored");
        }
        let mut out = Vec::new();
        let mut after = 0u64;
        loop {
            let chunk = self.store.audit_entries(org_id, after, CHUNK).await?;
            let n = chunk.len();
            for json in chunk {
                out.extend_from_slice(json.as_bytes());
                out.push(b'\n');
            }
            after += n as u64;
            if n < CHUNK as usize {
                break;
            }
        }
        for json in self.store.audit_checkpoints(org_id).await? {
            out.extend_from_slice(json.as_bytes());
            out.push(b'\n');
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::store::EmbeddedStore;

    fn actor() -> Actor {
        Actor { kind: "api_key".into(), id: "key_1".into() }
    }

    fn write(n: u32) -> AuditEvent {
        AuditEvent::Write {
            action: "gateway.update".into(),
            target: Target { kind: "gateway".into(), id: format!("gw_{n}") },
            before_hash: None,
            after_hash: None,
            detail: json!({}),
        }
    }

    #[tokio::test]
    async fn two_writers_on_one_store_make_one_chain_and_checkpoints_sign_its_head() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        // Two trails on one store stand for two instances: each one's cached head goes stale.
        let (a, b) = (Audit::new(store.clone(), b"k".to_vec()), Audit::new(store.clone(), b"k".to_vec()));
        for i in 0..6 {
            let trail = if i % 2 == 0 { &a } else { &b };
            trail.append("org_1", actor(), write(i)).await.unwrap();
        }
        a.append(
            "org_2",
            actor(),
            AuditEvent::ToolCallDenied {
                gateway_id: "gw".into(),
                method: "tools/call",
                tool: "t".into(),
                rule: "r".into(),
                reason: "matched",
            },
        )
        .await
        .unwrap();
        let interval = Duration::from_secs(60);
        a.checkpoint(interval).await;
        b.checkpoint(interval).await;
        let text = String::from_utf8(a.export("org_1", interval).await.unwrap()).unwrap();
        let v = chain::verify(&text, Some(b"k")).unwrap();
        // The second instance finds the head signed already: one checkpoint.
        assert_eq!((v.entries, v.checkpoints, v.signed_seq), (6, 1, 6), "{text}");
        let public = [a.signer().public_key()];
        let report = verify::verify_export(&text, &verify::Options { public_keys: &public, ..Default::default() });
        assert_eq!(report.map(|r| r.signatures).ok(), Some(1), "{text}");
        let other = String::from_utf8(a.export("org_2", interval).await.unwrap()).unwrap();
        assert!(other.contains("tool_call.denied") && !other.contains("gw_1"), "{other}");

        let f = Filter { action: Some("gateway.update".into()), actor: None };
        let page = a.page("org_1", 2, 3, &f).await.unwrap();
        let seqs: Vec<u64> = page.entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!((seqs, page.next_after_seq), (vec![3, 4, 5], Some(5)));
        let none = Filter { action: Some("key.revoke".into()), actor: None };
        assert!(a.page("org_1", 0, 3, &none).await.unwrap().entries.is_empty());
    }
}
