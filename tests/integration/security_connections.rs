//! Connection bounds (issue 11, #9): a request's header must be complete within
//! `server.header_timeout_ms`, an idle keep-alive connection is closed after
//! `server.keepalive_idle_secs`, and `server.max_connections` / `server.max_connections_per_ip`
//! cap open connections (per TCP peer). Raw sockets, so that the test controls every byte and
//! every pause. The 5000-connection measurement is `benches/slowloris.py` (BENCHMARKS.md).

use crate::common::{TestServer, BASE_CONFIG};
use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// The base config with `lines` (each `key: value`) added under `server:`.
fn server_with(lines: &[&str]) -> TestServer {
    let extra: String = lines.iter().map(|l| format!("  {l}\n")).collect();
    let config = BASE_CONFIG.replace("  trusted_proxies: []\n", &format!("  trusted_proxies: []\n{extra}"));
    assert_ne!(config, BASE_CONFIG, "the base config has a `trusted_proxies: []` line to add after");
    TestServer::start_with_config(&config)
}

fn connect(srv: &TestServer) -> TcpStream {
    let s = TcpStream::connect(srv.main_addr()).expect("connect to the main listener");
    s.set_nodelay(true).unwrap();
    s
}

/// Reads one response (head and a `Content-Length` body); `None` if the server closed the
/// connection (EOF or reset) before a whole response arrived.
fn read_response(s: &mut TcpStream) -> Option<(u16, String)> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("no response within 10 s")
            }
            Err(_) => return None,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status line");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().expect("a content length"))
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some((status, String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned()))
}

/// The head of `POST /v1/gateways` with the admin key, for a JSON body of `length` bytes.
fn create_gateway_head(srv: &TestServer, length: usize) -> String {
    format!(
        "POST /v1/gateways HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\n\r\n",
        srv.admin_key()
    )
}

/// `GET /healthz` on a kept-alive connection; `None` if the connection was closed instead.
fn healthz(s: &mut TcpStream) -> Option<u16> {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").ok()?;
    read_response(s).map(|(status, _)| status)
}

/// Waits up to `limit` for the server to close `s`: true on EOF or reset, false if the
/// connection is still open (or answered) when the time is up.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

/// The value of a metric line (`name{labels} value`), 0 if absent.
fn metric(srv: &TestServer, line_start: &str) -> f64 {
    srv.metrics().lines().find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// Waits until the server holds no main-listener connection (the harness's start-up probes
/// close theirs; the server notices a moment later).
fn wait_until_no_connections(srv: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(srv, "toolgate_connections_open ") != 0.0 {
        assert!(Instant::now() < deadline, "connections stay open:\n{}", srv.metrics());
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (3 s at most) for a counter to reach `at_least`: a client sees its connection closed a
/// moment before the server has counted the close, more so on a loaded machine.
fn counted_soon(srv: &TestServer, series: &str, at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while metric(srv, series) < at_least {
        assert!(Instant::now() < deadline, "{series} did not reach {at_least}:\n{}", srv.metrics());
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_header_trickled_past_the_deadline_is_cut() {
    let srv = server_with(&["header_timeout_ms: 2000"]);
    let mut silent = connect(&srv);
    let mut slow = connect(&srv);
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n").unwrap();
    // One header line a second, for well past the deadline. Pingora alone restarts its 60 s
    // read timeout on every line, so before the fix this loop ran to its end.
    let mut closed_after = None;
    for i in 0..12 {
        if slow.write_all(format!("X-Slow-{i}: 1\r\n").as_bytes()).is_err()
            || closed_within(&mut slow, Duration::from_secs(1))
        {
            closed_after = Some(started.elapsed());
            break;
        }
    }
    let closed_after = closed_after.expect("a header trickled for 12 s was still being read (deadline 2 s)");
    assert!(
        closed_after >= Duration::from_millis(1500) && closed_after < Duration::from_secs(6),
        "closed after {closed_after:?}; the deadline is 2 s from the accept"
    );
    // A connection that sends nothing at all has the same deadline.
    assert!(closed_within(&mut silent, Duration::from_secs(3)), "a silent connection is closed at the deadline");
    counted_soon(&srv, "toolgate_connections_closed_total{reason=\"header_timeout\"}", 2.0);

    // Others are served, and a header sent in time is answered.
    let mut prompt = connect(&srv);
    assert_eq!(healthz(&mut prompt), Some(200));
}

/// What toolgate's connection loop does besides the deadlines, each on a raw connection: an
/// unparsable header is a 400 and CONNECT a 405, both closing the connection; a body the
/// answer did not read closes the connection (its bytes are never read as requests), one that
/// was read leaves it ready for the next request; HTTP/1.0 without keep-alive is answered and
/// closed.
#[test]
fn the_connection_loop_refuses_bad_heads_and_never_reads_a_body_as_a_request() {
    let srv = server_with(&["header_timeout_ms: 5000"]);

    let mut garbage = connect(&srv);
    garbage.write_all(b"GET /healthz HTTP/1.1\r\nHost t\r\nno colon here\r\n\r\n").unwrap();
    let (status, _) = read_response(&mut garbage).expect("an answer to an unparsable header");
    assert_eq!(status, 400);
    assert!(closed_within(&mut garbage, Duration::from_secs(3)), "closed after the 400");

    let mut tunnel = connect(&srv);
    tunnel.write_all(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").unwrap();
    let (status, _) = read_response(&mut tunnel).expect("an answer to CONNECT");
    assert_eq!(status, 405);
    assert!(closed_within(&mut tunnel, Duration::from_secs(3)), "closed after the 405");

    // A body the answer did not read (a 404 answers before it) is never parsed as the next
    // request: the connection closes after the answer.
    let mut unread = connect(&srv);
    let junk = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".repeat(50);
    let head = format!("POST /no/such/path HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", junk.len());
    unread.write_all(head.as_bytes()).unwrap();
    unread.write_all(junk.as_bytes()).unwrap();
    let (status, text) = read_response(&mut unread).expect("an answer to the unknown path");
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("/no/such/path"), "{text}");
    assert!(closed_within(&mut unread, Duration::from_secs(3)), "the body's bytes were read as requests");

    // A body that was read leaves the connection ready for the next request.
    let mut kept = connect(&srv);
    let body = serde_json::to_vec(&json!({"name": "kept alive"})).unwrap();
    let head = create_gateway_head(&srv, body.len());
    kept.write_all(head.as_bytes()).unwrap();
    kept.write_all(&body).unwrap();
    let (status, text) = read_response(&mut kept).expect("an answer to the POST");
    assert_eq!(status, 201, "{text}");
    assert_eq!(healthz(&mut kept), Some(200), "the next request on the connection");
    assert_eq!(healthz(&mut kept), Some(200), "and the one after");

    let mut old = connect(&srv);
    old.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let (status, text) = read_response(&mut old).expect("an answer to HTTP/1.0");
    assert_eq!(status, 200, "{text}");
    assert!(closed_within(&mut old, Duration::from_secs(3)), "HTTP/1.0 without keep-alive is closed after the answer");
}

/// The server's resident memory (`VmRSS`), in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// What a connection waiting for its header costs the server in memory: issue 11's bound is
/// 32 KiB per open connection (`benches/slowloris.py` measures it with 5000; 29.4 KiB on
/// 2026-11-27). Here 500 connections send part of a header and wait, and the growth of the
/// server's resident memory is divided among them. The limit, 36 KiB, leaves room for the
/// allocator's granularity at this smaller count (25 to 29 KiB measured here) and fails the
/// build that Pingora's proxy layer had grown to (41 KiB here, 46 with 5000: each request's
/// future was made before its header was read).
#[test]
fn a_connection_waiting_for_its_header_costs_little_memory() {
    const SLOW: usize = 500;
    let srv = server_with(&["header_timeout_ms: 60000", "max_connections_per_ip: 10000"]);
    // The worker threads' heaps and buffers exist before the baseline is read.
    for _ in 0..50 {
        let mut warm = connect(&srv);
        assert_eq!(healthz(&mut warm), Some(200));
    }
    wait_until_no_connections(&srv);
    let before = rss_kib(srv.pid());
    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut s = connect(&srv);
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: 1\r\n").unwrap();
        slow.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&srv, "toolgate_connections_open ") < SLOW as f64 {
        assert!(Instant::now() < deadline, "the server did not take all {SLOW} connections:\n{}", srv.metrics());
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(500));
    let during = rss_kib(srv.pid());
    let per_connection = during.saturating_sub(before) as f64 / SLOW as f64;
    assert!(
        per_connection <= 36.0,
        "{per_connection:.1} KiB per connection waiting for its header ({before} KiB before, {during} KiB with {SLOW} open)"
    );
    // The server still answers others meanwhile.
    let mut other = connect(&srv);
    assert_eq!(healthz(&mut other), Some(200));
    drop(slow);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_but_each_request_gets_its_own_deadline() {
    let srv = server_with(&["header_timeout_ms: 1500", "keepalive_idle_secs: 1"]);

    // Idle after an answered request: closed after about a second. Before the fix Pingora kept
    // a keep-alive connection with no time limit at all once it had answered a request.
    let mut idle = connect(&srv);
    assert_eq!(healthz(&mut idle), Some(200));
    let t = Instant::now();
    assert!(closed_within(&mut idle, Duration::from_secs(5)), "an idle keep-alive connection stays open");
    assert!(t.elapsed() >= Duration::from_millis(800), "closed after {:?}, before the idle time", t.elapsed());
    counted_soon(&srv, "toolgate_connections_closed_total{reason=\"keepalive_idle\"}", 1.0);

    // The header deadline counts per request: a connection busy for longer than it, with pauses
    // shorter than the idle time, keeps being served.
    let mut busy = connect(&srv);
    for _ in 0..4 {
        assert_eq!(healthz(&mut busy), Some(200), "a request of a busy keep-alive connection");
        thread::sleep(Duration::from_millis(600));
    }

    // A body slower than the header deadline is not cut: the deadline covers the header only.
    let mut slow_body = connect(&srv);
    let body = serde_json::to_vec(&json!({"name": "slow body"})).unwrap();
    let head = create_gateway_head(&srv, body.len());
    slow_body.write_all(head.as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(2000));
    slow_body.write_all(&body).unwrap();
    let (status, text) = read_response(&mut slow_body).expect("a request whose header was in time is answered");
    assert_eq!(status, 201, "{text}");
}

#[test]
fn the_per_address_cap_refuses_one_address_and_serves_another() {
    let srv = server_with(&["max_connections_per_ip: 20"]);
    wait_until_no_connections(&srv);
    let mut held: Vec<TcpStream> = (0..20)
        .map(|i| {
            let mut s = connect(&srv);
            assert_eq!(healthz(&mut s), Some(200), "connection {i} of 20 from 127.0.0.1");
            s
        })
        .collect();

    let mut extra = connect(&srv);
    assert_eq!(healthz(&mut extra), None, "the 21st connection from 127.0.0.1 is closed unanswered");
    assert!(metric(&srv, "toolgate_connections_refused_total{reason=\"per_address\"}") >= 1.0);

    // Another address is served meanwhile, and the held connections still are.
    let other = client_from_127_0_0_3();
    let r = other.get(srv.url("/healthz")).send().expect("a client on 127.0.0.3");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(healthz(&mut held[0]), Some(200));

    // A closed connection gives its place back.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect(&srv);
        if healthz(&mut again) == Some(200) {
            break;
        }
        assert!(Instant::now() < deadline, "a freed place is not given back");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A client whose connections come from another loopback address than the other tests' sockets.
fn client_from_127_0_0_3() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)))
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[test]
fn the_global_cap_counts_every_address() {
    let srv = server_with(&["max_connections: 3", "max_connections_per_ip: 3"]);
    wait_until_no_connections(&srv);
    let _held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = connect(&srv);
            assert_eq!(healthz(&mut s), Some(200));
            s
        })
        .collect();
    let other = client_from_127_0_0_3();
    assert!(other.get(srv.url("/healthz")).send().is_err(), "a 4th connection, from any address, is refused");
    assert!(metric(&srv, "toolgate_connections_refused_total{reason=\"global\"}") >= 1.0);
}
