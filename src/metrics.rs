//! Prometheus metrics, served on `server.metrics_listen` by Pingora's Prometheus service.

use pingora_prometheus::prometheus::{
    register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge, Histogram,
    HistogramVec, IntCounter, IntCounterVec, IntGauge,
};
use std::sync::OnceLock;
use std::time::Duration;

struct Metrics {
    requests: IntCounterVec,
    latency: HistogramVec,
    /// The children of the two vectors for every route class, and of `requests` for the common
    /// statuses, looked up once: `with_label_values` hashes the labels and takes a lock on every
    /// call, and this runs on every request.
    by_route: Vec<RouteMetrics>,
    log_pending: IntGauge,
    log_dropped: IntCounter,
}

struct RouteMetrics {
    route: &'static str,
    latency: Histogram,
    by_status: Vec<(u16, IntCounter)>,
}

/// Statuses whose counters are looked up in advance; others are looked up per request.
const COMMON_STATUSES: [u16; 12] = [200, 201, 202, 204, 400, 401, 403, 404, 406, 429, 500, 502];

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let requests = register_int_counter_vec!(
            "toolgate_requests_total",
            "Requests answered, by route class and status code",
            &["route", "status"]
        )
        .expect("metric registers once");
        let latency = register_histogram_vec!(
            "toolgate_request_duration_seconds",
            "Time from request to response, by route class",
            &["route"],
            vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
        )
        .expect("metric registers once");
        let by_route = crate::route::Route::LABELS
            .iter()
            .map(|&route| RouteMetrics {
                route,
                latency: latency.with_label_values(&[route]),
                by_status: COMMON_STATUSES
                    .iter()
                    .map(|&status| (status, requests.with_label_values(&[route, itoa::Buffer::new().format(status)])))
                    .collect(),
            })
            .collect();
        Metrics {
            requests,
            latency,
            by_route,
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
        }
    })
}

/// Registers the metrics so they are exported (with zero values) from the start.
pub fn init() {
    metrics();
}

pub fn observe_request(route: &'static str, status: u16, elapsed: Duration) {
    let m = metrics();
    let known = m.by_route.iter().find(|r| r.route == route);
    match known.and_then(|r| r.by_status.iter().find(|(s, _)| *s == status)) {
        Some((_, counter)) => counter.inc(),
        None => m.requests.with_label_values(&[route, itoa::Buffer::new().format(status)]).inc(),
    }
    match known {
        Some(r) => r.latency.observe(elapsed.as_secs_f64()),
        None => m.latency.with_label_values(&[route]).observe(elapsed.as_secs_f64()),
    }
}

/// The request log's backlog at a flush: where a store that cannot keep up shows.
pub fn request_log_pending(entries: usize) {
    metrics().log_pending.set(i64::try_from(entries).unwrap_or(i64::MAX));
}

pub fn request_log_dropped(entries: usize) {
    metrics().log_dropped.inc_by(u64::try_from(entries).unwrap_or(u64::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_route_and_status_whether_looked_up_in_advance_or_not() {
        let m = metrics();
        let count = |route: &str, status: &str| m.requests.with_label_values(&[route, status]).get();
        let seen = |route: &str| m.latency.with_label_values(&[route]).get_sample_count();
        let (ok, teapot, gw, odd) = (count("gateway", "200"), count("gateway", "418"), seen("gateway"), seen("odd"));
        observe_request("gateway", 200, Duration::from_micros(150));
        observe_request("gateway", 418, Duration::from_micros(150));
        // A label outside `Route::LABELS` still counts.
        observe_request("odd", 200, Duration::from_micros(150));
        assert_eq!(count("gateway", "200"), ok + 1);
        assert_eq!(count("gateway", "418"), teapot + 1);
        assert_eq!(seen("gateway"), gw + 2);
        assert_eq!(seen("odd"), odd + 1);
        assert_eq!(count("odd", "200"), 1);
    }
}
