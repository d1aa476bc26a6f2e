"""A gateway's external guards (`guards`, issue 62): a guard written here, verifying every call's
signature with the Standard Webhooks library (`standardwebhooks`), asked before each tool call
and on its result, seen by the official Python SDK client in both protocol eras and by the
official TypeScript SDK client.

The guard masks e-mail addresses in results, denies one argument value (the time zone
`Antarctica/Troll`), denies a result it calls classified (the client is told the tool already
ran), and rewrites one call's arguments. A guard that answers late, and one that is stopped
(connection refused), refuse the call under `failure: closed` and let it through under `open`;
`mode: log` records what the guard said and lets the call go on. Every decision is on the call's
request log entry, a deny and a replace are in the audit trail, and the calls are counted in
`toolgate_guard_calls_total`. A task's result (the tasks extension of 2026-07-28, `tasks_app.py`)
is guarded as a call's own result is, where `tasks/get` carries it; a guard whose gateway's
calls are all in flight is `busy`.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from standardwebhooks import Webhook

from mcp_helpers import (
    STATELESS,
    Api,
    McpHttp,
    config,
    everything_server,
    http_app,
    mcp_url,
    node_bin,
    python_app,
    run,
    sdk_client,
    stateless_post,
    task_to_its_end,
    WITH_TASKS,
)

MODES = ["auto", "legacy"]
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
DENIED_ZONE = "Antarctica/Troll"
ALLOW_LOOPBACK = 'webhooks:\n  allowed_hosts: ["127.0.0.1"]\n'


def masked(v):
    """`v` with every e-mail address in its strings replaced by `[email]`."""
    if isinstance(v, str):
        return EMAIL.sub("[email]", v)
    if isinstance(v, list):
        return [masked(x) for x in v]
    if isinstance(v, dict):
        return {k: masked(x) for k, x in v.items()}
    return v


class Guard:
    """A guard on the loopback. `/main` masks, denies and rewrites; `/slow` answers after 2 s;
    `/hold` answers once the test sets `release`; every call's signature is verified with the
    secret the gateway's answer gave, once."""

    def __init__(self):
        self.secrets: dict[str, str] = {}
        self.calls: list[dict] = []
        self.failures: list[str] = []
        self.release = threading.Event()
        guard = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                payload = json.loads(body)
                secret = guard.secrets.get(payload["gateway"]["id"], "")
                try:
                    Webhook(secret).verify(body, {k.lower(): v for k, v in self.headers.items()})
                except Exception as e:  # noqa: BLE001 - any failure is the test's to report
                    guard.failures.append(f"{self.path}: {e!r}")
                    self.answer(401, {"error": "bad signature"})
                    return
                guard.calls.append({"path": self.path, "payload": payload, "headers": dict(self.headers)})
                if self.path == "/slow":
                    time.sleep(2)
                if self.path == "/hold":
                    guard.release.wait(60)
                self.answer(200, decide(payload))

            def answer(self, status, doc):
                out = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def decide(payload: dict) -> dict:
    """What the guard answers about one call."""
    args = payload.get("arguments") or {}
    if payload["phase"] == "request":
        if args.get("timezone") == DENIED_ZONE:
            return {"action": "deny", "reason": f"{DENIED_ZONE} is off limits"}
        if args.get("format") == "[rewrite-me]":
            return {"action": "replace", "arguments": {**args, "format": "[rewritten]"}}
        return {"action": "allow"}
    result = payload["result"]
    if "Long running operation" in json.dumps(result):
        return {"action": "replace", "result": {"content": [{"type": "text", "text": "guarded: long run done"}]}}
    if "classified" in json.dumps(result):
        return {"action": "deny", "reason": "the result is classified"}
    if EMAIL.search(json.dumps(result)):
        return {"action": "replace", "result": masked(result)}
    return {"action": "allow"}


def closed_port() -> int:
    """A loopback port nothing listens on (a stopped guard: connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def setup(module_toolgate_factory):
    """(toolgate, its API, the guard, {name: (gateway id, key)}) with a gateway per guard set-up."""
    guard = Guard()
    srv = module_toolgate_factory(full_config=config() + ALLOW_LOOPBACK)
    api = Api(srv)
    stopped = f"http://127.0.0.1:{closed_port()}/check"
    both = ["request", "response"]
    setups = {
        "main": [{"url": f"{guard.url}/main", "on": both, "timeout_ms": 5000}],
        "log": [{"url": f"{guard.url}/main", "on": both, "mode": "log"}],
        "late_closed": [{"url": f"{guard.url}/slow", "on": ["request"], "timeout_ms": 300}],
        "late_open": [{"url": f"{guard.url}/slow", "on": ["request"], "timeout_ms": 300, "failure": "open"}],
        "stopped_closed": [{"url": stopped, "on": ["request"]}],
        "stopped_open": [{"url": stopped, "on": both, "failure": "open"}],
    }
    # The guards see the arguments the app gets: the override's default time zone put in.
    overrides = [{"tool": "get_current_time", "default_arguments": {"timezone": "UTC"}}]
    gateways = {}
    for name, guards in setups.items():
        body = {"name": f"guarded-{name}", "servers": ["time"], "guards": guards, "tool_overrides": overrides}
        data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
        made = data["guards"]
        assert len(made) == 1 and made[0]["secret"].startswith("whsec_"), made
        guard.secrets[data["id"]] = made[0]["secret"]
        gateways[name] = (data["id"], data["api_key"])
    return srv, api, guard, gateways


async def outcome(c, args: dict):
    """(result, None) or (None, the JSON-RPC error) of one call of `get_current_time`."""
    try:
        return await c.call_tool("get_current_time", args), None
    except MCPError as e:
        return None, e.error


def sdk_calls(srv, gw_key, mode: str, *calls: dict) -> list:
    gw, key = gw_key

    async def go():
        async with sdk_client(mcp_url(srv, gw), key, mode=mode) as c:
            return [await outcome(c, args) for args in calls]

    return run(go())


@pytest.mark.parametrize("mode", MODES)
def test_the_guard_masks_denies_and_rewrites_what_the_client_sees(setup, mode):
    srv, api, guard, gws = setup
    before = len(guard.calls)
    (mail, _), (_, denied), (_, classified), (rewritten, _) = sdk_calls(
        srv, gws["main"], mode,
        {"format": f"[mail alice.{mode}@example.com]"},
        {"format": "YYYY", "timezone": DENIED_ZONE},
        {"format": "[classified]"},
        {"format": "[rewrite-me]"},
    )
    assert mail is not None and mail.content[0].text == "mail [email]", mail
    assert "@" not in json.dumps(mail.structured_content or {}), mail.structured_content
    assert denied is not None and denied.code == -32012 and f"{DENIED_ZONE} is off limits" in denied.message, denied
    assert denied.data["reason"] == "guard_denied" and denied.data["tool_ran"] is False, denied.data
    assert classified is not None and classified.code == -32013, classified
    assert "the result is classified" in classified.message and "already ran" in classified.message, classified
    assert classified.data["tool_ran"] is True, classified.data
    assert rewritten is not None and rewritten.content[0].text == "rewritten", rewritten
    assert not guard.failures, guard.failures
    # What the guard was sent: signed, the caller without a credential, the tool as exposed and
    # as the app names it, the arguments the app gets (the override's default in), the result.
    calls = guard.calls[before:]
    first = calls[0]["payload"]
    gw, key = gws["main"]
    assert first["phase"] == "request" and first["gateway"]["id"] == gw, first
    assert first["caller"]["kind"] == "gateway_key" and first["caller"]["organization_id"], first
    assert key not in json.dumps(calls), "no credential is sent to a guard"
    assert first["tool"] == {"name": "get_current_time", "app": "time", "function": "get_current_time"}, first
    assert first["arguments"] == {"format": f"[mail alice.{mode}@example.com]", "timezone": "UTC"}, first
    response = next(c["payload"] for c in calls if c["payload"]["phase"] == "response")
    assert "alice" in json.dumps(response["result"]) and response["arguments"]["timezone"] == "UTC", response
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= {h.lower() for h in calls[0]["headers"]}
    # A denied call reaches no app: no response phase for it.
    troll = [c for c in calls if (c["payload"].get("arguments") or {}).get("timezone") == DENIED_ZONE]
    assert [c["payload"]["phase"] for c in troll] == ["request"], troll


def logs_of(api: Api, gw: str) -> list[dict]:
    return api.ok("GET", f"/v1/logs?gateway_id={gw}&limit=100")["data"]["logs"]


def test_each_decision_is_on_the_log_entry_and_deny_and_replace_in_the_audit(setup):
    srv, api, guard, gws = setup
    sdk_calls(srv, gws["main"], "legacy", {"format": "[bob@example.com]"}, {"format": "Y", "timezone": DENIED_ZONE})
    gw = gws["main"][0]
    entries = logs_of(api, gw)
    denied = [e for e in entries if any(d.get("action") == "deny" for d in e.get("guards", []))]
    assert denied and denied[0]["status"] == "error", entries[:3]
    d = next(d for d in denied[0]["guards"] if d["action"] == "deny")
    assert d["phase"] == "request" and d["mode"] == "enforce" and DENIED_ZONE in d["reason"], d
    replaced = [e for e in entries if any(d.get("action") == "replace" for d in e.get("guards", []))]
    assert replaced and replaced[0]["status"] == "success", entries[:3]
    assert [x["phase"] for x in replaced[0]["guards"]] == ["request", "response"], replaced[0]["guards"]
    assert "bob@" not in json.dumps(replaced[0]["response"]), "the log keeps what the client got"
    audit = api.ok("GET", "/v1/audit?limit=100")["data"]["entries"]
    actions = {e["action"] for e in audit if e.get("target", {}).get("id") == gw}
    assert {"tool_call.guard_denied", "tool_call.guard_replaced"} <= actions, actions


@pytest.mark.parametrize("mode", MODES)
def test_a_late_or_stopped_guard_refuses_when_closed_and_lets_through_when_open(setup, mode):
    srv, api, guard, gws = setup
    args = {"format": "[through]"}
    for name, reason in [("late_closed", "guard_timeout"), ("stopped_closed", "guard_error")]:
        [(result, e)] = sdk_calls(srv, gws[name], mode, args)
        assert result is None and e is not None and e.code == -32012, (name, result, e)
        assert e.data["reason"] == reason and "could not be asked" in e.message, (name, e)
    for name in ["late_open", "stopped_open"]:
        [(result, e)] = sdk_calls(srv, gws[name], mode, args)
        assert e is None and result.content[0].text == "through", (name, e)
    entry = logs_of(api, gws["late_closed"][0])[0]
    assert entry["guards"][0]["action"] == "timeout" and entry["guards"][0]["failure"] == "closed", entry
    entry = logs_of(api, gws["stopped_open"][0])[0]
    assert [d["action"] for d in entry["guards"]] == ["error", "error"] and entry["status"] == "success", entry


def test_mode_log_records_what_the_guard_said_and_lets_the_call_go_on(setup):
    srv, api, guard, gws = setup
    (mail, e1), (zone, e2) = sdk_calls(
        srv, gws["log"], "auto", {"format": "[carol@example.com]"}, {"format": "[x]", "timezone": DENIED_ZONE})
    assert e1 is None and mail.content[0].text == "carol@example.com", "log mode replaces nothing"
    assert e2 is None and zone.content[0].text == "x", "log mode denies nothing"
    entries = logs_of(api, gws["log"][0])
    said = [(d["phase"], d["action"], d["mode"]) for e in entries for d in e.get("guards", [])]
    assert ("request", "deny", "log") in said and ("response", "replace", "log") in said, said


def test_the_guard_calls_are_counted_and_timed(setup):
    srv, api, guard, gws = setup
    sdk_calls(srv, gws["main"], "auto", {"format": "Y", "timezone": DENIED_ZONE})
    sdk_calls(srv, gws["late_closed"], "auto", {"format": "Y"})
    text = httpx2.get(srv.metrics_url, timeout=10).text

    def count(gw: str, outcome: str) -> float:
        m = re.search(rf'toolgate_guard_calls_total\{{gateway="{gw}",outcome="{outcome}"\}} (\S+)', text)
        return float(m.group(1)) if m else 0.0

    assert count(gws["main"][0], "deny") >= 1, text
    assert count(gws["late_closed"][0], "timeout") >= 1, text
    assert f'toolgate_guard_call_duration_seconds_count{{gateway="{gws["main"][0]}"}}' in text


def test_guards_are_validated_and_their_secret_shown_once(setup):
    srv, api, guard, gws = setup
    gw = gws["main"][0]
    shown = api.gateway(gw)["guards"]
    assert len(shown) == 1 and "secret" not in shown[0] and "sealed_secret" not in shown[0], shown
    for bad, field in [
        ({"url": f"{guard.url}/main", "on": ["request"], "timeout_ms": 60000}, "guards[0].timeout_ms"),
        ({"url": "http://169.254.169.254/latest", "on": ["request"]}, "guards[0].url"),
        ({"url": f"{guard.url}/main", "on": []}, "guards[0].on"),
        ({"id": "grd_unknown", "url": f"{guard.url}/main", "on": ["request"]}, "guards[0].id"),
    ]:
        r = api.call("PATCH", f"/v1/gateways/{gw}", {"guards": [bad]})
        assert r.status_code == 400 and r.json()["error"]["details"]["field"] == field, (bad, r.text)
    # Kept by its id: same secret, none shown; a new one beside it gets its own.
    kept = {k: v for k, v in shown[0].items() if k != "tools"}
    r = api.ok("PATCH", f"/v1/gateways/{gw}", {"guards": [kept, {"url": f"{guard.url}/main", "on": ["response"]}]})
    after = r["data"]["guards"]
    assert after[0]["id"] == shown[0]["id"] and "secret" not in after[0], after
    assert after[1]["secret"].startswith("whsec_") and after[1]["secret"] != guard.secrets[gw], after
    api.ok("PATCH", f"/v1/gateways/{gw}", {"guards": [kept]})


def test_the_typescript_client_sees_what_the_guard_decided(setup):
    srv, api, guard, gws = setup
    gw, key = gws["main"]
    script = Path(__file__).resolve().parent.parent / "node" / "ts_guard_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), mcp_url(srv, gw), key, DENIED_ZONE], cwd=script.parent,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_guard_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["masked"] == "mail [email]", out
    assert out["denied"]["code"] == -32012 and "off limits" in out["denied"]["message"], out
    assert out["classified"]["code"] == -32013 and "already ran" in out["classified"]["message"], out


def test_the_documented_example_guard_masks_and_denies(setup, tmp_path):
    """docs/governance.md's example guard (the block after `example guard`), run as written."""
    srv, api, guard, gws = setup
    text = (Path(__file__).resolve().parents[2] / "docs" / "governance.md").read_text()
    block = re.search(r"<!-- example guard -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/governance.md has no example guard"
    script = tmp_path / "guard.py"
    script.write_text(block.group(1))
    body = {"name": "documented-guard", "servers": ["time"],
            "guards": [{"url": f"{guard.url}/placeholder", "on": ["request", "response"]}]}
    data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
    gw, key, made = data["id"], data["api_key"], data["guards"][0]
    env = {**os.environ, "GUARD_SECRET": made["secret"], "PORT": "0"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = re.search(r"port (\d+)", line)
        assert port, f"the example guard said {line!r}"
        kept = {"id": made["id"], "url": f"http://127.0.0.1:{port.group(1)}/", "on": ["request", "response"]}
        api.ok("PATCH", f"/v1/gateways/{gw}", {"guards": [kept]})
        (mail, _), (_, denied) = sdk_calls(srv, (gw, key), "auto", {"format": "[erin@example.com]"},
                                           {"format": "[drop table users]"})
        assert mail is not None and mail.content[0].text == "[email]", mail
        assert denied is not None and denied.code == -32012 and "DROP TABLE is not allowed" in denied.message, denied
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def streaming(setup, module_toolgate_factory):
    """(toolgate, gateway id, key): server-everything's tools behind the guard on `response`."""
    guard = setup[2]
    with everything_server() as ev:
        srv = module_toolgate_factory(full_config=config(http_app("everything", ev.url)) + ALLOW_LOOPBACK)
        body = {"name": "guarded-stream", "servers": ["everything"],
                "guards": [{"url": f"{guard.url}/main", "on": ["response"], "timeout_ms": 5000}]}
        data = Api(srv).ok("POST", "/v1/gateways", body, status=201)["data"]
        guard.secrets[data["id"]] = data["guards"][0]["secret"]
        yield srv, data["id"], data["api_key"]


@pytest.mark.parametrize("mode", MODES)
def test_a_streamed_result_is_guarded_at_its_end(streaming, mode):
    """A call whose app streams progress (and, in a session, goes on by itself after 250 ms):
    the progress passes, the final result is the guard's."""
    srv, gw, key = streaming
    seen = []

    async def go():
        async def on_progress(progress, total, message):
            seen.append(progress)

        async with sdk_client(mcp_url(srv, gw), key, mode=mode) as c:
            return await c.call_tool("trigger-long-running-operation", {"duration": 1, "steps": 2},
                                     progress_callback=on_progress)

    r = run(go())
    assert r.content[0].text == "guarded: long run done", r
    assert seen == [1, 2], seen


# ------------------------------------------------------------------ tasks, and a busy guard



@pytest.fixture(scope="module")
def tasks_setup(setup, module_toolgate_factory, tmp_path_factory):
    """(toolgate, its API, the guard, {name: (gateway id, key)}) on `tasks_app.py` (2026-07-28 with
    the tasks extension), with at most one guard call of a gateway in flight: `main` guards
    results, `held` asks `/hold` about each call."""
    guard = setup[2]
    with python_app("tasks_app.py", tmp_path_factory.mktemp("guarded-tasks") / "app.log") as addr:
        limits = "  guards:\n    concurrency_per_gateway: 1\n"
        apps = http_app("tasks", f"http://{addr}/mcp", name="Tasks")
        srv = module_toolgate_factory(full_config=config(apps, mcp=limits) + ALLOW_LOOPBACK)
        api = Api(srv)
        setups = {
            "main": [{"url": f"{guard.url}/main", "on": ["response"], "timeout_ms": 5000}],
            "held": [{"url": f"{guard.url}/hold", "on": ["request"], "timeout_ms": 10000}],
        }
        gateways = {}
        for name, guards in setups.items():
            body = {"name": f"guarded-tasks-{name}", "servers": ["tasks"], "guards": guards}
            data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
            guard.secrets[data["id"]] = data["guards"][0]["secret"]
            gateways[name] = (data["id"], data["api_key"])
        yield srv, api, guard, gateways


def task_result(srv, gw_key, label: str) -> tuple[dict, dict]:
    """Runs `slow_compute` labelled `label` as a task to its end: (the created task, the last
    JSON-RPC answer of `tasks/get`)."""
    gw, key = gw_key
    call = {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": label}, "_meta": WITH_TASKS}
    return task_to_its_end(mcp_url(srv, gw), key, call)


def test_a_task_s_result_passes_the_response_guards_where_tasks_get_carries_it(tasks_setup):
    """A client that asks for a task gets its result through `tasks/get`: masked by the guard as
    a call's own result is, each time it is read; a denied result is the error that says the
    tool already ran, and none of it. The decisions are on a log entry, the guard is told the
    task's id, and a replace and a deny are in the audit trail."""
    srv, api, guard, gws = tasks_setup
    gw = gws["main"][0]
    created, got = task_result(srv, gws["main"], "mail grace@example.com")
    assert "grace@" not in json.dumps(created), "the created task carries no result yet"
    done = got["result"]
    assert done["status"] == "completed" and done["taskId"] == created["taskId"], got
    assert done["result"]["content"][0]["text"] == "computed mail [email]", got
    # Read again: guarded again, the same.
    url = mcp_url(srv, gw)
    again = stateless_post(url, gws["main"][1], "tasks/get", {"taskId": created["taskId"], "_meta": WITH_TASKS})
    assert again.json()["result"]["result"]["content"][0]["text"] == "computed mail [email]", again.text
    asked = [c["payload"] for c in guard.calls if c["payload"].get("task", {}).get("id") == created["taskId"]]
    assert len(asked) == 2 and all(a["phase"] == "response" for a in asked), asked
    assert asked[0]["tool"]["name"] == "slow_compute" and asked[0]["arguments"] is None, asked[0]
    assert "grace@example.com" in json.dumps(asked[0]["result"]), asked[0]
    _, denied = task_result(srv, gws["main"], "classified")
    e = denied.get("error")
    assert e is not None and e["code"] == -32013 and "already ran" in e["message"], denied
    assert e["data"]["reason"] == "guard_denied" and e["data"]["tool_ran"] is True, denied
    assert "computed" not in json.dumps(denied), denied
    entries = logs_of(api, gw)
    actions = [d["action"] for x in entries for d in x.get("guards", [])]
    assert "replace" in actions and "deny" in actions, entries[:4]
    assert not any("grace@" in json.dumps(x.get("response")) for x in entries), "the log keeps what the client got"
    audit = api.ok("GET", "/v1/audit?limit=100")["data"]["entries"]
    audited = {x["action"] for x in audit if x.get("target", {}).get("id") == gw}
    assert {"tool_call.guard_denied", "tool_call.guard_replaced"} <= audited, audited


def test_a_handshake_era_task_s_result_is_not_relayed_around_the_guards(streaming):
    """In a session (2025-11-25), an app's tasks (`params.task`, server-everything's
    `simulate-research-query`, which runs only as a task) are followed with `tasks/get` and
    `tasks/result`, which toolgate does not relay for a session: what the client gets for the
    call is guarded as a result, and the task's result, unguarded, is never read through toolgate."""
    srv, gw, key = streaming
    c = McpHttp(mcp_url(srv, gw), key)
    c.initialize(version="2025-11-25")
    call = {"name": "simulate-research-query", "arguments": {"topic": "mail heidi@example.com"}, "task": {"ttl": 60000}}
    answered = c.rpc("tools/call", call)
    task = answered["result"]["task"]
    assert task["status"] == "working" and "heidi@" not in json.dumps(answered), answered
    for method in ("tasks/result", "tasks/get"):
        got = c.rpc(method, {"taskId": task["taskId"]})
        assert got["error"]["code"] == -32601 and "heidi@" not in json.dumps(got), got
    c.close()


def test_a_guard_whose_gateway_s_calls_are_all_in_flight_is_busy(tasks_setup):
    """`mcp.guards.concurrency_per_gateway: 1`: while one call waits for the gateway's guard, the
    next is not queued but refused at once under `failure: closed` (`guard_busy`), counted as
    `busy`; once the first is answered, calls go on."""
    srv, api, guard, gws = tasks_setup
    gw, key = gws["held"]
    url = mcp_url(srv, gw)
    guard.release.clear()
    first: list = []
    t = threading.Thread(target=lambda: first.append(
        stateless_post(url, key, "tools/call", {"name": "greet", "arguments": {"name": "first"}, "_meta": WITH_TASKS}).json()))
    t.start()
    deadline = time.monotonic() + 30
    while not any(c["path"] == "/hold" and c["payload"]["gateway"]["id"] == gw for c in guard.calls):
        assert time.monotonic() < deadline, "the first call never reached the guard"
        time.sleep(0.05)
    second = stateless_post(url, key, "tools/call", {"name": "greet", "arguments": {"name": "second"}, "_meta": WITH_TASKS}).json()
    guard.release.set()
    t.join(timeout=30)
    e = second.get("error")
    assert e is not None and e["code"] == -32012 and e["data"]["reason"] == "guard_busy", second
    assert "could not be asked (busy)" in e["message"], second
    assert first and first[0]["result"]["content"][0]["text"] == "Hello, first!", first
    third = stateless_post(url, key, "tools/call", {"name": "greet", "arguments": {"name": "third"}, "_meta": WITH_TASKS}).json()
    assert third["result"]["content"][0]["text"] == "Hello, third!", third
    text = httpx2.get(srv.metrics_url, timeout=10).text
    m = re.search(rf'toolgate_guard_calls_total\{{gateway="{gw}",outcome="busy"\}} (\S+)', text)
    assert m and float(m.group(1)) == 1, text
    entry = next(x for x in logs_of(api, gw) if x.get("status") == "error")
    assert entry["guards"][0]["action"] == "busy" and entry["guards"][0]["failure"] == "closed", entry
