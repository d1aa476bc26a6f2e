//! The `concurrent` cap of the tier table (Decision 2): in-flight requests per key, held for the
//! whole request, with a 429 beyond it.

use crate::common::mcp::{self, Mcp};
use crate::common::{self, everything_url, spawn_everything, TestServer};
use serde_json::json;
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
    let (gw, _) = mcp::create_gateway(&srv, &key, json!({"name": "g", "servers": ["everything"]}));
    let session = mcp::initialize(&srv, &gw, &key, "t");
    let ping = |id: u64| {
        mcp::post(
            &srv,
            &gw,
            &key,
            Some(session.as_str()),
            &json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string(),
        )
    };
    // Two slow calls hold both slots of the key (each on a connection of its own). A slow call
    // that arrives while the other and a ping below hold the two slots is refused before it
    // starts, rightly: it tries again until admitted, and must then be answered with HTTP 200.
    let calls = Mcp::open(&srv, &gw, &key);
    let slow: Vec<_> = (0..2)
        .map(|i| {
            let calls = calls.on_own_connection();
            std::thread::spawn(move || loop {
                let (status, body) =
                    calls.try_call(10 + i, "trigger-long-running-operation", json!({"duration": 2, "steps": 2}));
                match status {
                    429 => std::thread::sleep(Duration::from_millis(5)),
                    200 => return body,
                    _ => panic!("a slow call: HTTP {status}: {body}"),
                }
            })
        })
        .collect();
    // ...so a third request of the same key is refused, with the headers of a 429. Until both
    // slow calls have arrived a ping passes; one is refused once they hold the slots, which must
    // happen before they end.
    let refused = loop {
        let r = ping(3);
        if r.status == 429 {
            break r;
        }
        assert_eq!(r.status, 200, "a ping before the slots are taken");
        assert!(slow.iter().all(|t| !t.is_finished()), "no request was refused while two calls were in flight");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused.header("retry-after").is_some(), "{:?}", refused.headers);
    // ...while the slow ones complete, and then the slots are free again.
    for t in slow {
        t.join().expect("a slow call answered with HTTP 200");
    }
    assert_eq!(ping(4).status, 200, "slots are released when requests end");
    srv.kill9();
}
