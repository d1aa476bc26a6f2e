//! Security issue 11, the MCP side, against the real binary over raw HTTP: open GET (listening)
//! streams hold no `concurrent` slot and end as soon as their client goes (#3); MCP sessions are
//! removed after expiry from memory and the store, capped per key and per organisation, and
//! listed per organisation (#10); a stream ends when its key is revoked or its gateway deleted,
//! and a session of an OAuth access token when its grant is revoked (not when an unrelated key
//! changes); JSON-RPC ids come back byte-exact.

use crate::common::mcp::credential_header;
use crate::common::{self, err, ok, ok_message, RawResponse as Raw, TestServer};
use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------------------
// Helpers

/// Two organisations on the `free` tier (5 concurrent requests per key) with an owner key each.
/// The free tier's request rates are raised so that only `concurrent` can refuse a request here.
pub(crate) fn orgs_yaml(key_a: &str, key_b: &str) -> String {
    format!(
        "rate_limits:\n  tiers:\n    free: {{ requests_per_hour: 100000, requests_per_minute: 10000, burst: 1000, concurrent: 5 }}\n\
         organizations:\n  - {{ id: org_a, name: A Inc, tier: free }}\n  - {{ id: org_b, name: B Inc, tier: free }}\n\
         users:\n  - {{ id: usr_a, email: a@a.test, name: A, role: owner, organization: org_a }}\n\
         \x20 - {{ id: usr_b, email: b@b.test, name: B, role: owner, organization: org_b }}\n\
         api_keys:\n{key_a}{key_b}"
    )
}

struct Setup {
    srv: TestServer,
    /// Owner keys of `org_a` and `org_b`.
    a: String,
    b: String,
}

fn start(mcp_yaml: &str) -> Setup {
    let (a, a_yaml) = common::declared_key("key_a", "usr_a", &["*"]);
    let (b, b_yaml) = common::declared_key("key_b", "usr_b", &["*"]);
    let srv = TestServer::start(&format!("{}{mcp_yaml}", orgs_yaml(&a_yaml, &b_yaml)));
    Setup { srv, a, b }
}

/// A gateway with the built-in `time` app: `(id, access key)`.
pub(crate) fn gateway(srv: &TestServer, owner: &str) -> (String, String) {
    let name = format!("g-{}", common::random_alnum(8));
    common::mcp::create_gateway(srv, owner, json!({"name": name, "servers": ["time"]}))
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).no_proxy().build().unwrap()
}

/// DELETE on the endpoint with `session`: the client ends it. Its HTTP status.
pub(crate) fn end_session(srv: &TestServer, gw: &str, key: &str, session: &str) -> u16 {
    let (header, value) = credential_header(key);
    let r = client()
        .delete(srv.url(&format!("/gateway/{gw}/mcp")))
        .header(header, value)
        .header("Mcp-Session-Id", session)
        .send()
        .unwrap();
    r.status().as_u16()
}

pub(crate) fn initialize_raw(srv: &TestServer, gw: &str, key: &str) -> Raw {
    common::mcp::initialize_raw(srv, gw, key, "security_mcp")
}

/// A new session of `key` on `gw`.
pub(crate) fn initialize(srv: &TestServer, gw: &str, key: &str) -> String {
    common::mcp::initialize(srv, gw, key, "security_mcp")
}

pub(crate) fn call_time(srv: &TestServer, gw: &str, key: &str, session: &str) -> Raw {
    common::mcp::post(
        srv,
        gw,
        key,
        Some(session),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_current_time","arguments":{"format":"YYYY"}}}"#,
    )
}

/// The HTTP/1.1 request of a session's GET stream on `gw`.
pub(crate) fn get_request(srv: &TestServer, gw: &str, key: &str, session: &str) -> String {
    let (header, value) = credential_header(key);
    format!(
        "GET /gateway/{gw}/mcp HTTP/1.1\r\nHost: {}\r\n{header}: {value}\r\nMcp-Session-Id: {session}\r\n\
         Accept: text/event-stream\r\n\r\n",
        srv.main_addr()
    )
}

/// An open GET stream on a raw socket: dropping it is the client going away.
pub(crate) struct Listening {
    sock: TcpStream,
    seen: Vec<u8>,
}

impl Listening {
    pub(crate) fn open(srv: &TestServer, gw: &str, key: &str, session: &str) -> Listening {
        Listening::request(srv, &get_request(srv, gw, key, session), ": stream open")
    }

    /// Sends `req` on a connection of its own and reads until `opened` has arrived in a 200
    /// event stream.
    fn request(srv: &TestServer, req: &str, opened: &str) -> Listening {
        let mut sock = TcpStream::connect(srv.main_addr()).expect("connect");
        sock.write_all(req.as_bytes()).unwrap();
        let mut l = Listening { sock, seen: Vec::new() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !l.text().contains(opened) {
            assert!(l.read_until(deadline), "the stream did not open: {}", l.text());
        }
        assert!(l.text().starts_with("HTTP/1.1 200"), "{}", l.text());
        assert!(l.text().to_ascii_lowercase().contains("content-type: text/event-stream"), "{}", l.text());
        l
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Reads what arrives before `deadline`: true when bytes came, false once the server closed
    /// the connection or the time is up. A read timeout that the kernel fires a little before
    /// `deadline` (its clock is coarser than `Instant`) is read again, not taken for an end.
    fn read_until(&mut self, deadline: Instant) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                return false;
            };
            self.sock.set_read_timeout(Some(left)).unwrap();
            match self.sock.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.seen.extend_from_slice(&buf[..n]);
                    return true;
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
                Err(_) => return false,
            }
        }
    }

    /// Whether `needle` arrives on the stream within `limit` (what it waits for, not a time).
    pub(crate) fn arrives(&mut self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.text().contains(needle) {
            if !self.read_until(deadline) {
                return false;
            }
        }
        true
    }

    /// Whether the server ends the stream (the last chunk, or the connection closed) within
    /// `limit`.
    pub(crate) fn ends_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.text().contains("\r\n0\r\n\r\n") {
                return true;
            }
            if !self.read_until(deadline) {
                return Instant::now() < deadline;
            }
        }
    }
}

/// `toolgate_requests_total{route="gateway",status="200"}`: gateway requests finished.
fn listed(srv: &TestServer, owner: &str) -> Vec<String> {
    let data = ok(&srv.api("GET", "/v1/sessions?limit=100", Some(owner), None), 200);
    data["sessions"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

/// Stored session records with this id, read from the embedded store's file.
fn stored_sessions(srv: &TestServer, id: &str) -> u64 {
    let db = rusqlite::Connection::open_with_flags(
        srv.data_dir().join("toolgate.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the store");
    db.query_row("SELECT count(*) FROM records WHERE kind = 'session' AND id = ?1", [id], |r| r.get(0)).unwrap()
}

// ------------------------------------------------------------------------------------------------
// Medium #3: listening streams and `concurrent`

#[test]
fn listening_streams_hold_no_concurrent_slot_and_end_when_the_client_goes() {
    let s = start("");
    let srv = &s.srv;
    let (gw, gw_key) = gateway(srv, &s.a);
    // Six clients of one gateway key (free tier: 5 concurrent requests) listen on their streams...
    let sessions: Vec<String> = (0..6).map(|_| initialize(srv, &gw, &gw_key)).collect();
    let streams: Vec<Listening> = sessions.iter().map(|sid| Listening::open(srv, &gw, &gw_key, sid)).collect();
    // ...and every one of them can still call tools and list them.
    for sid in &sessions {
        let r = call_time(srv, &gw, &gw_key, sid);
        assert_eq!(r.status, 200, "tools/call with six streams open: {:?} {}", r.header("retry-after"), r.body);
        assert!(r.json()["result"]["content"][0]["text"].is_string(), "{}", r.body);
        let r = common::mcp::post(srv, &gw, &gw_key, Some(sid), r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#);
        assert_eq!(r.status, 200, "tools/list: {}", r.body);
    }
    // The clients go: their streams finish at once (they used to wait for a failed keep-alive
    // write, 15 to 30 s later, holding a slot each all that time), and their connections close.
    assert_eq!(common::metric(srv, "toolgate_mcp_streams_open "), 6.0);
    let open = common::metric(srv, "toolgate_connections_open ");
    drop(streams);
    common::wait_until("the six streams finish after their clients left", Duration::from_secs(8), || {
        common::metric(srv, "toolgate_mcp_streams_open ") == 0.0
            && common::metric(srv, "toolgate_connections_open ") <= open - 6.0
    });
    // Calls still work, and the key's five slots are all free: five concurrent calls pass.
    let calls: Vec<_> = sessions[..5]
        .iter()
        .map(|sid| {
            let (url, gw_key, sid) = (srv.url(&format!("/gateway/{gw}/mcp")), gw_key.clone(), sid.clone());
            std::thread::spawn(move || {
                client()
                    .post(url)
                    .header("X-API-Key", gw_key)
                    .header("Mcp-Session-Id", sid)
                    .header("Accept", "application/json")
                    .header("Content-Type", "application/json")
                    .body(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#)
                    .send()
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    for c in calls {
        assert_eq!(c.join().unwrap(), 200);
    }
}

/// A stateless client's `subscriptions/listen` stream (2026-07-28) on `gw`: its connection, once
/// the acknowledgement has arrived.
pub(crate) fn listen_stateless(srv: &TestServer, gw: &str, key: &str) -> Listening {
    Listening::request(srv, &listen_request(srv, gw, key), "notifications/subscriptions/acknowledged")
}

/// The HTTP/1.1 request of a stateless client's `subscriptions/listen` on `gw`.
pub(crate) fn listen_request(srv: &TestServer, gw: &str, key: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":41,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    format!(
        "POST /gateway/{gw}/mcp HTTP/1.1\r\nHost: {}\r\nX-API-Key: {key}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
        srv.main_addr(),
        body.len()
    )
}

/// `subscriptions/listen` is the stateless counterpart of the GET stream: once open, it holds no
/// `concurrent` slot either.
#[test]
fn stateless_listen_streams_hold_no_concurrent_slot() {
    let s = start("");
    let srv = &s.srv;
    let (gw, gw_key) = gateway(srv, &s.a);
    // Six listen streams of one gateway key (free tier: 5 concurrent requests)...
    let _streams: Vec<Listening> = (0..6).map(|_| listen_stateless(srv, &gw, &gw_key)).collect();
    // ...and the key's calls still pass.
    let sid = initialize(srv, &gw, &gw_key);
    let r = call_time(srv, &gw, &gw_key, &sid);
    assert_eq!(r.status, 200, "tools/call with six listen streams open: {:?} {}", r.header("retry-after"), r.body);
}

/// An HTTP/1 stream goes on by itself once open (the request's state freed, `Exchange::stream_on`)
/// and keeps its connection's place: the per-address cap counts it, and its end gives the place
/// back. It still hears its gateway's changes, and still ends with its session.
#[test]
fn an_open_stream_keeps_its_connections_place_hears_changes_and_ends_with_its_session() {
    let (a, a_yaml) = common::declared_key("key_a", "usr_a", &["*"]);
    let (_, b_yaml) = common::declared_key("key_b", "usr_b", &["*"]);
    let config = common::BASE_CONFIG.replace(
        "  trusted_proxies: []\n",
        "  trusted_proxies: []\n  max_connections: 100\n  max_connections_per_ip: 3\n  keepalive_idle_secs: 1\n",
    );
    assert_ne!(config, common::BASE_CONFIG, "the base config has a `trusted_proxies: []` line to add after");
    let srv = TestServer::start_with_config(&format!("{config}{}", orgs_yaml(&a_yaml, &b_yaml)));
    let (gw, gw_key) = gateway(&srv, &a);
    let sessions: Vec<String> = (0..3).map(|_| initialize(&srv, &gw, &gw_key)).collect();
    // The set-up's kept-alive connections close after their idle second.
    common::wait_until("the set-up's connections close", Duration::from_secs(10), || {
        common::metric(&srv, "toolgate_connections_open ") == 0.0
    });
    let mut streams: Vec<Listening> =
        sessions[..2].iter().map(|sid| Listening::open(&srv, &gw, &gw_key, sid)).collect();
    assert_eq!(common::metric(&srv, "toolgate_connections_open "), 2.0, "each open stream is a connection");
    // A third connection from the same address is admitted (answered, so it holds its place
    // before the next one comes); a fourth is refused while the streams are open.
    let mut third = TcpStream::connect(srv.main_addr()).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    third.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains(r#""ok""#) {
        let n = third.read(&mut buf).unwrap();
        assert!(n > 0, "the third connection was closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    let mut fourth = TcpStream::connect(srv.main_addr()).unwrap();
    fourth.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = fourth.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        matches!(fourth.read(&mut buf), Ok(0) | Err(_)),
        "a fourth connection from the address is closed unanswered while two streams and a third connection hold their places"
    );
    assert!(common::metric(&srv, "toolgate_connections_refused_total{reason=\"per_address\"} ") >= 1.0);
    drop(third);
    common::wait_until("the third connection's place is given back", Duration::from_secs(10), || {
        common::metric(&srv, "toolgate_connections_open ") == 2.0
    });
    // A management change (on a connection of its own, the third place) reaches the open streams.
    let r = client()
        .patch(srv.url(&format!("/v1/gateways/{gw}")))
        .bearer_auth(&a)
        .json(&json!({"description": "changed"}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    drop(r);
    for l in &mut streams {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !l.text().contains("notifications/tools/list_changed") {
            assert!(l.read_until(deadline), "the change did not reach the stream: {}", l.text());
        }
    }
    common::wait_until("the change's connection closes", Duration::from_secs(10), || {
        common::metric(&srv, "toolgate_connections_open ") == 2.0
    });
    // DELETE of the first stream's session ends that stream: the server closes the connection.
    assert_eq!(end_session(&srv, &gw, &gw_key, &sessions[0]), 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    while streams[0].read_until(deadline) {}
    assert!(Instant::now() < deadline, "the ended session's stream was not closed: {}", streams[0].text());
    // Its place is free again, and the other stream's client leaving frees its place too.
    drop(streams);
    common::wait_until("the streams' places are given back", Duration::from_secs(10), || {
        common::metric(&srv, "toolgate_connections_open ") == 0.0
            && common::metric(&srv, "toolgate_mcp_streams_open ") == 0.0
    });
    let again: Vec<Listening> = sessions[1..].iter().map(|sid| Listening::open(&srv, &gw, &gw_key, sid)).collect();
    assert_eq!(again.len(), 2, "the address can open streams again");
}

// ------------------------------------------------------------------------------------------------
// Low: a stream ends with its key and with its gateway

#[test]
fn a_stream_ends_when_its_key_is_revoked() {
    let s = start("");
    let srv = &s.srv;
    let (gw, _) = gateway(srv, &s.a);
    let k = ok(
        &srv.api("POST", "/v1/api-keys", Some(&s.a), Some(json!({"name": "listener", "scopes": ["gateways:read"]}))),
        201,
    );
    let (key_id, key) = (k["id"].as_str().unwrap(), k["key"].as_str().unwrap());
    let sid = initialize(srv, &gw, key);
    let mut stream = Listening::open(srv, &gw, key, &sid);
    // Another session of another key on the same gateway is not concerned.
    let other = initialize(srv, &gw, &s.a);
    let mut other_stream = Listening::open(srv, &gw, &s.a, &other);

    ok(&srv.api("DELETE", &format!("/v1/api-keys/{key_id}"), Some(&s.a), None), 200);
    assert!(stream.ends_within(Duration::from_secs(5)), "the stream outlived its key: {}", stream.text());
    let detail = ok(&srv.api("GET", &format!("/v1/sessions/{sid}"), Some(&s.a), None), 200);
    assert_eq!(detail["status"], "ended", "{detail}");
    assert!(!other_stream.ends_within(Duration::from_millis(1500)), "another key's stream ended too");
    let detail = ok(&srv.api("GET", &format!("/v1/sessions/{other}"), Some(&s.a), None), 200);
    assert_eq!(detail["status"], "active", "{detail}");
}

const REDIRECT: &str = "https://client.example/cb";

/// A gateway of `org_a` that takes toolgate's own OAuth tokens, and an access token for its
/// endpoint (RFC 8707) that `usr_a` grants a confidential client on the consent page:
/// `(gateway id, client_id, client_secret, access token)`.
pub(crate) fn oauth_gateway_token(srv: &TestServer, owner: &str) -> (String, String, String, String) {
    let body = json!({"name": "oauth-gw", "servers": ["time"], "configuration": {"auth": "oauth"}});
    let gw = ok(&srv.api("POST", "/v1/gateways", Some(owner), Some(body)), 201)["id"].as_str().unwrap().to_string();
    let body = json!({ "name": "MCP client", "redirect_uris": [REDIRECT], "scopes": ["gateways:read"] });
    let c = ok(&srv.api("POST", "/v1/oauth/clients", Some(owner), Some(body)), 201);
    let (client, secret) =
        (c["client_id"].as_str().unwrap().to_string(), c["client_secret"].as_str().unwrap().to_string());
    let password = "oauth session passphrase";
    ok_message(&srv.request("PUT", "/v1/user/password", Some(owner), Some(json!({ "new_password": password })), &[]));
    let browser = common::Browser::new(srv, "a.test");
    assert_eq!(browser.sign_in("a", password, "").status, 303);

    let resource = format!("http://localhost:8080/gateway/{gw}/mcp");
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let query = format!(
        "/auth/oauth/authorize?response_type=code&client_id={client}&redirect_uri={}&resource={}&state=st",
        enc(REDIRECT),
        enc(&resource)
    );
    let page = browser.send("GET", &query, None);
    assert_eq!(page.status, 200, "the consent page: {page:?}");
    let marker = "name=\"csrf\" value=\"";
    let at = page.text.find(marker).expect("a CSRF field") + marker.len();
    let csrf = page.text[at..].split('"').next().unwrap().to_string();
    let form = [
        ("csrf", csrf.as_str()),
        ("client_id", &client),
        ("redirect_uri", REDIRECT),
        ("response_type", "code"),
        ("resource", &resource),
        ("state", "st"),
        ("decision", "allow"),
    ];
    let back = browser.send("POST", "/auth/oauth/authorize", Some(&form));
    assert_eq!(back.status, 303, "{back:?}");
    let to = url::Url::parse(back.header("location").unwrap()).unwrap();
    let code = to.query_pairs().find(|(k, _)| k == "code").map(|(_, v)| v.into_owned()).expect("a code");
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("client_id", &client),
        ("client_secret", &secret),
        ("resource", &resource),
    ];
    let r = common::Resp::from_blocking(srv.client().post(srv.url("/auth/oauth/token")).form(&form).send().unwrap());
    assert_eq!(r.status, 200, "{r:?}");
    let access = r.json["access_token"].as_str().unwrap().to_string();
    assert!(access.starts_with("tga_grt_"), "{access}");
    (gw, client, secret, access)
}

#[test]
fn an_oauth_session_outlives_other_keys_and_ends_with_its_grant() {
    let s = start("");
    let srv = &s.srv;
    let (gw, client, secret, access) = oauth_gateway_token(srv, &s.a);
    let sid = initialize(srv, &gw, &access);
    let mut stream = Listening::open(srv, &gw, &access, &sid);
    assert_eq!(call_time(srv, &gw, &access, &sid).status, 200);

    // Another key made and deleted, and more than a flush (500 ms) later: the session goes on.
    let k = ok(
        &srv.api("POST", "/v1/api-keys", Some(&s.a), Some(json!({"name": "other", "scopes": ["gateways:read"]}))),
        201,
    );
    ok(&srv.api("DELETE", &format!("/v1/api-keys/{}", k["id"].as_str().unwrap()), Some(&s.a), None), 200);
    assert!(!stream.ends_within(Duration::from_millis(1500)), "an unrelated key ended the stream: {}", stream.text());
    let r = call_time(srv, &gw, &access, &sid);
    assert_eq!(r.status, 200, "a tools/call after an unrelated key's change: {}", r.body);
    let detail = ok(&srv.api("GET", &format!("/v1/sessions/{sid}"), Some(&s.a), None), 200);
    assert_eq!(detail["status"], "active", "{detail}");

    // The client revokes its token (and so the grant): the session ends and its stream closes
    // within a second.
    let form = [("token", access.as_str()), ("client_id", &client), ("client_secret", &secret)];
    let r = srv.client().post(srv.url("/auth/oauth/revoke")).form(&form).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(stream.ends_within(Duration::from_secs(1)), "the stream outlived its grant: {}", stream.text());
    let detail = ok(&srv.api("GET", &format!("/v1/sessions/{sid}"), Some(&s.a), None), 200);
    assert_eq!(detail["status"], "ended", "{detail}");
    assert_eq!(call_time(srv, &gw, &access, &sid).status, 401, "the revoked token");
}

#[test]
fn a_stream_ends_when_its_gateway_is_deleted() {
    let s = start("");
    let srv = &s.srv;
    let (gw, gw_key) = gateway(srv, &s.a);
    let (kept, kept_key) = gateway(srv, &s.a);
    // Streams of the gateway's own key and of an account key.
    let sid = initialize(srv, &gw, &gw_key);
    let mut stream = Listening::open(srv, &gw, &gw_key, &sid);
    let account = initialize(srv, &gw, &s.a);
    let mut account_stream = Listening::open(srv, &gw, &s.a, &account);
    let kept_sid = initialize(srv, &kept, &kept_key);
    let mut kept_stream = Listening::open(srv, &kept, &kept_key, &kept_sid);

    ok(&srv.api("DELETE", &format!("/v1/gateways/{gw}"), Some(&s.a), None), 200);
    assert!(stream.ends_within(Duration::from_secs(5)), "the stream outlived its gateway: {}", stream.text());
    assert!(account_stream.ends_within(Duration::from_secs(5)), "an account key's stream outlived the gateway");
    for id in [&sid, &account] {
        let detail = ok(&srv.api("GET", &format!("/v1/sessions/{id}"), Some(&s.a), None), 200);
        assert_eq!(detail["status"], "ended", "{detail}");
    }
    assert!(!kept_stream.ends_within(Duration::from_millis(1500)), "another gateway's stream ended too");
    assert_eq!(call_time(srv, &kept, &kept_key, &kept_sid).status, 200);
}

// ------------------------------------------------------------------------------------------------
// Medium #10: sessions are removed, capped, and listed per organisation

#[test]
fn an_expired_session_leaves_the_list_and_the_store_and_is_not_loaded_again() {
    let mut s = start("mcp:\n  session_idle_timeout_secs: 2\n  session_retention_secs: 1\n");
    let (gw, gw_key) = gateway(&s.srv, &s.a);
    let sid = initialize(&s.srv, &gw, &gw_key);
    let kept = initialize(&s.srv, &gw, &gw_key);
    assert!(listed(&s.srv, &s.a).contains(&sid), "a new session is listed");
    assert_eq!(stored_sessions(&s.srv, &sid), 1, "a new session is stored");

    // Idle past the timeout and the retention: gone from the list, the detail and the store,
    // in the background (nobody asks for it). `kept` is kept alive meanwhile.
    let started = Instant::now();
    common::wait_until("the expired session leaves /v1/sessions", Duration::from_secs(20), || {
        assert_eq!(
            common::mcp::post(&s.srv, &gw, &gw_key, Some(&kept), r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).status,
            200
        );
        !listed(&s.srv, &s.a).contains(&sid)
    });
    // Not before the expiry is the behaviour under test (idle 2 s; 1 s leaves room for the
    // moment between the last use and `started`).
    assert!(started.elapsed() >= Duration::from_secs(1), "removed before it expired");
    err(&s.srv.api("GET", &format!("/v1/sessions/{sid}"), Some(&s.a), None), 404, "NOT_FOUND");
    common::wait_until("the expired session leaves the store", Duration::from_secs(10), || {
        stored_sessions(&s.srv, &sid) == 0
    });
    assert_eq!(
        common::mcp::post(&s.srv, &gw, &gw_key, Some(&sid), r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).status,
        404
    );
    assert!(listed(&s.srv, &s.a).contains(&kept), "a session in use stays");

    // With a long idle timeout after a restart, a record left in the store would be loaded as
    // active again.
    s.srv.kill9();
    let config = std::fs::read_to_string(s.srv.config_path()).unwrap();
    let config = config.replace("session_idle_timeout_secs: 2", "session_idle_timeout_secs: 3600");
    std::fs::write(s.srv.config_path(), config).unwrap();
    s.srv.restart();
    err(&s.srv.api("GET", &format!("/v1/sessions/{sid}"), Some(&s.a), None), 404, "NOT_FOUND");
    assert!(!listed(&s.srv, &s.a).contains(&sid));
    assert!(listed(&s.srv, &s.a).contains(&kept), "the live session survives the restart");
}

/// Commands Redis has served so far, of every kind (`INFO commandstats`).
fn redis_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|l| {
            l.split_once(":calls=").map(|(_, rest)| rest.split(',').next().unwrap().parse::<u64>().unwrap())
        })
        .sum()
}

#[test]
fn expired_sessions_leave_redis_in_batches() {
    let redis = common::spawn_redis();
    let prefix = format!("tgsw{}", common::random_alnum(6).to_lowercase());
    let (a, a_yaml) = common::declared_key("key_a", "usr_a", &["*"]);
    let (_, b_yaml) = common::declared_key("key_b", "usr_b", &["*"]);
    let storage = format!("storage:\n  backend: redis\n  url: {}\n  key_prefix: {prefix}\n", common::redis_url(&redis));
    let base = common::BASE_CONFIG.replace("storage:\n  backend: embedded\n  path: {data_dir}\n", &storage);
    assert!(base.contains("backend: redis"), "test setup: the base configuration changed shape");
    let yaml = format!(
        "{base}{}mcp:\n  session_idle_timeout_secs: 3600\n  session_retention_secs: 0\n  max_sessions_per_key: 1000\n",
        orgs_yaml(&a_yaml, &b_yaml)
    );
    let srv = TestServer::start_opts(common::ServerOptions {
        full_config: Some(yaml),
        env: vec![("TOOLGATE_SECRET_KEY".into(), "ab".repeat(32))],
        ..Default::default()
    });
    let (gw, gw_key) = gateway(&srv, &a);
    let n = 300;
    let ids: Vec<String> = (0..n).map(|_| initialize(&srv, &gw, &gw_key)).collect();
    let mut conn = redis::Client::open(common::redis_url(&redis)).unwrap().get_connection().unwrap();
    let mut session_keys =
        || -> Vec<String> { redis::cmd("KEYS").arg(format!("{prefix}:*session*")).query(&mut conn).unwrap() };
    let stored = session_keys();
    for id in &ids {
        assert!(stored.iter().any(|k| k.ends_with(id.as_str())), "{id} is in Redis: {stored:?}");
    }
    let mut conn = redis::Client::open(common::redis_url(&redis)).unwrap().get_connection().unwrap();
    let before = redis_calls(&mut conn);
    // A reload shortens the idle time-out to 1 s: out of memory, then every record, locator and
    // index entry leaves Redis.
    let config = std::fs::read_to_string(srv.config_path()).unwrap();
    std::fs::write(
        srv.config_path(),
        config.replace("session_idle_timeout_secs: 3600", "session_idle_timeout_secs: 1"),
    )
    .unwrap();
    ok(&srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None), 200);
    common::wait_until("the expired sessions leave Redis", Duration::from_secs(30), || {
        let left = session_keys();
        left.iter().all(|k| !ids.iter().any(|id| k.ends_with(id.as_str())))
            && redis::cmd("SCARD").arg(format!("{prefix}:k:session")).query::<u64>(&mut conn).unwrap() == 0
    });
    let left = session_keys();
    assert!(left.iter().all(|k| !k.contains(":r:session:") && !k.contains(":loc:session:")), "{left:?}");
    // In batches: one by one took several commands per session (read its locator, delete its
    // record, its locator and its index entries). The count includes this test's own reads and
    // the flushes' writes meanwhile.
    let sent = redis_calls(&mut conn) - before;
    eprintln!("{sent} Redis commands while {n} sessions were removed");
    assert!(sent < n as u64, "{sent} Redis commands while {n} sessions were removed");
    assert!(!listed(&srv, &a).iter().any(|id| ids.contains(id)), "gone from the list too");
}

#[test]
fn live_sessions_are_capped_per_key_and_per_organisation() {
    let s = start("mcp:\n  max_sessions_per_key: 2\n  max_sessions_per_organization: 3\n");
    let srv = &s.srv;
    let (gw, gw_key) = gateway(srv, &s.a);
    let first = initialize(srv, &gw, &gw_key);
    let _second = initialize(srv, &gw, &gw_key);
    // The key's third is refused with a JSON-RPC error naming the limit.
    let r = initialize_raw(srv, &gw, &gw_key);
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.header("mcp-session-id").is_none(), "no session was made");
    let e = r.json();
    assert_eq!(e["id"], 1, "{e}");
    assert_eq!(e["error"]["data"]["code"], "TOO_MANY_SESSIONS", "{e}");
    assert_eq!(e["error"]["data"]["limit"], 2, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("mcp.max_sessions_per_key"), "{e}");

    // Another key of the organisation gets the organisation's third, and no fourth.
    let _third = initialize(srv, &gw, &s.a);
    let r = initialize_raw(srv, &gw, &s.a);
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("mcp.max_sessions_per_organization"), "{}", r.body);

    // Another organisation has its own count, and never sees these sessions.
    let (gw_b, gw_b_key) = gateway(srv, &s.b);
    let b_sid = initialize(srv, &gw_b, &gw_b_key);
    let b_list = listed(srv, &s.b);
    assert_eq!(b_list, vec![b_sid.clone()], "B sees exactly its own session");
    err(&srv.api("GET", &format!("/v1/sessions/{first}"), Some(&s.b), None), 404, "NOT_FOUND");
    assert!(!listed(srv, &s.a).contains(&b_sid), "A sees B's session");

    // Ending one (DELETE on the endpoint) frees a place at once.
    assert_eq!(end_session(srv, &gw, &gw_key, &first), 200);
    initialize(srv, &gw, &gw_key);
    assert_eq!(initialize_raw(srv, &gw, &gw_key).status, 429, "the cap holds again");
}

#[test]
fn expired_sessions_do_not_count_toward_the_cap() {
    let s = start("mcp:\n  session_idle_timeout_secs: 1\n  max_sessions_per_key: 1\n");
    let srv = &s.srv;
    let (gw, gw_key) = gateway(srv, &s.a);
    let old = initialize(srv, &gw, &gw_key);
    assert_eq!(initialize_raw(srv, &gw, &gw_key).status, 429);
    // Time passing is the behaviour under test: idle past the 1 s time-out.
    std::thread::sleep(Duration::from_millis(1500));
    // Idle past the timeout (still listed, as expired, for the retention): a new one is allowed.
    initialize(srv, &gw, &gw_key);
    let detail = ok(&srv.api("GET", &format!("/v1/sessions/{old}"), Some(&s.a), None), 200);
    assert_eq!(detail["status"], "expired", "{detail}");
}

// ------------------------------------------------------------------------------------------------
// Low: JSON-RPC ids come back byte-exact

/// The ids a `serde_json::Value` would turn into floats (or respell): beyond 64 bits, beyond the
/// 53 bits of a double, with an exponent.
const ODD_IDS: [&str; 5] =
    ["12345678901234567890", "9007199254740993", "123456789012345678901234567890", "-12345678901234567890", "1e3"];

fn assert_id(r: &Raw, raw_id: &str, what: &str) {
    assert!(r.body.contains(&format!(r#""id":{raw_id},"#)), "{what}: id {raw_id} not echoed as sent: {}", r.body);
}

#[test]
fn json_rpc_ids_are_echoed_byte_for_byte() {
    let everything = common::spawn_everything();
    let srv = TestServer::start(&format!(
        "  - {{ id: everything, name: Everything, url: {} }}\n",
        common::everything_url(&everything)
    ));
    let admin = srv.admin_key();
    let (time_gw, _) = gateway(&srv, admin);
    let g =
        ok(&srv.api("POST", "/v1/gateways", Some(admin), Some(json!({"name": "ev", "servers": ["everything"]}))), 201);
    let ev_gw = g["id"].as_str().unwrap();
    let time_sid = initialize(&srv, &time_gw, admin);
    let ev_sid = initialize(&srv, ev_gw, admin);
    for raw_id in ODD_IDS {
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"ids","version":"1"}}}}}}"#
        );
        let r = common::mcp::post(&srv, &time_gw, admin, None, &init);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_id(&r, raw_id, "initialize");
        // A result of the gateway's own, of a built-in app, and errors.
        let rpc = |gw: &str, sid: &str, method: &str, params: &str| {
            common::mcp::post(
                &srv,
                gw,
                admin,
                Some(sid),
                &format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"{method}","params":{params}}}"#),
            )
        };
        assert_id(&rpc(&time_gw, &time_sid, "tools/list", "{}"), raw_id, "tools/list");
        let r = rpc(&time_gw, &time_sid, "tools/call", r#"{"name":"get_current_time","arguments":{"format":"YYYY"}}"#);
        assert!(r.body.contains("\"result\""), "{}", r.body);
        assert_id(&r, raw_id, "tools/call (built-in)");
        let r = rpc(&time_gw, &time_sid, "no/such/method", "{}");
        assert!(r.body.contains("-32601"), "{}", r.body);
        assert_id(&r, raw_id, "unknown method");
        assert_id(&rpc(&time_gw, &time_sid, "tools/call", r#"{"name":"nope"}"#), raw_id, "unknown tool");
        let r = common::mcp::post(
            &srv,
            &time_gw,
            admin,
            None,
            &format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"ping"}}"#),
        );
        assert_eq!(r.status, 400, "{}", r.body);
        assert_id(&r, raw_id, "not initialized");
        // An answer relayed from an HTTP app (its own id replaced by the client's).
        let r = rpc(ev_gw, &ev_sid, "tools/call", r#"{"name":"echo","arguments":{"message":"hi"}}"#);
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains("Echo: hi"), "{}", r.body);
        assert_id(&r, raw_id, "tools/call (relayed)");
    }
}
