//! The request log's write side: calls are recorded into a memory buffer (one short lock, no
//! I/O) and written to the store in batches by the background flusher, so logging never slows a
//! call.

use crate::store::{LogRecord, Store};
use parking_lot::Mutex;
use std::sync::Arc;

/// Most entries kept waiting when the store is unavailable; older ones are dropped (and counted).
const MAX_PENDING: usize = 100_000;

/// Entries written per store transaction, with a pause between slices. A whole flush at once
/// (thousands of entries serialised, written and freed in one go) is a burst of several
/// milliseconds of CPU, which on a small machine holds the calls in flight up for a scheduler
/// slice: it was toolgate's whole p99 (3.4 ms; 1.3-1.5 ms in slices, BENCHMARKS.md).
const FLUSH_SLICE: usize = 256;
const FLUSH_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

pub struct RequestLog {
    store: Arc<dyn Store>,
    pending: Mutex<Vec<LogRecord>>,
}

impl RequestLog {
    pub fn new(store: Arc<dyn Store>) -> RequestLog {
        RequestLog { store, pending: Mutex::new(Vec::new()) }
    }

    pub fn record(&self, entry: LogRecord) {
        let mut p = self.pending.lock();
        if p.len() >= MAX_PENDING {
            // A tenth at a time, so that a full buffer costs one shift per 10,000 calls.
            let dropped = MAX_PENDING / 10;
            p.drain(..dropped);
            crate::metrics::request_log_dropped(dropped);
            tracing::warn!(dropped, "request log buffer full; dropping the oldest entries");
        }
        p.push(entry);
    }

    /// Writes what is pending, [`FLUSH_SLICE`] entries per transaction; on failure the entries not
    /// yet written stay, in order, for the next try.
    pub async fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock());
        crate::metrics::request_log_pending(batch.len());
        let mut entries = batch.into_iter();
        loop {
            // Each entry is moved once, into its slice.
            let part: Vec<LogRecord> = entries.by_ref().take(FLUSH_SLICE).collect();
            if part.is_empty() {
                return;
            }
            // Shared with the store's writer, not copied.
            let part = Arc::new(part);
            if let Err(e) = self.store.append_logs(part.clone()).await {
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
    use crate::store::EmbeddedStore;
    use crate::store::LogQuery;

    fn entry(i: usize) -> LogRecord {
        LogRecord {
            id: format!("log_{i:06}"),
            ts_ms: 1_000 + i as i64,
            org_id: "org_1".into(),
            gateway_id: "gw_1".into(),
            app: "time".into(),
            function: "get_current_time".into(),
            duration: 2,
            status: if i % 3 == 0 { "error" } else { "success" }.into(),
            request: serde_json::json!({ "params": { "i": i } }),
            response: serde_json::json!({ "status": 200 }),
        }
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
        log.flush().await;
        assert!(log.pending.lock().is_empty());
        let q = LogQuery { org_id: "org_1".into(), ..Default::default() };
        let sum = store.log_summary(q).await.unwrap();
        assert_eq!(sum.requests, n as u64);
        assert_eq!(sum.errors, n.div_ceil(3) as u64);
        // A second flush with nothing pending writes nothing and does not fail.
        log.flush().await;
        let q = LogQuery { org_id: "org_1".into(), ..Default::default() };
        assert_eq!(store.log_summary(q).await.unwrap().requests, n as u64);
    }

    /// Fails the `fail_at`-th `append_logs` call (counting from 0); everything else goes to a real
    /// embedded store.
    struct FlakyStore {
        inner: EmbeddedStore,
        calls: std::sync::atomic::AtomicUsize,
        fail_at: usize,
    }

    #[async_trait::async_trait]
    impl Store for FlakyStore {
        async fn put(&self, kind: crate::store::Kind, id: &str, json: String) -> Result<(), crate::store::StoreError> {
            self.inner.put(kind, id, json).await
        }
        async fn put_many(
            &self,
            kind: crate::store::Kind,
            items: Vec<(String, String)>,
        ) -> Result<(), crate::store::StoreError> {
            self.inner.put_many(kind, items).await
        }
        async fn delete(&self, kind: crate::store::Kind, id: &str) -> Result<bool, crate::store::StoreError> {
            self.inner.delete(kind, id).await
        }
        async fn load_all(&self, kind: crate::store::Kind) -> Result<Vec<(String, String)>, crate::store::StoreError> {
            self.inner.load_all(kind).await
        }
        async fn append_logs(&self, entries: Arc<Vec<LogRecord>>) -> Result<(), crate::store::StoreError> {
            if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == self.fail_at {
                return Err(crate::store::StoreError::Backend("disk full".into()));
            }
            self.inner.append_logs(entries).await
        }
        async fn log_summary(&self, q: LogQuery) -> Result<crate::store::LogSummary, crate::store::StoreError> {
            self.inner.log_summary(q).await
        }
        async fn ping(&self) -> Result<(), crate::store::StoreError> {
            self.inner.ping().await
        }
    }

    #[tokio::test]
    async fn a_failed_slice_keeps_the_unwritten_entries_in_order_for_the_next_flush() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FlakyStore {
            inner: EmbeddedStore::open(dir.path()).unwrap(),
            calls: Default::default(),
            fail_at: 1,
        });
        let log = RequestLog::new(store.clone());
        let n = FLUSH_SLICE * 2 + 88;
        for i in 0..n {
            log.record(entry(i));
        }
        log.flush().await; // the first slice is written, the second fails
        let count = || async {
            let q = LogQuery { org_id: "org_1".into(), ..Default::default() };
            store.log_summary(q).await.unwrap().requests
        };
        assert_eq!(count().await, FLUSH_SLICE as u64);
        {
            let pending = log.pending.lock();
            assert_eq!(pending.len(), n - FLUSH_SLICE);
            assert_eq!(pending[0].id, entry(FLUSH_SLICE).id, "unwritten entries keep their order");
            assert_eq!(pending[pending.len() - 1].id, entry(n - 1).id);
        }
        log.record(entry(n)); // recorded while the store was failing: kept after the older ones
        log.flush().await;
        assert_eq!(count().await, n as u64 + 1);
        assert!(log.pending.lock().is_empty());
    }
}
