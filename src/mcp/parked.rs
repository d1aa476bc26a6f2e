//! Stateless calls waiting for their clients' answers: the app asked the client something
//! (elicitation, sampling, roots), toolgate answered the client with an input-required result,
//! and the app's call is kept here, with what it asked, until the client comes back with the
//! answers and toolgate's `requestState` (or the time runs out: dropping the reply stream cancels
//! the call at the app). `stateless.rs` parks and resumes; the runtime owns the table.

use crate::mcp::jsonrpc::{Id, RpcErrorObject};
use crate::mcp::protocol::RpcCode;
use crate::mcp::upstream::ReplyStream;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a call waits for the client's next round before it is cancelled at the app.
const PARK_TTL: Duration = Duration::from_secs(120);

/// At most this many calls wait for a client's answers at once, all clients together.
const MAX_PARKED: usize = 10_000;

/// The share of [`MAX_PARKED`] one key may hold (a tenth): a key that leaves its calls
/// unanswered, by mistake or on purpose, cannot keep every other key's calls from parking.
const MAX_PARKED_PER_KEY: usize = MAX_PARKED / 10;

/// Why a call could not be parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParkRefused {
    /// The call's key already holds its share.
    #[error("this key already has {limit} calls waiting for its answers (its share of the {total} the gateway keeps); answer them or let them expire, then try again")]
    KeyShare { limit: usize, total: usize },
    /// All keys together hold [`MAX_PARKED`].
    #[error("too many calls are waiting for their clients' answers; try again later")]
    Full { total: usize },
}

impl ParkRefused {
    /// The JSON-RPC error the client gets, and the status its request is logged with: a key over
    /// its share is told so (-32010, like any limit of its own); a full table is the gateway's
    /// trouble (-32603).
    pub(crate) fn to_error(self) -> (RpcErrorObject, u16) {
        match self {
            ParkRefused::KeyShare { limit, total } => (
                RpcErrorObject::new(RpcCode::LimitExceeded.code(), self.to_string())
                    .with_data(json!({ "limit": limit, "total": total, "scope": "key" })),
                RpcCode::LimitExceeded.status(),
            ),
            ParkRefused::Full { total } => (
                RpcErrorObject::internal(self.to_string()).with_data(json!({ "total": total, "scope": "gateway" })),
                503,
            ),
        }
    }
}

/// Who may continue a parked call: the same credential, on the same gateway, for the same
/// method and tool or prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Binding {
    #[serde(rename = "k")]
    pub key_id: String,
    #[serde(rename = "g")]
    pub gateway_id: String,
    #[serde(rename = "m")]
    pub method: String,
    #[serde(rename = "n")]
    pub name: String,
}

/// What toolgate's `requestState` seals: the parked call and who may continue it.
#[derive(Serialize, Deserialize)]
pub(crate) struct SealedState {
    #[serde(rename = "p")]
    pub(crate) parked: String,
    #[serde(flatten)]
    pub(crate) binding: Binding,
}

/// One of the app's questions the client has not answered yet.
pub(crate) struct Pending {
    /// The key the client answers it under (`inputResponses`).
    pub key: String,
    /// The app's request id, which its answer must carry.
    pub app_request: Id,
    /// `{method, params}` as the client sees it in `inputRequests`.
    pub request: Value,
    /// The method of the app's question, which says what a valid answer looks like.
    pub method: String,
}

/// A call whose app asked the client something: its reply stream, kept until the client comes
/// back with the answers (or [`PARK_TTL`] passes; dropping the stream cancels the call).
pub(crate) struct Parked {
    pub stream: ReplyStream,
    pub org_id: String,
    pub app_id: String,
    pub binding: Binding,
    pub pending: Vec<Pending>,
    /// Keys handed out so far, so a key is never reused within the call.
    pub keys_issued: u32,
    pub(crate) expires: Instant,
}

/// The calls waiting for their clients' answers.
pub struct ParkedCalls {
    calls: Mutex<HashMap<String, Parked>>,
    /// At most this many calls in all, and this many of one key.
    total: usize,
    per_key: usize,
}

impl Default for ParkedCalls {
    fn default() -> Self {
        Self::with_limits(MAX_PARKED, MAX_PARKED_PER_KEY)
    }
}

impl ParkedCalls {
    pub(crate) fn with_limits(total: usize, per_key: usize) -> Self {
        Self { calls: Mutex::new(HashMap::new()), total, per_key }
    }

    pub(crate) fn park(&self, mut call: Parked) -> Result<String, ParkRefused> {
        let now = Instant::now();
        call.expires = now + PARK_TTL;
        let id = crate::base::secrets::new_session_id();
        let mut calls = self.calls.lock();
        // Expired calls go first (their streams drop outside the lock, below).
        let expired: Vec<Parked> = {
            let gone: Vec<String> = calls.iter().filter(|(_, c)| c.expires <= now).map(|(k, _)| k.clone()).collect();
            gone.iter().filter_map(|k| calls.remove(k)).collect()
        };
        let admitted = if calls.len() >= self.total {
            Err(ParkRefused::Full { total: self.total })
        } else if calls.values().filter(|c| c.binding.key_id == call.binding.key_id).count() >= self.per_key {
            Err(ParkRefused::KeyShare { limit: self.per_key, total: self.total })
        } else {
            calls.insert(id.clone(), call);
            Ok(id)
        };
        drop(calls);
        drop(expired);
        admitted
    }

    pub(crate) fn take(&self, id: &str) -> Option<Parked> {
        let call = self.calls.lock().remove(id)?;
        (call.expires > Instant::now()).then_some(call)
    }

    pub fn len(&self) -> usize {
        self.calls.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(key: &str) -> Parked {
        Parked {
            stream: ReplyStream::idle_for_test(),
            org_id: "org_1".into(),
            app_id: "app".into(),
            binding: Binding {
                key_id: key.into(),
                gateway_id: "gw_1".into(),
                method: "tools/call".into(),
                name: "t".into(),
            },
            pending: Vec::new(),
            keys_issued: 0,
            expires: Instant::now(),
        }
    }

    #[tokio::test]
    async fn a_key_at_its_share_is_refused_while_another_key_still_parks() {
        let parked = ParkedCalls::with_limits(5, 2);
        let first = parked.park(call("key_a")).unwrap();
        assert!(parked.park(call("key_a")).is_ok());
        let refused = parked.park(call("key_a")).unwrap_err();
        assert_eq!(refused, ParkRefused::KeyShare { limit: 2, total: 5 });
        let (e, status) = refused.to_error();
        assert_eq!((e.code, status), (RpcCode::LimitExceeded.code(), 429));
        assert!(e.message.contains("this key already has 2 calls waiting"), "{}", e.message);
        assert_eq!(e.data.unwrap()["scope"], "key");
        // Another key is not held back by the first one's calls.
        assert!(parked.park(call("key_b")).is_ok());
        assert!(parked.park(call("key_b")).is_ok());
        assert!(parked.park(call("key_c")).is_ok());
        assert_eq!(parked.len(), 5);
        // The table as a whole is full now, whoever asks.
        let full = parked.park(call("key_d")).unwrap_err();
        assert_eq!(full, ParkRefused::Full { total: 5 });
        assert_eq!(full.to_error().1, 503);
        // A call taken back (its client answered) frees its place and its key's share.
        assert!(parked.take(&first).is_some());
        assert!(parked.park(call("key_a")).is_ok());
    }

    #[tokio::test]
    async fn the_default_share_is_a_tenth_of_the_total() {
        let parked = ParkedCalls::default();
        assert_eq!((parked.total, parked.per_key), (10_000, 1_000));
    }
}
