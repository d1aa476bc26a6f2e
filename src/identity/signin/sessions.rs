//! Web sessions: what a signed-in browser holds (a cookie with a random token), stored by the
//! token's SHA-256 under the user's partition, so that any instance finds it and a user's are
//! listed together. A session ends after `web.session_idle` without use (its record expires with
//! it; each use moves the expiry, written at most once a minute); a user holds at most
//! `web.max_sessions_per_user`, and a new one ends the oldest.
//!
//! Every start and end is a [`Change`] on the feed, published once the store has it. Each
//! instance holds the sessions it has seen (read from the store once, then from memory) and
//! drops a session's copy when the feed says it ended (on this instance or, through
//! `data::peers`, on another), or when its user's password changed. A held copy is checked
//! against the store again whenever its use is written (at most a minute apart), which bounds
//! how long a change missed on the way (a lost feed) can go unseen.

use crate::base::fast_map::FastMap;
use crate::base::secrets;
use crate::data::changes::{Change, Feed};
use crate::data::model::{Timestamp, User};
use crate::data::store::{Kind, PutRecord, Store, StoreError};
use chrono::Utc;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How stale a session's last use may be before a request writes it again (or a tenth of the
/// idle time-out, when that is shorter, so that a session in use never lapses).
const TOUCH_EVERY_MS: i64 = 60_000;

/// Sessions held in memory beyond which a new one sweeps out those past their expiry.
const HELD_SWEEP_ABOVE: usize = 10_000;

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
    changes: Feed,
    held: Arc<Held>,
}

/// The sessions this instance has seen, by the SHA-256 of their token.
#[derive(Default)]
struct Held {
    by_token: FastMap<String, Arc<WebSession>>,
    /// Bumped whenever held sessions are dropped: a copy read from the store before is not kept.
    dropped: AtomicU64,
    /// Held while sessions are dropped, and while a copy read is checked and kept.
    turn: Mutex<()>,
}

impl Held {
    fn turn(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.turn.lock()
    }

    /// Drops the sessions for which `doomed` holds.
    fn drop_where(&self, doomed: impl Fn(&WebSession) -> bool) {
        let _turn = self.turn();
        self.dropped.fetch_add(1, Ordering::AcqRel);
        self.by_token.retain(|_, s| !doomed(s));
    }

    /// Keeps `session` (of token hash `key`) unless sessions were dropped since `dropped`.
    fn keep(&self, key: &str, session: WebSession, dropped: u64) {
        let _turn = self.turn();
        if self.dropped.load(Ordering::Acquire) != dropped {
            return;
        }
        if self.by_token.len() >= HELD_SWEEP_ABOVE {
            let now = crate::base::time::now_ms();
            self.by_token.retain(|_, s| s.expires_at_ms > now);
        }
        self.by_token.insert(key.to_string(), Arc::new(session));
    }

    /// A change of the feed: an ended session, or every session of a user whose password
    /// changed or who was removed, is dropped.
    fn follow(&self, change: &Change) {
        match change {
            Change::WebSessionEnded { session_id, .. } => self.drop_where(|s| s.id == *session_id),
            Change::PasswordChanged { user_id, .. } | Change::UserDeleted { user_id, .. } => {
                self.drop_where(|s| s.user_id == *user_id)
            }
            _ => {}
        }
    }
}

impl WebSessions {
    /// Sessions on `store`, whose starts and ends are published on `changes` (and followed
    /// from it).
    pub fn new(store: Arc<dyn Store>, changes: Feed) -> WebSessions {
        let held = Arc::new(Held::default());
        // Held weakly: the feed outlives this.
        let weak = Arc::downgrade(&held);
        changes.listen(move |change| {
            if let Some(held) = weak.upgrade() {
                held.follow(change);
            }
        });
        WebSessions { store, changes, held }
    }

    fn ended(&self, s: &WebSession) {
        self.changes.publish(Change::WebSessionEnded {
            org_id: s.org_id.clone(),
            user_id: s.user_id.clone(),
            session_id: s.id.clone(),
        });
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
        for (key, s) in live.iter().take(excess) {
            self.store.delete(Kind::WebSession, key).await?;
            self.ended(s);
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
        self.store.put_record_until(Kind::WebSession, &user.id, &key, &session, session.expires_at_ms).await?;
        self.changes.publish(Change::WebSessionStarted {
            org_id: session.org_id.clone(),
            user_id: session.user_id.clone(),
            session_id: session.id.clone(),
        });
        Ok(token)
    }

    /// The session of token hash `key` as the store holds it, if live.
    async fn read(&self, key: &str) -> Result<Option<WebSession>, StoreError> {
        let Some(json) = self.store.get(Kind::WebSession, key).await? else { return Ok(None) };
        let Ok(session) = serde_json::from_str::<WebSession>(&json) else { return Ok(None) };
        Ok(Some(session).filter(|s| s.expires_at_ms > crate::base::time::now_ms()))
    }

    /// The live session of `token`, its use recorded (which moves its expiry).
    pub async fn find(&self, token: &str, idle: Duration) -> Result<Option<WebSession>, StoreError> {
        let key = secrets::hash_key(token);
        let now = Utc::now();
        let dropped = self.held.dropped.load(Ordering::Acquire);
        let held = self.held.by_token.get(&key).map(|s| s.value().clone());
        // A copy held here that looks expired may have been used on another instance since.
        let (mut session, just_read) = match held.filter(|s| s.expires_at_ms > now.timestamp_millis()) {
            Some(s) => (WebSession::clone(&s), false),
            None => match self.read(&key).await? {
                Some(s) => (s, true),
                None => {
                    self.held.by_token.remove(&key);
                    return Ok(None);
                }
            },
        };
        let touch_every = TOUCH_EVERY_MS.min(idle.as_millis() as i64 / 10);
        if now.timestamp_millis() - session.last_seen_at.timestamp_millis() >= touch_every {
            // A held copy is read again before writing, so that a session ended elsewhere is not
            // written back (one just read from the store is as fresh as that).
            if !just_read && self.read(&key).await?.is_none() {
                self.held.drop_where(|s| s.id == session.id);
                return Ok(None);
            }
            session.last_seen_at = now;
            session.expires_at_ms = now.timestamp_millis() + idle.as_millis() as i64;
            let (user, until) = (session.user_id.clone(), session.expires_at_ms);
            self.store.put_record_until(Kind::WebSession, &user, &key, &session, until).await?;
        }
        self.held.keep(&key, session.clone(), dropped);
        Ok(Some(session))
    }

    /// A user's live sessions, oldest first.
    pub(crate) async fn of_user(&self, user_id: &str) -> Result<Vec<WebSession>, StoreError> {
        let mut all: Vec<WebSession> = self.stored(user_id).await?.into_iter().map(|(_, s)| s).collect();
        all.sort_by_key(|s| s.created_at);
        Ok(all)
    }

    /// Ends the user's session `id`; `false` when the user has none of that id.
    pub async fn end(&self, user_id: &str, id: &str) -> Result<bool, StoreError> {
        for (key, s) in self.stored(user_id).await? {
            if s.id == id {
                let deleted = self.store.delete(Kind::WebSession, &key).await?;
                self.ended(&s);
                return Ok(deleted);
            }
        }
        Ok(false)
    }

    /// Ends the session of `token` (sign-out).
    pub(crate) async fn end_token(&self, token: &str) -> Result<(), StoreError> {
        let key = secrets::hash_key(token);
        let session = self.read(&key).await?;
        self.store.delete(Kind::WebSession, &key).await?;
        self.held.by_token.remove(&key);
        if let Some(s) = session {
            self.ended(&s);
        }
        Ok(())
    }

    /// Ends every session of the user (a new password).
    pub(crate) async fn end_all(&self, user_id: &str) -> Result<(), StoreError> {
        for (key, s) in self.stored(user_id).await? {
            self.store.delete(Kind::WebSession, &key).await?;
            self.ended(&s);
        }
        Ok(())
    }

    async fn stored(&self, user_id: &str) -> Result<Vec<(String, WebSession)>, StoreError> {
        let now = crate::base::time::now_ms();
        let rows = self.store.load_partition(Kind::WebSession, user_id).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, json)| serde_json::from_str::<WebSession>(&json).ok().map(|s| (key, s)))
            .filter(|(_, s)| s.expires_at_ms > now)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_held_session_is_dropped_when_the_feed_says_it_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::data::store::EmbeddedStore::open(dir.path()).unwrap());
        let feed = Feed::new();
        let mut heard = feed.subscribe();
        let sessions = WebSessions::new(store.clone(), feed.clone());
        let user = User {
            id: "usr_1".into(),
            org_id: "org_1".into(),
            email: "u@example.com".into(),
            name: "U".into(),
            role: "owner".into(),
            created_at: Utc::now(),
            notification_preferences: Default::default(),
            declared: false,
        };
        let idle = Duration::from_secs(3600);
        let token = sessions.start(&user, "127.0.0.1".into(), "test".into(), idle, 5).await.unwrap();
        let Ok(Change::WebSessionStarted { session_id, .. }) = heard.try_recv() else { panic!("a start is a change") };
        assert!(sessions.find(&token, idle).await.unwrap().is_some());
        // Another instance ends it: the store no longer has it, the copy held here stays until
        // the change arrives.
        store.delete(Kind::WebSession, &secrets::hash_key(&token)).await.unwrap();
        assert!(sessions.find(&token, idle).await.unwrap().is_some(), "held, not read again");
        let ended = Change::WebSessionEnded { org_id: "org_1".into(), user_id: "usr_1".into(), session_id };
        feed.follow_peer(&ended);
        assert!(sessions.find(&token, idle).await.unwrap().is_none(), "dropped by the change");

        // A new password drops every session of its user; ending one here publishes.
        let token = sessions.start(&user, "127.0.0.1".into(), "test".into(), idle, 5).await.unwrap();
        assert!(sessions.find(&token, idle).await.unwrap().is_some());
        store.delete(Kind::WebSession, &secrets::hash_key(&token)).await.unwrap();
        feed.follow_peer(&Change::PasswordChanged { org_id: "org_1".into(), user_id: "usr_1".into() });
        assert!(sessions.find(&token, idle).await.unwrap().is_none());
        let token = sessions.start(&user, "127.0.0.1".into(), "test".into(), idle, 5).await.unwrap();
        let _ = std::iter::from_fn(|| heard.try_recv().ok()).count();
        sessions.end_token(&token).await.unwrap();
        assert!(matches!(heard.try_recv(), Ok(Change::WebSessionEnded { .. })), "a sign-out is a change");
        assert!(sessions.find(&token, idle).await.unwrap().is_none());
    }
}
