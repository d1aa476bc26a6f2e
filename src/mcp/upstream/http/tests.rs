use super::source::{push_json_body, push_messages};
use super::*;

/// The canned servers below speak the handshake era: pinned, so no `server/discover` is
/// sent first (`discovery_*` tests the probe).
const HANDSHAKE: &str = "2025-11-25";

/// Settings of a canned server of the handshake era at `url`.
fn handshake(url: String) -> HttpSettings {
    HttpSettings { url, headers: vec![], credential: None, protocol_version: Some(HANDSHAKE.into()), tls_roots: None }
}

fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut p = SseParser::default();
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, &mut out).unwrap();
    }
    p.finish(&mut out);
    out
}

fn ev(data: &str, id: Option<&str>) -> SseEvent {
    SseEvent { event: None, data: data.into(), id: id.map(Into::into) }
}

#[test]
fn sse_basic_and_multiline() {
    let out = parse_all(&[b"event: message\nid: 1\ndata: {\"a\":1}\n\n: comment\ndata: x\ndata:y\ndata\n\n"]);
    assert_eq!(
        out,
        vec![
            SseEvent { event: Some("message".into()), data: "{\"a\":1}".into(), id: Some("1".into()) },
            ev("x\ny\n", Some("1")),
        ]
    );
}

/// A long id followed by many tiny events: every event shares the one id (the fuzzer found
/// the copy per event: a 35 KB stream asking for more than 40 MiB).
#[test]
fn sse_long_id_is_shared_not_copied() {
    let mut stream = format!("id: {}\n", "x".repeat(20_000)).into_bytes();
    stream.extend(b"data:\n\n".repeat(2_000));
    let out = parse_all(&[&stream]);
    assert_eq!(out.len(), 2_000);
    let first = out[0].id.as_ref().unwrap();
    assert_eq!(first.len(), 20_000);
    assert!(out.iter().all(|e| e.id.as_ref().is_some_and(|id| Arc::ptr_eq(id, first))));
}

#[test]
fn sse_line_endings_and_chunk_splits() {
    let whole: &[u8] = b"data: one\r\n\r\ndata: two\r\rdata: three\n\n";
    let expect = vec![ev("one", None), ev("two", None), ev("three", None)];
    assert_eq!(parse_all(&[whole]), expect);
    // Every possible split point, including between CR and LF.
    for i in 0..whole.len() {
        assert_eq!(parse_all(&[&whole[..i], &whole[i..]]), expect, "split at {i}");
    }
    // Byte by byte.
    let bytes: Vec<&[u8]> = whole.chunks(1).collect();
    assert_eq!(parse_all(&bytes), expect);
}

#[test]
fn sse_priming_event_and_unterminated_tail() {
    let out = parse_all(&[b"id: abc\ndata:\n\nid: def\ndata: {\"x\":2}"]);
    assert_eq!(out, vec![ev("", Some("abc")), ev("{\"x\":2}", Some("def"))]);
    let out = parse_all(&[b"id: only\n\n: keepalive\n\n"]);
    assert!(out.is_empty());
    let out = parse_all(&[b"retry: 100\nfoo: bar\ndata:  two spaces\n\n"]);
    assert_eq!(out, vec![ev(" two spaces", None)]);
}

#[test]
fn sse_limits() {
    let mut p = SseParser::default();
    let mut out = Vec::new();
    let big = vec![b'a'; MAX_MESSAGE_BYTES + 1];
    assert!(matches!(p.feed(&big, &mut out), Err(UpstreamError::Protocol(_))));
}

#[test]
fn push_messages_rejects_garbage() {
    let mut q = VecDeque::new();
    assert!(matches!(push_messages(&mut q, b"{not json"), Err(UpstreamError::Protocol(_))));
    assert!(matches!(push_messages(&mut q, b"{\"jsonrpc\":\"1.0\"}"), Err(UpstreamError::Protocol(_))));
    push_messages(&mut q, br#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"result":{}}]"#).unwrap();
    assert_eq!(q.len(), 2);
}

#[test]
fn settings_validation() {
    let client = HttpClients::default();
    let base = HttpSettings {
        url: "http://127.0.0.1:1/mcp".into(),
        headers: vec![],
        credential: None,
        protocol_version: None,
        tls_roots: None,
    };
    assert!(HttpUpstream::new("a", &base, Timeouts::default(), &client, NoticeReporter::default()).is_ok());
    for bad in [
        HttpSettings { url: "not a url".into(), ..base.clone() },
        HttpSettings { url: "ftp://x/mcp".into(), ..base.clone() },
        HttpSettings { headers: vec![("bad name".into(), "v".into())], ..base.clone() },
        HttpSettings { headers: vec![("x-ok".into(), "bad\nvalue".into())], ..base.clone() },
        HttpSettings { credential: Some(Credential::Bearer("a\nb".into())), ..base.clone() },
    ] {
        let e = HttpUpstream::new("a", &bad, Timeouts::default(), &client, NoticeReporter::default()).err().unwrap();
        assert!(matches!(e, UpstreamError::Config(_)), "{bad:?}");
        assert!(!e.to_string().contains("a\nb"));
    }
}

/// A minimal raw-TCP HTTP server that answers each request with the next canned response and
/// records the requests, so that session handling is tested without an MCP SDK in the loop.
async fn canned_server(responses: Vec<String>) -> (String, tokio::task::JoinHandle<Vec<String>>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let mut seen = Vec::new();
        for resp in responses {
            let (mut sock, _) = listener.accept().await.unwrap();
            let request = super::super::test_http::read_request(&mut sock, &mut Vec::new()).await;
            seen.push(request.unwrap_or_default());
            sock.write_all(resp.as_bytes()).await.unwrap();
            sock.shutdown().await.ok();
        }
        seen
    });
    (url, handle)
}

fn http_resp(status: &str, headers: &str, body: &str) -> String {
    format!("HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
}

#[tokio::test]
async fn reinitializes_once_on_404_and_parses_sse() {
    let init = |sid: &str, id: u64| {
        http_resp(
            "200 OK",
            &format!("Content-Type: application/json\r\nMcp-Session-Id: {sid}\r\n"),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-06-18","capabilities":{{}},"serverInfo":{{"name":"t","version":"1"}}}}}}"#
            ),
        )
    };
    let accepted = http_resp("202 Accepted", "", "");
    let sse_body = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n: ping\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"ok\":true}}\n\n";
    let responses = vec![
        init("s1", 1),
        accepted.clone(),
        http_resp("404 Not Found", "", "gone"),
        init("s2", 3),
        accepted.clone(),
        http_resp("200 OK", "Content-Type: text/event-stream\r\n", sse_body),
    ];
    let (url, server) = canned_server(responses).await;
    let up = HttpUpstream::new(
        "t",
        &HttpSettings {
            url,
            headers: vec![("X-Tenant".into(), "t1".into())],
            credential: Some(Credential::Bearer("tok".into())),
            protocol_version: Some(HANDSHAKE.into()),
            tls_roots: None,
        },
        Timeouts::default(),
        &HttpClients::default(),
        NoticeReporter::default(),
    )
    .unwrap();
    let ctx = CallContext { client_request_id: Id::from("client-7"), ..Default::default() };
    up.connect().await.unwrap();
    assert_eq!(up.protocol_version().as_deref(), Some("2025-06-18"));
    let reply = up.request("tools/call", Some(RawJson::from_value(&json!({"name":"x"}))), &ctx).await.unwrap();
    let UpstreamReply::Stream(mut s) = reply else { panic!("progress first means a stream") };
    let Some(Ok(Message::Notification(n))) = s.next().await else { panic!() };
    assert_eq!(n.method, "notifications/progress");
    let Some(Ok(Message::Response(r))) = s.next().await else { panic!() };
    assert_eq!(r.id, json!("client-7"));
    assert_eq!(r.outcome.unwrap(), json!({"ok": true}));
    assert!(s.next().await.is_none());
    let seen = server.await.unwrap();
    // Request 3 used the old session, request 6 the new one and the negotiated version.
    assert!(seen[2].to_ascii_lowercase().contains("mcp-session-id: s1"));
    assert!(seen[5].to_ascii_lowercase().contains("mcp-session-id: s2"));
    assert!(seen[5].to_ascii_lowercase().contains("mcp-protocol-version: 2025-06-18"));
    assert!(seen[5].to_ascii_lowercase().contains("authorization: bearer tok"));
    assert!(seen[5].to_ascii_lowercase().contains("x-tenant: t1"));
    assert!(seen[5].to_ascii_lowercase().contains("accept: application/json, text/event-stream"));
    assert!(!seen[0].to_ascii_lowercase().contains("mcp-session-id"));
}

#[tokio::test]
async fn malformed_upstream_json_is_a_protocol_error() {
    let init = http_resp(
        "200 OK",
        "Content-Type: application/json\r\n",
        r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-03-26","capabilities":{}}}"#,
    );
    let responses = vec![
        init,
        http_resp("202 Accepted", "", ""),
        http_resp("200 OK", "Content-Type: application/json\r\n", "{oops"),
        http_resp("200 OK", "Content-Type: text/html\r\n", "<html>"),
        http_resp("500 Internal Server Error", "", "boom"),
    ];
    let (url, server) = canned_server(responses).await;
    let up = HttpUpstream::new(
        "t",
        &handshake(url),
        Timeouts::default(),
        &HttpClients::default(),
        NoticeReporter::default(),
    )
    .unwrap();
    let ctx = CallContext::default();
    assert!(matches!(up.request("tools/list", None, &ctx).await, Err(UpstreamError::Protocol(_))));
    assert!(matches!(up.request("tools/list", None, &ctx).await, Err(UpstreamError::Protocol(_))));
    match up.request("tools/list", None, &ctx).await {
        Err(UpstreamError::Http { status: 500, body }) => assert_eq!(body, "boom"),
        other => panic!("{other:?}"),
    }
    server.await.unwrap();
}

#[tokio::test]
async fn discovery_finds_a_stateless_app_and_calls_it_without_a_session() {
    let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
    let responses = vec![
        json_resp(
            r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#,
        ),
        json_resp(
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"resultType":"complete"}}"#,
        ),
        // An error of this revision comes under a 4xx status and is still the answer.
        http_resp(
            "400 Bad Request",
            "Content-Type: application/json\r\n",
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: nope"}}"#,
        ),
    ];
    let (url, server) = canned_server(responses).await;
    let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
    let up = HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
        .unwrap();
    let call = |name: &str| RawJson::from_value(&json!({ "name": name, "arguments": {} }));
    let ctx = CallContext {
        client_request_id: Id::from(7u64),
        headers: vec![],
        client_era: ClientEra::Stateless,
        caller_upstream: None,
    };
    let r = up.request("tools/call", Some(call("echo")), &ctx).await.unwrap().into_response().await.unwrap();
    assert_eq!(r.id, Id::from(7u64));
    assert_eq!(r.outcome.unwrap().to_value()["content"][0]["text"], "hi");
    let r = up.request("tools/call", Some(call("nope")), &ctx).await.unwrap().into_response().await.unwrap();
    assert_eq!(r.outcome.unwrap_err().code, -32602);
    let seen = server.await.unwrap();
    assert!(seen[0].contains("server/discover") && !seen.iter().any(|r| r.contains("\"initialize\"")), "{seen:?}");
    let call = seen[1].to_ascii_lowercase();
    for h in ["mcp-protocol-version: 2026-07-28", "mcp-method: tools/call", "mcp-name: echo"] {
        assert!(call.contains(h), "{h} missing: {call}");
    }
    assert!(seen[1].contains(r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#), "{}", seen[1]);
    assert!(!call.contains("mcp-session-id"));
}

/// The app of each call's path, from the requests a canned server saw.
fn is_handshake_call(req: &str, session: &str) -> bool {
    let r = req.to_ascii_lowercase();
    r.contains(&format!("mcp-session-id: {session}")) && r.contains("mcp-protocol-version: 2025-11-25")
}

fn is_stateless_call(req: &str) -> bool {
    let r = req.to_ascii_lowercase();
    !r.contains("mcp-session-id") && r.contains("mcp-protocol-version: 2026-07-28")
}

/// An app that names only 2026-07-28 in `server/discover` and still takes `initialize` (as
/// the official SDKs' servers do) is spoken to in each client's era: a handshake-era
/// client's calls over a session (opened once), a 2026-07-28 client's and the gateway's own
/// without one.
#[tokio::test]
async fn a_dual_era_app_is_spoken_to_in_the_client_s_era() {
    let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
    let done = |id: u64| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"resultType":"complete","tools":[]}}}}"#)
    };
    let responses = vec![
        json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#),
        http_resp(
            "200 OK",
            "Content-Type: application/json\r\nMcp-Session-Id: s1\r\n",
            r#"{"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
        ),
        http_resp("202 Accepted", "", ""),
        json_resp(&done(3)),
        json_resp(&done(4)),
        json_resp(&done(5)),
        json_resp(&done(6)),
        http_resp("202 Accepted", "", ""),
    ];
    let (url, server) = canned_server(responses).await;
    let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
    let up = HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
        .unwrap();
    let ctx = |client_era| CallContext {
        client_request_id: Id::from(9u64),
        headers: vec![],
        client_era,
        caller_upstream: None,
    };
    let call = || Some(RawJson::from_value(&json!({ "name": "echo", "arguments": {} })));
    for era in [ClientEra::Handshake, ClientEra::Stateless] {
        let r = up.request("tools/call", call(), &ctx(era)).await.unwrap().into_response().await.unwrap();
        assert_eq!(r.id, Id::from(9u64));
        assert!(r.outcome.is_ok(), "{era:?}");
    }
    up.request("tools/list", None, &ctx(ClientEra::None)).await.unwrap().into_response().await.unwrap();
    up.request("tools/call", call(), &ctx(ClientEra::Handshake)).await.unwrap().into_response().await.unwrap();
    // A handshake-era client's notification goes to the session; a 2026-07-28 client's nowhere.
    up.notify("notifications/roots/list_changed", None, &ctx(ClientEra::Stateless)).await.unwrap();
    up.notify("notifications/roots/list_changed", None, &ctx(ClientEra::Handshake)).await.unwrap();
    let seen = server.await.unwrap();
    assert_eq!(seen.len(), 8, "{seen:#?}");
    assert!(seen[0].contains("server/discover"), "{}", seen[0]);
    assert!(seen[1].contains(r#""method":"initialize""#) && seen[1].contains("2025-11-25"), "{}", seen[1]);
    assert!(is_handshake_call(&seen[3], "s1"), "the handshake-era client's call: {}", seen[3]);
    assert!(is_stateless_call(&seen[4]), "the 2026-07-28 client's call: {}", seen[4]);
    assert!(seen[4].contains(r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#), "{}", seen[4]);
    assert!(is_stateless_call(&seen[5]) && seen[5].contains("tools/list"), "the gateway's own: {}", seen[5]);
    assert!(is_handshake_call(&seen[6], "s1"), "the session is kept: {}", seen[6]);
    assert!(is_handshake_call(&seen[7], "s1") && seen[7].contains("roots/list_changed"), "{}", seen[7]);
}

/// An app of 2026-07-28 alone refuses `initialize`: handshake-era clients reach it
/// translated, and it is not asked again.
#[tokio::test]
async fn a_stateless_only_app_is_translated_for_handshake_era_clients_and_tried_once() {
    let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
    let responses = vec![
        json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#),
        http_resp("400 Bad Request", "Content-Type: text/plain\r\n", "initialize is not a method of 2026-07-28"),
        json_resp(r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"resultType":"complete"}}"#),
        json_resp(r#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"complete"}}"#),
    ];
    let (url, server) = canned_server(responses).await;
    let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
    let up = HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
        .unwrap();
    let ctx = CallContext { client_era: ClientEra::Handshake, ..Default::default() };
    for _ in 0..2 {
        let call = RawJson::from_value(&json!({ "name": "echo", "arguments": {} }));
        let r = up.request("tools/call", Some(call), &ctx).await.unwrap().into_response().await.unwrap();
        assert!(r.outcome.is_ok());
    }
    let seen = server.await.unwrap();
    assert!(seen[1].contains(r#""method":"initialize""#), "{}", seen[1]);
    assert!(is_stateless_call(&seen[2]) && is_stateless_call(&seen[3]), "{seen:#?}");
    assert!(!seen[3].contains("initialize"));
}

/// A 2026-07-28 server may stream an answer as `application/json` (chunked), one message per
/// line, notifications first (the conformance suite's reference server does): each message is
/// read, the response last.
#[tokio::test]
async fn a_json_answer_of_several_lines_is_read_message_by_message() {
    let json_resp = |body: &str| http_resp("200 OK", "Content-Type: application/json\r\n", body);
    let lines = concat!(
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":50}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"Streaming complete"}]}}"#,
    );
    let chunked = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        lines.len(),
        lines
    );
    let responses = vec![
        json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#),
        chunked,
        // Not JSON at all stays a protocol error.
        json_resp("{\"jsonrpc\":\"2.0\"}\n{oops"),
    ];
    let (url, server) = canned_server(responses).await;
    let settings = HttpSettings { url, headers: vec![], credential: None, protocol_version: None, tls_roots: None };
    let up = HttpUpstream::new("t", &settings, Timeouts::default(), &HttpClients::default(), NoticeReporter::default())
        .unwrap();
    let ctx = CallContext { client_request_id: Id::from("c"), client_era: ClientEra::Stateless, ..Default::default() };
    let call = || Some(RawJson::from_value(&json!({ "name": "test_streaming_elicitation", "arguments": {} })));
    let UpstreamReply::Stream(mut s) = up.request("tools/call", call(), &ctx).await.unwrap() else {
        panic!("a notification first means a stream")
    };
    let Some(Ok(Message::Notification(n))) = s.next().await else { panic!("the progress first") };
    assert_eq!(n.method, "notifications/progress");
    let Some(Ok(Message::Response(r))) = s.next().await else { panic!("then the response") };
    assert_eq!(r.id, Id::from("c"));
    assert_eq!(r.outcome.unwrap().to_value()["content"][0]["text"], "Streaming complete");
    assert!(matches!(up.request("tools/call", call(), &ctx).await, Err(UpstreamError::Protocol(_))));
    server.await.unwrap();
}

#[test]
fn a_json_body_read_as_one_message_or_a_sequence() {
    let mut q = VecDeque::new();
    push_json_body(&mut q, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").unwrap();
    assert_eq!(q.len(), 1);
    let mut q = VecDeque::new();
    push_json_body(&mut q, b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\r\n {\"jsonrpc\":\"2.0\",\"method\":\"b\"}{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}").unwrap();
    assert_eq!(q.len(), 3);
    assert!(matches!(q.pop_back(), Some(Message::Response(_))));
    for bad in [
        &b"{oops"[..],
        b"",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"} nope",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n{\"x\":1}",
    ] {
        let mut q = VecDeque::new();
        assert!(
            matches!(push_json_body(&mut q, bad), Err(UpstreamError::Protocol(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
        assert!(q.is_empty());
    }
}

#[tokio::test]
async fn list_all_follows_next_cursor() {
    let json_resp = |body: String| http_resp("200 OK", "Content-Type: application/json\r\n", &body);
    let responses = vec![
        json_resp(r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#.into()),
        http_resp("202 Accepted", "", ""),
        json_resp(
            r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a"},{"name":"b"}],"nextCursor":"page-2"}}"#.into(),
        ),
        json_resp(r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"c"}]}}"#.into()),
    ];
    let (url, server) = canned_server(responses).await;
    let up = super::super::Upstream::Http(
        HttpUpstream::new(
            "t",
            &handshake(url),
            Timeouts::default(),
            &HttpClients::default(),
            NoticeReporter::default(),
        )
        .unwrap(),
    );
    let tools = up.list_tools(&CallContext::default()).await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let seen = server.await.unwrap();
    assert!(seen[3].contains(r#""params":{"cursor":"page-2"}"#), "{}", seen[3]);
    assert!(!seen[2].contains("cursor"));
}

#[tokio::test]
async fn unsupported_version_and_connect_errors() {
    let responses = vec![http_resp(
        "200 OK",
        "Content-Type: application/json\r\n",
        r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"1999-01-01","capabilities":{}}}"#,
    )];
    let (url, _server) = canned_server(responses).await;
    let up = HttpUpstream::new(
        "t",
        &handshake(url),
        Timeouts::default(),
        &HttpClients::default(),
        NoticeReporter::default(),
    )
    .unwrap();
    match up.connect().await {
        Err(UpstreamError::Protocol(m)) => assert!(m.contains("1999-01-01")),
        other => panic!("{other:?}"),
    }
    // Nothing listens on port 1.
    let up = HttpUpstream::new(
        "t",
        &HttpSettings {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: vec![],
            credential: None,
            protocol_version: Some(HANDSHAKE.into()),
            tls_roots: None,
        },
        Timeouts::default(),
        &HttpClients::default(),
        NoticeReporter::default(),
    )
    .unwrap();
    assert!(matches!(up.connect().await, Err(UpstreamError::Connect(_))));
}

#[tokio::test]
async fn first_byte_timeout() {
    // Accepts and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let _hold = tokio::spawn(async move {
        let mut socks = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            socks.push(s);
        }
    });
    let t = Timeouts { connect_ms: 1000, first_byte_ms: 200, total_ms: 5000 };
    let up = HttpUpstream::new("t", &handshake(url), t, &HttpClients::default(), NoticeReporter::default()).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(up.connect().await.unwrap_err(), UpstreamError::Timeout { phase: TimeoutPhase::FirstByte });
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}
