//! Resumable call streams for handshake-era clients (MCP 2025-11-25, "Resumability and
//! redelivery"): every event toolgate writes on a call's SSE answer has an id
//! (`<stream>.<seq>`), the stream opens with a priming event (an id, a `retry:` hint, no data),
//! and the events are kept in a bounded buffer while the call runs and for a while after. A client
//! whose connection drops mid-call reconnects with `GET` and `Last-Event-ID` and receives what it
//! missed, then the rest live. A dropped connection is not a cancellation (MCP says so): the call
//! goes on and its events are buffered for the client to come back to.
//!
//! SSE has no acknowledgement, so an ended stream's buffer is kept for
//! `mcp.resumable.keep_after_end_secs` whether or not its client read it; the bytes a key and an
//! organisation keep are bounded (`mcp.resumable.bytes_per_key`, `bytes_per_organization`,
//! Decision 23), counted from the moment an event is buffered until the buffer is dropped
//! ([`HeldBytes`]). A key or organisation at its bound is refused new calls
//! ([`CallStreams::refusal`]); a call already running goes on, its events buffered as before
//! (its own connection reads them from the buffer), but if its key or organisation is at its
//! bound when it ends, its buffer is not kept after the end ([`CallStreams::finish`]).

use crate::base::fast_map::FastMap;
use crate::config::ResumableBounds;
use crate::edge::exchange::{EventSink, EventSource};
use crate::mcp::bounds::{Holder, Refused, Scope, StreamSlot};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Events kept per stream, at most (the oldest go first)...
const MAX_EVENTS: usize = 256;
/// ...and bytes.
const MAX_BYTES: usize = 4 << 20;
/// Streams buffered at once, all sessions together; beyond it a new stream is not resumable.
const MAX_STREAMS: usize = 10_000;
/// The reconnection time suggested to clients (`retry:`), in milliseconds.
pub(crate) const RETRY_MS: u64 = 1000;
/// How often an idle open stream (a GET, a followed call, `subscriptions/listen`) gets a
/// keep-alive comment.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(15);

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
    /// Where its buffered bytes are counted, until it drops.
    charge: Charge,
}

impl Drop for CallStream {
    fn drop(&mut self) {
        self.charge.sub(self.buffered.get_mut().bytes);
    }
}

impl CallStream {
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The first event: its id, the `retry:` hint, and empty data (clients skip it).
    pub(crate) fn priming(&self) -> Bytes {
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
            let before = b.bytes;
            b.bytes += event.len();
            b.events.push_back((seq, event.clone()));
            while b.events.len() > MAX_EVENTS || (b.bytes > MAX_BYTES && b.events.len() > 1) {
                if let Some((_, old)) = b.events.pop_front() {
                    b.bytes -= old.len();
                }
            }
            // Counted under the buffer's lock, so the charge always equals what it holds.
            match b.bytes.cmp(&before) {
                std::cmp::Ordering::Greater => self.charge.add(b.bytes - before),
                std::cmp::Ordering::Less => self.charge.sub(before - b.bytes),
                std::cmp::Ordering::Equal => {}
            }
            event
        };
        self.changed.notify_waiters();
        event
    }

    /// The sequence number of the last event pushed (0: none yet, only the priming event).
    pub(crate) fn last_seq(&self) -> u64 {
        self.buffered.lock().next_seq
    }

    /// The call answered (or failed): no more events. `true` the first time.
    fn end(&self) -> bool {
        let first = {
            let mut b = self.buffered.lock();
            let first = b.ended.is_none();
            b.ended.get_or_insert_with(Instant::now);
            first
        };
        self.changed.notify_waiters();
        first
    }

    /// Bytes its buffer holds now.
    fn held(&self) -> usize {
        self.buffered.lock().bytes
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

/// The resumable streams of the running calls (and of recently ended ones), and the bytes they
/// hold per key and organisation.
#[derive(Default)]
pub struct CallStreams {
    streams: FastMap<String, Arc<CallStream>>,
    held: HeldBytes,
}

impl CallStreams {
    /// Whether `who` may start a call whose answer may become a resumable stream: `Err` when its
    /// key's or organisation's buffers hold their bound (the key's is named first), counted in
    /// the metrics.
    pub fn refusal(&self, who: Holder<'_>, bounds: &ResumableBounds) -> Result<(), Refused> {
        // All buffers together under a key's bound (the usual case): no tenant is at its
        // bound, and a call pays one atomic load for the check.
        if self.held_bytes() < bounds.bytes_per_key.min(bounds.bytes_per_org) {
            return Ok(());
        }
        let (key, org) = self.held.of(who.org_id, who.key_id);
        let scope = if key >= bounds.bytes_per_key {
            (Scope::Key, bounds.bytes_per_key)
        } else if org >= bounds.bytes_per_org {
            (Scope::Organization, bounds.bytes_per_org)
        } else {
            return Ok(());
        };
        crate::observe::metrics::mcp_resumable_refused(scope.0.as_str());
        Err(Refused::Resumable { scope: scope.0, limit: scope.1, keep_secs: bounds.keep_after_end.as_secs() })
    }

    /// A new stream for a call of `who` (its session); `None` when too many are buffered (the
    /// call is then answered without ids, as before this existed).
    pub fn open(&self, who: Holder<'_>) -> Option<Arc<CallStream>> {
        if self.streams.len() >= MAX_STREAMS {
            return None;
        }
        let id = hex::encode(rand::random::<[u8; 8]>());
        let stream = Arc::new(CallStream {
            id: id.clone(),
            session_id: who.session_id.unwrap_or_default().to_string(),
            buffered: Mutex::new(Buffered::default()),
            changed: Notify::new(),
            charge: self.held.charge(who.org_id, who.key_id),
        });
        self.streams.insert(id, stream.clone());
        Some(stream)
    }

    /// The call of `cs` answered (or failed): no more events. Its buffer is kept for resumption
    /// for `bounds.keep_after_end`, unless its key or organisation, without it, already holds its
    /// bound: then it is forgotten at once (a client reading it still reads it to its end, and
    /// its bytes are given back when that client is done), so the answers of calls running
    /// when a tenant crosses its bound do not stay in memory after they end.
    pub fn finish(&self, cs: &CallStream, bounds: &ResumableBounds) {
        if !cs.end() {
            return;
        }
        let own = cs.held();
        let (key, org) = (cs.charge.key.load(Ordering::Relaxed), cs.charge.org.load(Ordering::Relaxed));
        if key.saturating_sub(own) >= bounds.bytes_per_key || org.saturating_sub(own) >= bounds.bytes_per_org {
            self.streams.remove(&cs.id);
        }
    }

    /// The stream a `Last-Event-ID` names, and the sequence number it names.
    pub fn find(&self, last_event_id: &str) -> Option<(Arc<CallStream>, u64)> {
        let (id, seq) = last_event_id.trim().rsplit_once('.')?;
        let seq = seq.parse().ok()?;
        let stream = self.streams.get(id)?.clone();
        Some((stream, seq))
    }

    /// Forgets streams that ended more than `keep_after_end` ago (run by the flusher every
    /// second), and the counts of keys and organisations that hold nothing.
    pub fn sweep(&self, keep_after_end: Duration) {
        let now = Instant::now();
        self.streams.retain(|_, s| s.buffered.lock().ended.is_none_or(|t| now.duration_since(t) < keep_after_end));
        self.held.sweep();
    }

    /// Bytes all resumable buffers hold now.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held.all.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

/// The bytes resumable buffers hold, per organisation and per key within it, and in all. A
/// buffer adds to its counters as events are kept and subtracts what it drops ([`Charge`]), so
/// the hot path (an event pushed) is three atomic additions, and no map is locked for it.
#[derive(Default)]
struct HeldBytes {
    orgs: FastMap<String, OrgBytes>,
    all: Arc<AtomicUsize>,
}

#[derive(Default)]
struct OrgBytes {
    held: Arc<AtomicUsize>,
    keys: HashMap<String, Arc<AtomicUsize>>,
}

impl HeldBytes {
    /// The counters a new buffer of `key_id` adds to.
    fn charge(&self, org_id: &str, key_id: &str) -> Charge {
        let mut org = self.orgs.entry(org_id.to_owned()).or_default();
        let key = Arc::clone(org.keys.entry(key_id.to_owned()).or_default());
        Charge { key, org: Arc::clone(&org.held), all: Arc::clone(&self.all) }
    }

    /// Bytes held now by the key, and by its organisation.
    fn of(&self, org_id: &str, key_id: &str) -> (usize, usize) {
        let Some(org) = self.orgs.get(org_id) else { return (0, 0) };
        let key = org.keys.get(key_id).map_or(0, |k| k.load(Ordering::Relaxed));
        (key, org.held.load(Ordering::Relaxed))
    }

    /// Drops the counters no buffer holds (a buffer holds its key's and organisation's).
    fn sweep(&self) {
        self.orgs.retain(|_, org| {
            org.keys.retain(|_, k| Arc::strong_count(k) > 1);
            Arc::strong_count(&org.held) > 1
        });
    }
}

/// A buffer's share of [`HeldBytes`]: its key's, its organisation's and the total counter.
struct Charge {
    key: Arc<AtomicUsize>,
    org: Arc<AtomicUsize>,
    all: Arc<AtomicUsize>,
}

impl Charge {
    fn add(&self, n: usize) {
        for c in [&self.key, &self.org, &self.all] {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn sub(&self, n: usize) {
        for c in [&self.key, &self.org, &self.all] {
            c.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// A client reading a call's resumable stream: the events after `seen`, then the rest live, until
/// the stream ends. A stream taken up again with `Last-Event-ID` (a GET, holding its place under
/// `mcp.streams`), or the answer of a call that went on in a task of its own while its app was
/// slow (`dispatch/answer.rs`: the call's own POST, which its `concurrent` slot bounds).
pub(crate) struct Following {
    pub cs: Arc<CallStream>,
    pub seen: u64,
    pub _slot: Option<StreamSlot>,
}

impl EventSource for Following {
    async fn run<S: EventSink>(mut self, out: &mut S) {
        loop {
            let Some((mut events, ended)) = self.cs.after(self.seen) else {
                // Fell out of the buffer while the client was away: end; the client calls again.
                out.end(None).await.ok();
                return;
            };
            // The last event of an ended stream (the response) leaves with the end of the
            // answer, in one write and one wake-up of the client instead of two.
            let last = if ended { events.pop() } else { None };
            for (seq, event) in events {
                if out.send(event).await.is_err() {
                    return;
                }
                self.seen = seq;
            }
            if ended {
                out.end(last.map(|(_, event)| event)).await.ok();
                return;
            }
            tokio::select! {
                _ = self.cs.changed(self.seen) => {}
                _ = tokio::time::sleep(KEEPALIVE) => {
                    if out.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        return;
                    }
                }
                gone = out.client_gone() => if gone.is_err() { return },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESS: Holder<'static> = Holder { org_id: "org_a", key_id: "key_1", session_id: Some("sess") };

    const BOUNDS: ResumableBounds =
        ResumableBounds { bytes_per_key: 1000, bytes_per_org: 1500, keep_after_end: Duration::from_secs(60) };

    fn of(org_id: &'static str, key_id: &'static str) -> Holder<'static> {
        Holder { org_id, key_id, session_id: Some("sess") }
    }

    #[test]
    fn events_carry_ids_and_are_replayed_after_the_last_one_seen() {
        let streams = CallStreams::default();
        let s = streams.open(SESS).unwrap();
        let priming = String::from_utf8(s.priming().to_vec()).unwrap();
        assert!(priming.starts_with("id: ") && priming.contains("\nretry: 1000\ndata: \n\n"), "{priming}");
        let first = String::from_utf8(s.push(b"{\"a\":1}").to_vec()).unwrap();
        let id = first.lines().next().unwrap().strip_prefix("id: ").unwrap().to_string();
        assert!(id.ends_with(".1"), "{id}");
        s.push(b"{\"b\":2}");
        streams.finish(&s, &BOUNDS);
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
        let s = streams.open(SESS).unwrap();
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
        let s = streams.open(SESS).unwrap();
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

    #[test]
    fn buffered_bytes_are_counted_per_key_and_organisation_until_the_buffer_drops() {
        let streams = CallStreams::default();
        let a = streams.open(of("org_a", "key_1")).unwrap();
        let event = a.push(&[b'x'; 300]).len();
        assert!(event > 300, "the event's id and framing are counted with its data");
        assert_eq!(streams.held.of("org_a", "key_1"), (event, event));
        let b = streams.open(of("org_a", "key_2")).unwrap();
        b.push(&[b'y'; 300]);
        assert_eq!(streams.held.of("org_a", "key_2"), (event, 2 * event));
        assert_eq!(streams.held_bytes(), 2 * event);
        // What the per-stream bound drops is given back.
        for _ in 0..MAX_EVENTS {
            a.push(b"{}");
        }
        let (kept, _) = a.after(1).unwrap();
        assert_eq!(kept.len(), MAX_EVENTS, "the oldest event was dropped");
        assert_eq!(a.held(), kept.iter().map(|(_, e)| e.len()).sum::<usize>());
        assert_eq!(streams.held.of("org_a", "key_1").0, a.held());
        // An ended stream past its time is swept, and its bytes are given back when it drops.
        streams.finish(&a, &BOUNDS);
        streams.finish(&b, &BOUNDS);
        streams.sweep(Duration::ZERO);
        assert!(streams.is_empty());
        assert_eq!(streams.held.of("org_a", "key_1").0, a.held(), "a client still reading it holds it");
        drop((a, b));
        assert_eq!((streams.held_bytes(), streams.held.of("org_a", "key_1")), (0, (0, 0)));
        streams.sweep(Duration::ZERO);
        assert!(streams.held.orgs.is_empty(), "nothing is left of the counters");
    }

    #[test]
    fn a_key_at_its_bound_is_refused_and_a_buffer_ended_past_it_is_not_kept() {
        let streams = CallStreams::default();
        assert!(streams.refusal(of("org_a", "key_1"), &BOUNDS).is_ok());
        // Two calls of one key run at once; the first ends with its key under the bound without
        // it, and is kept, though it alone passes the bound...
        let (first, second) =
            (streams.open(of("org_a", "key_1")).unwrap(), streams.open(of("org_a", "key_1")).unwrap());
        first.push(&[b'x'; 1100]);
        second.push(&[b'x'; 300]);
        streams.finish(&first, &BOUNDS);
        assert!(streams.find(&format!("{}.1", first.id)).is_some(), "the first answer stays resumable");
        // ...the second ends with its key at the bound without it: not kept after its end.
        streams.finish(&second, &BOUNDS);
        assert!(streams.find(&format!("{}.1", second.id)).is_none(), "the second answer is not kept");
        assert_eq!(
            second.after(0).map(|(events, ended)| (events.len(), ended)),
            Some((1, true)),
            "its reader still reads it"
        );
        drop(second);
        // The key holds its bound: its next call is refused, naming the key; another key is not.
        let refused = streams.refusal(of("org_a", "key_1"), &BOUNDS).unwrap_err();
        assert_eq!(refused, Refused::Resumable { scope: Scope::Key, limit: 1000, keep_secs: 60 });
        assert!(streams.refusal(of("org_a", "key_2"), &BOUNDS).is_ok());
        // The organisation's bound: another key under its own, the two together over it.
        let other = streams.open(of("org_a", "key_2")).unwrap();
        other.push(&[b'y'; 500]);
        let refused = streams.refusal(of("org_a", "key_3"), &BOUNDS).unwrap_err();
        assert_eq!(refused.scope(), Scope::Organization);
        assert!(streams.refusal(of("org_b", "key_9"), &BOUNDS).is_ok(), "another organisation");
        // Once the buffers expire, the key calls again.
        streams.finish(&other, &BOUNDS);
        drop((first, other));
        streams.sweep(Duration::ZERO);
        assert!(streams.refusal(of("org_a", "key_1"), &BOUNDS).is_ok());
        assert_eq!(streams.held_bytes(), 0);
    }
}
