//! New MCP sessions are written to the store in groups (group commit): the sessions that arrive
//! while one transaction commits go together into the next, and each `initialize` is answered
//! only once the transaction holding its session has committed, so an acknowledged session
//! survives `kill -9` as before. Why: with one durable write per session, every `initialize`
//! waited for an fsync of its own (3,000 sessions a second at 32 connections against 29,000 to
//! 40,000 calls, the time in `pwrite`/fsync waits and thread hand-offs); a group pays one fsync
//! for all of its sessions, so the more clients arrive at once, the larger the groups.
//!
//! One writer takes every session waiting (up to [`MAX_GROUP`]), commits them with one call of
//! its [`Commit`] (the store's `put_many`: one SQLite transaction; on Redis one pipeline per hash
//! slot) and answers each waiter through its own oneshot channel. The writer is a thread of its
//! own with a small runtime: the runtime `Sessions` are made on (the start-up one) ends before
//! Pingora starts its own, and a task spawned there would end with it. The queue is bounded
//! ([`QUEUE`]): beyond it `initialize` waits for a place, so memory stays bounded however many
//! clients arrive at once. A failed commit answers every session of its group with the error:
//! nothing is acknowledged that was not written. A session whose `initialize` is dropped (its
//! client gone) before its group commits is left out of it; one dropped during the commit is
//! written for nobody, and its id goes to the list of records to delete ([`Unheard`]).

use crate::data::store::{StoreError, Stored};
use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Sessions waiting for the next commit; a creation beyond waits for a place.
const QUEUE: usize = 4096;

/// Most sessions per transaction: a commit of a few hundred is a few milliseconds, and a larger
/// one would only hold the first of its waiters longer.
const MAX_GROUP: usize = 1024;

/// How a group of session records is written durably: `Ok` once every record of it is.
pub(crate) type Commit = Box<dyn Fn(Vec<Stored>) -> BoxFuture<'static, Result<(), StoreError>> + Send + Sync>;

/// What a waiter is told: its session's group committed, or why not.
type Written = oneshot::Sender<Result<(), StoreError>>;

/// Where the ids of sessions written for nobody go (their waiter gone during the commit): the
/// sessions' list of store records to delete.
pub(crate) type Unheard = Arc<Mutex<Vec<String>>>;

struct Waiting {
    record: Stored,
    written: Written,
}

/// The writer's queue: each [`SessionWriter::write`] puts its record in it and waits for the
/// commit of the group that took it.
pub(crate) struct SessionWriter {
    queue: mpsc::Sender<Waiting>,
}

impl SessionWriter {
    /// Starts the writer's thread; it ends when the writer is dropped (its queue closes).
    pub(crate) fn start(commit: Commit, unheard: Unheard) -> Result<SessionWriter, StoreError> {
        let (queue, waiting) = mpsc::channel(QUEUE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::BackendFailed { context: "starting the MCP session writer", source: e.into() })?;
        std::thread::Builder::new()
            .name("toolgate-sessions".into())
            .spawn(move || runtime.block_on(run(commit, waiting, unheard)))
            .map_err(|e| StoreError::BackendFailed { context: "starting the MCP session writer", source: e.into() })?;
        Ok(SessionWriter { queue })
    }

    /// Writes one session record durably, in the next group to commit; `Ok` once it is written.
    pub(crate) async fn write(&self, record: Stored) -> Result<(), StoreError> {
        let (written, done) = oneshot::channel();
        self.queue.send(Waiting { record, written }).await.map_err(|_| stopped())?;
        done.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// The writer stopped (its thread ended): the session was not written.
fn stopped() -> StoreError {
    StoreError::Backend("the MCP session writer has stopped".into())
}

/// The writer's loop: waits for a session, takes every other one waiting with it, commits them
/// together and answers them; the sessions arriving meanwhile wait in the queue for the next.
async fn run(commit: Commit, mut waiting: mpsc::Receiver<Waiting>, unheard: Unheard) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while waiting.recv_many(&mut group, MAX_GROUP).await > 0 {
        // A session whose `initialize` was dropped (its client gone) is not written: nobody
        // will hear of it, and its place under the caps was given back (`Sessions::create`).
        group.retain(|w| !w.written.is_closed());
        if group.is_empty() {
            continue;
        }
        let ids: Vec<String> = group.iter().map(|w| w.record.id.clone()).collect();
        let (records, waiters): (Vec<Stored>, Vec<Written>) = group.drain(..).map(|w| (w.record, w.written)).unzip();
        crate::observe::metrics::session_group_committed(records.len());
        let gone = answer(waiters, commit(records).await);
        if !gone.is_empty() {
            unheard.lock().extend(gone.into_iter().map(|i| ids[i].clone()));
        }
    }
}

/// Tells every waiter of a group how its commit went; on failure each gets the error (the
/// store's cause shared by all, so the log of each shows the chain). Returns the places of the
/// sessions written whose waiter is gone (its request dropped during the commit).
fn answer(waiters: Vec<Written>, outcome: Result<(), StoreError>) -> Vec<usize> {
    match outcome {
        Ok(()) => waiters.into_iter().enumerate().filter_map(|(i, w)| w.send(Ok(())).is_err().then_some(i)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, sessions = waiters.len(), "cannot write new MCP sessions; their initialize fails");
            let cause = Arc::new(e);
            for w in waiters {
                let failed =
                    StoreError::BackendFailed { context: "writing new MCP sessions", source: Box::new(cause.clone()) };
                // A waiter gone has nothing to be told, and nothing was written.
                let _ = w.send(Err(failed));
            }
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Semaphore;

    /// A commit that reports each group it is given, then waits for a permit of `gate` and
    /// succeeds, or fails when `fails` says so for that group (by its place, from 0).
    struct Gated {
        writer: Arc<SessionWriter>,
        gate: Arc<Semaphore>,
        groups: mpsc::UnboundedReceiver<Vec<String>>,
    }

    fn gated(fails: &'static [usize]) -> Gated {
        let gate = Arc::new(Semaphore::new(0));
        let (report, groups) = mpsc::unbounded_channel();
        let calls = AtomicUsize::new(0);
        let held = gate.clone();
        let commit: Commit = Box::new(move |records: Vec<Stored>| {
            let place = calls.fetch_add(1, Ordering::Relaxed);
            let _ = report.send(records.into_iter().map(|r| r.id).collect());
            let gate = held.clone();
            async move {
                gate.acquire().await.expect("the gate stays open").forget();
                if fails.contains(&place) {
                    return Err(StoreError::Backend("disk full".into()));
                }
                Ok(())
            }
            .boxed()
        });
        Gated { writer: Arc::new(SessionWriter::start(commit, Unheard::default()).unwrap()), gate, groups }
    }

    fn record(id: &str) -> Stored {
        Stored { partition: "org_a".into(), id: id.into(), json: "{}".into() }
    }

    impl Gated {
        fn write(&self, id: &'static str) -> tokio::task::JoinHandle<Result<(), StoreError>> {
            let writer = self.writer.clone();
            tokio::spawn(async move { writer.write(record(id)).await })
        }

        /// Waits until `n` sessions wait in the queue (behind the commit under way).
        async fn queued(&self, n: usize) {
            while self.writer.queue.max_capacity() - self.writer.queue.capacity() < n {
                tokio::task::yield_now().await;
            }
        }
    }

    #[tokio::test]
    async fn sessions_arriving_during_a_commit_go_together_into_the_next() {
        let mut g = gated(&[]);
        let first = g.write("s1");
        assert_eq!(g.groups.recv().await.unwrap(), ["s1"], "a lone session is committed at once");
        let later: Vec<_> = ["s2", "s3", "s4", "s5"].into_iter().map(|id| g.write(id)).collect();
        g.queued(4).await;
        assert!(!first.is_finished(), "no answer before its commit");
        g.gate.add_permits(1);
        first.await.unwrap().expect("the first group committed");
        let mut next = g.groups.recv().await.unwrap();
        next.sort();
        assert_eq!(next, ["s2", "s3", "s4", "s5"], "the four that waited commit in one group");
        g.gate.add_permits(1);
        for w in later {
            w.await.unwrap().expect("the second group committed");
        }
    }

    #[tokio::test]
    async fn a_session_whose_initialize_was_dropped_before_its_commit_is_not_written() {
        let mut g = gated(&[]);
        let first = g.write("s1");
        g.groups.recv().await.unwrap();
        let gone = g.write("s2");
        let kept = g.write("s3");
        g.queued(2).await;
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled(), "the waiter is dropped");
        g.gate.add_permits(2);
        first.await.unwrap().expect("the first group committed");
        assert_eq!(g.groups.recv().await.unwrap(), ["s3"], "only the session still awaited is written");
        kept.await.unwrap().expect("its group committed");
    }

    #[tokio::test]
    async fn a_failed_commit_answers_every_waiter_of_its_group_with_an_error() {
        let mut g = gated(&[1]);
        let first = g.write("s1");
        g.groups.recv().await.unwrap();
        let failing: Vec<_> = ["s2", "s3", "s4"].into_iter().map(|id| g.write(id)).collect();
        g.queued(3).await;
        g.gate.add_permits(2);
        first.await.unwrap().expect("the group before committed");
        assert_eq!(g.groups.recv().await.unwrap().len(), 3, "one group of three");
        for w in failing {
            let e = w.await.unwrap().expect_err("a session of a failed commit is not acknowledged");
            assert!(matches!(e, StoreError::BackendFailed { context: "writing new MCP sessions", .. }), "{e}");
            let cause = std::error::Error::source(&e).expect("the store's error is kept").to_string();
            assert!(cause.contains("disk full"), "{cause}");
        }
        // The writer goes on after a failure.
        let after = g.write("s5");
        assert_eq!(g.groups.recv().await.unwrap(), ["s5"]);
        g.gate.add_permits(1);
        after.await.unwrap().expect("a later group commits");
    }
}
