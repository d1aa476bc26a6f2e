//! Assertions shared by the API test files (envelope, errors, rate-limit headers), and the reaper
//! of a server a file keeps in a `static` for all its tests (with the keys it declares).
//!
//! ```ignore
//! let r = srv.api("GET", "/v1/user", Some(srv.admin_key()), None);
//! let data = ok(&r, 200);                 // envelope checked, `data` returned
//! err(&srv.api("GET", "/v1/user", None, None), 401, "UNAUTHORIZED");
//! ```

use super::{Peer, Resp, TestServer};
use serde_json::Value;
use std::process::{Command, Stdio};

/// Kills `srv` (SIGKILL) and removes its directory when this test process exits: a server kept
/// in a `static` (statics are never dropped) by a watchdog process.
pub fn reap_on_exit(srv: &TestServer) {
    reap_pid_on_exit(srv.pid(), srv.dir());
}

/// The same for a [`Peer`] kept in a `static`.
pub fn reap_peer_on_exit(peer: &Peer) {
    if let Some(pid) = peer.pid() {
        reap_pid_on_exit(pid, peer.dir());
    }
}

/// Kills process `pid` (SIGKILL) and removes `dir` when this test process exits.
pub fn reap_pid_on_exit(pid: u32, dir: &std::path::Path) {
    let srv_pid = pid;
    let script = r#"while kill -0 "$1" 2>/dev/null; do sleep 0.3; done; kill -9 "$2" 2>/dev/null; rm -rf "$3""#;
    // The watchdog outlives this process on purpose (it waits for our exit), so it is not waited on.
    #[allow(clippy::zombie_processes)]
    let _watchdog = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("reaper")
        .arg(std::process::id().to_string())
        .arg(srv_pid.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the reaper of a shared server");
}

/// The `meta` of an envelope: `request_id` equal to the `X-Request-Id` header, an ISO 8601
/// `timestamp`.
pub fn check_meta(r: &Resp) {
    let header = r.header("x-request-id").unwrap_or_else(|| panic!("no X-Request-Id header: {r:?}"));
    assert!(!header.is_empty(), "empty X-Request-Id: {r:?}");
    assert_eq!(r.json["meta"]["request_id"].as_str(), Some(header), "meta.request_id != X-Request-Id: {r:?}");
    let ts = r.json["meta"]["timestamp"].as_str().unwrap_or_else(|| panic!("no meta.timestamp: {r:?}"));
    assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok(), "meta.timestamp `{ts}` is not ISO 8601: {r:?}");
}

/// A successful envelope with exactly `status`: `success: true`, `meta` checked. Returns
/// `data` (or `Null` for a message-only reply such as a deletion).
pub fn ok(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "expected HTTP {status}: {r:?}");
    assert_eq!(r.json["success"], Value::Bool(true), "expected success: true: {r:?}");
    assert!(r.json.get("error").is_none(), "a success carries no error: {r:?}");
    check_meta(r);
    r.json.get("data").cloned().unwrap_or(Value::Null)
}

/// A deletion-style reply: 200, `success: true` and a `message` string.
pub fn ok_message(r: &Resp) -> String {
    ok(r, 200);
    r.json["message"].as_str().unwrap_or_else(|| panic!("expected a `message`: {r:?}")).to_string()
}

/// An error envelope with `status` and `error.code`; returns the `error` object.
pub fn err(r: &Resp, status: u16, code: &str) -> Value {
    assert_eq!(r.status, status, "expected HTTP {status} {code}: {r:?}");
    assert_eq!(r.json["success"], Value::Bool(false), "expected success: false: {r:?}");
    assert!(r.json.get("data").is_none(), "an error carries no data: {r:?}");
    assert_eq!(r.error_code(), code, "error.code: {r:?}");
    assert!(r.json["error"]["message"].is_string(), "error.message must be a string: {r:?}");
    check_meta(r);
    r.json["error"].clone()
}

/// 400 `VALIDATION_ERROR` naming `field` in `details.field`, with a `details.issue`.
pub fn validation(r: &Resp, field: &str) -> Value {
    let e = err(r, 400, "VALIDATION_ERROR");
    assert_eq!(e["details"]["field"].as_str(), Some(field), "details.field: {r:?}");
    assert!(e["details"]["issue"].as_str().is_some_and(|s| !s.is_empty()), "details.issue: {r:?}");
    e
}

/// The five `X-RateLimit-*` headers, present and numeric (bucket a name); returns
/// `(limit, remaining, reset, reset_after, bucket)`.
pub fn rate_limit_headers(r: &Resp) -> (u64, u64, u64, u64, String) {
    let num = |name: &str| -> u64 {
        r.header(name)
            .unwrap_or_else(|| panic!("missing {name} on HTTP {}: {r:?}", r.status))
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number: {r:?}"))
    };
    let bucket = r.header("x-ratelimit-bucket").unwrap_or_else(|| panic!("missing X-RateLimit-Bucket: {r:?}"));
    assert!(
        ["global", "write", "analytics", "webhook", "gateway"].contains(&bucket),
        "unknown bucket `{bucket}`: {r:?}"
    );
    (
        num("x-ratelimit-limit"),
        num("x-ratelimit-remaining"),
        num("x-ratelimit-reset"),
        num("x-ratelimit-reset-after"),
        bucket.to_string(),
    )
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Polls `done` every 50 ms until it holds; fails naming `what` if it still does not after
/// `limit`. Tests wait with this for what they can observe (a log line, a metric, a process gone)
/// instead of sleeping a fixed time and hoping it happened.
pub fn wait_until(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The value of the first line of `srv`'s `/metrics` that starts with `line_start` (the series'
/// name and labels, with the space before the value), 0 if there is none.
pub fn metric(srv: &TestServer, line_start: &str) -> f64 {
    srv.metrics().lines().find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// How long a change made on one instance may take to reach another on the same Redis when
/// something is slow, as a bound for tests that wait for the change's state: each side of the
/// change feed (src/data/peers.rs) is at worst one reconnection away (the follower's `RETRY`
/// 0.5 s, a connect time-out of 2 s, a read time-out of `BLOCK` + 2 s = 3 s; the publisher's
/// `RETRY` 0.5 s, 2 s to connect and 2 s to add): 10 s. Unloaded, a few milliseconds. The same
/// bound as `FEED_CATCH_UP` in tests/py/test_redis_scaleout.py.
pub const FEED_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// The deadline SECURITY.md and docs/scale-out.md promise for a change to reach every other
/// instance: a second. No setting governs it (the feed's blocking read answers as soon as a
/// change is added), so tests that prove it hold the measured delay against this constant
/// (`followed_within_promise`), and every other test waits for the state (`FEED_CATCH_UP`).
pub const FEED_PROMISE: std::time::Duration = std::time::Duration::from_secs(1);

/// Proves the feed's promise for one change: polls `seen` until it holds (up to
/// `FEED_CATCH_UP`, so a late change reports how late rather than timing out at the promise),
/// and fails naming `what` unless the first probe that saw it began within `FEED_PROMISE` of
/// `since` (the write's answer). Each probe is timed from its start, so a busy machine's slow
/// probe does not count against the instance beyond one poll.
pub fn followed_within_promise(what: &str, since: std::time::Instant, mut seen: impl FnMut() -> bool) {
    let delay = loop {
        let began = std::time::Instant::now();
        if seen() {
            break began - since;
        }
        assert!(began - since < FEED_CATCH_UP, "{what}: not seen within {FEED_CATCH_UP:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(delay < FEED_PROMISE, "{what}: seen {delay:?} after the change, not within {FEED_PROMISE:?}");
}
