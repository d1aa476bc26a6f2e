//! The `concurrent` cap of the tier table (Decision 2): in-flight requests per key, held for the
//! whole request, with a 429 beyond it.

use crate::common::{self, everything_url, spawn_everything, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

#[test]
fn in_flight_requests_beyond_the_cap_are_429() {
    let everything = spawn_everything();
    let (key, key_yaml) = common::declared_key("key_cc", "usr_cc", &["*"]);
    let mut srv = TestServer::start_with_config(&format!(
        "server:\n  listen: 127.0.0.1:0\n  metrics_listen: 127.0.0.2:0\n  grace_period_secs: 1\n\
         storage:\n  backend: embedded\n  path: {{data_dir}}\n\
         rate_limits:\n  tiers:\n    duo: {{ requests_per_hour: 10000, requests_per_minute: 1000, burst: 100, concurrent: 2 }}\n\
         organizations:\n  - {{ id: org_cc, name: CC, tier: duo }}\n\
         users:\n  - {{ id: usr_cc, email: cc@cc.test, name: CC, role: owner, organization: org_cc }}\n\
         api_keys:\n{key_yaml}\
         apps:\n  - {{ id: everything, name: Everything, url: {} }}\n",
        everything_url(&everything)
    ));
    let gw = srv.api("POST", "/v1/gateways", Some(&key), Some(json!({"name": "g", "servers": ["everything"]})));
    let url = srv.url(&format!("/gateway/{}/mcp", gw.data()["id"].as_str().unwrap()));
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let post = |session: Option<&str>, body: Value| {
        let mut r = client
            .post(&url)
            .header("X-API-Key", &key)
            .header("Accept", "application/json")
            .header("Content-Type", "application/json")
            .json(&body);
        if let Some(s) = session {
            r = r.header("Mcp-Session-Id", s);
        }
        r.send().unwrap()
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_string();
    // Two slow calls hold both slots of the key...
    let slow: Vec<_> = (0..2)
        .map(|i| {
            let (client, url, key, session) = (client.clone(), url.clone(), key.clone(), session.clone());
            std::thread::spawn(move || {
                client
                    .post(&url)
                    .header("X-API-Key", &key)
                    .header("Mcp-Session-Id", &session)
                    .header("Accept", "application/json")
                    .header("Content-Type", "application/json")
                    .json(&json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                        "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 2, "steps": 2}}}))
                    .send()
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    // ...so a third request of the same key is refused, with the headers of a 429. Until both
    // slow calls have arrived a ping passes; one is refused once they hold the slots, which must
    // happen before they end.
    let refused = loop {
        let r = post(Some(&session), json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
        if r.status().as_u16() == 429 {
            break r;
        }
        assert_eq!(r.status().as_u16(), 200, "a ping before the slots are taken");
        assert!(slow.iter().all(|t| !t.is_finished()), "no request was refused while two calls were in flight");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused.headers().contains_key("retry-after"), "{:?}", refused.headers());
    // ...while the slow ones complete, and then the slots are free again.
    for t in slow {
        assert_eq!(t.join().unwrap(), 200);
    }
    let r = post(Some(&session), json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    assert_eq!(r.status().as_u16(), 200, "slots are released when requests end");
    srv.kill9();
}
