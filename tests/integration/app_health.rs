//! The apps' health is probed in the background (issue 56, A2), and a client is told one
//! sentence of an app's failure while the operator's logs keep the detail (A4): against the real
//! binary and a real server-everything, stopped and started again on its port.

use crate::common::mcp::{rpc_error, Mcp};
use crate::common::*;
use crate::mcp_upstreams::{config, create_gateway, free_port, spawn_everything_on};
use serde_json::{json, Value};
use std::time::Duration;

/// Probes every second, each within 2 s.
const FAST_PROBES: &str = "mcp:\n  app_health: { interval_secs: 1, timeout_ms: 2000 }\n";

/// Long enough for a few probes on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

fn health(srv: &TestServer, app: &str) -> Value {
    let d = ok(&srv.api("GET", &format!("/v1/apps/{app}"), Some(srv.admin_key()), None), 200);
    d["health"].clone()
}

/// Whether `/metrics` has the sample `toolgate_app_up{app="<app>"} <value>`.
fn app_up_is(srv: &TestServer, app: &str, value: u8) -> bool {
    let line = format!("toolgate_app_up{{app=\"{app}\"}} {value}");
    srv.metrics().lines().any(|l| l == line)
}

fn wait_for_state(srv: &TestServer, app: &str, state: &str, up: u8) -> Value {
    wait_until(&format!("{app} reads {state} in the API and {up} in toolgate_app_up"), PATIENCE, || {
        health(srv, app)["state"] == state && app_up_is(srv, app, up)
    });
    health(srv, app)
}

#[test]
fn an_app_whose_server_stops_reads_down_and_up_again_with_no_call() {
    let port = free_port();
    let mut everything = spawn_everything_on(port);
    let srv = TestServer::start_with_config(&config(
        &format!("  - {{ id: everything, name: Everything, url: \"http://127.0.0.1:{port}/mcp\" }}\n"),
        FAST_PROBES,
    ));
    let up = wait_for_state(&srv, "everything", "up", 1);
    assert_eq!(up["last_error"], Value::Null, "{up}");
    assert!(up["checked_at"].as_str().is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()), "{up}");
    // The connection's status is about its credentials and settings, not the server.
    let detail = ok(&srv.api("GET", "/v1/apps/everything", Some(srv.admin_key()), None), 200);
    assert_eq!(detail["status"], "connected", "{detail}");

    everything.kill9();
    let down = wait_for_state(&srv, "everything", "down", 0);
    assert_eq!(down["last_error"], "connection refused", "in words, no address: {down}");
    let listed = ok(&srv.api("GET", "/v1/apps", Some(srv.admin_key()), None), 200);
    let item = listed["apps"].as_array().unwrap().iter().find(|a| a["id"] == "everything").cloned().unwrap();
    assert_eq!(item["health"]["state"], "down", "the list shows it too: {item}");
    assert!(srv.stderr().contains("app is down"), "the process log says so");

    let everything = spawn_everything_on(port);
    wait_for_state(&srv, "everything", "up", 1);
    // Probes are no one's calls: nothing in the request log.
    let logs = ok(&srv.api("GET", "/v1/logs", Some(srv.admin_key()), None), 200);
    assert_eq!(logs["logs"], json!([]), "{logs}");
    drop(everything);
}

#[test]
fn a_builtin_app_reads_up_after_a_reload_and_a_tools_list() {
    // The default probe settings: the first probe comes within a second of the start.
    let srv = TestServer::start_with_config(&config("", ""));
    // A reload that changes the app (its catalogue is dropped and built again on the next list).
    let yaml = std::fs::read_to_string(srv.config_path()).unwrap();
    std::fs::write(srv.config_path(), yaml.replace("name: Time,", "name: Clock,")).unwrap();
    let r = srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None);
    assert_eq!(r.status, 200, "{r:?}");
    let (gw, key) = create_gateway(&srv, &["time"]);
    let mcp = Mcp::open(&srv, &gw, &key);
    // The list asks the app for its prompts and resources too, which it does not have.
    assert_eq!(mcp.tool_names(1), vec!["get_current_time".to_string()]);
    wait_until("a toolgate_app_up sample for time", PATIENCE, || {
        app_up_is(&srv, "time", 0) || app_up_is(&srv, "time", 1)
    });
    assert!(app_up_is(&srv, "time", 1), "the built-in app reads up: {}", srv.metrics());
    let h = health(&srv, "time");
    assert_eq!((h["state"].as_str(), h["last_error"].as_str()), (Some("up"), None), "{h}");
}

#[test]
fn a_call_to_a_down_app_tells_the_client_one_sentence_and_the_logs_the_detail() {
    let port = free_port();
    let mut everything = spawn_everything_on(port);
    let srv = TestServer::start_with_config(&config(
        &format!("  - {{ id: spy, name: Spy, url: \"http://127.0.0.1:{port}/mcp\" }}\n"),
        "",
    ));
    let (gw, key) = create_gateway(&srv, &["spy", "time"]);
    let mcp = Mcp::open(&srv, &gw, &key);
    assert!(mcp.tool_names(1).contains(&"spy__echo".to_string()));
    everything.kill9();

    // The app's tools are in the catalogue: the call reaches for it and fails; then it is
    // left out of the catalogue, and a call of its tool is answered from its failure.
    let mut ids = Vec::new();
    for id in [2, 3] {
        let body = mcp.call(id, "spy__echo", json!({"message": "x"}));
        let (code, message) = rpc_error(&body);
        assert_eq!((code, message.as_str()), (-32004, "app \"spy\" is unavailable (connection refused)"), "{body}");
        let text = body.to_string();
        for leak in ["127.0.0.1", &port.to_string(), "Fail to connect", "ConnectRefused", "os error"] {
            assert!(!text.contains(leak), "`{leak}` reached the client: {body}");
        }
        let request_id = body["error"]["data"]["request_id"].as_str().unwrap_or_else(|| panic!("{body}"));
        assert_eq!(request_id.len(), 36, "a request id: {body}");
        ids.push(request_id.to_string());
    }
    assert_ne!(ids[0], ids[1]);

    // The request log has the entry of the call, under its request id, with the detail.
    let entry = || {
        let logs = ok(&srv.api("GET", "/v1/logs", Some(srv.admin_key()), None), 200);
        logs["logs"].as_array().unwrap().iter().find(|e| e["request_id"] == ids[0].as_str()).cloned()
    };
    wait_until("the failed call's log entry", PATIENCE, || entry().is_some());
    let entry = entry().unwrap();
    assert_eq!(entry["status"], "error", "{entry}");
    let data = &entry["response"]["data"];
    assert_eq!(data["message"], "app \"spy\" is unavailable (connection refused)", "{entry}");
    let detail = data["detail"].as_str().unwrap_or_else(|| panic!("the detail: {entry}"));
    assert!(detail.contains(&format!("127.0.0.1:{port}")) && detail.contains("refused"), "{detail}");
    // And the process log, under the same id.
    let line = srv.stderr().lines().find(|l| l.contains(&ids[0]) && l.contains("app call failed")).map(str::to_string);
    let line = line.unwrap_or_else(|| panic!("a process log line with the request id\n{}", srv.logs_for_humans()));
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
}
