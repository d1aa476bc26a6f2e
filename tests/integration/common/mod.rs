//! Harness for toolgate's integration tests: the real binary, on ports the OS picks.
//!
//! Every `tests/*.rs` file says `mod common;` and starts servers with [`TestServer`]:
//!
//! ```ignore
//! let srv = TestServer::start("");                       // base config below
//! let r = srv.api("GET", "/v1/user", Some(srv.admin_key()), None);
//! assert_eq!(r.status, 200, "{r:?}");
//! ```
//!
//! How ports are found: the config binds port 0 for both listeners, so the kernel picks free
//! ports and nothing can take them between choosing and binding. The harness reads them back from
//! `/proc/<pid>/fd/*` (links `socket:[INODE]`) matched against the LISTEN rows (state `0A`) of
//! `/proc/<pid>/net/tcp` and `tcp6`, then asks each address: the main listener answers
//! `GET /healthz` with 200 JSON, the metrics listener answers `GET /metrics` with Prometheus text.
//! The server is "started" once both answer.
//!
//! The two listeners bind different loopback addresses (`127.0.0.1:0` and `127.0.0.2:0`):
//! Pingora keys its listening sockets by the address string, so two services both given
//! `127.0.0.1:0` would share one socket (and the metrics service would answer main traffic).
//!
//! Peers (real MCP servers, Redis) come from what `tests/run.sh` installs; a missing peer fails the
//! test with a message saying how to install it. Nothing here skips a test.
#![allow(dead_code)]

mod checks;
pub mod mcp;
#[allow(unused_imports)]
pub use checks::*;

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How long a server (or peer) may take to serve its listeners.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `sigterm()` waits for the process to exit.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of a log shown in a failure message.
const LOG_TAIL_LINES: usize = 80;

/// The configuration every [`TestServer::start`] begins with. `{data_dir}` is replaced by the
/// server's data directory (also in configs given to [`TestServer::start_with_config`]).
pub const BASE_CONFIG: &str = "\
environment: development
server:
  listen: 127.0.0.1:0
  metrics_listen: 127.0.0.2:0
  public_url: http://localhost:8080
  trusted_proxies: []
storage:
  backend: embedded
  path: {data_dir}
apps:
  - id: time
    name: Time
    description: Current time in any time zone
    category: utilities
    builtin: time
";

// ------------------------------------------------------------------------------------------------
// Keys

/// A fresh random key: `ag_` followed by 37 alphanumerics (40 characters).
pub fn random_key() -> String {
    format!("ag_{}", random_alnum(37))
}

/// `n` random alphanumeric characters (std only: `RandomState` is seeded from the OS).
pub fn random_alnum(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut out = String::with_capacity(n);
    while out.len() < n {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        );
        let mut v = h.finish();
        for _ in 0..10 {
            if out.len() == n {
                break;
            }
            out.push(ALPHABET[(v % 62) as usize] as char);
            v /= 62;
        }
    }
    out
}

/// Hex SHA-256 of `s`, as the config's `api_keys[].sha256` wants it.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A key declared in YAML: returns `(plaintext_key, yaml_list_item)`. The item goes under a
/// top-level `api_keys:` that the caller writes, e.g.
///
/// ```ignore
/// let (bob_key, bob_yaml) = declared_key("key_bob", "usr_bob", &["gateways:*", "apps:read"]);
/// let srv = TestServer::start(&format!("organizations:\n  - {{ id: org_other, name: Other Inc, tier: free }}\n\
///     users:\n  - {{ id: usr_bob, email: bob@other.test, name: Bob, role: developer, organization: org_other }}\n\
///     api_keys:\n{bob_yaml}"));
/// ```
pub fn declared_key(id: &str, user: &str, scopes: &[&str]) -> (String, String) {
    let key = random_key();
    let scopes = scopes.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    let yaml =
        format!("  - {{ id: {id}, name: {id}, user: {user}, sha256: {}, scopes: [{scopes}] }}\n", sha256_hex(&key));
    (key, yaml)
}

/// One declared key of a test's organisations: (key name, user, role, organisation, scopes).
pub type KeySpec = (&'static str, &'static str, &'static str, &'static str, &'static [&'static str]);

/// The YAML `users:` and `api_keys:` sections of `specs` (each user declared once, with the
/// e-mail `email(user)`, the role and organisation of its first key; key ids `key_<name>`), and
/// each key's plaintext by its name: for the tests that give each test a user of its own.
pub fn declared_users_and_keys(
    specs: &[KeySpec],
    email: impl Fn(&str) -> String,
) -> (String, std::collections::HashMap<&'static str, String>) {
    let (mut users, mut yk) = (String::new(), String::new());
    let mut seen = HashSet::new();
    let mut keys = std::collections::HashMap::new();
    for (name, user, role, org, scopes) in specs {
        if seen.insert(*user) {
            let email = email(user);
            users +=
                &format!("  - {{ id: {user}, email: {email}, name: {user}, role: {role}, organization: {org} }}\n");
        }
        let (k, y) = declared_key(&format!("key_{name}"), user, scopes);
        yk += &y;
        keys.insert(*name, k);
    }
    (format!("users:\n{users}api_keys:\n{yk}"), keys)
}

// ------------------------------------------------------------------------------------------------
// Ports

/// Addresses on which process `pid` holds a TCP socket in LISTEN state (IPv4 and IPv6).
pub fn listening_addrs(pid: u32) -> std::io::Result<Vec<SocketAddr>> {
    let mut inodes = HashSet::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(entry) = entry else { continue };
        // An fd may close while we look: skip it.
        let Ok(link) = fs::read_link(entry.path()) else { continue };
        let link = link.to_string_lossy();
        if let Some(inode) = link.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
            inodes.insert(inode.to_string());
        }
    }
    let mut addrs = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 9 && cols[3] == "0A" && inodes.contains(cols[9]) {
                if let Some(addr) = parse_proc_addr(cols[1]) {
                    addrs.insert(addr);
                }
            }
        }
    }
    Ok(addrs.into_iter().collect())
}

/// TCP ports on which process `pid` listens.
pub fn listening_ports(pid: u32) -> std::io::Result<Vec<u16>> {
    let mut ports: Vec<u16> = listening_addrs(pid)?.iter().map(|a| a.port()).collect();
    ports.dedup();
    Ok(ports)
}

/// `0100007F:1F90` (IPv4) or 32 hex digits `:PORT` (IPv6), as the kernel prints them: the address
/// in 32-bit words of host (little-endian) byte order, the port in plain hex.
fn parse_proc_addr(s: &str) -> Option<SocketAddr> {
    let (ip_hex, port_hex) = s.split_once(':')?;
    let port = u16::from_str_radix(port_hex, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for i in (0..ip_hex.len()).step_by(8) {
        let word = u32::from_str_radix(ip_hex.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    let ip = match bytes.len() {
        4 => IpAddr::from([bytes[0], bytes[1], bytes[2], bytes[3]]),
        16 => IpAddr::from(<[u8; 16]>::try_from(bytes.as_slice()).ok()?),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Where to connect to reach a listener bound to `addr` (a wildcard bind is reached on loopback).
fn connect_addr(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    }
}

fn probe_client() -> Client {
    Client::builder().timeout(Duration::from_secs(2)).no_proxy().build().expect("build probe client")
}

/// Which of `addrs` is the main listener and which the metrics listener, as far as they answer.
fn classify(client: &Client, addrs: &[SocketAddr]) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let (mut main, mut metrics) = (None, None);
    for &addr in addrs {
        let addr = connect_addr(addr);
        let get = |path: &str| -> Option<(u16, String)> {
            let r = client.get(format!("http://{addr}{path}")).send().ok()?;
            let status = r.status().as_u16();
            Some((status, r.text().unwrap_or_default()))
        };
        if let Some((200, body)) = get("/healthz") {
            if serde_json::from_str::<Value>(&body).is_ok() {
                main = Some(addr);
                continue;
            }
        }
        if let Some((200, body)) = get("/metrics") {
            if serde_json::from_str::<Value>(&body).is_err() {
                metrics = Some(addr);
            }
        }
    }
    (main, metrics)
}

// ------------------------------------------------------------------------------------------------
// Logs

/// The last `n` lines of a file, or a note saying why there are none.
pub fn tail_file(path: &Path, n: usize) -> String {
    let mut f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("<cannot read {}: {e}>", path.display()),
    };
    // Logs can be large; the tail is in the last 256 KiB.
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    if lines.is_empty() {
        "<empty>".to_string()
    } else {
        lines[start..].join("\n")
    }
}

// ------------------------------------------------------------------------------------------------
// HTTP responses

/// A response exactly as the wire gave it (header names lower-cased, the body untouched), for
/// tests that must see ids and headers byte for byte.
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// A header that must be there and be a number.
    pub fn num(&self, name: &str) -> u64 {
        let v = self.header(name).unwrap_or_else(|| panic!("missing {name}: {:?}", self.headers));
        v.parse().unwrap_or_else(|_| panic!("{name} is not a number: {v}"))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// A response read whole: status, headers, body as text and (if it parses) JSON.
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    /// The body parsed as JSON; `Value::Null` if it is not JSON.
    pub json: Value,
    pub text: String,
}

impl Resp {
    pub fn from_blocking(r: reqwest::blocking::Response) -> Resp {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp { status, headers, json, text }
    }

    /// A header's value as a string (None if absent or not visible ASCII).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `json["data"]`, after asserting a 2xx with `success: true`.
    pub fn data(&self) -> &Value {
        assert!(
            (200..300).contains(&self.status) && self.json["success"] == Value::Bool(true),
            "expected a successful envelope, got {self:?}"
        );
        &self.json["data"]
    }

    /// `json["error"]["code"]` as a string ("" if absent).
    pub fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

impl fmt::Debug for Resp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = if self.json.is_null() {
            self.text.clone()
        } else {
            serde_json::to_string_pretty(&self.json).unwrap_or_default()
        };
        write!(f, "HTTP {} {:?}\n{body}", self.status, self.headers)
    }
}

// ------------------------------------------------------------------------------------------------
// The server under test

/// Options for starting a [`TestServer`]; `TestServer::start*` cover the common cases.
#[derive(Default)]
pub struct ServerOptions {
    /// YAML appended at top level to [`BASE_CONFIG`].
    pub extra_yaml: String,
    /// A whole config instead of the base (with `{data_dir}` substituted).
    pub full_config: Option<String>,
    /// Start without `TOOLGATE_ADMIN_KEY` (to test the first-start bootstrap key).
    pub no_admin_key: bool,
    /// Extra environment variables for the process.
    pub env: Vec<(String, String)>,
}

/// The real `toolgate` binary, running in its own temporary directory.
///
/// Layout of [`TestServer::dir`]: `toolgate.yaml`, `data/`, and one `stdout.N.log` /
/// `stderr.N.log` pair per start (N = 0, then 1 after the first restart, ...).
/// Dropping it kills the process; if the test is panicking, the server's stderr tail is printed.
pub struct TestServer {
    dir: tempfile::TempDir,
    config_path: PathBuf,
    admin_key: String,
    use_admin_key: bool,
    env: Vec<(String, String)>,
    child: Option<Child>,
    pid: u32,
    run: u32,
    main_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    client: Client,
}

impl TestServer {
    /// Base config plus `extra_yaml` (top-level sections such as `organizations:`).
    pub fn start(extra_yaml: &str) -> TestServer {
        TestServer::start_opts(ServerOptions { extra_yaml: extra_yaml.to_string(), ..Default::default() })
    }

    /// A whole config of the caller's; `{data_dir}` in it becomes the server's data directory.
    /// It should bind port 0 on two different addresses (see the module doc).
    pub fn start_with_config(full_yaml: &str) -> TestServer {
        TestServer::start_opts(ServerOptions { full_config: Some(full_yaml.to_string()), ..Default::default() })
    }

    pub fn start_opts(opts: ServerOptions) -> TestServer {
        let dir = tempfile::Builder::new().prefix("toolgate-test-").tempdir().expect("create tempdir");
        let data_dir = dir.path().join("data");
        fs::create_dir_all(&data_dir).expect("create data dir");
        let template = match &opts.full_config {
            Some(full) => full.clone(),
            None => format!("{BASE_CONFIG}{}", opts.extra_yaml),
        };
        let config = template.replace("{data_dir}", &data_dir.to_string_lossy());
        let config_path = dir.path().join("toolgate.yaml");
        fs::write(&config_path, config).expect("write config");
        let client = Client::builder().timeout(Duration::from_secs(30)).no_proxy().build().expect("build http client");
        let mut srv = TestServer {
            dir,
            config_path,
            admin_key: random_key(),
            use_admin_key: !opts.no_admin_key,
            env: opts.env,
            child: None,
            pid: 0,
            run: 0,
            main_addr: None,
            metrics_addr: None,
            client,
        };
        srv.spawn();
        srv
    }

    /// Path of the binary under test: `$TOOLGATE_TEST_BINARY` when set (to run these tests
    /// against another build, e.g. to see a regression test fail on the code before a fix),
    /// otherwise the one cargo built with the tests.
    pub fn binary() -> &'static str {
        static BINARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        BINARY.get_or_init(|| {
            std::env::var("TOOLGATE_TEST_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_toolgate").to_string())
        })
    }

    fn spawn(&mut self) {
        self.main_addr = None;
        self.metrics_addr = None;
        let stdout = fs::File::create(self.stdout_path()).expect("create stdout log");
        let stderr = fs::File::create(self.stderr_path()).expect("create stderr log");
        let mut cmd = Command::new(Self::binary());
        cmd.arg("--config")
            .arg(&self.config_path)
            .current_dir(self.dir.path())
            .env("RUST_LOG", std::env::var("TOOLGATE_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        if self.use_admin_key {
            cmd.env("TOOLGATE_ADMIN_KEY", &self.admin_key);
        } else {
            cmd.env_remove("TOOLGATE_ADMIN_KEY");
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", Self::binary()));
        self.pid = child.id();
        self.child = Some(child);
        self.wait_for_listeners();
    }

    fn wait_for_listeners(&mut self) {
        let probe = probe_client();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut seen = Vec::new();
        let (mut main, mut metrics) = (None, None);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                panic!(
                    "toolgate exited during startup with {status}\nconfig {}:\n{}\n{}",
                    self.config_path.display(),
                    fs::read_to_string(&self.config_path).unwrap_or_default(),
                    self.logs_for_humans()
                );
            }
            seen = listening_addrs(self.pid).unwrap_or_default();
            (main, metrics) = classify(&probe, &seen);
            if let (Some(m), Some(x)) = (main, metrics) {
                self.main_addr = Some(m);
                self.metrics_addr = Some(x);
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let logs = self.logs_for_humans();
        self.kill9();
        panic!(
            "toolgate (pid {}) did not serve both listeners within {:?}: listening on {seen:?}, \
             main (/healthz 200 JSON) = {main:?}, metrics (/metrics 200 text) = {metrics:?}\n{logs}",
            self.pid, STARTUP_TIMEOUT
        );
    }

    /// The server's logs of the current run, formatted for a failure message.
    pub fn logs_for_humans(&self) -> String {
        format!(
            "--- toolgate stderr ({}) ---\n{}\n--- toolgate stdout ({}) ---\n{}\n---",
            self.stderr_path().display(),
            tail_file(&self.stderr_path(), LOG_TAIL_LINES),
            self.stdout_path().display(),
            tail_file(&self.stdout_path(), LOG_TAIL_LINES / 4),
        )
    }

    // --- where things are

    /// `http://ADDR:PORT` of the main listener (management API, gateway endpoints, health).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.main_addr())
    }
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.metrics_addr())
    }
    /// The main listener's address, as one connects to it.
    pub fn main_addr(&self) -> SocketAddr {
        self.main_addr.expect("the server is not running")
    }
    /// The metrics listener's address, as one connects to it.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr.expect("the server is not running")
    }
    pub fn port(&self) -> u16 {
        self.main_addr().port()
    }
    pub fn metrics_port(&self) -> u16 {
        self.metrics_addr().port()
    }
    pub fn admin_key(&self) -> &str {
        &self.admin_key
    }
    pub fn pid(&self) -> u32 {
        self.pid
    }
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }
    pub fn stdout_path(&self) -> PathBuf {
        self.dir.path().join(format!("stdout.{}.log", self.run))
    }
    pub fn stderr_path(&self) -> PathBuf {
        self.dir.path().join(format!("stderr.{}.log", self.run))
    }
    /// Everything the current run wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }
    /// Everything the current run wrote to stdout so far.
    pub fn stdout(&self) -> String {
        fs::read_to_string(self.stdout_path()).unwrap_or_default()
    }
    /// Everything written to stdout and stderr by every run of this server (for "never logs a
    /// secret" checks).
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        for run in 0..=self.run {
            for stream in ["stdout", "stderr"] {
                out += &fs::read_to_string(self.dir.path().join(format!("{stream}.{run}.log"))).unwrap_or_default();
            }
        }
        out
    }

    // --- HTTP

    /// A shared blocking client (no cookies, 30 s timeout).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A management API call: `path` like `/v1/gateways`; `key` goes in `Authorization: Bearer`.
    pub fn api(&self, method: &str, path: &str, key: Option<&str>, body: Option<Value>) -> Resp {
        self.request(method, path, key, body, &[])
    }

    /// [`TestServer::api`] with extra headers.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let method = Method::from_bytes(method.as_bytes()).expect("HTTP method");
        let mut req = self.client.request(method.clone(), self.url(path));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        match req.send() {
            Ok(r) => Resp::from_blocking(r),
            Err(e) => panic!("{method} {path} failed: {e}\n{}", self.logs_for_humans()),
        }
    }

    /// `GET /metrics` on the metrics listener, as text.
    pub fn metrics(&self) -> String {
        let r = self.client.get(self.metrics_url()).send().expect("GET /metrics");
        assert_eq!(r.status().as_u16(), 200, "GET /metrics");
        r.text().expect("metrics body")
    }

    // --- process control

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGKILL and reap. A no-op if it is not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait up to [`SHUTDOWN_TIMEOUT`] for the exit; returns its status.
    pub fn sigterm(&mut self) -> ExitStatus {
        self.sigterm_timeout(SHUTDOWN_TIMEOUT)
    }

    /// SIGTERM, then wait up to `timeout`; panics (with the logs) if it is still running then.
    pub fn sigterm_timeout(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("sigterm: the server is not running");
        let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("run kill -TERM");
        assert!(status.success(), "kill -TERM {} failed: {status}", child.id());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("wait for toolgate") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("toolgate did not exit within {timeout:?} of SIGTERM\n{}", self.logs_for_humans());
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Start again on the same config and data directory, with the same admin key; the ports
    /// are new. A server still running is killed (SIGKILL) first.
    pub fn restart(&mut self) {
        self.kill9();
        self.run += 1;
        self.spawn();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // A failed start has already put the logs in its panic message.
        if thread::panicking() && self.main_addr.is_some() {
            eprintln!(
                "toolgate at {} (dir {}):\n{}",
                self.base_url(),
                self.dir.path().display(),
                self.logs_for_humans()
            );
        }
        self.kill9();
    }
}

// ------------------------------------------------------------------------------------------------
// Peers: real MCP servers and Redis, installed by tests/run.sh

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn must_exist(path: PathBuf, what: &str, var: &str) -> PathBuf {
    if !path.exists() {
        panic!("{what} not found at {}: run tests/run.sh (it installs the test peers), or set {var}", path.display());
    }
    path
}

/// `tests/node`, with Node 22 and the MCP peers installed (`$TOOLGATE_TEST_NODE_DIR`).
pub fn node_dir() -> PathBuf {
    let dir = std::env::var_os("TOOLGATE_TEST_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("tests/node"));
    must_exist(dir.join("node_modules/.bin/node"), "Node 22 (npm package `node`)", "TOOLGATE_TEST_NODE_DIR");
    dir
}

/// The Node 22 binary that runs the JavaScript peers.
pub fn node_bin() -> PathBuf {
    node_dir().join("node_modules/.bin/node")
}

/// A JavaScript file inside `tests/node/node_modules`, e.g.
/// `@modelcontextprotocol/server-everything/dist/index.js`.
pub fn node_module(rel: &str) -> PathBuf {
    must_exist(node_dir().join("node_modules").join(rel), rel, "TOOLGATE_TEST_NODE_DIR")
}

/// The venv python (`$TOOLGATE_TEST_PYTHON`) with the MCP SDK and mcp-server-time.
pub fn python() -> PathBuf {
    let py = std::env::var_os("TOOLGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("tests/py/.venv/bin/python"));
    must_exist(py, "the test venv's python", "TOOLGATE_TEST_PYTHON")
}

/// A console script of the test venv, e.g. `mcp-server-time`.
pub fn venv_bin(name: &str) -> PathBuf {
    let py = python();
    must_exist(py.parent().expect("venv bin dir").join(name), name, "TOOLGATE_TEST_PYTHON")
}

/// `redis-server` (`$TOOLGATE_TEST_REDIS`, else found on PATH).
pub fn redis_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TOOLGATE_TEST_REDIS") {
        return must_exist(PathBuf::from(p), "redis-server", "TOOLGATE_TEST_REDIS");
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let p = dir.join("redis-server");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "redis-server not found on PATH: run tests/run.sh (apt-get install redis-server), or set TOOLGATE_TEST_REDIS"
    );
}

/// A helper process (an MCP server, Redis) with its logs in a temp dir; killed on drop.
pub struct Peer {
    pub name: String,
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Peer {
    /// Spawn `cmd` (stdout/stderr go to the peer's dir) and wait until it listens on a TCP port,
    /// which becomes `port`. For programs that bind port 0 (or a port given in `cmd`).
    pub fn spawn(name: &str, mut cmd: Command) -> Peer {
        let dir = tempfile::Builder::new().prefix(&format!("toolgate-peer-{name}-")).tempdir().expect("tempdir");
        let out = fs::File::create(dir.path().join("stdout.log")).expect("log");
        let err = fs::File::create(dir.path().join("stderr.log")).expect("log");
        cmd.stdin(Stdio::null()).stdout(Stdio::from(out)).stderr(Stdio::from(err));
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start peer {name} ({cmd:?}): {e}"));
        let mut peer = Peer { name: name.to_string(), port: 0, child: Some(child), dir };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while Instant::now() < deadline {
            let child = peer.child.as_mut().expect("child");
            if let Ok(Some(status)) = child.try_wait() {
                peer.child = None;
                panic!("peer {name} exited during startup with {status}\n{}", peer.logs_for_humans());
            }
            if let Some(&port) = listening_ports(child.id()).unwrap_or_default().first() {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    peer.port = port;
                    return peer;
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
        let logs = peer.logs_for_humans();
        panic!("peer {name} did not listen within {STARTUP_TIMEOUT:?}\n{logs}");
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn logs_for_humans(&self) -> String {
        format!(
            "--- {} stderr ---\n{}\n--- {} stdout ---\n{}\n---",
            self.name,
            tail_file(&self.dir.path().join("stderr.log"), LOG_TAIL_LINES),
            self.name,
            tail_file(&self.dir.path().join("stdout.log"), LOG_TAIL_LINES / 4),
        )
    }

    /// SIGKILL and reap (an upstream going away mid-test).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.logs_for_humans());
        }
        self.kill9();
    }
}

/// The reference MCP server `@modelcontextprotocol/server-everything` over Streamable HTTP, on an
/// OS-chosen port. Its endpoint is [`everything_url`].
pub fn spawn_everything() -> Peer {
    let mut cmd = Command::new(node_bin());
    cmd.arg(node_module("@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", "0");
    Peer::spawn("server-everything", cmd)
}

/// `http://127.0.0.1:PORT/mcp` of a [`spawn_everything`] peer.
pub fn everything_url(peer: &Peer) -> String {
    format!("http://127.0.0.1:{}/mcp", peer.port)
}

/// argv for the stdio MCP server `mcp-server-time` (for an app's `command:`), UTC.
pub fn mcp_server_time_command() -> Vec<String> {
    vec![venv_bin("mcp-server-time").to_string_lossy().into_owned(), "--local-timezone".into(), "UTC".into()]
}

/// A throwaway Redis server on loopback, no persistence. Redis cannot bind port 0 (`--port 0`
/// turns TCP off), so a random port below the ephemeral range is tried and, should it be taken
/// (redis-server then exits), another one: a collision is seen and retried, never raced.
pub fn spawn_redis() -> Peer {
    let bin = redis_server_bin();
    let mut last = String::new();
    for _ in 0..20 {
        let port = 20_000 + (random_u64() % 12_000) as u16;
        let dir = tempfile::Builder::new().prefix("toolgate-redis-").tempdir().expect("tempdir");
        let mut child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(fs::File::create(dir.path().join("stdout.log")).expect("log")))
            .stderr(Stdio::from(fs::File::create(dir.path().join("stderr.log")).expect("log")))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                last = tail_file(&dir.path().join("stdout.log"), 20);
                break; // most likely the port was taken: try another
            }
            if listening_ports(child.id()).unwrap_or_default().contains(&port) {
                return Peer { name: "redis".into(), port, child: Some(child), dir };
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-server did not listen on {port} within {STARTUP_TIMEOUT:?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("could not start redis-server after 20 tries; last output:\n{last}");
}

/// `redis://127.0.0.1:PORT` of a [`spawn_redis`] peer.
pub fn redis_url(peer: &Peer) -> String {
    format!("redis://127.0.0.1:{}", peer.port)
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// Runs the server on the configuration `file` (without the harness's admin and secret keys) and
/// returns its output once it exits: for configurations it must refuse. A server still running
/// after 20 s started, which fails the test (it is killed first).
pub fn run_until_exit(file: &Path) -> Output {
    let mut child = Command::new(TestServer::binary())
        .arg("--config")
        .arg(file)
        .current_dir(file.parent().expect("file in a directory"))
        .env_remove("TOOLGATE_ADMIN_KEY")
        .env_remove("TOOLGATE_SECRET_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run toolgate");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait for toolgate").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("toolgate output");
            panic!("{}: the server started on a config it should refuse:\n{}", file.display(), describe_output(&out));
        }
        thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("toolgate output")
}

/// A finished process's exit status, stderr and stdout, for assertion messages.
pub fn describe_output(out: &Output) -> String {
    format!(
        "exit status {}\n--- stderr ---\n{}\n--- stdout ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

/// One browser on the identity service: its own cookie jar (the cookies are `Secure` and the
/// requests plain HTTP on the loopback, so the test keeps them), no redirects followed. Users
/// are named by the part before `@` of their e-mail, in `email_domain`.
pub struct Browser {
    base: String,
    email_domain: &'static str,
    http: Client,
    jar: std::cell::RefCell<std::collections::BTreeMap<String, String>>,
}

impl Browser {
    pub fn new(srv: &TestServer, email_domain: &'static str) -> Browser {
        let http = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Browser { base: srv.base_url(), email_domain, http, jar: Default::default() }
    }

    pub fn send(&self, method: &str, path: &str, form: Option<&[(&str, &str)]>) -> Resp {
        self.send_with(method, path, form, &[])
    }

    /// [`Browser::send`] with more request headers (`Origin`, `Sec-Fetch-Site`).
    pub fn send_with(&self, method: &str, path: &str, form: Option<&[(&str, &str)]>, headers: &[(&str, &str)]) -> Resp {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let cookies: Vec<String> = self.jar.borrow().iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !cookies.is_empty() {
            req = req.header("Cookie", cookies.join("; "));
        }
        if let Some(form) = form {
            req = req.form(form);
        }
        let r = req.send().unwrap_or_else(|e| panic!("{path}: {e}"));
        for line in r.headers().get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
            let (name, value) = line.split(';').next().unwrap().split_once('=').unwrap();
            if line.contains("Max-Age=0") {
                self.jar.borrow_mut().remove(name);
            } else {
                self.jar.borrow_mut().insert(name.to_string(), value.to_string());
            }
        }
        Resp::from_blocking(r)
    }

    pub fn cookie(&self, name: &str) -> Option<String> {
        self.jar.borrow().get(name).cloned()
    }

    /// Puts a cookie in the jar, as a page of another host of the domain (or a plain-HTTP
    /// answer) could plant one.
    pub fn plant_cookie(&self, name: &str, value: &str) {
        self.jar.borrow_mut().insert(name.to_string(), value.to_string());
    }

    /// Opens the sign-in page: the CSRF token its form carries.
    pub fn csrf(&self) -> String {
        let page = self.send("GET", "/auth/signin", None);
        assert_eq!(page.status, 200, "{page:?}");
        self.cookie("toolgate_csrf").expect("a CSRF cookie")
    }

    pub fn sign_in(&self, user: &str, password: &str, next: &str) -> Resp {
        let csrf = self.csrf();
        let email = format!("{user}@{}", self.email_domain);
        let form = [("csrf", csrf.as_str()), ("email", &email), ("password", password), ("next", next)];
        self.send("POST", "/auth/signin", Some(&form))
    }

    /// Answers the MFA step of a sign-in with `challenge` and `code`.
    pub fn answer(&self, challenge: &str, code: &str) -> Resp {
        let csrf = self.cookie("toolgate_csrf").unwrap_or_else(|| self.csrf());
        let form = [("csrf", csrf.as_str()), ("challenge_id", challenge), ("code", code), ("next", "")];
        self.send("POST", "/auth/signin/mfa", Some(&form))
    }

    pub fn signed_in(&self) -> bool {
        self.cookie("toolgate_session").is_some() && self.send("GET", "/auth/", None).status == 200
    }

    /// The consent form's decision to allow `client` (the [`authorize_query`] it was asked
    /// with), posted with the browser's CSRF cookie.
    pub fn allow(&self, client: &str) -> Resp {
        self.allow_for(client, "gateways:read")
    }

    /// [`Browser::allow`] for `scope`.
    pub fn allow_for(&self, client: &str, scope: &str) -> Resp {
        let csrf = self.cookie("toolgate_csrf").expect("a CSRF cookie");
        let form = [
            ("csrf", csrf.as_str()),
            ("client_id", client),
            ("redirect_uri", CLIENT_REDIRECT),
            ("response_type", "code"),
            ("scope", scope),
            ("state", "st"),
            ("decision", "allow"),
        ];
        self.send("POST", "/auth/oauth/authorize", Some(&form))
    }

    /// The code this signed-in browser's consent gives `client`: the consent page (its form's
    /// CSRF token the browser's cookie), then the decision to allow.
    pub fn consent(&self, client: &str) -> String {
        self.consent_for(client, "gateways:read")
    }

    /// [`Browser::consent`] to `scope`.
    pub fn consent_for(&self, client: &str, scope: &str) -> String {
        let page = self.send("GET", &authorize_query_for(client, scope), None);
        assert_eq!(page.status, 200, "the consent page: {page:?}");
        assert_eq!(hidden(&page.text, "csrf"), self.cookie("toolgate_csrf").unwrap());
        back_at_client(&self.allow_for(client, scope)).remove("code").expect("a code")
    }
}

/// The value of the hidden field `name` of a page.
pub fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker).unwrap_or_else(|| panic!("no field {name} in {page}")) + marker.len();
    page[start..].split('"').next().unwrap().to_string()
}

/// Where the tests' OAuth clients of the authorization server are sent back.
pub const CLIENT_REDIRECT: &str = "https://client.example/cb";

/// A confidential OAuth client of `key`'s organisation named `name`, made on `srv` (sent back
/// to [`CLIENT_REDIRECT`], scope `gateways:read`): (client_id, client_secret).
pub fn oauth_client(srv: &TestServer, key: &str, name: &str) -> (String, String) {
    oauth_client_for(srv, key, name, "gateways:read")
}

/// [`oauth_client`] that may be granted `scope`.
pub fn oauth_client_for(srv: &TestServer, key: &str, name: &str, scope: &str) -> (String, String) {
    let body = serde_json::json!({ "name": name, "redirect_uris": [CLIENT_REDIRECT], "scopes": [scope] });
    let c = ok(&srv.api("POST", "/v1/oauth/clients", Some(key), Some(body)), 201);
    (c["client_id"].as_str().unwrap().to_string(), c["client_secret"].as_str().unwrap().to_string())
}

/// The consent page's address for `client`: a code for `gateways:read`, state `st`.
pub fn authorize_query(client: &str) -> String {
    authorize_query_for(client, "gateways:read")
}

/// [`authorize_query`] for `scope`.
pub fn authorize_query_for(client: &str, scope: &str) -> String {
    let redirect = url::form_urlencoded::byte_serialize(CLIENT_REDIRECT.as_bytes()).collect::<String>();
    let scope = url::form_urlencoded::byte_serialize(scope.as_bytes()).collect::<String>();
    format!(
        "/auth/oauth/authorize?response_type=code&client_id={client}&redirect_uri={redirect}&scope={scope}&state=st"
    )
}

/// The query of the redirect back to the client.
pub fn back_at_client(r: &Resp) -> std::collections::HashMap<String, String> {
    assert_eq!(r.status, 303, "{r:?}");
    let to = url::Url::parse(r.header("location").expect("a Location")).unwrap();
    assert!(to.as_str().starts_with(CLIENT_REDIRECT), "{to}");
    to.query_pairs().into_owned().collect()
}

/// The answer of `srv`'s token endpoint to `form`.
pub fn oauth_token(srv: &TestServer, form: &[(&str, &str)]) -> Resp {
    Resp::from_blocking(srv.client().post(srv.url("/auth/oauth/token")).form(form).send().unwrap())
}

/// `code` exchanged for tokens at `srv` by `client`, with `secret`.
pub fn exchange_code(srv: &TestServer, client: &str, secret: &str, code: &str) -> Resp {
    oauth_token(
        srv,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", CLIENT_REDIRECT),
            ("client_id", client),
            ("client_secret", secret),
        ],
    )
}
