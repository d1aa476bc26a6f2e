//! Decision 23, streams (issue 54, item 5), against the real binary over raw HTTP: the long-lived
//! streams of the MCP endpoint (GET streams and `subscriptions/listen`) are bounded per session,
//! key and organisation (`mcp.streams`). Past a bound the stream is not opened: HTTP 429 with the
//! JSON-RPC error -32010 whose `data.scope` names the bound; a stream that ends gives its place
//! back; another organisation is not held back; the metrics show the open streams and the
//! refusals by scope. Before, 10,050 GET streams of one session took every connection of the
//! listener.

use crate::common::{self, ok, TestServer};
use crate::security_mcp::{
    end_session, gateway, get_request, initialize, listen_request, listen_stateless, orgs_yaml, Listening,
};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Two organisations (owner keys `a` and `b`), streams bounded at 2 per session, 3 per key and 4
/// per organisation.
fn start() -> (TestServer, String, String) {
    let (a, a_yaml) = common::declared_key("key_a", "usr_a", &["*"]);
    let (b, b_yaml) = common::declared_key("key_b", "usr_b", &["*"]);
    let bounds = "mcp:\n  streams: { per_session: 2, per_key: 3, per_organization: 4 }\n";
    let srv = TestServer::start(&format!("{}{bounds}", orgs_yaml(&a_yaml, &b_yaml)));
    (srv, a, b)
}

/// Sends `req` on a connection of its own and reads its whole answer, which must not be an open
/// stream: `(status, JSON body)`.
fn answer_of(srv: &TestServer, req: &str) -> (u16, Value) {
    let mut sock = TcpStream::connect(srv.main_addr()).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    sock.write_all(req.as_bytes()).unwrap();
    let (mut seen, mut buf) = (Vec::new(), [0u8; 4096]);
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            assert!(!head.starts_with("HTTP/1.1 200"), "the stream opened: {text}");
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .unwrap_or_else(|| panic!("a refusal has a Content-Length: {text}"));
            let length: usize = length.parse().unwrap();
            if seen.len() >= end + 4 + length {
                let status = head[9..12].parse().unwrap();
                let body = serde_json::from_slice(&seen[end + 4..end + 4 + length]).unwrap();
                return (status, body);
            }
        }
        let n = sock.read(&mut buf).unwrap_or_else(|e| panic!("the answer did not arrive ({e}): {text}"));
        assert!(n > 0, "the connection closed before the answer: {text}");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// A refusal at the bound of `scope` (`limit`): 429, -32010, the scope and the setting named.
fn assert_refused(answer: (u16, Value), scope: &str, limit: u64, what: &str) {
    let (status, body) = answer;
    assert_eq!(status, 429, "{what}: {body}");
    assert_eq!(body["error"]["code"], -32010, "{what}: {body}");
    let data = &body["error"]["data"];
    assert_eq!((data["scope"].as_str(), data["limit"].as_u64()), (Some(scope), Some(limit)), "{what}: {body}");
    assert_eq!(data["code"], "TOO_MANY_STREAMS", "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(data["setting"].as_str().unwrap()), "the message names the setting: {body}");
}

fn refusals(srv: &TestServer, scope: &str) -> f64 {
    common::metric(srv, &format!("toolgate_mcp_stream_refusals_total{{scope=\"{scope}\"}} "))
}

fn open_streams(srv: &TestServer) -> f64 {
    common::metric(srv, "toolgate_mcp_streams_open ")
}

#[test]
fn streams_are_bounded_per_session_key_and_organisation_and_a_closed_one_frees_its_place() {
    let (srv, a, b) = start();
    let srv = &srv;
    let (gw, gw_key) = gateway(srv, &a);
    let k = ok(
        &srv.api("POST", "/v1/api-keys", Some(&a), Some(json!({"name": "second", "scopes": ["gateways:read"]}))),
        201,
    );
    let second_key = k["key"].as_str().unwrap().to_string();
    let (s1, s2, s3) =
        (initialize(srv, &gw, &gw_key), initialize(srv, &gw, &gw_key), initialize(srv, &gw, &second_key));
    for scope in ["session", "key", "organization"] {
        assert_eq!(refusals(srv, scope), 0.0, "the series exist from zero");
    }

    // Session: two streams of one session, the third refused.
    let mut first = vec![Listening::open(srv, &gw, &gw_key, &s1), Listening::open(srv, &gw, &gw_key, &s1)];
    assert_refused(answer_of(srv, &get_request(srv, &gw, &gw_key, &s1)), "session", 2, "a third stream of a session");
    // Key: its third stream on another session; a fourth refused, on a GET or a `subscriptions/listen`.
    let _third = Listening::open(srv, &gw, &gw_key, &s2);
    assert_refused(answer_of(srv, &get_request(srv, &gw, &gw_key, &s2)), "key", 3, "a fourth stream of a key");
    assert_refused(answer_of(srv, &listen_request(srv, &gw, &gw_key)), "key", 3, "a listen stream past the key's");
    // Organisation: another key's stream is its fourth; a fifth refused.
    let _fourth = Listening::open(srv, &gw, &second_key, &s3);
    assert_refused(
        answer_of(srv, &get_request(srv, &gw, &second_key, &s3)),
        "organization",
        4,
        "a fifth stream of an organisation",
    );
    // Another organisation is not held back, on either kind of stream.
    let (gw_b, gw_b_key) = gateway(srv, &b);
    let sb = initialize(srv, &gw_b, &gw_b_key);
    let _other = (Listening::open(srv, &gw_b, &gw_b_key, &sb), listen_stateless(srv, &gw_b, &gw_b_key));
    assert_eq!(open_streams(srv), 6.0);
    assert_eq!((refusals(srv, "session"), refusals(srv, "key"), refusals(srv, "organization")), (1.0, 2.0, 1.0));

    // A stream whose client goes gives its place back to its session, key and organisation.
    first.pop();
    common::wait_until("the closed stream gives its place back", Duration::from_secs(8), || open_streams(srv) == 5.0);
    first.push(Listening::open(srv, &gw, &gw_key, &s1));
    assert_eq!(open_streams(srv), 6.0);
    // A session that ends ends its streams, and their places are free again: the key's next stream
    // opens on a new session.
    assert_eq!(end_session(srv, &gw, &gw_key, &s1), 200);
    for l in &mut first {
        assert!(l.ends_within(Duration::from_secs(5)), "the ended session's stream stays open: {}", l.text());
    }
    common::wait_until("the ended session's streams give their places back", Duration::from_secs(8), || {
        open_streams(srv) == 4.0
    });
    let s4 = initialize(srv, &gw, &gw_key);
    let _again = Listening::open(srv, &gw, &gw_key, &s4);
    assert_eq!(open_streams(srv), 5.0);
}
