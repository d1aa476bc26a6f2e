//! Resumable call streams for handshake-era clients (MCP 2025-11-25, "Resumability and
//! redelivery"): every event toolgate writes on a call's SSE answer has an id
//! (`<stream>.<seq>`), the stream opens with a priming event (an id, a `retry:` hint, no data),
//! and the events are kept in a bounded buffer while the call runs and for a while after. A client
//! whose connection drops mid-call reconnects with `GET` and `Last-Event-ID` and receives what it
//! missed, then the rest live. A dropped connection is not a cancellation (MCP says so): the call
//! goes on and its events are buffered for the client to come back to.

use crate::base::fast_map::FastMap;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Events kept per stream, at most (the oldest go first)...
const MAX_EVENTS: usize = 256;
/// ...and bytes.
const MAX_BYTES: usize = 4 << 20;
/// How long an ended stream can still be resumed.
const KEEP_AFTER_END: Duration = Duration::from_secs(60);
/// Streams buffered at once, all sessions together; beyond it a new stream is not resumable.
const MAX_STREAMS: usize = 10_000;
/// The reconnection time suggested to clients (`retry:`), in milliseconds.
pub const RETRY_MS: u64 = 1000;

#[derive(Default)]
struct Buffered {
    events: VecDeque<(u64, Bytes)>,
    bytes: usize,
    next_seq: u64,
    ended: Option<Instant>,
}

/// One call's answer stream, as a client may resume it.
pub struct CallStream {
    id: String,
    session_id: String,
    buffered: Mutex<Buffered>,
    changed: Notify,
}

impl CallStream {
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The first event: its id, the `retry:` hint, and empty data (clients skip it).
    pub fn priming(&self) -> Bytes {
        Bytes::from(format!("id: {}.0\nretry: {RETRY_MS}\ndata: \n\n", self.id))
    }

    /// Keeps a message (a JSON-RPC message's bytes) and returns its event, id included.
    pub fn push(&self, data: &[u8]) -> Bytes {
        let event = {
            let mut b = self.buffered.lock();
            b.next_seq += 1;
            let seq = b.next_seq;
            let head = format!("id: {}.{seq}\nevent: message\ndata: ", self.id);
            let mut out = Vec::with_capacity(head.len() + data.len() + 2);
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\n\n");
            let event = Bytes::from(out);
            b.bytes += event.len();
            b.events.push_back((seq, event.clone()));
            while b.events.len() > MAX_EVENTS || (b.bytes > MAX_BYTES && b.events.len() > 1) {
                if let Some((_, old)) = b.events.pop_front() {
                    b.bytes -= old.len();
                }
            }
            event
        };
        self.changed.notify_waiters();
        event
    }

    /// The sequence number of the last event pushed (0: none yet, only the priming event).
    pub fn last_seq(&self) -> u64 {
        self.buffered.lock().next_seq
    }

    /// The call answered (or failed): no more events.
    pub fn finish(&self) {
        self.buffered.lock().ended.get_or_insert_with(Instant::now);
        self.changed.notify_waiters();
    }

    /// The events after `seq`, and whether the stream has ended. `None` when some of them are no
    /// longer buffered: the client cannot be given a complete replay.
    pub fn after(&self, seq: u64) -> Option<(Vec<(u64, Bytes)>, bool)> {
        let b = self.buffered.lock();
        let first = b.events.front().map_or(b.next_seq + 1, |(s, _)| *s);
        if seq + 1 < first {
            return None;
        }
        let events = b.events.iter().filter(|(s, _)| *s > seq).cloned().collect();
        Some((events, b.ended.is_some()))
    }

    /// Waits for the next event or the end; `after` tells which. Registered before it checks,
    /// so an event pushed in between is not missed.
    pub async fn changed(&self, seen: u64) {
        let notified = self.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let b = self.buffered.lock();
            if b.next_seq > seen || b.ended.is_some() {
                return;
            }
        }
        notified.await;
    }
}

/// The resumable streams of the running calls (and of recently ended ones).
#[derive(Default)]
pub struct CallStreams {
    streams: FastMap<String, Arc<CallStream>>,
}

impl CallStreams {
    /// A new stream for a call of `session_id`; `None` when too many are buffered (the call is
    /// then answered without ids, as before this existed).
    pub fn open(&self, session_id: &str) -> Option<Arc<CallStream>> {
        if self.streams.len() >= MAX_STREAMS {
            self.sweep();
            if self.streams.len() >= MAX_STREAMS {
                return None;
            }
        }
        let id = hex::encode(rand::random::<[u8; 8]>());
        let stream = Arc::new(CallStream {
            id: id.clone(),
            session_id: session_id.to_string(),
            buffered: Mutex::new(Buffered::default()),
            changed: Notify::new(),
        });
        self.streams.insert(id, stream.clone());
        Some(stream)
    }

    /// The stream a `Last-Event-ID` names, and the sequence number it names.
    pub fn find(&self, last_event_id: &str) -> Option<(Arc<CallStream>, u64)> {
        let (id, seq) = last_event_id.trim().rsplit_once('.')?;
        let seq = seq.parse().ok()?;
        let stream = self.streams.get(id)?.clone();
        Some((stream, seq))
    }

    /// Forgets streams that ended more than [`KEEP_AFTER_END`] ago (run by the flusher, and when full).
    pub fn sweep(&self) {
        let now = Instant::now();
        self.streams.retain(|_, s| s.buffered.lock().ended.is_none_or(|t| now.duration_since(t) < KEEP_AFTER_END));
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_ids_and_are_replayed_after_the_last_one_seen() {
        let streams = CallStreams::default();
        let s = streams.open("sess").unwrap();
        let priming = String::from_utf8(s.priming().to_vec()).unwrap();
        assert!(priming.starts_with("id: ") && priming.contains("\nretry: 1000\ndata: \n\n"), "{priming}");
        let first = String::from_utf8(s.push(b"{\"a\":1}").to_vec()).unwrap();
        let id = first.lines().next().unwrap().strip_prefix("id: ").unwrap().to_string();
        assert!(id.ends_with(".1"), "{id}");
        s.push(b"{\"b\":2}");
        s.finish();
        let (found, seq) = streams.find(&id).unwrap();
        assert_eq!((found.session_id(), seq), ("sess", 1));
        let (events, ended) = found.after(seq).unwrap();
        assert!(ended);
        assert_eq!(events.len(), 1);
        assert!(String::from_utf8(events[0].1.to_vec()).unwrap().ends_with("data: {\"b\":2}\n\n"));
        // From the priming event: everything.
        assert_eq!(found.after(0).unwrap().0.len(), 2);
        assert!(streams.find("nope.1").is_none() && streams.find("garbage").is_none());
    }

    #[test]
    fn the_buffer_is_bounded_and_a_gap_is_no_replay() {
        let streams = CallStreams::default();
        let s = streams.open("sess").unwrap();
        for _ in 0..(MAX_EVENTS + 10) {
            s.push(b"{}");
        }
        assert!(s.after(0).is_none(), "the first events are gone: no complete replay");
        let (events, ended) = s.after(20).unwrap();
        assert_eq!(events.len(), MAX_EVENTS - 10);
        assert!(!ended);
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_the_next_event() {
        let streams = CallStreams::default();
        let s = streams.open("sess").unwrap();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.changed(0).await })
        };
        tokio::task::yield_now().await;
        s.push(b"{}");
        tokio::time::timeout(Duration::from_secs(2), waiter).await.unwrap().unwrap();
        // Already past: returns at once.
        tokio::time::timeout(Duration::from_millis(100), s.changed(0)).await.unwrap();
    }
}
