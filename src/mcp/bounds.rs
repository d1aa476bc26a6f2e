//! What one tenant may hold open on the MCP endpoint (Decision 23): its long-lived streams, per
//! session, key and organisation, counted while they are open. A GET stream (listening, or
//! resuming a call's stream) and a `subscriptions/listen` stream each hold a connection of the
//! listener for as long as their client listens; uncounted, one key's 10,050 streams took every
//! connection of the listener and reset another tenant's request. The bytes of answers kept for
//! resumption are the other bound of this decision (`resumable.rs`); both refuse the same way
//! ([`Refused`]: HTTP 429, -32010, `data.scope` naming the bound).
//!
//! The counts are this instance's: a stream holds this instance's connection and memory, which
//! is what the bound protects; several instances each apply it.

use crate::base::fast_map::FastMap;
use crate::config::StreamBounds;
use crate::mcp::jsonrpc::RpcErrorObject;
use crate::mcp::protocol::RpcCode;
use crate::observe::metrics;
use serde_json::json;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Which bound refused: `data.scope` of the error and the `scope` label of its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Session,
    Key,
    Organization,
}

impl Scope {
    /// As the API spells its fields (`organization`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Key => "key",
            Scope::Organization => "organization",
        }
    }

    fn holder(self) -> &'static str {
        match self {
            Scope::Session => "this MCP session",
            Scope::Key => "this key",
            Scope::Organization => "this organisation",
        }
    }
}

/// A tenant at one of its bounds: nothing was started, and the client is told which bound,
/// its figure and the setting that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// One more open stream would pass the bound of `scope`.
    Streams { scope: Scope, limit: usize },
    /// The key's or organisation's resumable call streams hold their bound of bytes; they
    /// expire `keep_secs` after their calls end.
    Resumable { scope: Scope, limit: usize, keep_secs: u64 },
}

impl Refused {
    /// The setting that holds the bound.
    pub fn setting(self) -> &'static str {
        match self {
            Refused::Streams { scope: Scope::Session, .. } => "mcp.streams.per_session",
            Refused::Streams { scope: Scope::Key, .. } => "mcp.streams.per_key",
            Refused::Streams { scope: Scope::Organization, .. } => "mcp.streams.per_organization",
            Refused::Resumable { scope: Scope::Organization, .. } => "mcp.resumable.bytes_per_organization",
            Refused::Resumable { .. } => "mcp.resumable.bytes_per_key",
        }
    }

    pub fn scope(self) -> Scope {
        match self {
            Refused::Streams { scope, .. } | Refused::Resumable { scope, .. } => scope,
        }
    }

    /// The JSON-RPC error the client gets (answered under HTTP 429, -32010's status): like any
    /// limit of its own, with `data.scope` naming the bound, as parked calls name theirs.
    pub(crate) fn to_error(self) -> RpcErrorObject {
        let (code, limit) = match self {
            Refused::Streams { limit, .. } => ("TOO_MANY_STREAMS", limit),
            Refused::Resumable { limit, .. } => ("RESUMABLE_BYTES_HELD", limit),
        };
        let data = json!({ "code": code, "scope": self.scope().as_str(), "limit": limit, "setting": self.setting() });
        RpcErrorObject::new(RpcCode::LimitExceeded.code(), self.to_string()).with_data(data)
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (holder, setting) = (self.scope().holder(), self.setting());
        match *self {
            Refused::Streams { limit, .. } => {
                write!(f, "{holder} already has {limit} streams open ({setting}); close one before opening another")
            }
            Refused::Resumable { limit, keep_secs, .. } => write!(
                f,
                "{holder} already keeps {limit} bytes of answers for resumption ({setting}); calls are refused \
                 until some expire, {keep_secs} s after their calls end"
            ),
        }
    }
}

impl std::error::Error for Refused {}

/// Whose stream or buffer: its organisation, its credential, and its session (none for a
/// stateless `subscriptions/listen` stream).
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub org_id: &'a str,
    pub key_id: &'a str,
    pub session_id: Option<&'a str>,
}

/// The long-lived streams open now, per organisation, and per key and session within it.
#[derive(Default)]
pub struct OpenStreams {
    orgs: FastMap<String, OrgStreams>,
    open: AtomicUsize,
}

#[derive(Default)]
struct OrgStreams {
    open: usize,
    keys: HashMap<String, usize>,
    sessions: HashMap<String, usize>,
}

impl OpenStreams {
    /// A place for one more stream of `who`, or the narrowest bound it is at (session, then key,
    /// then organisation: the one the client can do most about), counted in the metrics. The
    /// place is given back when the returned slot drops, however the stream ends.
    pub fn open(self: &Arc<Self>, who: Holder<'_>, bounds: &StreamBounds) -> Result<StreamSlot, Refused> {
        let mut org = self.orgs.entry(who.org_id.to_owned()).or_default();
        let count = |m: &HashMap<String, usize>, k: &str| m.get(k).copied().unwrap_or(0);
        let full = match who.session_id {
            Some(s) if count(&org.sessions, s) >= bounds.per_session => Some((Scope::Session, bounds.per_session)),
            _ if count(&org.keys, who.key_id) >= bounds.per_key => Some((Scope::Key, bounds.per_key)),
            _ if org.open >= bounds.per_org => Some((Scope::Organization, bounds.per_org)),
            _ => None,
        };
        if let Some((scope, limit)) = full {
            drop(org);
            metrics::mcp_stream_refused(scope.as_str());
            return Err(Refused::Streams { scope, limit });
        }
        org.open += 1;
        *org.keys.entry(who.key_id.to_owned()).or_default() += 1;
        if let Some(s) = who.session_id {
            *org.sessions.entry(s.to_owned()).or_default() += 1;
        }
        drop(org);
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(StreamSlot {
            streams: Arc::clone(self),
            org_id: who.org_id.into(),
            key_id: who.key_id.into(),
            session_id: who.session_id.map(Into::into),
        })
    }

    /// Streams open now, all tenants together.
    pub fn len(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Streams open now of a key of `org_id` (tests).
    #[cfg(test)]
    fn of_key(&self, org_id: &str, key_id: &str) -> usize {
        self.orgs.get(org_id).and_then(|o| o.keys.get(key_id).copied()).unwrap_or(0)
    }

    fn close(&self, slot: &StreamSlot) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(mut org) = self.orgs.get_mut(&*slot.org_id) {
            org.open = org.open.saturating_sub(1);
            release(&mut org.keys, &slot.key_id);
            if let Some(s) = &slot.session_id {
                release(&mut org.sessions, s);
            }
        }
        // An organisation without open streams holds no entry.
        self.orgs.remove_if(&*slot.org_id, |_, o| o.open == 0);
    }
}

fn release(counts: &mut HashMap<String, usize>, id: &str) {
    if let Some(n) = counts.get_mut(id) {
        *n -= 1;
        if *n == 0 {
            counts.remove(id);
        }
    }
}

/// One open stream's place under the bounds: held by the stream's loop (`EventSource`), so it
/// is given back when the stream ends, whichever way: the client gone, its session ended or
/// expired, its key revoked, its gateway deleted, a shutdown.
pub struct StreamSlot {
    streams: Arc<OpenStreams>,
    org_id: Box<str>,
    key_id: Box<str>,
    session_id: Option<Box<str>>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.streams.close(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: StreamBounds = StreamBounds { per_session: 2, per_key: 3, per_org: 4 };

    fn who<'a>(org_id: &'a str, key_id: &'a str, session_id: Option<&'a str>) -> Holder<'a> {
        Holder { org_id, key_id, session_id }
    }

    #[test]
    fn streams_are_bounded_per_session_key_and_organisation_and_a_slot_gives_its_place_back() {
        let open = Arc::new(OpenStreams::default());
        let mut held = Vec::new();
        held.push(open.open(who("org_a", "key_1", Some("s1")), &BOUNDS).unwrap());
        held.push(open.open(who("org_a", "key_1", Some("s1")), &BOUNDS).unwrap());
        let refused = open.open(who("org_a", "key_1", Some("s1")), &BOUNDS).err().unwrap();
        assert_eq!(refused, Refused::Streams { scope: Scope::Session, limit: 2 });
        held.push(open.open(who("org_a", "key_1", Some("s2")), &BOUNDS).unwrap());
        let refused = open.open(who("org_a", "key_1", Some("s3")), &BOUNDS).err().unwrap();
        assert_eq!(refused.scope(), Scope::Key, "the key's third stream was its last");
        // A stream without a session (`subscriptions/listen`) counts for its key too.
        assert_eq!(open.open(who("org_a", "key_1", None), &BOUNDS).err().unwrap().scope(), Scope::Key);
        held.push(open.open(who("org_a", "key_2", None), &BOUNDS).unwrap());
        let refused = open.open(who("org_a", "key_3", Some("s4")), &BOUNDS).err().unwrap();
        assert_eq!(refused, Refused::Streams { scope: Scope::Organization, limit: 4 });
        // Another organisation is not held back.
        let other = open.open(who("org_b", "key_9", Some("s9")), &BOUNDS).unwrap();
        assert_eq!(open.len(), 5);
        // A stream that ends gives its place back to its session, key and organisation.
        held.remove(0);
        assert_eq!(open.of_key("org_a", "key_1"), 2);
        held.push(open.open(who("org_a", "key_1", Some("s1")), &BOUNDS).unwrap());
        drop(held);
        drop(other);
        assert!(open.is_empty() && open.orgs.is_empty(), "nothing is left of closed streams");
    }

    #[test]
    fn a_refusal_names_its_bound_scope_and_setting() {
        let e = Refused::Streams { scope: Scope::Key, limit: 250 }.to_error();
        assert_eq!(e.code, RpcCode::LimitExceeded.code());
        assert_eq!(RpcCode::LimitExceeded.status(), 429);
        assert!(e.message.contains("this key already has 250 streams open (mcp.streams.per_key)"), "{}", e.message);
        let data = e.data.unwrap();
        assert_eq!((data["scope"].as_str(), data["limit"].as_u64()), (Some("key"), Some(250)));
        assert_eq!(data["code"], "TOO_MANY_STREAMS");
        let e = Refused::Resumable { scope: Scope::Organization, limit: 1024, keep_secs: 60 }.to_error();
        assert!(
            e.message.contains("mcp.resumable.bytes_per_organization") && e.message.contains("60 s"),
            "{}",
            e.message
        );
        assert_eq!(e.data.unwrap()["scope"], "organization");
    }
}
