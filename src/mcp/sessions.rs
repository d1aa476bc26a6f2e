//! MCP protocol sessions: created by `initialize`, carried by `Mcp-Session-Id` or the session
//! cookie, bound to the credential that made them, expired after an idle time.
//!
//! A new or ended session is written to the store before the client hears of it (so a restart
//! keeps it); activity (last use, request count) is kept in memory and written in the background
//! by [`Sessions::flush`], so a request costs no store write.

use crate::model::{ClientCapabilities, McpSession};
use crate::store::{Kind, Store, StoreError};
use chrono::Utc;
use dashmap::{DashMap, DashSet};
use std::sync::Arc;
use std::time::Duration;

/// Why a session id cannot be used; all are answered like an unknown session (HTTP 404).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("unknown session")]
    Unknown,
    #[error("session has ended")]
    Ended,
    #[error("session expired")]
    Expired,
}

pub struct Sessions {
    store: Arc<dyn Store>,
    map: DashMap<String, McpSession>,
    dirty: DashSet<String>,
    idle_timeout: Duration,
}

impl Sessions {
    pub async fn load(store: Arc<dyn Store>, idle_timeout: Duration) -> Result<Sessions, StoreError> {
        let map = DashMap::new();
        for (id, body) in store.load_all(Kind::Session).await? {
            match serde_json::from_str::<McpSession>(&body) {
                Ok(s) => {
                    map.insert(id, s);
                }
                Err(e) => tracing::warn!(session = id, error = %e, "skipping corrupt session record"),
            }
        }
        Ok(Sessions { store, map, dirty: DashSet::new(), idle_timeout })
    }

    fn expired(&self, s: &McpSession, now: chrono::DateTime<Utc>) -> bool {
        (now - s.last_activity).to_std().is_ok_and(|idle| idle > self.idle_timeout)
    }

    /// Stores a new session durably, then makes it usable.
    pub async fn create(&self, session: McpSession) -> Result<(), StoreError> {
        let json = serde_json::to_string(&session).map_err(|e| StoreError::Backend(e.to_string()))?;
        self.store.put(Kind::Session, &session.id, json).await?;
        self.map.insert(session.id.clone(), session);
        Ok(())
    }

    /// Checks a session for a request by `key_id` on `gateway_id` and records the activity
    /// (in memory; nothing is copied or allocated when the session was already marked dirty).
    /// A session of another credential or gateway is reported as unknown.
    pub fn touch(&self, id: &str, gateway_id: &str, key_id: &str) -> Result<(), SessionError> {
        let now = Utc::now();
        let mut entry = self.map.get_mut(id).ok_or(SessionError::Unknown)?;
        let s = entry.value_mut();
        if s.gateway_id != gateway_id || s.key_id != key_id {
            return Err(SessionError::Unknown);
        }
        if s.status != "active" {
            return Err(SessionError::Ended);
        }
        if self.expired(s, now) {
            return Err(SessionError::Expired);
        }
        s.last_activity = now;
        s.requests_count += 1;
        drop(entry);
        if !self.dirty.contains(id) {
            self.dirty.insert(id.to_string());
        }
        Ok(())
    }

    /// Ends a session (DELETE on the MCP endpoint or the management API); durable on return.
    pub async fn end(&self, id: &str) -> Result<bool, StoreError> {
        let ended = {
            let Some(mut s) = self.map.get_mut(id) else { return Ok(false) };
            if s.status != "active" {
                return Ok(false);
            }
            s.status = "ended".into();
            s.clone()
        };
        let json = serde_json::to_string(&ended).map_err(|e| StoreError::Backend(e.to_string()))?;
        self.store.put(Kind::Session, id, json).await?;
        Ok(true)
    }

    pub fn get(&self, id: &str) -> Option<McpSession> {
        self.map.get(id).map(|s| s.clone())
    }

    /// What the session's client declared it can do (nothing for an unknown session), read
    /// without copying the session.
    pub fn capabilities(&self, id: &str) -> ClientCapabilities {
        self.map.get(id).map(|s| s.capabilities).unwrap_or_default()
    }

    /// The status a reader sees: `active`, `ended` or `expired`.
    pub fn status_of(&self, s: &McpSession) -> &'static str {
        if s.status != "active" {
            "ended"
        } else if self.expired(s, Utc::now()) {
            "expired"
        } else {
            "active"
        }
    }

    pub fn all(&self) -> Vec<McpSession> {
        self.map.iter().map(|s| s.clone()).collect()
    }

    /// Writes the activity of sessions used since the last flush, in one transaction.
    pub async fn flush(&self) {
        crate::store::write_dirty(&*self.store, Kind::Session, &self.dirty, |id| {
            self.get(id).and_then(|s| serde_json::to_string(&s).ok())
        })
        .await;
    }
}
