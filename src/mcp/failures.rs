//! Runs of failed exchanges with an app, per organisation: the source of `error.critical`
//! (`kind: app_failing`, issue 16).
//!
//! A run starts at an exchange that failed (the app could not be reached, started or
//! understood; a JSON-RPC error is an answer, not a failure) and ends at the next one that went
//! through. A run that reaches `alerts.app_failures` failures within
//! `alerts.app_failure_window_secs` of its first is reported once; a run older than the window
//! starts again from its latest failure. Reports wait here until the server's flusher hands them
//! to the events (the call that failed never waits for a store write).
//!
//! The path of a call that went through costs one atomic load while no run is open.

use crate::base::pair_key::pair;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// An organisation's app that failed `failures` times in a row within `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppFailing {
    pub org_id: String,
    pub app_id: String,
    pub failures: u32,
    pub window: Duration,
    /// When the run's first counted failure happened.
    pub since: DateTime<Utc>,
    pub last_error: String,
}

struct Run {
    first: Instant,
    since: DateTime<Utc>,
    failures: u32,
    reported: bool,
}

impl Run {
    fn starting(now: Instant) -> Run {
        Run { first: now, since: Utc::now(), failures: 0, reported: false }
    }
}

/// The open runs and the reports not yet taken.
#[derive(Default)]
pub struct FailureRuns {
    runs: parking_lot::Mutex<HashMap<(String, String), Run>>,
    /// How many runs are open: a success looks at the map only when some are.
    open: AtomicUsize,
    reports: parking_lot::Mutex<Vec<AppFailing>>,
}

impl FailureRuns {
    /// An exchange of `org_id` with `app_id` went through: its run, if any, ends.
    pub fn succeeded(&self, org_id: &str, app_id: &str) {
        if self.open.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut runs = self.runs.lock();
        if runs.remove(pair(&(org_id, app_id))).is_some() {
            self.open.store(runs.len(), Ordering::Relaxed);
        }
    }

    /// An exchange failed with `error`; `threshold` failures (0: never) within `window` are
    /// reported, once per run.
    pub fn failed(&self, org_id: &str, app_id: &str, error: &dyn std::fmt::Display, threshold: u32, window: Duration) {
        if threshold == 0 {
            return;
        }
        let now = Instant::now();
        let mut runs = self.runs.lock();
        let run = runs.entry((org_id.to_string(), app_id.to_string())).or_insert_with(|| Run::starting(now));
        if now.duration_since(run.first) > window && !run.reported {
            *run = Run::starting(now);
        }
        run.failures = run.failures.saturating_add(1);
        if run.failures >= threshold && !run.reported {
            run.reported = true;
            self.reports.lock().push(AppFailing {
                org_id: org_id.to_string(),
                app_id: app_id.to_string(),
                failures: run.failures,
                window,
                since: run.since,
                last_error: error.to_string(),
            });
        }
        self.open.store(runs.len(), Ordering::Relaxed);
    }

    /// The reports made since the last take.
    pub(crate) fn take_reports(&self) -> Vec<AppFailing> {
        std::mem::take(&mut *self.reports.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);

    #[test]
    fn a_run_is_reported_once_at_the_threshold_and_again_only_after_a_success() {
        let runs = FailureRuns::default();
        for _ in 0..2 {
            runs.failed("org_1", "time", &"cannot connect", 3, WINDOW);
        }
        assert!(runs.take_reports().is_empty(), "two failures are below the threshold");
        runs.failed("org_1", "time", &"refused", 3, WINDOW);
        let reports = runs.take_reports();
        assert_eq!(reports.len(), 1);
        assert_eq!((reports[0].failures, reports[0].last_error.as_str()), (3, "refused"));
        for _ in 0..5 {
            runs.failed("org_1", "time", &"refused", 3, WINDOW);
        }
        assert!(runs.take_reports().is_empty(), "one report per run");
        runs.succeeded("org_1", "time");
        assert_eq!(runs.open.load(Ordering::Relaxed), 0);
        for _ in 0..3 {
            runs.failed("org_1", "time", &"refused", 3, WINDOW);
        }
        assert_eq!(runs.take_reports().len(), 1, "a new run after a success is reported again");
    }

    #[test]
    fn runs_are_per_organisation_and_app_and_a_threshold_of_zero_is_off() {
        let runs = FailureRuns::default();
        runs.failed("org_1", "time", &"x", 2, WINDOW);
        runs.failed("org_2", "time", &"x", 2, WINDOW);
        runs.failed("org_1", "echo", &"x", 2, WINDOW);
        assert!(runs.take_reports().is_empty());
        runs.succeeded("org_2", "time");
        runs.failed("org_2", "time", &"x", 2, WINDOW);
        runs.failed("org_1", "time", &"x", 2, WINDOW);
        let reports = runs.take_reports();
        assert_eq!(reports.len(), 1);
        assert_eq!((reports[0].org_id.as_str(), reports[0].app_id.as_str()), ("org_1", "time"));
        runs.failed("org_3", "time", &"x", 0, WINDOW);
        assert!(!runs.runs.lock().contains_key(&("org_3".to_string(), "time".to_string())));
    }

    #[test]
    fn failures_spread_wider_than_the_window_start_the_run_again() {
        let runs = FailureRuns::default();
        let window = Duration::from_millis(30);
        runs.failed("org_1", "time", &"x", 2, window);
        std::thread::sleep(Duration::from_millis(50));
        runs.failed("org_1", "time", &"x", 2, window);
        assert!(runs.take_reports().is_empty(), "the first failure fell out of the window");
        runs.failed("org_1", "time", &"x", 2, window);
        assert_eq!(runs.take_reports().len(), 1);
    }
}
