//! Stateless calls waiting for their clients' answers: the app asked the client something
//! (elicitation, sampling, roots), toolgate answered the client with an input-required result,
//! and the app's call is kept here, with what it asked, until the client comes back with the
//! answers and toolgate's `requestState` (or the time runs out: dropping the reply stream cancels
//! the call at the app). `stateless.rs` parks and resumes; the runtime owns the table.

use crate::mcp::jsonrpc::Id;
use crate::mcp::upstream::ReplyStream;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a call waits for the client's next round before it is cancelled at the app.
const PARK_TTL: Duration = Duration::from_secs(120);

/// At most this many calls wait for a client's answers at once, all clients together.
const MAX_PARKED: usize = 10_000;

/// Who may continue a parked call: the same credential, on the same gateway, for the same
/// method and tool or prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
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
pub struct Pending {
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
pub struct Parked {
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
#[derive(Default)]
pub struct ParkedCalls {
    calls: Mutex<HashMap<String, Parked>>,
}

impl ParkedCalls {
    pub(crate) fn park(&self, mut call: Parked) -> Option<String> {
        let now = Instant::now();
        call.expires = now + PARK_TTL;
        let id = crate::secrets::new_session_id();
        let mut calls = self.calls.lock();
        // Expired calls go first (their streams drop outside the lock, below).
        let expired: Vec<Parked> = {
            let gone: Vec<String> = calls.iter().filter(|(_, c)| c.expires <= now).map(|(k, _)| k.clone()).collect();
            gone.iter().filter_map(|k| calls.remove(k)).collect()
        };
        let admitted = calls.len() < MAX_PARKED;
        if admitted {
            calls.insert(id.clone(), call);
        }
        drop(calls);
        drop(expired);
        admitted.then_some(id)
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
