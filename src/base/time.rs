//! The wall clock as the store and the limiter keep it: milliseconds since the Unix epoch.

/// Milliseconds since the Unix epoch, now (negative before 1970, as `chrono` counts).
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
