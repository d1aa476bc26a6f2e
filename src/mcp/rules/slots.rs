//! Where a dear rule set runs: on tokio's blocking pool, a few evaluations of one organisation
//! at a time (`mcp.rules.concurrency_per_organization`), so that one organisation's rules,
//! however close to their budget, never hold the worker threads that serve every other
//! organisation's requests. A rule set whose worst case is a few microseconds runs where the
//! call is (`RuleSet::inline`): a hop to another thread would cost more than it.

use crate::base::fast_map::FastMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Calls that may wait for an organisation's slots, per slot; past it a call is refused as
/// busy (a clear refusal, not a queue that grows without bound).
const WAITING_PER_SLOT: usize = 32;

/// Why an evaluation did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotError {
    /// Every slot of the organisation is taken and as many calls wait already.
    Busy,
    /// The evaluation's thread failed (it does not panic: `RuleSet::walk` catches the
    /// interpreter's panics); denied all the same.
    Lost,
}

/// The slots of every organisation that ran a dear rule set.
pub struct RuleSlots {
    per_org: AtomicUsize,
    orgs: FastMap<String, Arc<OrgSlots>>,
}

struct OrgSlots {
    free: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// One call waiting for a slot; counted out however the wait ends (a client that goes away
/// drops it).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RuleSlots {
    pub fn new(per_org: usize) -> RuleSlots {
        RuleSlots { per_org: AtomicUsize::new(per_org.max(1)), orgs: FastMap::default() }
    }

    /// A reload's figure: organisations get slots of the new size from their next call (those
    /// running finish on the old ones).
    pub(crate) fn set_per_org(&self, per_org: usize) {
        if self.per_org.swap(per_org.max(1), Ordering::Relaxed) != per_org.max(1) {
            self.orgs.clear();
        }
    }

    /// Runs `f` on the blocking pool in one of `org_id`'s slots, waiting for one if none is free.
    /// The slot is held until `f` returns, even when the caller stops waiting: it bounds the
    /// threads working, not the callers.
    pub async fn run<T: Send + 'static>(
        &self,
        org_id: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, SlotError> {
        let per_org = self.per_org.load(Ordering::Relaxed);
        let slots = match self.orgs.get(org_id) {
            Some(s) => s.value().clone(),
            None => self
                .orgs
                .entry(org_id.to_string())
                .or_insert_with(|| {
                    Arc::new(OrgSlots { free: Arc::new(Semaphore::new(per_org)), waiting: AtomicUsize::new(0) })
                })
                .clone(),
        };
        let permit = match slots.free.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if slots.waiting.fetch_add(1, Ordering::Relaxed) >= per_org * WAITING_PER_SLOT {
                    slots.waiting.fetch_sub(1, Ordering::Relaxed);
                    return Err(SlotError::Busy);
                }
                let _waiting = Waiting(&slots.waiting);
                slots.free.clone().acquire_owned().await.map_err(|_| SlotError::Lost)?
            }
        };
        tokio::task::spawn_blocking(move || {
            let _slot = permit;
            f()
        })
        .await
        .map_err(|_| SlotError::Lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_organisation_runs_at_most_its_slots_at_once_and_refuses_past_the_queue() {
        let slots = Arc::new(RuleSlots::new(1));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for _ in 0..4 {
            let (slots, running, most) = (slots.clone(), running.clone(), most.clone());
            calls.push(tokio::spawn(async move {
                slots
                    .run("org_a", move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
            }));
        }
        // Another organisation is not behind org_a's queue.
        assert_eq!(slots.run("org_b", || 7).await, Ok(7));
        for c in calls {
            assert_eq!(c.await.unwrap(), Ok(()));
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "one slot: one at a time");

        // A full queue refuses at once.
        let gate = Arc::new(std::sync::Barrier::new(2));
        let held = {
            let (slots, gate) = (slots.clone(), gate.clone());
            tokio::spawn(async move { slots.run("org_c", move || gate.wait()).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut waiters = Vec::new();
        for _ in 0..WAITING_PER_SLOT {
            let slots = slots.clone();
            waiters.push(tokio::spawn(async move { slots.run("org_c", || ()).await }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(slots.run("org_c", || ()).await, Err(SlotError::Busy));
        gate.wait();
        held.await.unwrap().unwrap();
        for w in waiters {
            assert_eq!(w.await.unwrap(), Ok(()));
        }
    }
}
