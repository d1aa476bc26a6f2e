//! Dispatch to apps (issue 3), against the real binary and real upstreams: a stdio app that
//! crashes is restarted after its back-off (one child at a time, none left after SIGTERM); the
//! bound on stdio processes; per-app timeouts that never block other calls; a dead app dropped
//! from the catalogue; an HTTP upstream restart re-initialized transparently; and, with a tiny
//! upstream written here that records every request, that the client's `X-API-Key` never goes
//! upstream, that the app's connection credential does, and that one upstream session serves
//! many calls.

use crate::common;

use common::mcp::{result_text, rpc_error, Mcp};
use common::{everything_url, mcp_server_time_command, ok, unix_now, Peer, TestServer};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------------------
// Helpers

/// A whole config: both listeners on port 0, embedded storage, the built-in `time` app, then
/// `apps_yaml` (more `apps:` items, each starting with `  - `) and `extra` (top-level sections).
pub(crate) fn config(apps_yaml: &str, extra: &str) -> String {
    format!(
        "environment: development\n\
         server:\n  listen: 127.0.0.1:0\n  metrics_listen: 127.0.0.2:0\n  grace_period_secs: 3\n\
         storage:\n  backend: embedded\n  path: {{data_dir}}\n\
         apps:\n  - {{ id: time, name: Time, builtin: time }}\n{apps_yaml}{extra}"
    )
}

/// `mcp-server-time`'s argv as a YAML flow list.
fn clock_command() -> String {
    mcp_server_time_command().iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ")
}

/// A gateway made with the admin key: `(id, gateway api_key)`.
pub(crate) fn create_gateway(srv: &TestServer, servers: &[&str]) -> (String, String) {
    let body = json!({"name": format!("g-{}", servers.join("-")), "servers": servers});
    common::mcp::create_gateway(srv, srv.admin_key(), body)
}

/// Field 3 (state) and field 4 (parent pid) of `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Live (not zombie) children of `parent` whose command line contains `needle`.
fn live_children(parent: u32, needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Some((state, ppid)) = proc_stat(pid) else { continue };
        if ppid != parent || state == 'Z' || state == 'X' {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` still exists as a process that is not a zombie.
fn alive(pid: u32) -> bool {
    matches!(proc_stat(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

fn kill9(pid: u32) {
    let st = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("run kill -KILL");
    assert!(st.success(), "kill -KILL {pid}: {st}");
}

/// A free TCP port on loopback, found by binding and releasing it. Only for a PEER that must
/// come back on the same port after a restart (server-everything takes its port from `PORT`);
/// toolgate itself always binds port 0. The port is drawn below Linux's ephemeral range
/// (32768-60999), so that the many client connections of other tests running at the same time
/// cannot take it between the release here and the peer's bind (they did, as "port in use").
pub(crate) fn free_port() -> u16 {
    let seed = std::process::id() as u64 ^ unix_now();
    (0..2000u64)
        .map(|i| 20_000 + ((seed.wrapping_mul(2_654_435_761).wrapping_add(i * 7919)) % 12_000) as u16)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port in 20000-31999 on 127.0.0.1")
}

/// server-everything (Streamable HTTP) on a given port.
pub(crate) fn spawn_everything_on(port: u16) -> Peer {
    let mut cmd = std::process::Command::new(common::node_bin());
    cmd.arg(common::node_module("@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    let peer = Peer::spawn("server-everything", cmd);
    assert_eq!(peer.port, port, "server-everything should listen on PORT={port}");
    peer
}

// ------------------------------------------------------------------------------------------------
// 1. stdio crash and restart

#[test]
fn stdio_app_crash_is_restarted_with_one_child_at_a_time_and_none_left_after_sigterm() {
    let mut srv = TestServer::start_with_config(&config(
        &format!("  - {{ id: clock, name: Clock, command: [{}] }}\n", clock_command()),
        "",
    ));
    let toolgate = srv.pid();
    let (gw, key) = create_gateway(&srv, &["time", "clock"]);
    let mcp = Mcp::open(&srv, &gw, &key);
    let names = mcp.tool_names(1);
    assert!(names.contains(&"clock__get_current_time".to_string()), "{names:?}");

    let body = mcp.call(2, "clock__get_current_time", json!({"timezone": "UTC"}));
    let text = result_text(&body);
    assert!(text.contains("UTC"), "mcp-server-time answers for UTC: {text}");
    let first = live_children(toolgate, "mcp-server-time");
    assert_eq!(first.len(), 1, "one stdio child of toolgate (pid {toolgate}) for `clock`: {first:?}");
    let old = first[0];

    // Watch the children from now on: never more than one for the app.
    let stop = Arc::new(AtomicBool::new(false));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (stop, max_seen) = (stop.clone(), max_seen.clone());
        thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let now = live_children(toolgate, "mcp-server-time");
                max_seen.fetch_max(now.len(), Ordering::SeqCst);
                if now.len() > 1 {
                    seen = now;
                }
                thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };

    kill9(old);
    // Waits for the restart (after the 250 ms back-off): 8 s is only how long to wait before
    // failing, not a speed asserted.
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut id = 10;
    let mut errors = Vec::new();
    let new = loop {
        assert!(Instant::now() < deadline, "no successful call within 8 s of the crash; errors: {errors:#?}");
        id += 1;
        let body = mcp.call(id, "clock__get_current_time", json!({"timezone": "UTC"}));
        if body.get("error").is_some() {
            let (code, msg) = rpc_error(&body);
            assert_eq!(code, -32004, "a crashed stdio app is an app failure (UpstreamFailure): {body}");
            assert!(msg.contains("clock"), "the error names the app: {body}");
            errors.push(body);
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        let text = result_text(&body);
        assert!(text.contains("UTC"), "{text}");
        let now = live_children(toolgate, "mcp-server-time");
        assert_eq!(now.len(), 1, "one child after the restart: {now:?}");
        break now[0];
    };
    assert_ne!(new, old, "the call after the crash is served by a NEW process");
    assert!(!alive(old), "the killed child {old} is gone (reaped)");

    // A few more calls: the same process serves them (no restart loop).
    for _ in 0..3 {
        id += 1;
        result_text(&mcp.call(id, "clock__get_current_time", json!({"timezone": "Europe/Paris"})));
    }
    assert_eq!(live_children(toolgate, "mcp-server-time"), vec![new], "the restarted child keeps serving");

    stop.store(true, Ordering::SeqCst);
    let many = watcher.join().expect("watcher thread");
    assert!(
        max_seen.load(Ordering::SeqCst) <= 1,
        "more than one live `clock` child at once: {many:?} (max {})",
        max_seen.load(Ordering::SeqCst)
    );

    let status = srv.sigterm();
    assert!(status.success(), "toolgate exited with {status}");
    assert!(!alive(new), "stdio child {new} outlived toolgate: {:?}", proc_stat(new));
    assert!(live_children(toolgate, "mcp-server-time").is_empty(), "no child of the old toolgate pid remains");
}

// ------------------------------------------------------------------------------------------------
// 2. stdio process bound

#[test]
fn stdio_process_bound_refuses_a_second_process_with_an_error_naming_the_limit() {
    let cmd = clock_command();
    let mut srv = TestServer::start_with_config(&config(
        &format!(
            "  - {{ id: clock1, name: Clock one, command: [{cmd}] }}\n  - {{ id: clock2, name: Clock two, command: [{cmd}] }}\n"
        ),
        "mcp:\n  max_stdio_processes: 1\n",
    ));
    let toolgate = srv.pid();
    // One gateway per app, so that listing the first app's gateway does not start the second.
    let (gw1, key1) = create_gateway(&srv, &["clock1"]);
    let (gw2, key2) = create_gateway(&srv, &["clock2"]);
    let one = Mcp::open(&srv, &gw1, &key1);
    let two = Mcp::open(&srv, &gw2, &key2);

    result_text(&one.call(1, "get_current_time", json!({"timezone": "UTC"})));
    let running = live_children(toolgate, "mcp-server-time");
    assert_eq!(running.len(), 1, "clock1 runs: {running:?}");

    // The second app cannot start.
    let body = two.call(2, "get_current_time", json!({"timezone": "UTC"}));
    assert_eq!(live_children(toolgate, "mcp-server-time"), running, "no second process was started");

    // The first app keeps working, on the same process.
    for id in 3..6 {
        result_text(&one.call(id, "get_current_time", json!({"timezone": "Asia/Tokyo"})));
    }
    assert_eq!(live_children(toolgate, "mcp-server-time"), running, "clock1 still the only process");

    // The operator sees why: the gateway detail shows clock2 failing, the log names the limit.
    let r = srv.api("GET", &format!("/v1/gateways/{gw2}"), Some(srv.admin_key()), None);
    let detail = ok(&r, 200);
    assert_eq!(detail["servers"][0]["id"], "clock2", "{detail}");
    assert_ne!(detail["servers"][0]["status"], "connected", "clock2 cannot run: {detail}");
    // The log is written by a background writer: the line may trail the answer by a moment.
    let logged = (0..60).any(|_| {
        let found = srv.stderr().contains("limit of 1 running stdio upstream processes reached");
        if !found {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        found
    });
    assert!(logged, "the log names the limit\n{}", srv.logs_for_humans());

    // The client gets a clear JSON-RPC error naming the app and the limit (not "Unknown tool").
    let (code, msg) = rpc_error(&body);
    assert!(
        msg.contains("limit") && msg.contains('1') && msg.contains("clock2"),
        "the error names the app and the limit of 1 stdio process: {body}"
    );
    assert_eq!(code, -32004, "an app failure (UpstreamFailure): {body}");

    let status = srv.sigterm();
    assert!(status.success(), "toolgate exited with {status}");
    // Reaped by toolgate before it exits; on a loaded machine the kernel may take a moment to
    // drop the process entry, so allow a short bounded wait rather than a single look.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(running[0]) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(running[0]), "clock1's process outlived toolgate by 5 s");
}

// ------------------------------------------------------------------------------------------------
// 3. Per-app timeout

#[test]
fn per_app_total_timeout_answers_32003_in_time_and_does_not_block_other_calls() {
    let everything = common::spawn_everything();
    let srv = TestServer::start_with_config(&config(
        &format!(
            "  - {{ id: everything, name: Everything, url: {}, timeouts: {{ total_ms: 800 }} }}\n",
            everything_url(&everything)
        ),
        "",
    ));
    let (gw, key) = create_gateway(&srv, &["everything", "time"]);
    let mcp = Mcp::open(&srv, &gw, &key);
    let names = mcp.tool_names(1);
    for t in ["everything__trigger-long-running-operation", "time__get_current_time"] {
        assert!(names.contains(&t.to_string()), "{t} listed: {names:?}");
    }

    // The slow call on a connection of its own, so that the server's count of open connections
    // shows when it has arrived.
    let open_before = common::metric(&srv, "toolgate_connections_open ");
    let slow = {
        let mcp = mcp.on_own_connection();
        thread::spawn(move || {
            let started = Instant::now();
            let body = mcp.call(2, "everything__trigger-long-running-operation", json!({"duration": 3, "steps": 3}));
            (body, started.elapsed())
        })
    };
    common::wait_until("the slow call's connection is accepted", Duration::from_secs(10), || {
        common::metric(&srv, "toolgate_connections_open ") > open_before
    });
    // While the slow call runs, the built-in app answers, several times: the first answer comes
    // while the slow call is still unanswered (it would come after it if the slow call blocked
    // other calls). How fast the time app answers is the benchmarks' business.
    for id in 3..6 {
        let body = mcp.call(id, "time__get_current_time", json!({"format": "YYYY-MM-DD", "timezone": "UTC"}));
        let text = result_text(&body);
        assert_eq!(text.len(), 10, "a YYYY-MM-DD date: {body}");
        assert!(!slow.is_finished() || id > 3, "the slow call should still be running during the first time call");
    }

    let (body, took) = slow.join().expect("slow call thread");
    let (code, msg) = rpc_error(&body);
    assert_eq!(code, -32003, "a timeout is -32003: {body}");
    assert!(msg.contains("everything"), "the message names the app: {body}");
    assert!(msg.contains("timed out") || msg.contains("timeout"), "the message names the timeout: {body}");
    // The deadline is the behaviour under test: not before total_ms (800, less the moment
    // before `started`), and before the 3 s operation could have answered by itself.
    assert!(took >= Duration::from_millis(700), "not before total_ms = 800 ({took:?})");
    assert!(took < Duration::from_secs(3), "the timeout answer took {took:?}, as long as the operation itself");

    // The app itself still works afterwards (the timed-out call was cancelled, not the session).
    let body = mcp.call(7, "everything__echo", json!({"message": "after"}));
    assert!(result_text(&body).contains("after"), "{body}");
}

// ------------------------------------------------------------------------------------------------
// 4. Dead app

#[test]
fn dead_app_drops_out_of_the_catalogue_and_shows_in_the_gateway_detail() {
    let srv = TestServer::start_with_config(&config(
        "  - { id: dead, name: Dead, url: \"http://127.0.0.1:1/mcp\", timeouts: { connect_ms: 500 } }\n",
        "",
    ));
    let (gw, key) = create_gateway(&srv, &["time", "dead"]);
    let mcp = Mcp::open(&srv, &gw, &key);

    // Not waiting on the dead app is the behaviour under test: its connection is refused, so the
    // list does not wait out mcp.list_deadline_ms (5 s by default), which bounds a slow app.
    let started = Instant::now();
    let names = mcp.tool_names(1);
    assert!(started.elapsed() < Duration::from_secs(5), "tools/list waited {:?} on a dead app", started.elapsed());
    assert_eq!(names, vec!["time__get_current_time".to_string()], "only the time tools are listed");

    // A name of the dead app is not in the catalogue; its `dead__` prefix says whose it is, so
    // the answer is the dead app's failure, named (UpstreamFailure), not "Unknown tool".
    let body = mcp.call(2, "dead__echo", json!({"message": "x"}));
    let (code, msg) = rpc_error(&body);
    assert_eq!(code, -32004, "{body}");
    assert_eq!(msg, "app \"dead\" is unavailable (connection refused)", "the error names the dead app: {body}");
    // A name of no app at all is unknown.
    let body = mcp.call(4, "nosuch__tool", json!({}));
    let (code, msg) = rpc_error(&body);
    assert_eq!((code, msg.as_str()), (-32602, "Unknown tool: nosuch__tool"), "{body}");

    // The other app is still callable.
    let body = mcp.call(3, "time__get_current_time", json!({"format": "YYYY"}));
    assert_eq!(result_text(&body).len(), 4, "{body}");

    let r = srv.api("GET", &format!("/v1/gateways/{gw}"), Some(srv.admin_key()), None);
    let detail = ok(&r, 200);
    let servers = detail["servers"].as_array().unwrap_or_else(|| panic!("servers: {detail}"));
    let find = |id: &str| {
        servers.iter().find(|s| s["id"] == id).unwrap_or_else(|| panic!("server {id} in the detail: {detail}")).clone()
    };
    let dead = find("dead");
    assert!(dead["status"].is_string(), "{dead}");
    assert_ne!(dead["status"], "connected", "the dead app is not shown as connected: {dead}");
    assert_eq!(dead["functions"], json!([]), "{dead}");
    let time = find("time");
    assert_eq!(time["status"], "connected", "{time}");
    assert_eq!(time["functions"], json!(["get_current_time"]), "{time}");
}

// ------------------------------------------------------------------------------------------------
// 5. Upstream restart

#[test]
fn http_upstream_restart_is_reinitialized_transparently() {
    // server-everything takes its port from PORT: to bring it back on the SAME port, the port is
    // found by binding 127.0.0.1:0 and releasing it (the peer's, not toolgate's, port).
    let port = free_port();
    let mut everything = spawn_everything_on(port);
    let srv = TestServer::start_with_config(&config(
        &format!("  - {{ id: everything, name: Everything, url: \"http://127.0.0.1:{port}/mcp\" }}\n"),
        "",
    ));
    let (gw, key) = create_gateway(&srv, &["everything", "time"]);
    let mcp = Mcp::open(&srv, &gw, &key);
    assert!(mcp.tool_names(1).contains(&"everything__echo".to_string()));
    assert!(result_text(&mcp.call(2, "everything__echo", json!({"message": "one"}))).contains("one"));
    let reinit_line = "upstream session expired; re-initializing";
    assert_eq!(srv.stderr().matches(reinit_line).count(), 0, "no re-initialization yet");

    let old_pid = everything.pid().expect("server-everything runs");
    everything.kill9();
    assert!(!alive(old_pid), "server-everything {old_pid} killed");
    let everything = spawn_everything_on(port);
    assert_ne!(everything.pid(), Some(old_pid));

    // The new server does not know toolgate's upstream session: toolgate opens a new one, once.
    let body = mcp.call(3, "everything__echo", json!({"message": "two"}));
    assert!(result_text(&body).contains("two"), "the call after the restart succeeds: {body}");
    for id in 4..8 {
        assert!(result_text(&mcp.call(id, "everything__echo", json!({"message": id.to_string()})))
            .contains(&id.to_string()));
    }
    let logs = srv.stderr();
    assert_eq!(
        logs.matches(reinit_line).count(),
        1,
        "exactly one upstream re-initialization after the restart\n{}",
        srv.logs_for_humans()
    );
    drop(everything);
}

// ------------------------------------------------------------------------------------------------
// 6. Credentials and one upstream session, against a recording upstream

/// One request as the recording upstream saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Lower-case names.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
    pub(crate) rpc_method: String,
}

/// A minimal Streamable HTTP MCP server answering plain JSON: `initialize` (gives a session id),
/// notifications (202), `tools/list` (one tool, `echo`), empty prompts/resources/templates,
/// `tools/call` (echoes `message`). A request with an unknown session id gets 404, and
/// `forget_sessions` makes it forget every session (as a restart would). A call of `echo` with
/// the message `hold` waits for `release`. Under `/oauth/` it is an app's authorization server
/// (`oauth_endpoint`).
pub(crate) struct Recorder {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    forget: Arc<AtomicBool>,
    /// While set, a call of `echo` with the message `hold` is not answered.
    holding: Arc<AtomicBool>,
}

impl Recorder {
    pub(crate) fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the recording upstream");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let forget = Arc::new(AtomicBool::new(false));
        let holding = Arc::new(AtomicBool::new(true));
        let sessions = Arc::new(Mutex::new(Vec::<String>::new()));
        let (s2, f2, h2) = (seen.clone(), forget.clone(), holding.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (seen, forget, sessions, holding) = (s2.clone(), f2.clone(), sessions.clone(), h2.clone());
                thread::spawn(move || serve_connection(conn, &seen, &forget, &sessions, &holding));
            }
        });
        Recorder { port, seen, forget, holding }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Answers the calls of `echo` with the message `hold`, held until now.
    pub(crate) fn release(&self) {
        self.holding.store(false, Ordering::SeqCst);
    }

    /// What the gateway's calls sent: the apps' health probes (`X-Toolgate-Probe`) aside.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        let seen = self.seen.lock();
        seen.iter().filter(|s| !s.headers.iter().any(|(k, _)| k == "x-toolgate-probe")).cloned().collect()
    }
}

/// The recorder as an app's OAuth authorization server, at `/oauth/...`: `token` answers a code
/// grant with `at-<code>` and `rt-<code>`; `revoke` accepts a revocation (RFC 7009); `revoke-busy`
/// refuses it with 503 `temporarily_unavailable`.
fn oauth_endpoint(path: &str, form: &str) -> Option<(&'static str, Option<Value>)> {
    let field = |name: &str| {
        form.split('&').find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('='))).unwrap_or_default()
    };
    match path.rsplit_once("/oauth/")?.1 {
        "token" => {
            let code = field("code");
            let tokens = json!({"access_token": format!("at-{code}"), "refresh_token": format!("rt-{code}"),
                "token_type": "Bearer", "expires_in": 3600});
            Some(("200 OK", Some(tokens)))
        }
        "revoke" => Some(("200 OK", None)),
        "revoke-busy" => Some(("503 Service Unavailable", Some(json!({"error": "temporarily_unavailable"})))),
        _ => None,
    }
}

fn serve_connection(
    conn: TcpStream,
    seen: &Mutex<Vec<Seen>>,
    forget: &AtomicBool,
    sessions: &Mutex<Vec<String>>,
    holding: &AtomicBool,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(120)));
    let mut reader = BufReader::new(conn.try_clone().expect("clone stream"));
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) =
            (parts.next().unwrap_or_default().to_string(), parts.next().unwrap_or_default().to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body = String::from_utf8_lossy(&body).to_string();
        let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let rpc_method = msg["method"].as_str().unwrap_or_default().to_string();
        seen.lock().push(Seen {
            method: method.clone(),
            path: path.clone(),
            headers: headers.clone(),
            body: body.clone(),
            rpc_method: rpc_method.clone(),
        });
        if forget.swap(false, Ordering::SeqCst) {
            sessions.lock().clear();
        }

        let (status, extra, reply): (&str, String, Option<Value>) = if method != "POST" {
            ("405 Method Not Allowed", String::new(), None)
        } else if let Some((status, reply)) = oauth_endpoint(&path, &body) {
            (status, String::new(), reply)
        } else if rpc_method == "initialize" {
            let sid = format!("sess-{}", common::random_alnum(16));
            sessions.lock().push(sid.clone());
            let result = json!({"protocolVersion": msg["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "recorder", "version": "1"}});
            (
                "200 OK",
                format!("Mcp-Session-Id: {sid}\r\n"),
                Some(json!({"jsonrpc": "2.0", "id": msg["id"], "result": result})),
            )
        } else if !header("mcp-session-id").is_some_and(|s| sessions.lock().contains(&s)) {
            let e = json!({"jsonrpc": "2.0", "id": msg.get("id").cloned().unwrap_or(Value::Null),
                "error": {"code": -32001, "message": "Session not found"}});
            ("404 Not Found", String::new(), Some(e))
        } else if msg.get("id").is_none() {
            ("202 Accepted", String::new(), None)
        } else {
            let result = match rpc_method.as_str() {
                "tools/list" => json!({"tools": [{"name": "echo", "description": "Echoes",
                    "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}]}),
                "prompts/list" => json!({"prompts": []}),
                "resources/list" => json!({"resources": []}),
                "resources/templates/list" => json!({"resourceTemplates": []}),
                "tools/call" => {
                    let m = msg["params"]["arguments"]["message"].as_str().unwrap_or_default();
                    while m == "hold" && holding.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(10));
                    }
                    json!({"content": [{"type": "text", "text": format!("Echo: {m}")}]})
                }
                "ping" => json!({}),
                _ => Value::Null,
            };
            let reply = if result.is_null() {
                json!({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}})
            } else {
                json!({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            };
            ("200 OK", String::new(), Some(reply))
        };
        let payload = reply.map(|v| v.to_string()).unwrap_or_default();
        let ctype = if payload.is_empty() { "" } else { "Content-Type: application/json\r\n" };
        let head = format!("HTTP/1.1 {status}\r\n{ctype}{extra}Content-Length: {}\r\n\r\n", payload.len());
        if out.write_all(head.as_bytes()).and_then(|_| out.write_all(payload.as_bytes())).is_err() {
            return;
        }
    }
}

#[test]
fn client_key_never_goes_upstream_connection_credential_does_and_one_session_serves_many_calls() {
    let up = Recorder::start();
    let srv = TestServer::start_with_config(&config(
        &format!(
            "  - {{ id: plain, name: Plain, url: \"{}\" }}\n  - {{ id: keyed, name: Keyed, url: \"{}\", auth_types: [api_key], protocol_version: \"2025-06-18\" }}\n",
            up.url("/plain/mcp"),
            up.url("/keyed/mcp")
        ),
        "",
    ));
    let r = srv.api(
        "POST",
        "/v1/apps/keyed/connect",
        Some(srv.admin_key()),
        Some(json!({"auth_type": "api_key", "credentials": {"api_key": "upstream-secret"}})),
    );
    let c = ok(&r, 200);
    assert_eq!(c["status"], "connected", "{c}");
    let (gw, key) = create_gateway(&srv, &["plain", "keyed", "time"]);
    let mcp = Mcp::open(&srv, &gw, &key);
    let mut names = mcp.tool_names(1);
    names.sort();
    assert_eq!(names, vec!["keyed__echo", "plain__echo", "time__get_current_time"], "{names:?}");

    for i in 0..10u64 {
        for app in ["plain", "keyed"] {
            let body = mcp.call(
                100 + i * 2 + (app == "keyed") as u64,
                &format!("{app}__echo"),
                json!({"message": format!("{app}-{i}")}),
            );
            assert_eq!(result_text(&body), format!("Echo: {app}-{i}"), "{body}");
        }
    }

    // Longer than the GET stream's first back-off (1 s), so that a listener retrying after the
    // 405 would show a second GET: the time passing is what is tested (that nothing happens).
    std::thread::sleep(Duration::from_millis(1500));
    let seen = up.seen();
    let on = |path: &str| seen.iter().filter(|s| s.path == path).cloned().collect::<Vec<_>>();
    // `protocol_version` picks the version offered upstream; the default is the newest.
    let offered = |path: &str| {
        let init = on(path).into_iter().find(|s| s.rpc_method == "initialize").expect("an initialize");
        serde_json::from_str::<Value>(&init.body).unwrap()["params"]["protocolVersion"].clone()
    };
    assert_eq!(offered("/keyed/mcp"), "2025-06-18");
    assert_eq!(offered("/plain/mcp"), "2025-11-25");
    for path in ["/plain/mcp", "/keyed/mcp"] {
        let reqs = on(path);
        let count = |m: &str| reqs.iter().filter(|s| s.rpc_method == m).count();
        assert_eq!(count("initialize"), 1, "ONE upstream initialize for {path}: {reqs:#?}");
        // Which revision the app speaks is asked once, unless `protocol_version` says it.
        let probes = if path == "/plain/mcp" { 1 } else { 0 };
        assert_eq!(count("server/discover"), probes, "{path}: {reqs:#?}");
        assert_eq!(count("notifications/initialized"), 1, "{path}: {reqs:#?}");
        assert_eq!(count("tools/call"), 10, "every call reached {path}");
        // The session's GET stream (server-initiated messages) is asked for once; this server
        // answers 405, which ends the listener instead of starting a retry loop.
        let gets = reqs.iter().filter(|s| s.method == "GET").count();
        assert_eq!(gets, 1, "one GET stream request per session for {path}: {reqs:#?}");
        let sids: std::collections::HashSet<_> = reqs
            .iter()
            .filter(|s| s.rpc_method != "initialize" && s.rpc_method != "server/discover")
            .map(|s| s.headers.iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v.clone()))
            .collect();
        assert_eq!(sids.len(), 1, "every request after initialize carries the one session id ({path}): {sids:?}");
        assert!(sids.iter().all(Option::is_some), "{path}: {sids:?}");
    }

    // No request carries the client's key, in any header or body.
    for s in &seen {
        assert!(["POST", "GET", "DELETE"].contains(&s.method.as_str()), "{s:?}");
        for (k, v) in &s.headers {
            assert_ne!(k, "x-api-key", "X-API-Key forwarded upstream: {s:?}");
            assert!(!v.contains(&key), "the gateway key went upstream in header {k}: {s:?}");
            assert!(!v.contains(srv.admin_key()), "the admin key went upstream in header {k}: {s:?}");
        }
        assert!(!s.body.contains(&key), "the gateway key went upstream in a body: {s:?}");
    }
    // The connected app gets its credential; the other none.
    let auth = |s: &Seen| s.headers.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.clone());
    for s in on("/keyed/mcp") {
        assert_eq!(auth(&s).as_deref(), Some("Bearer upstream-secret"), "{s:?}");
    }
    for s in on("/plain/mcp") {
        assert_eq!(auth(&s), None, "an app without a connection gets no Authorization: {s:?}");
    }
    assert!(!srv.all_logs().contains("upstream-secret"), "the upstream credential is never logged");

    // The upstream forgets its sessions (404, per the spec): one new initialize, and the call
    // goes through.
    let before = up.seen().len();
    up.forget.store(true, Ordering::SeqCst);
    let body = mcp.call(500, "plain__echo", json!({"message": "again"}));
    assert_eq!(result_text(&body), "Echo: again", "{body}");
    let after: Vec<Seen> = up.seen()[before..].to_vec();
    let inits = after.iter().filter(|s| s.rpc_method == "initialize").count();
    assert_eq!(inits, 1, "one re-initialize after a 404: {after:#?}");
    let mut methods: HashMap<String, usize> = HashMap::new();
    for s in &after {
        *methods.entry(s.rpc_method.clone()).or_default() += 1;
    }
    assert_eq!(methods.get("tools/call"), Some(&2), "the rejected call and its retry: {methods:?}");
}
