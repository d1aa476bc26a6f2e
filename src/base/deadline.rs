//! Deadlines on Pingora's timer (`pingora::time`) instead of tokio's, for the per-request and
//! per-call waits: the connection's header deadline and the upstream call's deadline. The waits
//! of a fixed length (keep-alive, the shutdown drain, a session call's early-stream wait) call
//! `pingora::time` directly, for the same reason.
//!
//! Why: tokio's timers live in one wheel per runtime behind a mutex, and a timer due sooner than
//! a parked worker's next wake-up wakes that worker with a write to its eventfd. With a timer or
//! two per request, the two worker threads contended for the lock (parking_lot spins, then
//! `sched_yield`) and woke each other about once per request. Pingora's timers live in
//! per-thread lists that a clock thread fires in 10 ms steps; a `timeout` creates its timer only
//! when the future is not ready at once. The cost is resolution: a deadline fires up to 10 ms
//! late, which none of these waits minds.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

pub(crate) use pingora::time::Elapsed;

/// The time left until `deadline` (zero once it has passed).
pub(crate) fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// `fut`, or [`Elapsed`] at `deadline`.
///
/// A plain function, not an `async fn`: an `async fn` would hold `fut` twice (its argument and
/// the timeout wrapping it), doubling a future that the whole call's state machine carries and
/// copies.
pub(crate) fn until<F: Future>(deadline: Instant, fut: F) -> impl Future<Output = Result<F::Output, Elapsed>> {
    pingora::time::timeout(left(deadline), fut)
}

/// Completes at `deadline`.
pub(crate) async fn sleep_until(deadline: Instant) {
    pingora::time::sleep(left(deadline)).await
}
