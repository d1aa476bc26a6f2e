//! New MCP sessions are written in groups (one store transaction for the sessions that arrive
//! while the one before commits), and each `initialize` is answered only once its group has
//! committed: every session acknowledged survives `kill -9` and a restart, on the embedded store
//! and on Redis. `initialize` once waited for a durable write of its own (issue 59).

use crate::common;

use common::mcp::{create_gateway, initialize, post};
use common::*;
use serde_json::json;

/// Sessions opened, and client threads opening them at once.
const SESSIONS: usize = 200;
const CONNECTIONS: usize = 32;

/// `SESSIONS` sessions of `key` on `gw`, opened by `CONNECTIONS` clients at once; their ids.
fn open_at_once(srv: &TestServer, gw: &str, key: &str) -> Vec<String> {
    let ids = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                scope.spawn(move || {
                    (c..SESSIONS)
                        .step_by(CONNECTIONS)
                        .map(|n| initialize(srv, gw, key, &format!("c{n}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        clients.into_iter().flat_map(|t| t.join().expect("a client thread")).collect::<Vec<_>>()
    });
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), SESSIONS, "every initialize made a session of its own");
    ids
}

/// The count and sum of `toolgate_mcp_session_group_size`: store transactions of new sessions,
/// and the sessions they wrote.
fn groups_and_sessions(srv: &TestServer) -> (u64, u64) {
    let metrics = srv.metrics();
    let read = |series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series} in the metrics"))
    };
    (read("toolgate_mcp_session_group_size_count ") as u64, read("toolgate_mcp_session_group_size_sum ") as u64)
}

/// Opens the sessions at once, checks they were written in groups, kills the process with
/// SIGKILL right after the last answer, restarts it on the same store and uses every session.
fn sessions_survive(srv: &mut TestServer, gw: &str, key: &str) {
    let ids = open_at_once(srv, gw, key);
    let (groups, written) = groups_and_sessions(srv);
    srv.kill9();
    assert_eq!(written, SESSIONS as u64, "every session was written ({groups} transactions)");
    assert!(groups < written, "sessions opened at once share transactions: {written} in {groups}");
    srv.restart();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).to_string();
    for id in &ids {
        let r = post(srv, gw, key, Some(id), &list);
        assert_eq!(r.status, 200, "session {id}, acknowledged before kill -9, after the restart: {}", r.body);
        assert!(r.json()["result"]["tools"].is_array(), "{}", r.body);
    }
}

#[test]
fn sessions_opened_at_once_survive_kill_9_on_the_embedded_store() {
    let mut srv = TestServer::start("");
    let (gw, key) = create_gateway(&srv, srv.admin_key(), json!({ "name": "sessions", "servers": ["time"] }));
    sessions_survive(&mut srv, &gw, &key);
}

#[test]
fn sessions_opened_at_once_survive_kill_9_on_redis() {
    let redis = spawn_redis();
    let prefix = format!("tgsg{}", random_alnum(6).to_lowercase());
    let yaml = BASE_CONFIG.replace(
        "storage:\n  backend: embedded\n  path: {data_dir}\n",
        &format!("storage:\n  backend: redis\n  url: {}\n  key_prefix: {prefix}\n", redis_url(&redis)),
    );
    let mut srv = TestServer::start_opts(ServerOptions {
        full_config: Some(yaml),
        env: vec![("TOOLGATE_SECRET_KEY".into(), "ef".repeat(32))],
        ..Default::default()
    });
    let (gw, key) = create_gateway(&srv, srv.admin_key(), json!({ "name": "sessions", "servers": ["time"] }));
    sessions_survive(&mut srv, &gw, &key);
}
