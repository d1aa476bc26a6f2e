//! The audit chains on Redis: per organisation a list of entries (`P:{org}:audit`, seq `n` at
//! index `n - 1`), its head (`P:{org}:audit:head`, `<seq> <hash>`) and a list of checkpoints
//! (`P:{org}:audit:checkpoints`, appended by a script that compares the last one), all under the organisation's hash tag. An entry is appended by
//! one script that compares the head it follows and pushes it, so the chain's order is Redis'
//! whichever instance writes: an instance whose head moved reads it again and retries.

use super::{backend, tag, Keys, RedisStore};
use crate::data::store::{AuditLink, StoreError};
use redis::AsyncCommands;
use std::sync::OnceLock;

/// KEYS: the list, the head. ARGV: the head followed (`""` for none), the entry, the new head.
const APPEND: &str = r"
local head = redis.call('GET', KEYS[2]) or ''
if head ~= ARGV[1] then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return 1
";

/// KEYS: the checkpoints. ARGV: whether one is followed (`1`/`0`), the one followed, the new one.
const ADD_CHECKPOINT: &str = r"
local last = redis.call('LINDEX', KEYS[1], -1)
if ARGV[1] == '1' then
  if last ~= ARGV[2] then return 0 end
elseif last then
  return 0
end
redis.call('RPUSH', KEYS[1], ARGV[3])
return 1
";

fn add_checkpoint_script() -> &'static redis::Script {
    static SCRIPT: OnceLock<redis::Script> = OnceLock::new();
    SCRIPT.get_or_init(|| redis::Script::new(ADD_CHECKPOINT))
}

fn append_script() -> &'static redis::Script {
    static SCRIPT: OnceLock<redis::Script> = OnceLock::new();
    SCRIPT.get_or_init(|| redis::Script::new(APPEND))
}

impl Keys {
    fn audit(&self, org_id: &str, what: &str) -> String {
        format!("{}:{{{}}}:audit{what}", self.prefix, tag(org_id))
    }
}

fn head_value(seq: u64, hash: &str) -> String {
    format!("{seq} {hash}")
}

impl RedisStore {
    pub(super) async fn audit_append_link(&self, link: AuditLink) -> Result<bool, StoreError> {
        self.with("audit_append", move |k, mut c| async move {
            let followed = if link.seq <= 1 { String::new() } else { head_value(link.seq - 1, &link.prev_hash) };
            let mut invocation = append_script().prepare_invoke();
            invocation.key(k.audit(&link.org_id, "")).key(k.audit(&link.org_id, ":head"));
            invocation.arg(followed).arg(&link.json).arg(head_value(link.seq, &link.hash));
            let done: i64 = invocation.invoke_async(&mut c).await.map_err(backend)?;
            Ok(done == 1)
        })
        .await
    }

    pub(super) async fn audit_head_of(&self, org_id: &str) -> Result<Option<(u64, String)>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_head", move |k, mut c| async move {
            let head: Option<String> = c.get(k.audit(&org_id, ":head")).await.map_err(backend)?;
            let Some(head) = head else { return Ok(None) };
            let parsed = head.split_once(' ').and_then(|(seq, hash)| Some((seq.parse().ok()?, hash.to_string())));
            parsed.map(Some).ok_or_else(|| StoreError::Corrupt {
                kind: "audit_head",
                id: org_id.clone(),
                reason: format!("`{head}` is not `<seq> <hash>`"),
            })
        })
        .await
    }

    pub(super) async fn audit_entries_of(
        &self,
        org_id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_entries", move |k, mut c| async move {
            let start = isize::try_from(after_seq).unwrap_or(isize::MAX);
            let stop = start.saturating_add(limit as isize).saturating_sub(1);
            c.lrange(k.audit(&org_id, ""), start, stop).await.map_err(backend)
        })
        .await
    }

    pub(super) async fn audit_add_checkpoint_of(
        &self,
        org_id: &str,
        after: Option<String>,
        json: String,
    ) -> Result<bool, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_add_checkpoint", move |k, mut c| async move {
            let mut invocation = add_checkpoint_script().prepare_invoke();
            invocation.key(k.audit(&org_id, ":checkpoints"));
            invocation.arg(if after.is_some() { "1" } else { "0" }).arg(after.as_deref().unwrap_or("")).arg(&json);
            let done: i64 = invocation.invoke_async(&mut c).await.map_err(backend)?;
            Ok(done == 1)
        })
        .await
    }

    pub(super) async fn audit_last_checkpoint_of(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_last_checkpoint", move |k, mut c| async move {
            c.lindex(k.audit(&org_id, ":checkpoints"), -1).await.map_err(backend)
        })
        .await
    }

    pub(super) async fn audit_checkpoints_of(&self, org_id: &str) -> Result<Vec<String>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_checkpoints", move |k, mut c| async move {
            c.lrange(k.audit(&org_id, ":checkpoints"), 0, -1).await.map_err(backend)
        })
        .await
    }
}
