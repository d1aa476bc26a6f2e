//! Prometheus metrics, served on `server.metrics_listen` by Pingora's Prometheus service.

use pingora_prometheus::prometheus::{
    register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge, HistogramVec,
    IntCounter, IntCounterVec, IntGauge,
};
use std::sync::OnceLock;
use std::time::Duration;

struct Metrics {
    requests: IntCounterVec,
    latency: HistogramVec,
    log_pending: IntGauge,
    log_dropped: IntCounter,
}

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| Metrics {
        requests: register_int_counter_vec!(
            "toolgate_requests_total",
            "Requests answered, by route class and status code",
            &["route", "status"]
        )
        .expect("metric registers once"),
        latency: register_histogram_vec!(
            "toolgate_request_duration_seconds",
            "Time from request to response, by route class",
            &["route"],
            vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
        )
        .expect("metric registers once"),
        log_pending: register_int_gauge!(
            "toolgate_request_log_pending",
            "Request-log entries waiting to be written, as of the last flush"
        )
        .expect("metric registers once"),
        log_dropped: register_int_counter!(
            "toolgate_request_log_dropped_total",
            "Request-log entries dropped because the buffer was full"
        )
        .expect("metric registers once"),
    })
}

/// Registers the metrics so they are exported (with zero values) from the start.
pub fn init() {
    metrics();
}

pub fn observe_request(route: &'static str, status: u16, elapsed: Duration) {
    let m = metrics();
    let mut buf = itoa::Buffer::new();
    m.requests.with_label_values(&[route, buf.format(status)]).inc();
    m.latency.with_label_values(&[route]).observe(elapsed.as_secs_f64());
}

/// The request log's backlog at a flush: where a store that cannot keep up shows.
pub fn request_log_pending(entries: usize) {
    metrics().log_pending.set(i64::try_from(entries).unwrap_or(i64::MAX));
}

pub fn request_log_dropped(entries: usize) {
    metrics().log_dropped.inc_by(u64::try_from(entries).unwrap_or(u64::MAX));
}
