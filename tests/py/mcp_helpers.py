"""Shared helpers of the MCP gateway tests (`test_mcp_*.py`).

* `config(...)`: a complete toolgate YAML (ephemeral ports, embedded store in `./data`,
  apps, extra `server:` / `mcp:` settings). `ToolgateServer(full_config=...)` runs it.
* `Api`: the management API with the admin key (create gateways, read sessions, ...).
* `McpHttp`: a raw Streamable HTTP client (httpx2) for the protocol-rule tests; `list_all`
  follows a list's `nextCursor` pages.
* `EverythingServer`, `node_bin`: the real `@modelcontextprotocol/server-everything` over
  Streamable HTTP, on a port the OS picks (PORT=0, read back from /proc: no race).
* `sdk_client(...)`: the official Python SDK (`mcp`) client against a gateway, in `auto`
  (server/discover probe, then fallback) or `legacy` (initialize) mode.
* `HeaderForwarder`: a tiny HTTP forwarder that adds `X-API-Key` (for the conformance suite,
  which cannot send headers).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import http.server
import json
import os
import socketserver
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx2

from toolgate_harness import ROOT, ToolgateServer, listening_addrs

VENV = Path(os.environ.get("TOOLGATE_TEST_VENV", ROOT / "tests" / "py" / ".venv"))
NODE_DIR = Path(os.environ.get("TOOLGATE_TEST_NODE_DIR", ROOT / "tests" / "node"))

# Accept header every MCP client sends on POST.
ACCEPT_BOTH = "application/json, text/event-stream"
LATEST = "2025-11-25"
STATELESS = "2026-07-28"

TIME_APP = """\
  - id: time
    name: Time
    description: Current time in any time zone
    category: utilities
    builtin: time
"""


# A stdio app on the Python SDK imports for seconds before it answers `initialize`, longer on a
# busy machine (the test files run in parallel) than the 5 s `timeouts.connect_ms` gives it:
# the tests' stdio apps get 30 s, so that a slow start is not taken for a failed one.
STDIO_START = "    timeouts: {connect_ms: 30000}\n"


def stdio_time_app(app_id: str = "clock") -> str:
    """`mcp-server-time` (the Python reference server) as a stdio app."""
    exe = VENV / "bin" / "mcp-server-time"
    if not exe.exists():
        raise AssertionError(f"mcp-server-time missing at {exe}: run tests/run.sh (pip install -r requirements.txt)")
    return f"""\
  - id: {app_id}
    name: Clock
    description: mcp-server-time over stdio
    category: utilities
    command: [{json.dumps(str(exe))}, --local-timezone, UTC]
{STDIO_START}"""


def http_app(app_id: str, url: str, name: str = "Everything", timeouts: str = "") -> str:
    extra = f"    timeouts: {{{timeouts}}}\n" if timeouts else ""
    return f"""\
  - id: {app_id}
    name: {name}
    description: Streamable HTTP app
    category: testing
    url: {url}
{extra}"""


def config(apps: str = TIME_APP, server: str = "", mcp: str = "") -> str:
    """A complete config; `server`/`mcp` are extra indented lines (`  max_body_bytes: 2048`).

    `mcp.list_deadline_ms` is 30 s unless `mcp` sets it: a stdio app on the Python SDK takes
    seconds to start on a busy machine (the test files run in parallel), and a first list that
    left it out would fail a test about something else. Tests of the deadline set their own."""
    if "list_deadline_ms" not in mcp:
        mcp += "  list_deadline_ms: 30000\n"
    return (
        "environment: development\n"
        "server:\n"
        "  listen: 127.0.0.1:0\n"
        "  metrics_listen: 127.0.0.2:0\n"
        "  public_url: http://localhost:8080\n"
        "  trusted_proxies: []\n"
        f"{server}"
        "storage:\n"
        "  backend: embedded\n"
        "  path: ./data\n"
        "mcp:\n"
        "  allowed_origins: [\"http://allowed.example\"]\n"
        f"{mcp}"
        "apps:\n"
        f"{apps}"
    )


def start_toolgate(full_config: str) -> ToolgateServer:
    return ToolgateServer(full_config=full_config).start()


def start_on_a_chosen_port(make_config, env: dict[str, str] | None = None) -> ToolgateServer:
    """toolgate whose main listener's port is chosen before the start, for tests whose
    configuration must name its own public URL (an OAuth resource, a redirect URI):
    `make_config(port)` gives the whole configuration. The port may be taken meanwhile; then
    another is tried (the only place the tests choose a port, since the URL must be known)."""
    import socket

    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            return ToolgateServer(full_config=make_config(port), env=env).start()
        except RuntimeError as e:
            if "in use" not in str(e).lower():
                raise
    raise AssertionError("no free port for toolgate's main listener")


def on_port(text: str, port: int) -> str:
    """A config of `config()` with its main listener and public URL on `port`."""
    text = text.replace("listen: 127.0.0.1:0", f"listen: 127.0.0.1:{port}")
    return text.replace("public_url: http://localhost:8080", f"public_url: http://127.0.0.1:{port}")


# ------------------------------------------------------------------ management API


class Api:
    """The management API as the admin (owner key with scope `*`, sent as `Authorization: Bearer`)."""

    def __init__(self, srv: ToolgateServer):
        self.srv = srv

    def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> httpx2.Response:
        headers = {"Authorization": f"Bearer {key or self.srv.admin_key}"}
        return httpx2.request(method, self.srv.base_url + path, json=body, headers=headers, timeout=30)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> dict:
        r = self.call(method, path, body)
        assert r.status_code == status, f"{method} {path}: expected {status}, got {r.status_code}: {r.text}"
        return r.json()

    def create_gateway(
        self, servers: list[str], allowed_tools: dict | None = None, configuration: dict | None = None, name: str = ""
    ) -> tuple[str, str]:
        """Creates a gateway; returns (gateway id, its access key)."""
        body: dict[str, Any] = {"name": name or f"gw-{time.monotonic_ns()}", "servers": servers}
        if allowed_tools is not None:
            body["allowed_tools"] = allowed_tools
        if configuration is not None:
            body["configuration"] = configuration
        data = self.ok("POST", "/v1/gateways", body, status=201)["data"]
        return data["id"], data["api_key"]

    def gateway(self, gw_id: str) -> dict:
        return self.ok("GET", f"/v1/gateways/{gw_id}")["data"]


def mcp_url(srv: ToolgateServer, gw_id: str) -> str:
    return f"{srv.base_url}/gateway/{gw_id}/mcp"


# ------------------------------------------------------------------ raw Streamable HTTP


def sse_messages(text: str) -> list[dict]:
    """The JSON-RPC messages of an SSE body (`data:` lines of each event)."""
    out = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
        if data:
            out.append(json.loads(data))
    return out


def sse_events(text: str) -> list[dict]:
    """Server-sent events as {id, data} (the `retry:` hint as `retry`)."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        ev: dict = {}
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field in ("id", "data", "retry", "event"):
                ev[field] = ev.get(field, "") + value if field == "data" else value
        if ev:
            out.append(ev)
    return out


class McpHttp:
    """Raw Streamable HTTP to one gateway endpoint; remembers the session after initialize."""

    def __init__(self, url: str, key: str | None, version: str = LATEST):
        self.url = url
        self.key = key
        self.version = version
        self.session_id: str | None = None
        self.cookie: str | None = None
        self.client = httpx2.Client(timeout=60)
        self._next_id = 0

    def headers(self, **extra: str | None) -> dict[str, str]:
        h = {"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
        if self.key is not None:
            h["X-API-Key"] = self.key
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
            h["MCP-Protocol-Version"] = self.version
        for k, v in extra.items():
            name = k.replace("_", "-")
            if v is None:
                h.pop(name, None)
                h = {hk: hv for hk, hv in h.items() if hk.lower() != name.lower()}
            else:
                h[name] = v
        return h

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def post(self, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> httpx2.Response:
        h = headers if headers is not None else self.headers()
        content = raw if raw is not None else json.dumps(body).encode()
        return self.client.post(self.url, content=content, headers=h)

    def initialize(self, version: str | None = None, client_name: str = "pytest-raw") -> httpx2.Response:
        body = {
            "jsonrpc": "2.0",
            "id": self.next_id(),
            "method": "initialize",
            "params": {
                "protocolVersion": version or self.version,
                "capabilities": {},
                "clientInfo": {"name": client_name, "version": "1.2.3"},
            },
        }
        h = self.headers()
        h.pop("Mcp-Session-Id", None)
        h.pop("MCP-Protocol-Version", None)
        r = self.post(body, headers=h)
        assert r.status_code == 200, f"initialize: {r.status_code} {r.text}"
        self.session_id = r.headers.get("mcp-session-id")
        self.cookie = r.headers.get("set-cookie")
        assert self.session_id, f"initialize answered no Mcp-Session-Id: {dict(r.headers)}"
        note = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert note.status_code == 202, f"notifications/initialized: {note.status_code} {note.text}"
        return r

    def request(self, method: str, params: dict | None = None, headers: dict[str, str] | None = None) -> httpx2.Response:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id(), "method": method}
        if params is not None:
            body["params"] = params
        return self.post(body, headers=headers)

    def rpc(self, method: str, params: dict | None = None) -> dict:
        """A request whose HTTP status must be 200; returns the JSON-RPC response (JSON or SSE)."""
        r = self.request(method, params)
        assert r.status_code == 200, f"{method}: HTTP {r.status_code}: {r.text}"
        return response_message(r)

    def delete(self, headers: dict[str, str] | None = None) -> httpx2.Response:
        return self.client.delete(self.url, headers=headers if headers is not None else self.headers())

    def close(self) -> None:
        self.client.close()


def gateway_session(srv, servers: list[str], **gateway: Any) -> tuple[str, str, McpHttp]:
    """A new gateway of `servers` (`Api.create_gateway`'s keywords: `configuration`, ...) and an
    initialized raw session on it: (gateway id, its access key, the session). The conftest
    fixture `mcp_session` is the same, and closes the sessions after the test."""
    gw_id, key = Api(srv).create_gateway(servers, **gateway)
    c = McpHttp(mcp_url(srv, gw_id), key)
    c.initialize()
    return gw_id, key, c


def first_event_then_drop(c: McpHttp, body: dict) -> str:
    """POSTs `body`, a call answered as an event stream, and drops the connection after its first
    event (a slow call's priming event, while the app still works): what arrived, as text."""
    seen = ""
    with httpx2.stream("POST", c.url, json=body, headers=c.headers(), timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.headers
        for chunk in r.iter_text():
            seen += chunk
            if "\n\n" in seen.replace("\r\n", "\n"):
                break
    return seen


def open_stream(c: McpHttp, read_timeout: float = 20.0):
    """The gateway's GET stream for `c`'s session (not yet read)."""
    headers = c.headers(Accept="text/event-stream")
    return c.client.stream("GET", c.url, headers=headers, timeout=httpx2.Timeout(5.0, read=read_timeout))


def messages_on_stream_while(c: McpHttp, action, wanted: str, within: float = 10) -> list[dict]:
    """Opens the gateway's GET stream, runs `action`, and returns the messages seen on the
    stream until one with method `wanted` (or `within` seconds: the stream's keep-alive comments
    keep reads from timing out)."""
    seen: list[dict] = []
    with open_stream(c) as r:
        assert r.status_code == 200, r.status_code
        lines = r.iter_lines()
        assert next(lines).startswith(":"), "the stream opens with a comment"
        action()
        deadline = time.monotonic() + within
        for line in lines:
            if time.monotonic() > deadline:
                break
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1]["method"] == wanted:
                    break
    return seen


def methods_on_stream_while(c: McpHttp, action, wanted: str) -> list[str]:
    return [m["method"] for m in messages_on_stream_while(c, action, wanted)]


def list_all(c: McpHttp, method: str, key: str) -> list[dict]:
    """Every item of a paginated list (`tools/list`, ...), following `nextCursor`."""
    items, cursor = [], None
    while True:
        msg = c.rpc(method, {"cursor": cursor} if cursor else {})
        assert "result" in msg, msg
        items += msg["result"][key]
        cursor = msg["result"].get("nextCursor")
        if not cursor:
            return items


def response_message(r: httpx2.Response) -> dict:
    """The JSON-RPC response of a POST answered as JSON or as an SSE stream."""
    ct = r.headers.get("content-type", "")
    if ct.startswith("text/event-stream"):
        msgs = [m for m in sse_messages(r.text) if "id" in m and ("result" in m or "error" in m)]
        assert len(msgs) == 1, f"expected one response in the SSE stream, got: {r.text}"
        return msgs[0]
    assert ct.startswith("application/json"), f"unexpected content type {ct!r}: {r.text}"
    return r.json()


# ------------------------------------------------------------------ Node peers


def node_bin() -> Path:
    node = Path(os.environ.get("TOOLGATE_TEST_NODE", NODE_DIR / "node_modules" / ".bin" / "node"))
    if not node.exists():
        raise AssertionError(f"Node 22 missing at {node}: run tests/run.sh or `npm ci` in {NODE_DIR}")
    return node


def wait_for_port(proc: subprocess.Popen, what: str, timeout: float = 30) -> str:
    """`host:port` of the first socket `proc` listens on (read from /proc: no port race)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode} during startup")
        addrs = listening_addrs(proc.pid)
        if addrs:
            return addrs[0].replace("[::1]", "127.0.0.1")
        time.sleep(0.1)
    raise AssertionError(f"{what} did not listen within {timeout}s")


class NodeServer:
    """A Node MCP server started on PORT=0, its address read back from /proc/<pid>."""

    def __init__(self, script: Path, args: list[str], what: str, log_dir: Path | None = None):
        self.script, self.args, self.what = script, args, what
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.addr = ""

    def start(self) -> "NodeServer":
        if not self.script.exists():
            raise AssertionError(f"{self.what} missing at {self.script}: run `npm ci` in {NODE_DIR}")
        log = open(os.devnull, "wb") if self.log_dir is None else open(self.log_dir / f"{self.what}.log", "ab")
        self.proc = subprocess.Popen(
            [str(node_bin()), str(self.script), *self.args],
            cwd=NODE_DIR, env=dict(os.environ, PORT="0"), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )
        log.close()
        self.addr = wait_for_port(self.proc, self.what)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.addr}/mcp"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> "NodeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def everything_server(log_dir: Path | None = None) -> NodeServer:
    script = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    return NodeServer(script, ["streamableHttp"], "server-everything", log_dir)


def conformance_fixture(log_dir: Path | None = None) -> NodeServer:
    return NodeServer(NODE_DIR / "conformance" / "fixture.mjs", [], "conformance-fixture", log_dir)


# ------------------------------------------------------------------ official Python SDK


@contextlib.asynccontextmanager
async def sdk_client(url: str, key: str, mode: str = "auto", **kwargs):
    """The official `mcp` Client over Streamable HTTP with `X-API-Key`; `mode` is auto or legacy."""
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"X-API-Key": key}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **kwargs) as client:
            yield client


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------ header-adding forwarder


class HeaderForwarder:
    """Forwards every HTTP request to `target` (`http://host:port`) adding `headers`.

    Streams the answer back chunk by chunk (SSE included), so the conformance suite, which cannot
    send headers, can talk to a gateway whose endpoint requires `X-API-Key`.
    """

    def __init__(self, target: str, headers: dict[str, str]):
        self.target = target.removeprefix("http://").rstrip("/")
        self.headers = headers
        fwd = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _forward(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                host, port = fwd.target.rsplit(":", 1)
                conn = http.client.HTTPConnection(host, int(port), timeout=120)
                hdrs = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                hdrs.update(fwd.headers)
                try:
                    conn.request(self.command, self.path, body=body, headers=hdrs)
                    resp = conn.getresponse()
                except OSError as e:
                    self.send_error(502, f"forwarder: {e}")
                    return
                self.send_response_only(resp.status, resp.reason)
                chunked = resp.getheader("content-length") is None and self.command != "HEAD" and resp.status not in (204, 304)
                for k, v in resp.getheaders():
                    if k.lower() in ("transfer-encoding", "connection"):
                        continue
                    self.send_header(k, v)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while True:
                        chunk = resp.read1(65536) if chunked else resp.read(65536)
                        if not chunk:
                            break
                        if chunked:
                            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        else:
                            self.wfile.write(chunk)
                        self.wfile.flush()
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                except OSError:
                    self.close_connection = True
                finally:
                    conn.close()

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = _forward

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "HeaderForwarder":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def gateway_for_suites(app_id: str, app_url: str, log_dir: Path, name: str = "App"):
    """A single-app gateway on `app_url` behind a `HeaderForwarder` that adds its key, for peers
    that cannot send headers (the conformance suite): yields (URL of the gateway's endpoint at the
    forwarder, the key, the server). Origins of the forwarder are allowed; the server's stderr goes
    to `log_dir/toolgate-<app_id>.log` when it stops."""
    with HeaderForwarder("http://127.0.0.1:1", {}) as fwd:
        port = fwd.base_url.rsplit(":", 1)[1]
        origins = f"  allowed_origins: [\"http://localhost:{port}\", \"http://127.0.0.1:{port}\"]\n"
        cfg = config(http_app(app_id, app_url, name=name)).replace(
            '  allowed_origins: ["http://allowed.example"]\n', origins)
        srv = start_toolgate(cfg)
        try:
            gw_id, key = Api(srv).create_gateway([app_id])
            fwd.target = srv.base_url.removeprefix("http://")
            fwd.headers = {"X-API-Key": key}
            yield f"http://localhost:{port}/gateway/{gw_id}/mcp", key, srv
        finally:
            srv.stop()
            (log_dir / f"toolgate-{app_id}.log").write_text(srv.stderr_text())
            srv.tmp.cleanup()


def stateless_post(url: str, key: str | None, method: str, params: dict, headers: dict | None = None, rid: int = 1):
    """One 2026-07-28 request with its routing headers (`headers` override them)."""
    h = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": STATELESS,
        "Mcp-Method": method,
    }
    if key:
        h["X-API-Key"] = key
    if method in ("tools/call", "prompts/get") and "name" in params:
        h["Mcp-Name"] = params["name"]
    if method.startswith("tasks/") and "taskId" in params:
        h["Mcp-Name"] = params["taskId"]
    h.update(headers or {})
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    return httpx2.post(url, json=body, headers=h, timeout=30)


@contextlib.contextmanager
def python_app(script: str, log: Path):
    """One of the Python test apps (`tests/py/<script>`) running: yields its `host:port`."""
    proc = subprocess.Popen([str(VENV / "bin" / "python"), str(Path(__file__).parent / script)],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        yield wait_for_port(proc, script)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def suite_2026_run(url: str, out_dir: Path, *selection: str) -> tuple[dict, str]:
    """Runs the conformance suite 0.2.0-alpha.12 (`conformance-2026` in tests/node) against `url`
    with `selection` (`--requirements REVISION`, `--scenario NAME`); returns scenario -> [checks],
    and the output."""
    import re

    cli = NODE_DIR / "node_modules" / "conformance-2026" / "dist" / "index.js"
    if not cli.exists():
        raise AssertionError(f"conformance suite 0.2.0-alpha.12 missing at {cli}: run `npm ci` in {NODE_DIR}")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PATH=f"{node_bin().parent}:{os.environ.get('PATH', '')}")
    p = subprocess.run(
        [str(node_bin()), str(cli), "server", "--url", url, "-o", str(out_dir), *selection],
        cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=900,
    )
    output = p.stdout + "\n--- stderr ---\n" + p.stderr
    (out_dir / "output.txt").write_text(output)
    results: dict[str, list] = {}
    for checks in out_dir.glob("server-*/checks.json"):
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks.parent.name.removeprefix("server-"))
        results.setdefault(scenario, []).extend(json.loads(checks.read_text()))
    return results, output


def passes(checks: list) -> bool:
    """A scenario passed: some check succeeded and none failed."""
    return bool(checks) and any(c.get("status") == "SUCCESS" for c in checks) and not any(
        c.get("status") == "FAILURE" for c in checks)

TASKS = "io.modelcontextprotocol/tasks"
# A 2026-07-28 request's `_meta` from a client that declared the tasks extension.
WITH_TASKS = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
}


def task_to_its_end(url: str, key: str, call: dict) -> tuple[dict, dict]:
    """Calls a tool as a task (`call`: the `tools/call` params, `_meta` asking for one) and polls
    `tasks/get` until the task has ended or an error answers it: (the created task, the last
    JSON-RPC answer of `tasks/get`)."""
    created = stateless_post(url, key, "tools/call", call).json()["result"]
    assert created["resultType"] == "task" and created["taskId"].startswith("tgt1."), created
    deadline = time.monotonic() + 30
    while True:
        got = stateless_post(url, key, "tasks/get", {"taskId": created["taskId"], "_meta": WITH_TASKS}).json()
        if "error" in got or got["result"]["status"] not in ("working", "input_required"):
            return created, got
        assert time.monotonic() < deadline, got
