//! Refusals in the trail, bounded so that a flood of them cannot stall an organisation's
//! appender: each organisation's first [`PER_WINDOW`] refusals of one action in a minute are
//! entries of their own; past that they are counted, and the count is one entry
//! (`refusals.folded`) once the minute is over. Who was refused is in each recorded entry; the
//! folded one names the last caller and how many there were.

use super::chain::Actor;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Refusals of one action, per organisation and window, recorded one by one.
pub(crate) const PER_WINDOW: u32 = 20;
/// How long a window lasts.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Organisations × actions tracked at once; past that a new key is folded at once (a flood of
/// distinct organisations cannot grow the table).
const MAX_KEYS: usize = 100_000;

/// One organisation's refusals of one action in the current window.
struct Window {
    opened: Instant,
    opened_ms: i64,
    recorded: u32,
    folded: u64,
    last: Option<Actor>,
}

/// Refusals folded over a window that has closed: written as one entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Folded {
    pub org_id: String,
    pub action: String,
    pub count: u64,
    pub from_ms: i64,
    pub to_ms: i64,
    pub last: Actor,
}

#[derive(Default)]
pub(crate) struct Refusals {
    windows: Mutex<HashMap<(String, String), Window>>,
}

impl Refusals {
    /// Whether this refusal is an entry of its own (`true`) or folded into its window's count.
    pub(crate) fn admit(&self, org_id: &str, action: &str, actor: &Actor, now: Instant, now_ms: i64) -> bool {
        let mut windows = self.windows.lock();
        let key = (org_id.to_string(), action.to_string());
        if !windows.contains_key(&key) && windows.len() >= MAX_KEYS {
            return false;
        }
        let w = windows.entry(key).or_insert_with(|| Window {
            opened: now,
            opened_ms: now_ms,
            recorded: 0,
            folded: 0,
            last: None,
        });
        if w.recorded < PER_WINDOW {
            w.recorded += 1;
            return true;
        }
        w.folded += 1;
        w.last = Some(actor.clone());
        false
    }

    /// The windows that closed by `now`, those that folded refusals as counts to write.
    pub(crate) fn take_closed(&self, now: Instant, now_ms: i64) -> Vec<Folded> {
        let mut out = Vec::new();
        self.windows.lock().retain(|(org_id, action), w| {
            if now.duration_since(w.opened) < WINDOW {
                return true;
            }
            if let Some(last) = w.last.take().filter(|_| w.folded > 0) {
                let (org_id, action) = (org_id.clone(), action.clone());
                out.push(Folded { org_id, action, count: w.folded, from_ms: w.opened_ms, to_ms: now_ms, last });
            }
            false
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(id: &str) -> Actor {
        Actor { kind: "api_key".into(), id: id.into() }
    }

    #[test]
    fn past_the_window_s_share_refusals_are_counted_and_written_once_it_closes() {
        let r = Refusals::default();
        let t0 = Instant::now();
        let recorded =
            (0..PER_WINDOW + 5).filter(|i| r.admit("org_a", "write.refused", &actor(&format!("k{i}")), t0, 1)).count();
        assert_eq!(recorded, PER_WINDOW as usize);
        // Another organisation and another action have windows of their own.
        assert!(r.admit("org_b", "write.refused", &actor("kb"), t0, 1));
        assert!(r.admit("org_a", "tool_call.refused", &actor("ka"), t0, 1));
        assert!(r.take_closed(t0 + WINDOW / 2, 2).is_empty(), "no window has closed yet");
        let folded = r.take_closed(t0 + WINDOW, 3);
        assert_eq!(folded.len(), 1, "only the window that folded refusals writes a count: {folded:?}");
        let f = &folded[0];
        assert_eq!(
            (f.org_id.as_str(), f.action.as_str(), f.count, f.from_ms, f.to_ms),
            ("org_a", "write.refused", 5, 1, 3)
        );
        assert_eq!(f.last, actor(&format!("k{}", PER_WINDOW + 4)));
        // The next window starts afresh.
        assert!(r.admit("org_a", "write.refused", &actor("k"), t0 + WINDOW, 4));
    }
}
