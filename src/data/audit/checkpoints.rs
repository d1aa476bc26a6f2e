//! This instance's checkpoints: before signing an organisation's head, check that the store
//! still extends the last checkpoint this instance signed; sign; and let the checkpoint leave
//! the store at once (a process-log line, an `audit.checkpoint` event, and a file beside the
//! master key that a restart reads again).
//!
//! Why: a checkpoint signs whatever the store holds when it is made, so someone who rewrote the
//! store (and re-hashed it) between two checkpoints would get the next one signed over the
//! rewrite. The instance remembers what it signed outside the store; if the store no longer
//! holds it (the checkpoint gone or changed, the entries it signs rewritten, a checkpoint after
//! it that does not follow it), the instance signs nothing more for that organisation and
//! raises `audit.tampered` (event, `toolgate_audit_tampered_total`, an error line). Deleting the
//! kept file accepts the store as it is (an operator's decision after restoring a backup).

use super::chain::{self, Checkpoint, Head, GENESIS};
use super::signing::signature_valid;
use super::{Audit, AuditError, CHUNK};
use crate::base::time::now_ms;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the trail tells the rest of the server (the webhooks): `audit.checkpoint` with the
/// checkpoint as `data`, `audit.tampered` with what broke.
#[derive(Debug, Clone)]
pub(crate) struct Notice {
    pub org_id: String,
    pub event: &'static str,
    pub data: Value,
}

/// The last checkpoint this instance signed per organisation, and the file that keeps them.
pub(super) struct Kept {
    path: Option<PathBuf>,
    last: Mutex<HashMap<String, Checkpoint>>,
}

impl Kept {
    /// Kept in memory only (a store without a file beside the master key: Redis).
    pub(super) fn in_memory() -> Kept {
        Kept { path: None, last: Mutex::default() }
    }

    /// Kept in `path` too, read now; an unreadable file is logged and starts empty (its holder
    /// holds the master key beside it, and could sign anyway).
    pub(super) fn in_file(path: PathBuf) -> Kept {
        let last = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                tracing::error!(file = %path.display(), error = %e, "the kept audit checkpoints are unreadable; starting without them");
                HashMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "cannot read the kept audit checkpoints");
                HashMap::new()
            }
        };
        Kept { path: Some(path), last: Mutex::new(last) }
    }

    fn get(&self, org_id: &str) -> Option<Checkpoint> {
        self.last.lock().get(org_id).cloned()
    }

    /// Keeps `cp` as its organisation's last, and writes the file: a temporary file beside it
    /// (mode 0600, synced), renamed over it, so a crash leaves the old file or the new one.
    fn set(&self, cp: Checkpoint) -> std::io::Result<()> {
        let text = {
            let mut last = self.last.lock();
            last.insert(cp.checkpoint.org_id.clone(), cp);
            serde_json::to_string(&*last).map_err(std::io::Error::other)?
        };
        let Some(path) = &self.path else { return Ok(()) };
        write_atomically(path, text.as_bytes())
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// How the store stopped extending the kept checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tamper {
    /// The kept checkpoint is not in the store any more (or the store holds none).
    CheckpointMissing,
    /// A checkpoint with the kept one's head but not its signature.
    CheckpointChanged,
    /// A checkpoint after the kept one does not follow it or is not signed by this key.
    CheckpointsAfter(u64),
    /// The entries the kept checkpoint signs (or later ones) were changed or removed.
    Entries(String),
}

impl Tamper {
    /// The metric's `reason` label.
    fn label(&self) -> &'static str {
        match self {
            Tamper::CheckpointMissing => "checkpoint_missing",
            Tamper::CheckpointChanged => "checkpoint_changed",
            Tamper::CheckpointsAfter(_) => "checkpoints_after",
            Tamper::Entries(_) => "entries",
        }
    }

    fn describe(&self) -> String {
        match self {
            Tamper::CheckpointMissing => "the last checkpoint this instance signed is not in the store".into(),
            Tamper::CheckpointChanged => "the last checkpoint this instance signed was changed in the store".into(),
            Tamper::CheckpointsAfter(seq) => {
                format!("the checkpoint of seq {seq} does not follow the last one this instance signed")
            }
            Tamper::Entries(what) => what.clone(),
        }
    }
}

fn parse(json: &str) -> Result<Checkpoint, AuditError> {
    serde_json::from_str(json).map_err(|e| AuditError::Json("checkpoint", e))
}

impl Audit {
    /// Signs the head of every organisation whose chain this instance moved since the last
    /// checkpoint (every `audit.checkpoint_interval_secs`, and at shutdown).
    pub async fn checkpoint(&self, interval: Duration) {
        let orgs: Vec<String> = self.moved.lock().drain().collect();
        for org_id in orgs {
            if let Err(e) = self.checkpoint_org(&org_id, interval).await {
                tracing::warn!(error = %e, org_id, "cannot store an audit checkpoint; the next one retries");
                self.moved.lock().insert(org_id);
            }
        }
    }

    /// Signs the organisation's head unless its last checkpoint already does, after checking
    /// the store still extends the checkpoint this instance kept. Several instances never
    /// follow the same checkpoint: the store adds one only after the last it was shown.
    pub(super) async fn checkpoint_org(&self, org_id: &str, interval: Duration) -> Result<(), AuditError> {
        let _one_at_a_time = self.signing.lock().await;
        for _ in 0..3 {
            let Some((seq, head_hash)) = self.store.audit_head(org_id).await? else { return Ok(()) };
            let last_json = self.store.audit_last_checkpoint(org_id).await?;
            let last = last_json.as_deref().map(parse).transpose()?;
            if last.as_ref().is_some_and(|c| c.checkpoint.seq == seq && c.checkpoint.head_hash == head_hash) {
                return Ok(());
            }
            if let Err(tamper) = self.extends_kept(org_id, last.as_ref(), seq).await? {
                self.raise_tampered(org_id, &tamper);
                return Ok(());
            }
            self.tampered.lock().remove(org_id);
            let head = Head {
                org_id: org_id.to_string(),
                seq,
                head_hash,
                at: now_ms(),
                prev_checkpoint: Some(last.as_ref().map_or_else(|| GENESIS.to_string(), Checkpoint::hash)),
                interval_ms: Some(interval.as_millis() as u64),
            };
            let mut cp = Checkpoint::sign(head, &self.key);
            self.signer.sign(&mut cp);
            let json = serde_json::to_string(&cp).map_err(|e| AuditError::Json("checkpoint", e))?;
            if self.store.audit_add_checkpoint(org_id, last_json, json.clone()).await? {
                self.made(cp, &json);
                return Ok(());
            }
        }
        Err(AuditError::Contended)
    }

    /// The checkpoint leaves the store: the kept file, a log line, an `audit.checkpoint` event.
    fn made(&self, cp: Checkpoint, json: &str) {
        let head = &cp.checkpoint;
        tracing::info!(
            target: "toolgate::audit",
            org_id = head.org_id,
            seq = head.seq,
            head_hash = head.head_hash,
            checkpoint_hash = cp.hash(),
            key_id = cp.key_id.as_deref().unwrap_or_default(),
            signature = cp.signature.as_deref().unwrap_or_default(),
            checkpoint = %json,
            "audit checkpoint signed"
        );
        let org_id = head.org_id.clone();
        let data = json!(cp);
        if let Err(e) = self.kept.set(cp) {
            tracing::error!(error = %e, org_id, "cannot keep the audit checkpoint beside the master key");
        }
        self.tell(Notice { org_id, event: "audit.checkpoint", data });
    }

    fn raise_tampered(&self, org_id: &str, tamper: &Tamper) {
        let kept = self.kept.get(org_id);
        if !self.tampered.lock().insert(org_id.to_string()) {
            tracing::warn!(
                org_id,
                reason = tamper.describe(),
                "the audit chain is still not the one signed; no checkpoint is signed"
            );
            return;
        }
        crate::observe::metrics::audit_tampered(tamper.label());
        tracing::error!(
            target: "toolgate::audit",
            org_id,
            reason = tamper.describe(),
            kept_seq = kept.as_ref().map(|c| c.checkpoint.seq),
            "the audit chain in the store no longer extends the last checkpoint this instance signed: \
             it was tampered with; no checkpoint is signed until it is restored"
        );
        let data =
            json!({ "org_id": org_id, "reason": tamper.label(), "detail": tamper.describe(), "kept_checkpoint": kept });
        self.tell(Notice { org_id: org_id.to_string(), event: "audit.tampered", data });
    }

    fn tell(&self, notice: Notice) {
        if let Some(hook) = self.notices.get() {
            hook(notice);
        }
    }

    /// Whether the store still extends the kept checkpoint: it is there unchanged, the ones after
    /// it follow it under this key, the entry it signs hashes as it did and the entries after it
    /// link, and the entry this instance appended last is still the one it wrote.
    async fn extends_kept(
        &self,
        org_id: &str,
        last: Option<&Checkpoint>,
        head_seq: u64,
    ) -> Result<Result<(), Tamper>, AuditError> {
        let Some(kept) = self.kept.get(org_id) else { return Ok(Ok(())) };
        let Some(last) = last else { return Ok(Err(Tamper::CheckpointMissing)) };
        if last.hash() != kept.hash() || last.signature != kept.signature {
            let all = self.store.audit_checkpoints(org_id).await?;
            let all: Vec<Checkpoint> = all.iter().map(|j| parse(j)).collect::<Result<_, _>>()?;
            let Some(at) = all.iter().position(|c| c.hash() == kept.hash()) else {
                return Ok(Err(Tamper::CheckpointMissing));
            };
            if all[at].signature != kept.signature {
                return Ok(Err(Tamper::CheckpointChanged));
            }
            let public = self.signer.public_key();
            for pair in all[at..].windows(2) {
                if pair[1].checkpoint.prev_checkpoint.as_deref() != Some(&pair[0].hash())
                    || !signature_valid(&pair[1], &public)
                {
                    return Ok(Err(Tamper::CheckpointsAfter(pair[1].checkpoint.seq)));
                }
            }
        }
        if kept.checkpoint.seq > head_seq {
            return Ok(Err(Tamper::Entries(format!(
                "the chain ends at seq {head_seq}, before seq {} that this instance signed",
                kept.checkpoint.seq
            ))));
        }
        self.entries_extend(org_id, &kept).await
    }

    /// The entries from the kept checkpoint's seq on: each hashes to its `hash`, each links to
    /// the one before, the first is the one the checkpoint signs, and the one this instance
    /// appended last (when among them) is the one it wrote.
    async fn entries_extend(&self, org_id: &str, kept: &Checkpoint) -> Result<Result<(), Tamper>, AuditError> {
        let own = self.chain(org_id).try_lock().ok().and_then(|head| head.clone());
        let mut after = kept.checkpoint.seq - 1;
        let mut prev: Option<String> = None;
        let broken = |what: String| Ok(Err(Tamper::Entries(what)));
        loop {
            let chunk = self.store.audit_entries(org_id, after, CHUNK).await?;
            let n = chunk.len();
            for json in chunk {
                let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&json) else {
                    return broken(format!("the entry after seq {after} is not JSON"));
                };
                let seq = map.get("seq").and_then(Value::as_u64).unwrap_or_default();
                let hash = map.get("hash").and_then(Value::as_str).unwrap_or_default().to_string();
                if seq != after + 1 || chain::hash_of(&map) != hash {
                    return broken(format!("the entry of seq {} was changed or removed", after + 1));
                }
                if seq == kept.checkpoint.seq && hash != kept.checkpoint.head_hash {
                    return broken(format!("the entries up to seq {seq} were rewritten (its hash changed)"));
                }
                if prev.as_ref().is_some_and(|p| map.get("prev_hash").and_then(Value::as_str) != Some(p)) {
                    return broken(format!("the entry of seq {seq} does not follow the one before it"));
                }
                if own.as_ref().is_some_and(|(s, h)| *s == seq && *h != hash) {
                    return broken(format!("the entry of seq {seq}, appended by this instance, was rewritten"));
                }
                prev = Some(hash);
                after = seq;
            }
            if n < CHUNK as usize {
                break;
            }
        }
        if after < kept.checkpoint.seq {
            return broken(format!("the entry of seq {} is gone", kept.checkpoint.seq));
        }
        Ok(Ok(()))
    }
}
