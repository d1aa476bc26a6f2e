//! The request log's write side: calls are recorded into a memory buffer (one short lock, no
//! I/O) and written to the store in batches by the background flusher, so logging never slows a
//! call.

use crate::store::{LogRecord, Store};
use parking_lot::Mutex;
use std::sync::Arc;

/// Most entries kept waiting when the store is unavailable; older ones are dropped (and counted).
const MAX_PENDING: usize = 100_000;

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

    /// Writes what is pending; on failure the entries stay for the next try.
    pub async fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock());
        crate::metrics::request_log_pending(batch.len());
        if batch.is_empty() {
            return;
        }
        // Shared with the store's writer rather than copied: a batch is thousands of entries.
        let batch = Arc::new(batch);
        if let Err(e) = self.store.append_logs(batch.clone()).await {
            tracing::warn!(error = %e, "cannot write the request log; will retry");
            let batch = Arc::try_unwrap(batch).unwrap_or_else(|shared| (*shared).clone());
            let mut p = self.pending.lock();
            let newer = std::mem::take(&mut *p);
            *p = batch;
            p.extend(newer);
        }
    }
}
