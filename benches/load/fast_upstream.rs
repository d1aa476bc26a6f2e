//! A tiny, fast MCP server for the load benchmark (`benches/load.sh`): Streamable HTTP, plain JSON
//! answers (never SSE), one tool `echo`.
//!
//! ```text
//! cargo run --release --example fast_upstream -- [PORT] [--threads N]
//! ```
//!
//! Binds `127.0.0.1:PORT` (default 0: the kernel picks a free port) and prints the bound port on
//! stdout, alone on one line, once it accepts connections.
//!
//! Why a hand-rolled HTTP/1.1 server on tokio rather than a Pingora `ServeHttp` app: the upstream
//! is the denominator of every ratio, so it must cost as little CPU per call as possible (it shares
//! the two cores with the load tool and the proxy under test), and it must bind port 0 and say
//! which port it got, which Pingora's listening service does not report. What it parses is exactly
//! what the benchmark sends: `Content-Length` bodies (no chunked requests), keep-alive unless the
//! client says `Connection: close`, pipelining handled by keeping unread bytes in the buffer.
//!
//! MCP behaviour: `initialize` answers with a `Mcp-Session-Id`; every other POST must carry one
//! (else 400, as the TypeScript SDK servers answer); notifications and client responses get 202;
//! `tools/list` lists `echo`; `tools/call` of `echo` returns `Echo: <message>`; `ping` returns
//! `{}`; anything else is -32601. GET is 405 (no server-initiated stream), DELETE 200.

use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head or body accepted (the benchmark sends a few hundred bytes).
const MAX_REQUEST: usize = 1 << 20;

static SESSIONS: AtomicU64 = AtomicU64::new(1);

fn main() {
    let mut port: u16 = 0;
    let mut threads: usize = 2;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).expect("--threads N"),
            p => port = p.parse().unwrap_or_else(|_| panic!("usage: fast_upstream [PORT] [--threads N], got `{p}`")),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        let bound = listener.local_addr().expect("local addr").port();
        let mut out = std::io::stdout();
        writeln!(out, "{bound}").and_then(|_| out.flush()).expect("stdout");
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(stream));
        }
    });
}

/// One parsed request head.
struct Head {
    method: String,
    content_length: usize,
    session: bool,
    close: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(head: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next()?;
    let method = request_line.split(' ').next()?.to_string();
    let mut h = Head { method, content_length: 0, session: false, close: request_line.ends_with("HTTP/1.0") };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            h.content_length = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("mcp-session-id") {
            h.session = !value.is_empty();
        } else if name.eq_ignore_ascii_case("connection") {
            h.close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return None; // chunked request bodies are not supported here
        }
    }
    Some(h)
}

async fn serve(mut stream: TcpStream) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(1024);
    loop {
        // Read until a complete head is buffered.
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_REQUEST || !read_more(&mut stream, &mut buf).await {
                return;
            }
        };
        let Some(head) = parse_head(&buf[..head_end - 4]) else {
            let _ =
                stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
            return;
        };
        if head.content_length > MAX_REQUEST {
            let _ = stream
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
            return;
        }
        let end = head_end + head.content_length;
        while buf.len() < end {
            if !read_more(&mut stream, &mut buf).await {
                return;
            }
        }
        out.clear();
        respond(&head, &buf[head_end..end], &mut out);
        buf.drain(..end);
        if stream.write_all(&out).await.is_err() || head.close {
            return;
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let len = buf.len();
    buf.resize(len + 4096, 0);
    match stream.read(&mut buf[len..]).await {
        Ok(0) | Err(_) => {
            buf.truncate(len);
            false
        }
        Ok(n) => {
            buf.truncate(len + n);
            true
        }
    }
}

/// Writes a complete HTTP/1.1 response into `out`.
fn write_response(out: &mut Vec<u8>, status: &str, body: &[u8], session: Option<u64>, close: bool) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: application/json\r\nContent-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    if let Some(s) = session {
        out.extend_from_slice(b"\r\nMcp-Session-Id: bench-");
        out.extend_from_slice(itoa::Buffer::new().format(s).as_bytes());
    }
    if close {
        out.extend_from_slice(b"\r\nConnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }))
        .unwrap_or_default()
}

fn respond(head: &Head, body: &[u8], out: &mut Vec<u8>) {
    match head.method.as_str() {
        "POST" => {}
        "DELETE" => return write_response(out, "200 OK", b"", None, head.close),
        _ => {
            let body = rpc_error(&Value::Null, -32000, "Method not allowed");
            return write_response(out, "405 Method Not Allowed", &body, None, head.close);
        }
    }
    let msg: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            return write_response(
                out,
                "400 Bad Request",
                &rpc_error(&Value::Null, -32700, "Parse error"),
                None,
                head.close,
            )
        }
    };
    let method = msg.get("method").and_then(Value::as_str);
    let id = msg.get("id").cloned();
    if method == Some("initialize") {
        let version = msg.pointer("/params/protocolVersion").and_then(Value::as_str).unwrap_or("2025-06-18");
        let result = json!({
            "protocolVersion": version,
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "fast-upstream", "version": "1.0.0" },
        });
        let body = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "result": result })).unwrap_or_default();
        let sid = SESSIONS.fetch_add(1, Ordering::Relaxed);
        return write_response(out, "200 OK", &body, Some(sid), head.close);
    }
    if !head.session {
        let body = rpc_error(&id.unwrap_or(Value::Null), -32000, "Bad Request: No valid session ID provided");
        return write_response(out, "400 Bad Request", &body, None, head.close);
    }
    let (Some(method), Some(id)) = (method, id) else {
        // A notification or a response from the client.
        return write_response(out, "202 Accepted", b"", None, head.close);
    };
    let result = match method {
        "ping" => json!({}),
        "tools/list" => json!({ "tools": [{
            "name": "echo",
            "description": "Echoes back the input",
            "inputSchema": {
                "type": "object",
                "properties": { "message": { "type": "string", "description": "Message to echo" } },
                "required": ["message"],
            },
        }] }),
        "tools/call" if msg.pointer("/params/name").and_then(Value::as_str) == Some("echo") => {
            let text = msg.pointer("/params/arguments/message").and_then(Value::as_str).unwrap_or_default();
            json!({ "content": [{ "type": "text", "text": format!("Echo: {text}") }] })
        }
        "tools/call" => {
            let name = msg.pointer("/params/name").and_then(Value::as_str).unwrap_or_default();
            let body = rpc_error(&id, -32602, &format!("Unknown tool: {name}"));
            return write_response(out, "200 OK", &body, None, head.close);
        }
        "resources/list" => json!({ "resources": [] }),
        "resources/templates/list" => json!({ "resourceTemplates": [] }),
        "prompts/list" => json!({ "prompts": [] }),
        other => {
            let body = rpc_error(&id, -32601, &format!("Method not found: {other}"));
            return write_response(out, "200 OK", &body, None, head.close);
        }
    };
    let body = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "result": result })).unwrap_or_default();
    write_response(out, "200 OK", &body, None, head.close);
}
