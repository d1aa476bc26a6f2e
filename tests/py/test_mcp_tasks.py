"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) through toolgate.

1. The official conformance suite (`conformance-2026`: `@modelcontextprotocol/conformance@0.2.0-alpha.12`)
   runs each of its tasks scenarios directly against `tasks_app.py` (a 2026-07-28 app on the
   official Python SDK with a tasks extension) and through a gateway on it: every scenario passes
   directly, and through toolgate, whose task ids are its own (sealed) and whose `tasks/*`
   requests reach the app that created the task.
2. Raw HTTP: a task id is toolgate's and is followed only by the key that created it; the
   extension is required for `tasks/*` (-32021); `Mcp-Name` carries the task id; a handshake-era
   client is answered synchronously and never sees the extension's methods.
3. The app's `slow_compute` also serves a session client's slow call: past 250 ms its answer
   becomes a resumable SSE stream.
"""

from __future__ import annotations

import json
import threading
import time

import httpx2
import pytest

from mcp_helpers import (
    NODE_DIR,
    STATELESS,
    Api,
    McpHttp,
    config,
    first_event_then_drop,
    gateway_for_suites,
    http_app,
    mcp_url,
    passes,
    python_app,
    run,
    sdk_client,
    sse_events,
    start_toolgate,
    stateless_post,
    suite_2026_run,
)

# The suite's tasks scenarios (`tasks-status-notifications` is a placeholder the suite skips).
SCENARIOS = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
]

TASKS = "io.modelcontextprotocol/tasks"
WITH_TASKS = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {TASKS: {}}},
}
WITHOUT_TASKS = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


@pytest.fixture(scope="module")
def tasks_app(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks-app")
    with python_app("tasks_app.py", out / "app.log") as addr:
        yield addr, out


@pytest.fixture(scope="module")
def suite_results(tasks_app):
    """{scenario: (direct checks, checks through toolgate)}."""
    addr, out = tasks_app
    results = {}
    direct_url = f"http://localhost:{addr.rsplit(':', 1)[1]}/mcp"
    with gateway_for_suites("tasks", f"http://{addr}/mcp", out, name="Tasks app") as (url, _, _):
        for scenario in SCENARIOS:
            direct, _ = suite_2026_run(direct_url, out / "direct" / scenario, "--scenario", scenario)
            through, output = suite_2026_run(url, out / "toolgate" / scenario, "--scenario", scenario)
            results[scenario] = (direct.get(scenario, []), through.get(scenario, []), output)
    return results


def failures(checks: list) -> list[str]:
    return [f"{c.get('id')}: {c.get('errorMessage')}" for c in checks if c.get("status") == "FAILURE"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_suite_s_tasks_scenario_passes_directly_and_through_toolgate(suite_results, scenario):
    assert (NODE_DIR / "node_modules" / "conformance-2026").exists(), f"run `npm ci` in {NODE_DIR}"
    direct, through, output = suite_results[scenario]
    assert passes(direct), f"{scenario} against the app directly: {failures(direct)}"
    assert passes(through), f"{scenario} through toolgate: {failures(through)}\n{output[-2000:]}"
    # The same checks ran both ways (none was skipped through toolgate).
    ids = lambda checks: sorted(c.get("id") for c in checks if c.get("status") == "SUCCESS")  # noqa: E731
    assert ids(through) == ids(direct), (ids(direct), ids(through))


@pytest.fixture(scope="module")
def gateway(tasks_app, module_toolgate_factory):
    """A gateway on the tasks app: (server, endpoint URL, its key, an account key of the org)."""
    addr, _ = tasks_app
    srv = module_toolgate_factory(full_config=config(http_app("tasks", f"http://{addr}/mcp", name="Tasks")))
    gw_id, key = Api(srv).create_gateway(["tasks"])
    created = Api(srv).ok("POST", "/v1/api-keys", {"name": "other", "scopes": ["gateways:read"]}, status=201)
    return srv, mcp_url(srv, gw_id), key, created.get("data", created)["key"]


def error_of(r) -> int:
    return r.json()["error"]["code"]


def task_until(url: str, key: str, task_id: str, status: str) -> dict:
    """Polls `tasks/get` (5 s at most) until the task has `status`; returns the last answer."""
    deadline = time.monotonic() + 5
    while True:
        detail = stateless_post(url, key, "tasks/get", {"taskId": task_id, "_meta": WITH_TASKS}).json()["result"]
        if detail["status"] == status or time.monotonic() > deadline:
            return detail
        time.sleep(0.1)


def test_a_task_id_is_toolgate_s_own_and_followed_only_by_the_key_that_created_it(gateway):
    srv, url, key, other = gateway
    r = stateless_post(url, key, "server/discover", {"_meta": WITH_TASKS})
    assert TASKS in r.json()["result"]["capabilities"]["extensions"], r.text
    call = {"name": "slow_compute", "arguments": {"seconds": 30, "label": "bound"}, "_meta": WITH_TASKS}
    created = stateless_post(url, key, "tools/call", call).json()["result"]
    assert created["resultType"] == "task" and created["status"] == "working", created
    task_id = created["taskId"]
    # toolgate's id: sealed, so the app's own id (`task-<hex>`) is not in it.
    assert task_id.startswith("tgt1.") and "task-" not in task_id, task_id
    got = stateless_post(url, key, "tasks/get", {"taskId": task_id, "_meta": WITH_TASKS})
    assert got.status_code == 200 and got.json()["result"]["taskId"] == task_id, got.text
    assert got.json()["result"]["status"] == "working", got.text
    # Another key of the same organisation, allowed on this gateway, does not know the task.
    for method in ("tasks/get", "tasks/cancel"):
        r = stateless_post(url, other, method, {"taskId": task_id, "_meta": WITH_TASKS})
        assert r.status_code == 400 and error_of(r) == -32602, r.text
    # Altered by one character, or an id of the app's own making: unknown.
    altered = task_id[:-3] + ("A" if task_id[-3] != "A" else "B") + task_id[-2:]
    for wrong in (altered, "task-0123456789abcdef01234567"):
        r = stateless_post(url, key, "tasks/get", {"taskId": wrong, "_meta": WITH_TASKS})
        assert r.status_code == 400 and error_of(r) == -32602, r.text
    # Without the extension declared: -32021 naming it.
    r = stateless_post(url, key, "tasks/get", {"taskId": task_id, "_meta": WITHOUT_TASKS})
    assert r.status_code == 400 and error_of(r) == -32021, r.text
    assert TASKS in r.json()["error"]["data"]["requiredCapabilities"]["extensions"], r.text
    # Mcp-Name carries the task id.
    r = stateless_post(url, key, "tasks/get", {"taskId": task_id, "_meta": WITH_TASKS}, {"Mcp-Name": "other"})
    assert r.status_code == 400 and error_of(r) == -32020, r.text
    # The creator cancels it; the app settles it.
    r = stateless_post(url, key, "tasks/cancel", {"taskId": task_id, "_meta": WITH_TASKS})
    assert r.status_code == 200 and r.json()["result"] == {"resultType": "complete"} | {
        k: v for k, v in r.json()["result"].items() if k == "_meta"}, r.text
    status = task_until(url, key, task_id, "cancelled")
    assert status["status"] == "cancelled" and status["taskId"] == task_id, status


def test_a_task_s_question_is_answered_with_tasks_update_through_toolgate(gateway):
    srv, url, key, _ = gateway
    call = {"name": "confirm_delete", "arguments": {"filename": "notes.txt"}, "_meta": WITH_TASKS}
    task_id = stateless_post(url, key, "tools/call", call).json()["result"]["taskId"]
    detail = task_until(url, key, task_id, "input_required")
    assert detail["status"] == "input_required" and list(detail["inputRequests"]) == ["confirm"], detail
    answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    r = stateless_post(url, key, "tasks/update", {"taskId": task_id, "inputResponses": answer, "_meta": WITH_TASKS})
    assert r.status_code == 200 and "taskId" not in r.json()["result"], r.text
    detail = task_until(url, key, task_id, "completed")
    assert detail["status"] == "completed" and detail["result"]["content"][0]["text"] == "deleted notes.txt", detail


def test_a_handshake_era_client_gets_answers_not_tasks(gateway):
    """toolgate declares no extension for a session, so the app answers synchronously; a tool
    that needs the extension is refused by the app with -32021, relayed; `tasks/*` in a session
    is not a method of that era's endpoint here (-32601)."""
    from mcp.shared.exceptions import MCPError

    srv, url, key, _ = gateway

    async def scenario():
        async with sdk_client(url, key, mode="legacy") as client:
            computed = await client.call_tool("slow_compute", {"seconds": 0, "label": "sync"})
            try:
                await client.call_tool("failing_job", {})
                refused = None
            except MCPError as e:
                refused = e
            return computed, refused

    computed, refused = run(scenario())
    assert computed.content[0].text == "computed sync", computed
    assert refused is not None and refused.error.code == -32021, refused


@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel"])
def test_tasks_methods_in_a_session_are_not_found(gateway, method):
    srv, url, key, _ = gateway
    c = McpHttp(url, key)
    c.initialize()
    body = c.rpc(method, {"taskId": "tgt1.x"})
    assert body["error"]["code"] == -32601, body
    c.close()


def test_a_slow_call_of_a_session_becomes_a_resumable_stream(gateway):
    """A session client that takes SSE: a call the app answers at once comes back as plain JSON;
    one the app takes longer than 250 ms over becomes an SSE answer that opens with a priming
    event (id, `retry`, no data) before the app has answered; a client that drops after that
    event gets the result on `GET` with `Last-Event-ID` (the call went on without it)."""
    srv, url, key, _ = gateway
    c = McpHttp(url, key)
    c.initialize()
    quick = c.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "quick"}})
    assert quick.status_code == 200, quick.text
    assert quick.headers["content-type"].startswith("application/json"), quick.headers
    assert "computed quick" in quick.text, quick.text

    body = {"jsonrpc": "2.0", "id": 41, "method": "tools/call",
            "params": {"name": "slow_compute", "arguments": {"seconds": 2, "label": "slow"}}}
    seen = first_event_then_drop(c, body)  # drops the connection while the app still works
    first = sse_events(seen)[0]
    assert first.get("id") and first.get("retry") and not first.get("data"), first
    assert "computed slow" not in seen, "the app's answer came before the priming event"

    h = c.headers(**{"Accept": "text/event-stream", "Last-Event-ID": first["id"], "Content-Type": None})
    r = httpx2.get(url, headers=h, timeout=30)
    assert r.status_code == 200, r.text
    results = [json.loads(e["data"]) for e in sse_events(r.text) if '"result"' in e.get("data", "")]
    assert len(results) == 1 and results[0]["id"] == 41, r.text
    assert results[0]["result"]["content"][0]["text"] == "computed slow", results
    c.close()


def slow_calls(srv) -> float:
    """`toolgate_mcp_slow_calls` from the metrics listener."""
    text = httpx2.get(srv.metrics_url, timeout=10).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith("toolgate_mcp_slow_calls ")))


def test_a_slow_call_goes_on_by_itself_keeps_its_slot_and_is_logged_once_answered(tasks_app):
    """A session's slow call, once its answer is a resumable stream, goes on in a task of its
    own while its client's connection follows the stream: each client still gets the priming
    event, then the result as the stream's last event, and the stream ends. The key's
    `concurrent` slots stay taken until the app answers (a call in flight, unlike an open GET
    stream): a third request is refused while two slow calls wait, and passes once they are
    answered. The calls' log entries are written when they end, with the app's result."""
    addr, _ = tasks_app
    limits = ("rate_limits:\n  tiers:\n"
              "    duo: { requests_per_hour: 10000, requests_per_minute: 1000, burst: 100, concurrent: 2 }\n"
              "limits:\n  bootstrap_tier: duo\n")
    srv = start_toolgate(config(http_app("tasks", f"http://{addr}/mcp", name="Tasks")) + limits)
    try:
        gw_id, key = Api(srv).create_gateway(["tasks"])
        url = mcp_url(srv, gw_id)
        c = McpHttp(url, key)
        c.initialize()
        primed = [threading.Event() for _ in range(2)]
        texts: list[str] = ["", ""]

        def slow_call(i: int) -> None:
            body = {"jsonrpc": "2.0", "id": 70 + i, "method": "tools/call",
                    "params": {"name": "slow_compute", "arguments": {"seconds": 3, "label": f"alone{i}"}}}
            with httpx2.stream("POST", url, json=body, headers=c.headers(), timeout=30) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                for chunk in r.iter_text():
                    texts[i] += chunk
                    if "\n\n" in texts[i].replace("\r\n", "\n"):
                        primed[i].set()
            primed[i].set()

        threads = [threading.Thread(target=slow_call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        assert all(p.wait(10) for p in primed), "a slow call's stream did not open"
        assert all("computed" not in t for t in texts), texts
        refused = c.request("ping")
        assert refused.status_code == 429, (refused.status_code, refused.text)
        assert slow_calls(srv) == 2, "the running calls are not counted"
        for t in threads:
            t.join(30)
        for i, text in enumerate(texts):
            events = sse_events(text)
            assert events[0].get("id") and events[0].get("retry") and not events[0].get("data"), events
            last = json.loads(events[-1]["data"])
            assert last["id"] == 70 + i and last["result"]["content"][0]["text"] == f"computed alone{i}", events
            assert all(e.get("id") for e in events), "every event of a resumable stream has an id"
        assert c.request("ping").status_code == 200, "the slots come back when the calls are answered"
        assert slow_calls(srv) == 0
        logs = Api(srv).ok("GET", f"/v1/logs?gateway_id={gw_id}")
        entries = [e for e in logs.get("data", logs)["logs"] if e.get("function") == "slow_compute"]
        assert len(entries) == 2 and all(e["status"] == "success" for e in entries), entries
    finally:
        srv.stop()
        srv.tmp.cleanup()
