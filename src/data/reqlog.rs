//! The request log's write side: calls are recorded into a memory buffer (one short lock, no
//! I/O) and written to the store in batches by the background flusher, so logging never slows a
//! call.
//!
//! An entry is written as JSON once, while its call runs ([`EntryWriter`]): what was asked (the
//! arguments as the client sent them) before the call goes upstream, what came back after. The
//! buffer then holds one string per call, not a tree of values: no deep copy of the arguments or
//! the result, nothing to serialise at flush time, and two allocations to free (on the log
//! writer's thread, where every allocation of a tree was a cross-thread `free` contending for the
//! workers' malloc arenas). The writer runs at idle CPU priority ([`IdleWriter`]), and folds each
//! slice into the rollups ([`crate::observe::rollup`]) that analytics and metrics read.

use crate::data::model::Gateway;
use crate::data::store::{LogRecord, Store};
use crate::mcp::jsonrpc::{put, RawJson};
use parking_lot::Mutex;
use std::sync::Arc;

/// Most entries kept waiting when the store is unavailable; older ones are dropped (and counted).
const MAX_PENDING: usize = 100_000;

/// Entries written per store transaction, with a pause between slices. A whole flush at once
/// (thousands of entries serialised, written and freed in one go) is a burst of several
/// milliseconds of CPU, which on a small machine holds the calls in flight up for a scheduler
/// slice: it was toolgate's whole p99 (3.4 ms; 1.3-1.5 ms in slices, 0.65 ms at idle priority,
/// BENCHMARKS.md). Slices also bound how long a flush someone waits for holds the store.
const FLUSH_SLICE: usize = 256;
const FLUSH_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// Largest serialised request params or response data kept in one entry; a larger value is kept
/// as `{"truncated": true, "size": <bytes>, "preview": "<its first bytes>"}`.
const LOG_FIELD_CAP: usize = 16 * 1024;

/// What an upstream call came back with, as the entry's `response.data` shows it.
pub enum Answer<'a> {
    /// The JSON-RPC result (capped), as the app sent it.
    Result(&'a RawJson),
    /// A JSON-RPC error: its code and message, and what the operator is told beyond the
    /// client's message (an app's failure in full), if anything.
    Error { code: i64, message: &'a str, detail: Option<&'a str> },
}

/// One call's entry (spec "Log entry" without `id` and `timestamp`, which the store assigns and
/// keeps in columns), written as JSON in two steps around the upstream call.
pub struct EntryWriter {
    gateway: Arc<Gateway>,
    app: String,
    function_at: std::ops::Range<usize>,
    json: Vec<u8>,
}

impl EntryWriter {
    /// Starts the entry with what was asked; `arguments` is the JSON text the client sent.
    pub fn begin(gateway: &Arc<Gateway>, app: &str, function: &str, arguments: &str) -> EntryWriter {
        let mut json = Vec::with_capacity(256);
        json.extend_from_slice(b"{\"gateway_id\":");
        put(&mut json, gateway.id.as_str());
        json.extend_from_slice(b",\"app\":");
        put(&mut json, app);
        json.extend_from_slice(b",\"function\":");
        let start = json.len();
        put(&mut json, function);
        let function_at = start..json.len();
        json.extend_from_slice(b",\"request\":{\"params\":");
        put_raw_capped(&mut json, arguments);
        json.push(b'}');
        EntryWriter { gateway: gateway.clone(), app: app.to_string(), function_at, json }
    }

    /// Puts the request's id in the entry (`request_id`, as the answer's `X-Request-Id` and an
    /// app failure's `data.request_id` carry it), so that what a client quotes finds the entry.
    pub fn request_id(&mut self, id: &str) {
        self.json.extend_from_slice(b",\"request_id\":");
        put(&mut self.json, id);
    }

    /// Puts who called in the entry: the credential's id (`key_id`: a key's, `web:<session>` for
    /// a call from the console's playground, `oauth:<grant>`) and its user (`user_id`), so that
    /// a call is found by its caller.
    pub fn caller(&mut self, key_id: &str, user_id: &str) {
        self.json.extend_from_slice(b",\"key_id\":");
        put(&mut self.json, key_id);
        self.json.extend_from_slice(b",\"user_id\":");
        put(&mut self.json, user_id);
    }

    /// Marks the entry with what the content checks found in the answer (`content`: where, the
    /// classes of hidden text and what was done, the kinds redacted), never the text itself.
    pub fn content(&mut self, marks: &serde_json::Value) {
        self.json.extend_from_slice(b",\"content\":");
        put(&mut self.json, marks);
    }

    /// Marks the entry with what the gateway's external guards decided (`guards`: each guard's
    /// id, phase, mode and action, a deny's reason, a failure's cause), never what they were sent.
    pub fn guards(&mut self, decisions: &serde_json::Value) {
        self.json.extend_from_slice(b",\"guards\":");
        put(&mut self.json, decisions);
    }

    /// Ends the entry with the outcome. `error` is the entry's `status` (a JSON-RPC error, or a
    /// tool result with `isError`); `status` is the HTTP-like `response.status`.
    pub fn finish(mut self, elapsed: std::time::Duration, error: bool, status: u16, answer: Answer<'_>) -> LogRecord {
        let json = &mut self.json;
        json.extend_from_slice(b",\"duration\":");
        put(json, &(elapsed.as_millis() as u64));
        json.extend_from_slice(if error { b",\"status\":\"error\"" } else { b",\"status\":\"success\"" });
        json.extend_from_slice(b",\"response\":{\"status\":");
        put(json, &status);
        json.extend_from_slice(b",\"data\":");
        match answer {
            Answer::Result(raw) => put_raw_capped(json, raw.get()),
            Answer::Error { code, message, detail } => {
                json.extend_from_slice(b"{\"code\":");
                put(json, &code);
                json.extend_from_slice(b",\"message\":");
                put(json, message);
                if let Some(detail) = detail {
                    json.extend_from_slice(b",\"detail\":");
                    put(json, detail);
                }
                json.push(b'}');
            }
        }
        json.extend_from_slice(b"}}");
        // Only UTF-8 went in: serde_json's output and ASCII literals.
        let body = String::from_utf8(std::mem::take(json)).unwrap_or_default();
        LogRecord {
            ts_ms: crate::base::time::now_ms(),
            gateway: self.gateway,
            app: self.app,
            error,
            duration_us: elapsed.as_micros() as u64,
            function_at: self.function_at,
            body,
        }
    }
}

/// Appends JSON text: copied when small, else kept as a preview with its size.
fn put_raw_capped(out: &mut Vec<u8>, json: &str) {
    if json.len() <= LOG_FIELD_CAP {
        out.extend_from_slice(json.as_bytes());
    } else {
        put_truncated(out, json.len(), &json.as_bytes()[..LOG_FIELD_CAP]);
    }
}

/// `{"truncated":true,"size":SIZE,"preview":"..."}`: `preview` (the value's first bytes) is cut
/// back to the last whole character.
fn put_truncated(out: &mut Vec<u8>, size: usize, preview: &[u8]) {
    let preview = match std::str::from_utf8(preview) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&preview[..e.valid_up_to()]).unwrap_or_default(),
    };
    out.extend_from_slice(b"{\"truncated\":true,\"size\":");
    put(out, &size);
    out.extend_from_slice(b",\"preview\":");
    put(out, preview);
    out.push(b'}');
}

/// How a flush is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// The periodic flush: on [`IdleWriter`]'s idle-priority thread while the log keeps up.
    Background,
    /// Someone waits for it (a read of today's metrics, shutdown): at normal priority.
    Now,
}

/// A periodic flush with this many entries waiting is written at normal priority: the log has
/// fallen behind (a machine with no idle CPU), and idle priority would let it fall further.
const CATCH_UP: usize = 20_000;

pub struct RequestLog {
    store: Arc<dyn Store>,
    pending: Mutex<Vec<LogRecord>>,
    /// Held through a flush: an urgent flush (a read of the log) that finds nothing pending
    /// still waits for a background flush already writing, so that it reads every entry
    /// recorded before it (a slow call's entry, taken by the periodic flush just before, was
    /// missing from a `/v1/logs` read made after its answer).
    flushing: tokio::sync::Mutex<()>,
    idle: IdleWriter,
}

/// A one-worker runtime whose threads, its worker and the blocking threads the store writes on,
/// run with the `SCHED_IDLE` policy: the kernel prefers every other thread to them and takes
/// the CPU back when a call's thread wakes. Not always at once: `perf sched` (2026-11-27, kernel
/// 6.18) showed the scheduler run the writer for 2 ms while a worker waited on the same CPU, so
/// the writer's work itself has to stay small (the store's compressed slices, BENCHMARKS.md).
///
/// Why: a slice of log rows is about a millisecond of SQLite work. At normal priority a
/// scheduler that lets the running thread finish its slice kept a woken proxy thread (or the
/// load tool, or the app) waiting for it while the other core sat idle; that was toolgate's p99
/// (1.0 ms against the plain Pingora hop's 0.3 ms; `perf sched` showed the waits, and `nice 19`
/// did not help). The policy is set once per thread and never lifted: an unprivileged process
/// may not leave `SCHED_IDLE`, which is also why this is a runtime of its own rather than a
/// priority switched around each write.
struct IdleWriter(Option<tokio::runtime::Runtime>);

impl IdleWriter {
    fn new() -> IdleWriter {
        let built = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(2)
            .thread_name("toolgate-log")
            .on_thread_start(|| {
                use thread_priority::{
                    set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadPriority,
                    ThreadSchedulePolicy,
                };
                let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
                if let Err(e) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
                    tracing::warn!(error = ?e, "cannot give the request-log writer idle priority");
                }
            })
            .enable_all()
            .build();
        match built {
            Ok(rt) => IdleWriter(Some(rt)),
            Err(e) => {
                tracing::warn!(error = %e, "no idle-priority request-log writer; writing at normal priority");
                IdleWriter(None)
            }
        }
    }
}

impl Drop for IdleWriter {
    fn drop(&mut self) {
        // A runtime may not be dropped (which waits for its threads) inside another one.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl RequestLog {
    pub fn new(store: Arc<dyn Store>) -> RequestLog {
        RequestLog {
            store,
            pending: Mutex::new(Vec::new()),
            flushing: tokio::sync::Mutex::new(()),
            idle: IdleWriter::new(),
        }
    }

    pub fn record(&self, entry: LogRecord) {
        let mut p = self.pending.lock();
        if p.len() >= MAX_PENDING {
            // A tenth at a time, so that a full buffer costs one shift per 10,000 calls.
            let dropped = MAX_PENDING / 10;
            p.drain(..dropped);
            crate::observe::metrics::request_log_dropped(dropped);
            tracing::warn!(dropped, "request log buffer full; dropping the oldest entries");
        }
        p.push(entry);
    }

    /// Writes what is pending, [`FLUSH_SLICE`] entries per transaction; on failure the entries not
    /// yet written stay, in order, for the next try.
    pub async fn flush(&self, urgency: Urgency) {
        let _one_at_a_time = self.flushing.lock().await;
        let batch = std::mem::take(&mut *self.pending.lock());
        crate::observe::metrics::request_log_pending(batch.len());
        let idle = match (urgency, &self.idle.0) {
            (Urgency::Background, Some(rt)) if batch.len() < CATCH_UP => Some(rt.handle()),
            _ => None,
        };
        let mut entries = batch.into_iter();
        loop {
            // Each entry is moved once, into its slice.
            let part: Vec<LogRecord> = entries.by_ref().take(FLUSH_SLICE).collect();
            if part.is_empty() {
                return;
            }
            // Shared with the store's writer, not copied; once written, the entries are freed
            // where they were written (on the idle-priority thread for a periodic flush).
            let part = Arc::new(part);
            let count = part.len();
            let store = self.store.clone();
            let write = async move {
                // Folded where the slice is written: on the idle-priority thread, not the call's.
                let rollups = crate::observe::rollup::of(&part);
                match store.append_logs(part.clone(), rollups).await {
                    Ok(()) => Ok(()),
                    Err(e) => Err((e, part)),
                }
            };
            let written = match idle {
                Some(rt) => rt.spawn(write).await.unwrap_or_else(|e| {
                    // Only a panic in the store, or the process stopping, ends the task early.
                    tracing::error!(error = %e, entries = count, "request-log writer failed; entries lost");
                    crate::observe::metrics::request_log_dropped(count);
                    Ok(())
                }),
                None => write.await,
            };
            if let Err((e, part)) = written {
                tracing::warn!(error = %e, "cannot write the request log; will retry");
                let mut unwritten = Arc::try_unwrap(part).unwrap_or_else(|shared| (*shared).clone());
                unwritten.extend(entries);
                let mut p = self.pending.lock();
                let newer = std::mem::take(&mut *p);
                *p = unwritten;
                p.extend(newer);
                return;
            }
            if entries.len() > 0 {
                tokio::time::sleep(FLUSH_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::store::EmbeddedStore;
    use crate::data::store::LogQuery;
    use serde_json::json;
    use serde_json::Value;
    use std::time::Duration;

    /// Entries written, and the calls the hour rollups count.
    async fn written(store: &dyn Store) -> (u64, u64) {
        let q = LogQuery { org_id: "org_1".into(), ..Default::default() };
        let entries = store.log_page(q, 0, 1).await.unwrap().0;
        let q = crate::data::store::RollupQuery {
            org_id: "org_1".into(),
            tier_ms: crate::observe::rollup::HOUR,
            ..Default::default()
        };
        let counted = store.rollups(q).await.unwrap().iter().map(|r| r.requests).sum();
        (entries, counted)
    }

    fn gateway() -> Arc<Gateway> {
        Arc::new(Gateway::for_tests("gw_1", "org_1"))
    }

    /// Entry `i`: every third one an error; `ts_ms` says which entry it is.
    fn entry(i: usize) -> LogRecord {
        let w = EntryWriter::begin(&gateway(), "time", "get_current_time", &json!({ "i": i }).to_string());
        let mut e = w.finish(
            Duration::from_millis(2),
            i.is_multiple_of(3),
            200,
            Answer::Result(&RawJson::from_value(&json!({ "content": [] }))),
        );
        e.ts_ms = 1_000 + i as i64;
        e
    }

    fn body(e: &LogRecord) -> Value {
        serde_json::from_str(&e.body).expect("the entry is JSON")
    }

    #[test]
    fn an_entry_has_every_field_of_the_spec_but_those_the_store_assigns() {
        let args = json!({ "format": "YYYY", "note": "quote \" and ünïcode" });
        let w = EntryWriter::begin(&gateway(), "time", "get_current_time", &args.to_string());
        let result = json!({ "content": [{ "type": "text", "text": "2026" }], "isError": false });
        let e = w.finish(Duration::from_micros(7_400), false, 200, Answer::Result(&RawJson::from_value(&result)));
        assert!(!e.error);
        assert_eq!((e.gateway.id.as_str(), e.app.as_str(), e.duration_us), ("gw_1", "time", 7_400));
        assert_eq!(e.function(), "get_current_time");
        assert!((crate::base::time::now_ms() - e.ts_ms).abs() < 60_000);
        assert_eq!(
            body(&e),
            json!({
                "gateway_id": "gw_1", "app": "time", "function": "get_current_time", "duration": 7,
                "status": "success", "request": { "params": args }, "response": { "status": 200, "data": result }
            })
        );
        let w = EntryWriter::begin(&gateway(), "time", "get_current_time", "null");
        let e = w.finish(
            Duration::from_millis(30_001),
            true,
            504,
            Answer::Error { code: -32003, message: "App `time` failed: timed out", detail: None },
        );
        assert!(e.error);
        let b = body(&e);
        assert_eq!(b["status"], "error");
        assert_eq!(b["request"]["params"], Value::Null);
        assert_eq!(
            b["response"],
            json!({ "status": 504, "data": { "code": -32003, "message": "App `time` failed: timed out" } })
        );
    }

    #[test]
    fn a_value_over_the_cap_is_kept_as_a_preview_with_its_size() {
        // Multi-byte characters, so that the cut has to find a character boundary.
        let big = json!({ "text": "é".repeat(LOG_FIELD_CAP) });
        let size = serde_json::to_string(&big).unwrap().len();
        let at_cap = json!("x".repeat(LOG_FIELD_CAP - 2)); // exactly the cap with its quotes
        let w = EntryWriter::begin(&gateway(), "time", "f", &big.to_string());
        let e = w.finish(Duration::from_millis(1), false, 200, Answer::Result(&RawJson::from_value(&at_cap)));
        let b = body(&e);
        let params = &b["request"]["params"];
        assert_eq!(params["truncated"], true, "{params}");
        assert_eq!(params["size"], size);
        let preview = params["preview"].as_str().unwrap();
        assert!(preview.len() <= LOG_FIELD_CAP && preview.len() > LOG_FIELD_CAP - 4, "{}", preview.len());
        assert!(serde_json::to_string(&big).unwrap().starts_with(preview));
        assert_eq!(b["response"]["data"], at_cap, "a value of exactly the cap is kept whole");
        assert_eq!(b["function"], "f", "the fields after a truncated value are still there");
        // A relayed result over the cap (kept as text, so measured as text).
        let w = EntryWriter::begin(&gateway(), "time", "f", "null");
        let e = w.finish(Duration::from_millis(1), false, 200, Answer::Result(&RawJson::from_value(&big)));
        let data = &body(&e)["response"]["data"];
        assert_eq!(data["truncated"], true, "{data}");
        assert_eq!(data["size"], size);
        let preview = data["preview"].as_str().unwrap();
        assert!(preview.len() <= LOG_FIELD_CAP && preview.len() > LOG_FIELD_CAP - 4);
        assert!(serde_json::to_string(&big).unwrap().starts_with(preview));
    }

    #[tokio::test]
    async fn a_flush_writes_every_entry_in_slices() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let log = RequestLog::new(store.clone());
        let n = FLUSH_SLICE * 2 + 88; // three slices, the last one partial
        for i in 0..n {
            log.record(entry(i));
        }
        log.flush(Urgency::Background).await;
        assert!(log.pending.lock().is_empty());
        assert_eq!(written(&*store).await, (n as u64, n as u64), "every entry, and its rollups");
        let q = crate::data::store::RollupQuery {
            org_id: "org_1".into(),
            gateway_id: Some("gw_1".into()),
            app: Some("time".into()),
            tier_ms: crate::observe::rollup::MINUTE,
            histograms: true,
            ..Default::default()
        };
        let minutes = store.rollups(q).await.unwrap();
        assert_eq!(minutes.len(), 1, "every entry is in the minute after 1970: {minutes:?}");
        let m = &minutes[0];
        assert_eq!((m.function.as_str(), m.requests, m.errors), ("get_current_time", n as u64, n.div_ceil(3) as u64));
        assert_eq!((m.total_us, m.histogram.count()), (2_000 * n as u64, n as u64));
        // A second flush with nothing pending writes nothing and does not fail.
        log.flush(Urgency::Now).await;
        assert_eq!(written(&*store).await, (n as u64, n as u64));
    }

    /// Fails the `fail_at`-th `append_logs` call (counting from 0); everything else goes to a real
    /// embedded store.
    struct FlakyStore {
        inner: EmbeddedStore,
        calls: std::sync::atomic::AtomicUsize,
        fail_at: usize,
        /// Per `append_logs` call: whether it ran on a `SCHED_IDLE` thread.
        idle: Mutex<Vec<bool>>,
    }

    impl FlakyStore {
        fn new(dir: &std::path::Path, fail_at: usize) -> FlakyStore {
            let inner = EmbeddedStore::open(dir).unwrap();
            FlakyStore { inner, calls: Default::default(), fail_at, idle: Default::default() }
        }
    }

    #[async_trait::async_trait]
    impl Store for FlakyStore {
        async fn put(
            &self,
            kind: crate::data::store::Kind,
            partition: &str,
            id: &str,
            json: String,
        ) -> Result<(), crate::data::store::StoreError> {
            self.inner.put(kind, partition, id, json).await
        }
        async fn put_many(
            &self,
            kind: crate::data::store::Kind,
            items: Vec<crate::data::store::Stored>,
        ) -> Result<(), crate::data::store::StoreError> {
            self.inner.put_many(kind, items).await
        }
        async fn put_expiring(
            &self,
            kind: crate::data::store::Kind,
            partition: &str,
            id: &str,
            json: String,
            expires_at_ms: i64,
        ) -> Result<(), crate::data::store::StoreError> {
            self.inner.put_expiring(kind, partition, id, json, expires_at_ms).await
        }
        async fn put_if_absent(
            &self,
            kind: crate::data::store::Kind,
            partition: &str,
            id: &str,
            json: String,
        ) -> Result<bool, crate::data::store::StoreError> {
            self.inner.put_if_absent(kind, partition, id, json).await
        }
        async fn get(
            &self,
            kind: crate::data::store::Kind,
            id: &str,
        ) -> Result<Option<String>, crate::data::store::StoreError> {
            self.inner.get(kind, id).await
        }
        async fn take(
            &self,
            kind: crate::data::store::Kind,
            id: &str,
        ) -> Result<Option<String>, crate::data::store::StoreError> {
            self.inner.take(kind, id).await
        }
        async fn sweep_expired(&self) -> Result<u64, crate::data::store::StoreError> {
            self.inner.sweep_expired().await
        }
        async fn delete(
            &self,
            kind: crate::data::store::Kind,
            id: &str,
        ) -> Result<bool, crate::data::store::StoreError> {
            self.inner.delete(kind, id).await
        }
        async fn load_all(
            &self,
            kind: crate::data::store::Kind,
        ) -> Result<Vec<(String, String)>, crate::data::store::StoreError> {
            self.inner.load_all(kind).await
        }
        async fn load_partition(
            &self,
            kind: crate::data::store::Kind,
            partition: &str,
        ) -> Result<Vec<(String, String)>, crate::data::store::StoreError> {
            self.inner.load_partition(kind, partition).await
        }
        async fn add_rate_usage(
            &self,
            minutes: Arc<Vec<toolgate_filters::rate_limit::UsageMinute>>,
        ) -> Result<(), crate::data::store::StoreError> {
            self.inner.add_rate_usage(minutes).await
        }
        async fn rate_usage(
            &self,
            key_id: String,
            since_unix: i64,
        ) -> Result<Vec<toolgate_filters::rate_limit::UsageMinute>, crate::data::store::StoreError> {
            self.inner.rate_usage(key_id, since_unix).await
        }
        async fn prune_rate_usage(&self, before_unix: i64) -> Result<u64, crate::data::store::StoreError> {
            self.inner.prune_rate_usage(before_unix).await
        }
        async fn rollups(
            &self,
            q: crate::data::store::RollupQuery,
        ) -> Result<Vec<crate::observe::rollup::Rollup>, crate::data::store::StoreError> {
            self.inner.rollups(q).await
        }
        async fn prune_rollups(&self, tier_ms: i64, before_ms: i64) -> Result<u64, crate::data::store::StoreError> {
            self.inner.prune_rollups(tier_ms, before_ms).await
        }
        async fn prune_logs(&self, before_ms: i64, max_rows: u64) -> Result<u64, crate::data::store::StoreError> {
            self.inner.prune_logs(before_ms, max_rows).await
        }
        async fn log_page(
            &self,
            q: crate::data::store::LogQuery,
            offset: u64,
            limit: u32,
        ) -> Result<(u64, Vec<crate::data::store::LogRow>), crate::data::store::StoreError> {
            self.inner.log_page(q, offset, limit).await
        }
        async fn append_logs(
            &self,
            entries: Arc<Vec<LogRecord>>,
            rollups: Vec<crate::observe::rollup::Rollup>,
        ) -> Result<(), crate::data::store::StoreError> {
            use thread_priority::{thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy};
            let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
            self.idle.lock().push(thread_schedule_policy().is_ok_and(|p| p == idle));
            if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == self.fail_at {
                return Err(crate::data::store::StoreError::Backend("disk full".into()));
            }
            self.inner.append_logs(entries, rollups).await
        }
        async fn ping(&self) -> Result<(), crate::data::store::StoreError> {
            self.inner.ping().await
        }
    }

    #[tokio::test]
    async fn a_failed_slice_keeps_the_unwritten_entries_in_order_for_the_next_flush() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FlakyStore::new(dir.path(), 1));
        let log = RequestLog::new(store.clone());
        let n = FLUSH_SLICE * 2 + 88;
        for i in 0..n {
            log.record(entry(i));
        }
        log.flush(Urgency::Now).await; // the first slice is written, the second fails
        assert_eq!(written(&*store).await, (FLUSH_SLICE as u64, FLUSH_SLICE as u64));
        {
            let pending = log.pending.lock();
            assert_eq!(pending.len(), n - FLUSH_SLICE);
            assert_eq!(pending[0].ts_ms, entry(FLUSH_SLICE).ts_ms, "unwritten entries keep their order");
            assert_eq!(pending[pending.len() - 1].ts_ms, entry(n - 1).ts_ms);
        }
        log.record(entry(n)); // recorded while the store was failing: kept after the older ones
        log.flush(Urgency::Now).await;
        assert_eq!(written(&*store).await, (n as u64 + 1, n as u64 + 1));
        assert!(log.pending.lock().is_empty());
    }

    #[tokio::test]
    async fn periodic_flushes_write_at_idle_priority_unless_the_log_is_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FlakyStore::new(dir.path(), usize::MAX));
        let log = RequestLog::new(store.clone());
        log.record(entry(0));
        log.flush(Urgency::Background).await;
        log.record(entry(1));
        log.flush(Urgency::Now).await;
        for i in 0..CATCH_UP {
            log.record(entry(2 + i));
        }
        log.flush(Urgency::Background).await;
        let idle = store.idle.lock().clone();
        assert_eq!(idle.len(), 2 + CATCH_UP.div_ceil(FLUSH_SLICE));
        assert!(idle[0], "the periodic flush runs at idle priority");
        assert!(!idle[1], "a flush someone waits for does not");
        assert!(idle[2..].iter().all(|i| !i), "nor one that has to catch up");
        assert_eq!(written(&*store).await.0, CATCH_UP as u64 + 2);
        // The caller's own thread is left as it was.
        let normal = thread_priority::ThreadSchedulePolicy::Normal(thread_priority::NormalThreadSchedulePolicy::Other);
        assert_eq!(thread_priority::thread_schedule_policy().unwrap(), normal);
    }
}
