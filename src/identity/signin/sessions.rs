//! Web sessions: what a signed-in browser holds (a cookie with a random token), stored by the
//! token's SHA-256 under the user's partition, so that any instance finds it and a user's are
//! listed together. A session ends after `web.session_idle` without use (its record expires with
//! it; each use moves the expiry, written at most once a minute); a user holds at most
//! `web.max_sessions_per_user`, and a new one ends the oldest.

use crate::base::secrets;
use crate::data::model::{Timestamp, User};
use crate::data::store::{Kind, Store, StoreError};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// How stale a session's last use may be before a request writes it again (or a tenth of the
/// idle time-out, when that is shorter, so that a session in use never lapses).
const TOUCH_EVERY_MS: i64 = 60_000;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebSession {
    /// The public id (`ws_...`): how the user names it to end it; the token is never shown.
    pub id: String,
    pub user_id: String,
    pub org_id: String,
    pub created_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub ip: String,
    pub user_agent: String,
    pub expires_at_ms: i64,
}

pub struct WebSessions {
    store: Arc<dyn Store>,
}

fn encode(s: &WebSession) -> Result<String, StoreError> {
    serde_json::to_string(s).map_err(|e| StoreError::Backend(e.to_string()))
}

impl WebSessions {
    pub fn new(store: Arc<dyn Store>) -> WebSessions {
        WebSessions { store }
    }

    /// Starts a session for `user`; returns its token (the cookie's value). Ends the oldest
    /// sessions beyond `max - 1` first.
    pub async fn start(
        &self,
        user: &User,
        ip: String,
        user_agent: String,
        idle: Duration,
        max: usize,
    ) -> Result<String, StoreError> {
        let mut live = self.stored(&user.id).await?;
        live.sort_by_key(|(_, s)| s.created_at);
        let excess = (live.len() + 1).saturating_sub(max);
        for (key, _) in live.iter().take(excess) {
            self.store.delete(Kind::WebSession, key).await?;
        }
        let token = secrets::new_session_id();
        let now = Utc::now();
        let session = WebSession {
            id: secrets::new_id("ws"),
            user_id: user.id.clone(),
            org_id: user.org_id.clone(),
            created_at: now,
            last_seen_at: now,
            ip,
            user_agent: user_agent.chars().take(256).collect(),
            expires_at_ms: now.timestamp_millis() + idle.as_millis() as i64,
        };
        let key = secrets::hash_key(&token);
        self.store.put_expiring(Kind::WebSession, &user.id, &key, encode(&session)?, session.expires_at_ms).await?;
        Ok(token)
    }

    /// The live session of `token`, its use recorded (which moves its expiry).
    pub async fn find(&self, token: &str, idle: Duration) -> Result<Option<WebSession>, StoreError> {
        let key = secrets::hash_key(token);
        let Some(json) = self.store.get(Kind::WebSession, &key).await? else { return Ok(None) };
        let Ok(mut session) = serde_json::from_str::<WebSession>(&json) else { return Ok(None) };
        let now = Utc::now();
        if session.expires_at_ms <= now.timestamp_millis() {
            return Ok(None);
        }
        let touch_every = TOUCH_EVERY_MS.min(idle.as_millis() as i64 / 10);
        if now.timestamp_millis() - session.last_seen_at.timestamp_millis() >= touch_every {
            session.last_seen_at = now;
            session.expires_at_ms = now.timestamp_millis() + idle.as_millis() as i64;
            let json = encode(&session)?;
            self.store.put_expiring(Kind::WebSession, &session.user_id, &key, json, session.expires_at_ms).await?;
        }
        Ok(Some(session))
    }

    /// A user's live sessions, oldest first.
    pub async fn of_user(&self, user_id: &str) -> Result<Vec<WebSession>, StoreError> {
        let mut all: Vec<WebSession> = self.stored(user_id).await?.into_iter().map(|(_, s)| s).collect();
        all.sort_by_key(|s| s.created_at);
        Ok(all)
    }

    /// Ends the user's session `id`; `false` when the user has none of that id.
    pub async fn end(&self, user_id: &str, id: &str) -> Result<bool, StoreError> {
        for (key, s) in self.stored(user_id).await? {
            if s.id == id {
                return self.store.delete(Kind::WebSession, &key).await;
            }
        }
        Ok(false)
    }

    /// Ends the session of `token` (sign-out).
    pub async fn end_token(&self, token: &str) -> Result<(), StoreError> {
        self.store.delete(Kind::WebSession, &secrets::hash_key(token)).await.map(|_| ())
    }

    /// Ends every session of the user (a new password).
    pub async fn end_all(&self, user_id: &str) -> Result<(), StoreError> {
        for (key, _) in self.stored(user_id).await? {
            self.store.delete(Kind::WebSession, &key).await?;
        }
        Ok(())
    }

    async fn stored(&self, user_id: &str) -> Result<Vec<(String, WebSession)>, StoreError> {
        let now = Utc::now().timestamp_millis();
        let rows = self.store.load_partition(Kind::WebSession, user_id).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, json)| serde_json::from_str::<WebSession>(&json).ok().map(|s| (key, s)))
            .filter(|(_, s)| s.expires_at_ms > now)
            .collect())
    }
}
