//! The process's own log on standard error: one JSON object per line by default when standard
//! error is not a terminal (here it is a file; at a terminal the default is text, see
//! `observe::logging::format_for`'s unit test), with an access
//! line per request (request id, route, status, duration, principal; never a secret);
//! `observability.log_format: text` for people; `observability.log_level` unless `RUST_LOG`
//! says otherwise.

use crate::common::{ServerOptions, TestServer};
use serde_json::Value;

fn start(yaml: &str, rust_log: &str) -> TestServer {
    TestServer::start_opts(ServerOptions {
        extra_yaml: yaml.into(),
        env: vec![("RUST_LOG".into(), rust_log.into())],
        ..Default::default()
    })
}

/// The access lines of the JSON log.
fn access_lines(srv: &TestServer) -> Vec<Value> {
    srv.stderr()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "toolgate::access")
        .collect()
}

/// Waits for the access line of `request_id` (written as the request ends).
fn access_line(srv: &TestServer, request_id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(l) = access_lines(srv).into_iter().find(|v| v["request_id"] == request_id) {
            return l;
        }
        assert!(std::time::Instant::now() < deadline, "no access line for {request_id}:\n{}", srv.stderr());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn every_line_is_json_and_every_request_has_an_access_line_without_secrets() {
    let srv = start("", "");
    let key = srv.admin_key().to_string();
    let ok = srv.api("GET", "/v1/user", Some(&key), None);
    assert_eq!(ok.status, 200, "{ok:?}");
    let denied = srv.api("GET", "/v1/gateways?secret=hunter2", None, None);
    assert_eq!(denied.status, 401, "{denied:?}");

    let line = access_line(&srv, ok.header("x-request-id").unwrap());
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!((&line["method"], &line["path"], &line["status"]), (&"GET".into(), &"/v1/user".into(), &200.into()));
    assert!(line["route"].is_string() && line["timestamp"].is_string(), "{line}");
    assert!(line["duration_ms"].as_f64().is_some_and(|d| d > 0.0 && d < 5000.0), "{line}");
    let principal = line["principal"].as_str().expect("the caller's key id");
    assert!(!principal.is_empty() && !principal.starts_with("ag_"), "a key id, not the key: {line}");

    let line = access_line(&srv, denied.header("x-request-id").unwrap());
    assert_eq!(line["status"], 401, "{line}");
    assert!(line["principal"].is_null(), "nobody authenticated: {line}");
    assert_eq!(line["path"], "/v1/gateways", "no query string: {line}");

    let logs = srv.stderr();
    assert!(!logs.contains(&key) && !logs.contains("hunter2"), "a secret in the log:\n{logs}");
    for l in logs.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("toolgate:")) {
        assert!(serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object()), "not a JSON object: {l}");
    }
}

#[test]
fn text_format_level_from_yaml_and_rust_log_over_it() {
    // Text, at the YAML's level: `warn` hides the info access lines.
    let srv = start("observability:\n  log_format: text\n  log_level: warn\n", "");
    assert_eq!(srv.api("GET", "/healthz", None, None).status, 200);
    // A check that a line is NOT written needs time to pass: the log writes every 25 ms, so a
    // line that is coming is there after 300 ms.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let logs = srv.stderr();
    assert!(!logs.contains("toolgate::access"), "warn hides info:\n{logs}");
    assert!(logs.lines().all(|l| serde_json::from_str::<Value>(l).is_err()), "text, not JSON:\n{logs}");
    drop(srv);

    // A RUST_LOG that is not a filter is said, and the YAML's level holds.
    let srv = start("observability:\n  log_format: text\n  log_level: warn\n", "info,[bad");
    assert_eq!(srv.api("GET", "/healthz", None, None).status, 200);
    // As above: time for an access line that should not come.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let logs = srv.stderr();
    assert!(logs.contains("RUST_LOG \"info,[bad\" is not a log filter"), "{logs}");
    assert!(!logs.contains("toolgate::access"), "{logs}");
    drop(srv);

    // RUST_LOG wins over the YAML.
    let srv = start("observability:\n  log_format: text\n  log_level: warn\n", "info");
    let r = srv.api("GET", "/healthz", None, None);
    let id = r.header("x-request-id").unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !srv.stderr().lines().any(|l| l.contains("toolgate::access") && l.contains(&id)) {
        assert!(std::time::Instant::now() < deadline, "no text access line for {id}:\n{}", srv.stderr());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Waits until `srv`'s log has an access line for the request `id` (true), or 1 s has passed
/// without one (false: the log writes every 25 ms, so a line that is coming is there by then).
fn logged_within_a_second(srv: &TestServer, id: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        if access_lines(srv).iter().any(|v| v["request_id"] == id) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn a_reload_changes_the_log_level_unless_rust_log_chose_it() {
    let srv = start("observability:\n  log_level: warn\n", "");
    let admin = srv.admin_key().to_string();
    let health = |srv: &TestServer| srv.api("GET", "/healthz", None, None).header("x-request-id").unwrap().to_string();
    let quiet = health(&srv);
    assert!(!logged_within_a_second(&srv, &quiet), "warn hides the access lines:\n{}", srv.stderr());

    let text = std::fs::read_to_string(srv.config_path()).unwrap();
    std::fs::write(srv.config_path(), text.replace("log_level: warn", "log_level: info")).unwrap();
    let r = srv.api("POST", "/v1/admin/reload", Some(&admin), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["data"]["changed"], serde_json::json!(["observability"]), "{r:?}");
    let heard = health(&srv);
    assert!(logged_within_a_second(&srv, &heard), "info after the reload:\n{}", srv.stderr());

    std::fs::write(srv.config_path(), &text).unwrap();
    assert_eq!(srv.api("POST", "/v1/admin/reload", Some(&admin), None).status, 200);
    let quiet_again = health(&srv);
    assert!(!logged_within_a_second(&srv, &quiet_again), "warn again:\n{}", srv.stderr());
    drop(srv);

    // RUST_LOG chose the filter at start: a reload leaves it.
    let srv = start("observability:\n  log_level: info\n", "warn");
    let text = std::fs::read_to_string(srv.config_path()).unwrap();
    std::fs::write(srv.config_path(), text.replace("log_level: info", "log_level: debug")).unwrap();
    assert_eq!(srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None).status, 200);
    let id = health(&srv);
    assert!(!logged_within_a_second(&srv, &id), "RUST_LOG=warn still rules:\n{}", srv.stderr());
}
