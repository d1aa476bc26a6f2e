//! The harness itself works: the binary starts on OS-chosen ports, both listeners are found and
//! answer what they should, restart gives new ports on the same data, and the peers start.

use crate::common;

use common::{declared_key, listening_ports, sha256_hex, TestServer};

#[test]
fn starts_and_finds_both_listeners() {
    let srv = TestServer::start("");
    assert_ne!(srv.main_addr(), srv.metrics_addr());

    let health = srv.client().get(srv.url("/healthz")).send().expect("GET /healthz");
    assert_eq!(health.status().as_u16(), 200);
    let body: serde_json::Value = health.json().expect("/healthz answers JSON");
    assert!(body.is_object(), "/healthz body: {body}");

    let metrics = srv.metrics();
    assert!(metrics.contains("# TYPE") || metrics.contains("# HELP"), "not Prometheus text:\n{metrics}");

    // /metrics lives only on its own listener.
    let on_main = srv.client().get(srv.url("/metrics")).send().expect("GET main /metrics");
    assert_eq!(on_main.status().as_u16(), 404);

    // Exactly the two listeners we configured.
    let mut ports = listening_ports(srv.pid()).expect("read /proc");
    ports.sort_unstable();
    let mut want = vec![srv.port(), srv.metrics_port()];
    want.sort_unstable();
    assert_eq!(ports, want);

    assert!(srv.admin_key().starts_with("ag_") && srv.admin_key().len() == 40);
}

#[test]
fn restart_keeps_config_and_key_with_new_process() {
    let mut srv = TestServer::start("");
    let (pid, config) = (srv.pid(), srv.config_path().to_path_buf());
    srv.kill9();
    srv.restart();
    assert_ne!(srv.pid(), pid);
    assert_eq!(srv.config_path(), config);
    let health = srv.client().get(srv.url("/healthz")).send().expect("GET /healthz");
    assert_eq!(health.status().as_u16(), 200);
}

#[test]
fn sigterm_stops_the_server() {
    let mut srv = TestServer::start("");
    let status = srv.sigterm();
    assert!(!srv.is_running());
    eprintln!("toolgate exit after SIGTERM: {status}");
}

#[test]
fn declared_key_hashes_the_plaintext() {
    let (key, yaml) = declared_key("key_bob", "usr_bob", &["gateways:*", "apps:read"]);
    assert!(key.starts_with("ag_") && key.len() == 40);
    assert!(yaml.contains(&sha256_hex(&key)), "{yaml}");
    assert!(yaml.contains("\"gateways:*\""), "{yaml}");
    assert_eq!(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

#[test]
fn peers_start() {
    let everything = common::spawn_everything();
    assert!(everything.port > 0);
    let resp = reqwest::blocking::Client::new()
        .post(common::everything_url(&everything))
        .header("accept", "application/json, text/event-stream")
        .json(&serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "toolgate-harness", "version": "0"}}
        }))
        .send()
        .expect("POST initialize to server-everything");
    assert_eq!(resp.status().as_u16(), 200, "server-everything initialize");

    let redis = common::spawn_redis();
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", redis.port)).expect("connect redis");
    use std::io::{Read, Write};
    conn.write_all(b"PING\r\n").expect("write");
    let mut buf = [0u8; 7];
    conn.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"+PONG\r\n");

    let time = common::mcp_server_time_command();
    assert!(std::path::Path::new(&time[0]).exists(), "{time:?}");
}
