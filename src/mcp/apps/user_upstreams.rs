//! Calls made as the caller: whose connection (and upstream) serves a call to an app
//! ([`UpstreamOwner`]), who the caller is for an app connected by each user (`connection_scope:
//! user`, docs/identity.md "Per-user connections"), and the per-caller upstreams themselves,
//! bounded per app ([`SubjectPool`]).
//!
//! One rule holds it together: a caller's credential is read from that caller's own connection
//! and sent only on that caller's own upstream (its own MCP session with the app), keyed by the
//! member or service account behind the call's credential. Nothing here falls back to another
//! caller's connection or to the organisation's.

use super::{AppClients, AppError};
use crate::base::fast_map::FastMap;
use crate::base::pair_key::pair;
use crate::config::{AppConfig, ListAs};
use crate::data::model::Connection;
use crate::data::state::State;
use crate::mcp::upstream::Upstream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_filters::{CredentialKind, Principal};

/// A caller's upstream not used for this long is closed by the idle sweep; its next call opens
/// (and initializes) another.
pub(crate) const USER_UPSTREAM_IDLE: Duration = Duration::from_secs(600);

/// Whose connection serves a call to an app, and so whose upstream it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamOwner<'a> {
    /// An app without credentials: one upstream serves every organisation.
    Shared,
    /// The organisation's own connection.
    Organization(&'a str),
    /// A member's or a service account's own connection of a per-user app.
    Subject { org_id: &'a str, subject: &'a str },
}

impl<'a> UpstreamOwner<'a> {
    /// The organisation the call is made in (`""` for a shared upstream).
    pub(crate) fn org_id(self) -> &'a str {
        match self {
            UpstreamOwner::Shared => "",
            UpstreamOwner::Organization(org_id) | UpstreamOwner::Subject { org_id, .. } => org_id,
        }
    }

    /// The connection whose credential the call goes with, if it has one.
    pub(crate) fn connection(self, state: &State, app_id: &str) -> Option<Arc<Connection>> {
        match self {
            UpstreamOwner::Shared => None,
            UpstreamOwner::Organization(org_id) => state.connection(org_id, app_id),
            UpstreamOwner::Subject { org_id, subject } => state.user_connection(org_id, subject, app_id),
        }
    }

    /// Whose view an app's lists (the catalogue, pins, a `test`) are read with: the
    /// organisation's, or for a per-user app listed as a service account, that account's.
    pub(crate) fn for_lists(org_id: &'a str, app: &'a AppConfig) -> UpstreamOwner<'a> {
        if !app.needs_credentials() {
            return UpstreamOwner::Shared;
        }
        match app.per_user.as_ref().map(|p| &p.list_as) {
            Some(ListAs::ServiceAccount(sa)) => UpstreamOwner::Subject { org_id, subject: sa },
            _ => UpstreamOwner::Organization(org_id),
        }
    }
}

/// Where a member connects a per-user app: the console's apps page (`console::PATH`), which
/// signs the person in first (the URL carries no token and is not pre-authenticated).
pub(crate) fn connect_url(public_url: &str, app_id: &str) -> String {
    format!("{public_url}/console/apps?connect={app_id}")
}

/// The member or service account behind a call's credential, for a per-user app: a user's API
/// key, a JWT or OAuth token naming a member, the console's web session: that member; a service
/// account's key: the account. A gateway key is shared by everyone who holds it and names no
/// user; nor does a token whose subject is no member of the organisation.
fn subject_of<'p>(state: &State, who: &'p Principal, app_id: &str) -> Result<&'p str, AppError> {
    match &who.credential {
        CredentialKind::GatewayKey { .. } => Err(AppError::NoCaller { app: app_id.into(), gateway_key: true }),
        CredentialKind::ServiceAccount { account_id } => Ok(account_id),
        _ if state.user(&who.user_id).is_some_and(|u| u.org_id == who.org_id) => Ok(&who.user_id),
        _ => Err(AppError::NoCaller { app: app_id.into(), gateway_key: false }),
    }
}

impl AppClients {
    /// Whose connection a call of `who` in `org_id` to `app` goes with: the shared upstream
    /// for an app without credentials, the organisation's for an app connected once, else the
    /// caller's own, which must be connected (the refusal says where to connect). The one
    /// place a call's owner is decided; a per-caller credential of another kind (a token
    /// exchanged for the caller's) belongs here too.
    pub(crate) fn owner_for_call<'a>(
        &self,
        org_id: &'a str,
        who: Option<&'a Principal>,
        app: &AppConfig,
    ) -> Result<UpstreamOwner<'a>, AppError> {
        if !app.needs_credentials() {
            return Ok(UpstreamOwner::Shared);
        }
        if app.per_user.is_none() {
            return Ok(UpstreamOwner::Organization(org_id));
        }
        let who = who.ok_or_else(|| AppError::NoCaller { app: app.id.clone(), gateway_key: false })?;
        let subject = subject_of(&self.state, who, &app.id)?;
        let owner = UpstreamOwner::Subject { org_id, subject };
        if owner.connection(&self.state, &app.id).is_some_and(|c| c.status == "connected") {
            return Ok(owner);
        }
        let service_account = matches!(who.credential, CredentialKind::ServiceAccount { .. });
        let url = connect_url(&self.state.config().server.public_url, &app.id);
        Err(AppError::NotConnectedByCaller { app: app.id.clone(), url, service_account })
    }

    /// The caller's own upstream of a per-user app, made on first use with the caller's own
    /// credential. At most the app's `max_user_sessions` are kept: the least recently used idle
    /// one is closed to make room; when every one is in use the call is refused.
    pub(super) fn user_upstream(&self, owner: UpstreamOwner<'_>, app: &AppConfig) -> Result<Arc<Upstream>, AppError> {
        let UpstreamOwner::Subject { org_id, subject } = owner else {
            return Err(AppError::NoCaller { app: app.id.clone(), gateway_key: false });
        };
        if let Some(up) = self.users.get(subject, &app.id) {
            return Ok(up);
        }
        let settings = self.settings_with(app, self.credential(owner, app));
        // Its notices (list changes) are the organisation's, whose catalogue shows the app.
        let up = Upstream::for_owner(org_id, &settings, &self.shared)
            .map_err(|error| AppError::Upstream { app: app.id.clone(), error: Box::new(error) })?;
        let most = app.per_user.as_ref().map_or(1, |p| p.max_user_sessions);
        let (up, evicted) = self.users.insert(subject, &app.id, Arc::new(up), most);
        if let Some(old) = evicted {
            tokio::spawn(async move { old.shutdown().await });
        }
        up.ok_or(AppError::UserSessionsFull { app: app.id.clone(), most })
    }

    /// Closes every upstream of `subject` (a member or a service account gone).
    pub(crate) fn forget_upstreams_of(&self, subject: &str) {
        for up in self.users.remove_subject(subject) {
            tokio::spawn(async move { up.shutdown().await });
        }
    }

    /// Forgets a caller's upstream of an app (its connection changed or ended): the next call
    /// opens another with the connection as it is now, or is refused if it is gone.
    pub(crate) fn forget_user_upstream(&self, subject: &str, app_id: &str) {
        if let Some(up) = self.users.remove(subject, app_id) {
            tokio::spawn(async move { up.shutdown().await });
        }
    }
}

/// A value per (caller, app), each stamped with its last use: the per-caller upstreams. The
/// look-up of a call takes no lock and allocates nothing; making room (rare: a caller's first
/// call) is done under one lock so that the bound per app holds under concurrency. A value is
/// idle when nothing but the pool holds it (no call in flight).
pub(crate) struct SubjectPool<T> {
    map: FastMap<(String, String), Held<T>>,
    /// One insertion at a time: counting an app's entries and making room is one step.
    making_room: parking_lot::Mutex<()>,
    epoch: Instant,
}

struct Held<T> {
    value: Arc<T>,
    /// Milliseconds since the pool's epoch at its last use.
    used: AtomicU64,
}

impl<T> Default for SubjectPool<T> {
    fn default() -> Self {
        SubjectPool { map: FastMap::default(), making_room: parking_lot::Mutex::new(()), epoch: Instant::now() }
    }
}

impl<T> SubjectPool<T> {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// `subject`'s value for `app_id`, marked as used now.
    pub(crate) fn get(&self, subject: &str, app_id: &str) -> Option<Arc<T>> {
        let held = self.map.get(pair(&(subject, app_id)))?;
        held.used.store(self.now(), Ordering::Relaxed);
        Some(held.value.clone())
    }

    /// Keeps `value` for (`subject`, `app_id`), or the one another call kept meanwhile. When
    /// the app has `most` already, the least recently used idle one is taken out (returned, to
    /// be closed) to make room; `None` as the first when every one is in use.
    pub(crate) fn insert(
        &self,
        subject: &str,
        app_id: &str,
        value: Arc<T>,
        most: usize,
    ) -> (Option<Arc<T>>, Option<Arc<T>>) {
        let _one = self.making_room.lock();
        if let Some(kept) = self.get(subject, app_id) {
            return (Some(kept), None);
        }
        let mut evicted = None;
        let of_app: Vec<(String, u64, bool)> = self
            .map
            .iter()
            .filter(|e| e.key().1 == app_id)
            .map(|e| (e.key().0.clone(), e.used.load(Ordering::Relaxed), Arc::strong_count(&e.value) == 1))
            .collect();
        if of_app.len() >= most {
            let lru = of_app.into_iter().filter(|e| e.2).min_by_key(|e| e.1);
            let Some((old, _, _)) = lru else { return (None, None) };
            evicted = self.remove(&old, app_id);
        }
        let used = AtomicU64::new(self.now());
        self.map.insert((subject.to_string(), app_id.to_string()), Held { value: value.clone(), used });
        (Some(value), evicted)
    }

    pub(crate) fn remove(&self, subject: &str, app_id: &str) -> Option<Arc<T>> {
        self.map.remove(pair(&(subject, app_id))).map(|(_, h)| h.value)
    }

    /// Takes out every value of `subject` (a caller gone).
    pub(crate) fn remove_subject(&self, subject: &str) -> Vec<Arc<T>> {
        let mut out = Vec::new();
        self.map.retain(|k, h| {
            let keep = k.0 != subject;
            if !keep {
                out.push(h.value.clone());
            }
            keep
        });
        out
    }

    /// Takes out every caller's value of an app (its settings changed).
    pub(crate) fn remove_app(&self, app_id: &str) -> Vec<Arc<T>> {
        let mut out = Vec::new();
        self.map.retain(|k, h| {
            let keep = k.1 != app_id;
            if !keep {
                out.push(h.value.clone());
            }
            keep
        });
        out
    }

    /// Takes out the values idle (no call holds them) and unused for `idle` or longer; `each`
    /// sees every one kept.
    pub(crate) fn sweep(&self, idle: Duration, each: impl Fn(&T)) -> Vec<Arc<T>> {
        let before = self.now().saturating_sub(idle.as_millis() as u64);
        let mut out = Vec::new();
        self.map.retain(|_, h| {
            let stale = h.used.load(Ordering::Relaxed) <= before && Arc::strong_count(&h.value) == 1;
            if stale {
                out.push(h.value.clone());
            } else {
                each(&h.value);
            }
            !stale
        });
        out
    }

    /// Takes out every value.
    pub(crate) fn drain(&self) -> Vec<Arc<T>> {
        let out = self.map.iter().map(|h| h.value.clone()).collect();
        self.map.clear();
        out
    }

    #[cfg(test)]
    fn len_of(&self, app_id: &str) -> usize {
        self.map.iter().filter(|e| e.key().1 == app_id).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_caller_has_its_own_and_the_bound_closes_the_least_recently_used_idle_one() {
        let pool: SubjectPool<String> = SubjectPool::default();
        let (a, _) = pool.insert("usr_a", "crm", Arc::new("a".into()), 2);
        let (b, _) = pool.insert("usr_b", "crm", Arc::new("b".into()), 2);
        assert_eq!((a.as_deref().map(String::as_str), b.as_deref().map(String::as_str)), (Some("a"), Some("b")));
        drop((a, b));
        // Another app's count is its own.
        assert!(pool.insert("usr_a", "mail", Arc::new("a-mail".into()), 1).0.is_some());
        assert_eq!(pool.get("usr_a", "crm").as_deref().map(String::as_str), Some("a"));
        assert_eq!(pool.get("usr_b", "crm").as_deref().map(String::as_str), Some("b"));
        // A second insert for the same caller keeps the first.
        let (kept, none) = pool.insert("usr_a", "crm", Arc::new("other".into()), 2);
        assert_eq!((kept.as_deref().map(String::as_str), none), (Some("a"), None));
        drop(kept);
        // Make `usr_a` the most recently used, clearly after `usr_b`.
        std::thread::sleep(Duration::from_millis(5));
        drop(pool.get("usr_a", "crm"));
        let (c, evicted) = pool.insert("usr_c", "crm", Arc::new("c".into()), 2);
        assert_eq!(evicted.as_deref().map(String::as_str), Some("b"), "the least recently used idle one goes");
        assert_eq!(pool.len_of("crm"), 2);
        assert!(pool.get("usr_b", "crm").is_none());
        // Every one in use (held by a call): a new caller is refused, none is taken out.
        let held_a = pool.get("usr_a", "crm");
        let (none, nothing) = pool.insert("usr_d", "crm", Arc::new("d".into()), 2);
        assert!(none.is_none() && nothing.is_none());
        assert_eq!(pool.len_of("crm"), 2);
        drop((held_a, c));
        // The sweep takes out the idle ones past their time, keeps those in use.
        let in_use = pool.get("usr_a", "crm");
        let swept = pool.sweep(Duration::ZERO, |_| {});
        let mut swept: Vec<String> = swept.iter().map(|s| s.to_string()).collect();
        swept.sort();
        assert_eq!(swept, vec!["a-mail".to_string(), "c".to_string()]);
        assert!(in_use.is_some() && pool.get("usr_a", "crm").is_some());
        assert_eq!(pool.remove_app("crm").len(), 1);
        assert!(pool.drain().is_empty());
    }
}
