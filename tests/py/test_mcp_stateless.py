"""MCP 2026-07-28 (stateless) on the gateway endpoint, with peers we did not write.

1. The official conformance suite (`conformance-2026` in tests/node: the npm package
   `@modelcontextprotocol/conformance@0.2.0-alpha.12`) runs `--requirements 2026-07-28` through a
   gateway whose only app is `tests/node/conformance/fixture.mjs`, a 2025-11-25 server: every
   scenario the revision requires passes through toolgate's translation (the app's
   server->client requests become input-required results, its lists gain `resultType` and the
   caching hints, the envelope and routing headers are toolgate's to check).
2. The official Python SDK (pinned in requirements.txt) in its default mode: it probes
   `server/discover`, stays on 2026-07-28 (no `initialize`) and calls tools of a Streamable HTTP
   app and of a stdio app through one gateway.
3. Raw HTTP: the envelope and header rules, both eras on one endpoint, a sealed requestState
   that another key cannot use.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx2
import pytest

from mcp_helpers import (
    NODE_DIR,
    STATELESS as REVISION,
    TIME_APP,
    Api,
    gateway_for_suites,
    config,
    conformance_fixture,
    http_app,
    mcp_url,
    node_bin,
    passes,
    python_app,
    run,
    sdk_client,
    sse_events,
    start_toolgate,
    stateless_post,
    stdio_time_app,
    suite_2026_run,
)


META = {
    "io.modelcontextprotocol/protocolVersion": REVISION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


def requirements_run(url: str, out_dir: Path, revision: str = REVISION) -> tuple[dict, str]:
    """Runs `conformance server --requirements REVISION`; returns scenario -> [checks], and the output."""
    return suite_2026_run(url, out_dir, "--requirements", revision)


def required_scenarios(revision: str = REVISION) -> list[str]:
    """The server scenarios a revision requires (the suite's frozen requirement set)."""
    path = NODE_DIR / "node_modules" / "conformance-2026" / "requirements" / f"{revision}.yaml"
    if not path.exists():
        return ["suite-missing"]
    text = path.read_text()
    section = text.split("\nserver:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip()[2:] for line in section.splitlines() if line.strip().startswith("- ")]


@pytest.fixture(scope="module")
def gateway_of_fixture(tmp_path_factory):
    """(forwarder URL of a single-app gateway on the 2025-11-25 fixture, its key, the server)."""
    out = tmp_path_factory.mktemp("stateless")
    with conformance_fixture(log_dir=out) as fx:
        with gateway_for_suites("fixture", fx.url, out, name="Conformance fixture") as (url, key, srv):
            yield url, key, srv, out


@pytest.fixture(scope="module")
def requirements(gateway_of_fixture):
    url, _, _, out = gateway_of_fixture
    return requirements_run(url, out / "conformance")


def test_every_required_scenario_ran(requirements):
    results, output = requirements
    required = required_scenarios()
    assert len(required) > 30, f"requirement set not read: {required}"
    missing = [s for s in required if s not in results]
    assert not missing, f"scenarios without checks: {missing}\n{output[-3000:]}"


@pytest.mark.parametrize("scenario", required_scenarios())
def test_required_scenario_passes_through_toolgate(requirements, scenario):
    results, output = requirements
    assert scenario != "suite-missing", f"conformance suite 0.2.0-alpha.12 missing: run `npm ci` in {NODE_DIR}"
    checks = results.get(scenario)
    assert checks, f"{scenario} recorded no checks\n{output[-2000:]}"
    failed = [f"{c.get('id')}: {c.get('errorMessage')}" for c in checks if c.get("status") == "FAILURE"]
    passed = [c for c in checks if c.get("status") == "SUCCESS"]
    assert not failed and passed, f"{scenario}: {len(passed)} passed, failed: {failed}"


# ------------------------------------------------------------------ raw HTTP


def test_both_eras_on_one_endpoint_and_the_header_rules(gateway_of_fixture):
    _, key, srv, _ = gateway_of_fixture
    gw_id = gateway_of_fixture[0].rsplit("/gateway/", 1)[1].split("/")[0]
    url = mcp_url(srv, gw_id)
    # Stateless: no session, the key on the request.
    r = stateless_post(url, key, "tools/call", {"name": "test_simple_text", "arguments": {}, "_meta": META})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == 1 and body["result"]["resultType"] == "complete", body
    assert "mcp-session-id" not in r.headers
    # Without the key: 401, as in the handshake era.
    r = stateless_post(url, None, "tools/call", {"name": "test_simple_text", "arguments": {}, "_meta": META})
    assert r.status_code == 401, r.text
    # Mcp-Name disagreeing with the body: -32020 under 400.
    r = stateless_post(url, key, "tools/call", {"name": "test_simple_text", "_meta": META}, {"Mcp-Name": "other"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32020, r.text
    # Mcp-Param-* declared by the tool (x-mcp-header) must match the argument.
    args = {"name": "test_param_headers", "arguments": {"region": "eu-west"}, "_meta": META}
    r = stateless_post(url, key, "tools/call", args, {"Mcp-Param-Region": "eu-west"})
    assert r.status_code == 200 and "region eu-west" in r.text, r.text
    r = stateless_post(url, key, "tools/call", args, {"Mcp-Param-Region": "us-east"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32020, r.text
    r = stateless_post(url, key, "tools/call", args)
    assert r.status_code == 400 and "missing" in r.json()["error"]["message"], r.text
    # A list carries the caching hints.
    r = stateless_post(url, key, "tools/list", {"_meta": META})
    result = r.json()["result"]
    assert result["resultType"] == "complete" and result["cacheScope"] == "private", result
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    # The handshake era on the same endpoint still needs its session.
    h = {"X-API-Key": key, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    r = httpx2.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=h, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32000, r.text


def test_request_state_is_bound_to_the_key_that_received_it(gateway_of_fixture):
    _, key, srv, _ = gateway_of_fixture
    gw_id = gateway_of_fixture[0].rsplit("/gateway/", 1)[1].split("/")[0]
    url = mcp_url(srv, gw_id)
    call = {"name": "test_input_required_result_elicitation", "arguments": {}, "_meta": META}
    r1 = stateless_post(url, key, "tools/call", call).json()["result"]
    assert r1["resultType"] == "input_required" and "user_name" in r1["inputRequests"], r1
    answer = {"user_name": {"action": "accept", "content": {"name": "Ada"}}}
    # An account key of the same organisation may call the gateway but not continue this call.
    created = Api(srv).ok("POST", "/v1/api-keys", {"name": "other", "scopes": ["gateways:read"]}, status=201)
    other = created.get("data", created)["key"]
    r = stateless_post(url, other, "tools/call", {**call, "inputResponses": answer, "requestState": r1["requestState"]})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602, r.text
    # A state altered by one character is refused.
    state = r1["requestState"]
    altered = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
    r = stateless_post(url, key, "tools/call", {**call, "inputResponses": answer, "requestState": altered})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602, r.text
    # The rightful caller completes it, and only once.
    r = stateless_post(url, key, "tools/call", {**call, "inputResponses": answer, "requestState": state})
    assert r.status_code == 200 and "Hello, Ada!" in r.text, r.text
    r = stateless_post(url, key, "tools/call", {**call, "inputResponses": answer, "requestState": state})
    assert r.status_code == 400 and "expired" in r.json()["error"]["message"], r.text


# ------------------------------------------------------------------ the Python SDK, default mode


def test_python_sdk_default_mode_stays_stateless_across_three_kinds_of_app(tmp_path):
    """The SDK's default mode against a gateway of a 2025-11-25 HTTP app, a stdio app and a
    2026-07-28 app: it stays on 2026-07-28 and calls a tool of each."""
    with python_app("stateless_app.py", tmp_path / "app.log") as addr:
        with conformance_fixture(log_dir=tmp_path) as fx:
            apps = (http_app("fixture", fx.url, name="Conformance fixture") + stdio_time_app("clock")
                    + http_app("modern", f"http://{addr}/mcp", name="Modern"))
            srv = start_toolgate(config(apps))
            try:
                gw_id, key = Api(srv).create_gateway(["fixture", "clock", "modern"])
                url = mcp_url(srv, gw_id)

                async def scenario():
                    async with sdk_client(url, key) as client:
                        assert client.session.discover_result is not None, "the SDK fell back to initialize"
                        assert client.session.initialize_result is None
                        assert client.session.protocol_version == REVISION
                        tools = {t.name for t in (await client.list_tools()).tools}
                        want = {"fixture__test_simple_text", "clock__get_current_time", "modern__greet"}
                        assert want <= tools, tools
                        a = await client.call_tool("fixture__test_simple_text", {})
                        b = await client.call_tool("clock__get_current_time", {"timezone": "UTC"})
                        c = await client.call_tool("modern__greet", {"name": "Ada"})
                        return a, b, c

                a, b, c = run(scenario())
                assert "simple text response" in a.content[0].text, a
                assert not b.is_error and "UTC" in json.dumps(b.model_dump(mode="json")), b
                assert c.content[0].text == "Hello, Ada! (from a 2026-07-28 app)", c
                # No MCP session was made: the handshake era was never used by the client.
                sessions = Api(srv).ok("GET", "/v1/sessions")
                assert sessions["data"]["sessions"] == [], sessions
            finally:
                srv.stop()
                srv.tmp.cleanup()


# ------------------------------------------------------------------ an app that closes its stream


def test_an_app_closing_its_stream_mid_call_is_resumed_with_last_event_id(gateway_of_fixture):
    """`test_reconnection` of the fixture closes its SSE stream before its result (SEP-1699
    polling); toolgate resumes it with `GET` + `Last-Event-ID` and relays the result, to a
    stateless client and to a session client alike."""
    from mcp_helpers import McpHttp, response_message

    _, key, srv, out = gateway_of_fixture
    gw_id = gateway_of_fixture[0].rsplit("/gateway/", 1)[1].split("/")[0]
    url = mcp_url(srv, gw_id)
    r = stateless_post(url, key, "tools/call", {"name": "test_reconnection", "arguments": {}, "_meta": META})
    assert r.status_code == 200 and "Reconnection test completed" in r.text, r.text
    c = McpHttp(url, key)
    c.initialize()
    r = c.request("tools/call", {"name": "test_reconnection", "arguments": {}})
    msg = response_message(r)
    assert "Reconnection test completed" in json.dumps(msg), msg


# ------------------------------------------------------------------ resumable call streams (2025-11-25)


def test_a_session_client_resumes_a_dropped_call_stream_with_last_event_id(gateway_of_fixture):
    """The call's SSE answer opens with a priming event (id, retry, no data); every event has an
    id; a client that drops after the first progress event gets the rest, the result included,
    on `GET` with `Last-Event-ID`, and the call was not cancelled meanwhile."""
    from mcp_helpers import McpHttp

    _, key, srv, _ = gateway_of_fixture
    gw_id = gateway_of_fixture[0].rsplit("/gateway/", 1)[1].split("/")[0]
    url = mcp_url(srv, gw_id)
    c = McpHttp(url, key)
    c.initialize()
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p1"}}}
    seen = ""
    with httpx2.stream("POST", url, json=body, headers=c.headers(), timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.headers
        for chunk in r.iter_text():
            seen += chunk
            events = sse_events(seen)
            if any("progress" in e.get("data", "") for e in events):
                break  # drop the connection mid-call
    events = sse_events(seen)
    assert events[0].get("data", "") == "" and events[0].get("retry") == "1000" and events[0].get("id"), events[0]
    progress = [e for e in events if "progress" in e.get("data", "")]
    assert progress and all(e.get("id") for e in progress), events
    last = progress[-1]["id"]
    h = c.headers(**{"Accept": "text/event-stream", "Last-Event-ID": last})
    h.pop("Content-Type", None)
    r = httpx2.get(url, headers=h, timeout=30)
    assert r.status_code == 200, r.text
    rest = sse_events(r.text)
    assert all(e["id"] != last for e in rest), "an event the client had is sent again"
    results = [json.loads(e["data"]) for e in rest if e.get("data") and '"result"' in e["data"]]
    assert len(results) == 1 and results[0]["id"] == 7, rest
    # An id of nothing this session knows opens the listening stream instead (no replay); it is
    # left open, so only its first bytes are read.
    h["Last-Event-ID"] = "unknown.3"
    with httpx2.stream("GET", url, headers=h, timeout=10) as r:
        assert r.status_code == 200
        first = next(r.iter_text())
        assert "stream open" in first, first


def test_a_streamed_answer_still_going_after_250_ms_goes_on_by_itself_and_arrives_whole():
    """server-everything streams a long operation's progress (SSE) for 2 s. Past 250 ms the rest
    of the call goes on in a task of its own and the client's connection follows the call's
    resumable stream from the last event it was written. The client, which stays, gets the
    priming event, every progress event and the result, each once and in order (the ids'
    sequence numbers run 0, 1, 2, ... without a gap); the POST's access line is written at the
    hand-over, long before the call ends."""
    from mcp_helpers import Api, McpHttp, everything_server

    with everything_server() as ev:
        srv = start_toolgate(config(http_app("everything", ev.url)))
        try:
            gw_id, key = Api(srv).create_gateway(["everything"])
            url = mcp_url(srv, gw_id)
            c = McpHttp(url, key)
            c.initialize()
            body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 2, "steps": 4},
                               "_meta": {"progressToken": "long"}}}
            r = httpx2.post(url, json=body, headers=c.headers(), timeout=30)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.headers
            events = sse_events(r.text)
            assert events[0].get("id") and events[0].get("retry") and not events[0].get("data"), events[0]
            seqs = [int(e["id"].rsplit(".", 1)[1]) for e in events]
            assert seqs == list(range(len(events))), f"an event lost or repeated: {seqs}"
            messages = [json.loads(e["data"]) for e in events[1:]]
            progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
            assert len(progress) == 4 and progress == sorted(progress), messages
            assert messages[-1]["id"] == 9 and "result" in messages[-1], messages[-1]
            calls = [json.loads(line) for line in srv.stderr_text().splitlines()
                     if '"route":"gateway"' in line and '"method":"POST"' in line]
            # initialize and notifications/initialized take milliseconds; the call's request ends
            # at its hand-over, some 250 ms in.
            call = [line["duration_ms"] for line in calls if line["duration_ms"] >= 200]
            assert len(call) == 1 and call[0] < 1500, f"the call's request did not end at its hand-over: {calls}"
            c.close()
        finally:
            srv.stop()
            srv.tmp.cleanup()


def test_the_suite_s_sse_polling_scenario_passes_through_toolgate(gateway_of_fixture):
    """`server-sse-polling` (2025-11-25; pending in the suite's own requirement set) through toolgate."""
    url, _, _, out = gateway_of_fixture
    cli = NODE_DIR / "node_modules" / "conformance-2026" / "dist" / "index.js"
    env = dict(os.environ, PATH=f"{node_bin().parent}:{os.environ.get('PATH', '')}")
    d = out / "sse-polling"
    p = subprocess.run(
        [str(node_bin()), str(cli), "server", "--url", url, "-o", str(d), "--scenario", "server-sse-polling",
         "--spec-version", "2025-11-25"],
        cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=300,
    )
    checks = [c for f in d.glob("server-*/checks.json") for c in json.loads(f.read_text())]
    bad = [f"{c['id']}: {c.get('errorMessage')}" for c in checks if c.get("status") in ("FAILURE", "WARNING")]
    passed = [c["id"] for c in checks if c.get("status") == "SUCCESS"]
    assert checks and not bad and passed, f"{bad}\n{p.stdout[-2000:]}\n{p.stderr[-1000:]}"


# ------------------------------------------------------------------ an app of the stateless revision


@pytest.fixture(scope="module")
def stateless_app(tmp_path_factory):
    """A 2026-07-28 app (`stateless_app.py`, the Python SDK) behind a gateway: (toolgate, gateway id, key)."""
    log = tmp_path_factory.mktemp("stateless-app") / "app.log"
    with python_app("stateless_app.py", log) as addr:
        srv = start_toolgate(config(http_app("modern", f"http://{addr}/mcp", name="Modern")))
        try:
            gw_id, key = Api(srv).create_gateway(["modern"])
            yield srv, gw_id, key
        finally:
            srv.stop()
            srv.tmp.cleanup()


def test_a_stateless_client_reaches_a_stateless_app(stateless_app):
    srv, gw_id, key = stateless_app
    url = mcp_url(srv, gw_id)
    r = stateless_post(url, key, "tools/call", {"name": "greet", "arguments": {"name": "Ada"}, "_meta": META})
    assert r.status_code == 200 and "from a 2026-07-28 app" in r.text, r.text
    # The app says its tool list may be kept 7 s; the gateway caches for 300 s: the gateway's
    # list is kept no longer than the app's.
    r = stateless_post(url, key, "tools/list", {"_meta": META})
    assert r.json()["result"]["ttlMs"] == 7000, r.text
    # The app saw the stateless revision (no session was opened upstream).
    r = stateless_post(url, key, "tools/call", {"name": "envelope", "arguments": {}, "_meta": META})
    assert '\\"protocol_version\\": \\"2026-07-28\\"' in r.text, r.text
    # The app's question comes back under the app's own key; the answer completes the call, and
    # the app's requestState went back to it unchanged (it greets with it).
    call = {"name": "ask_name", "arguments": {}, "_meta": META}
    r1 = stateless_post(url, key, "tools/call", call).json()["result"]
    assert r1["resultType"] == "input_required" and list(r1["inputRequests"]) == ["who"], r1
    assert r1["inputRequests"]["who"]["method"] == "elicitation/create", r1
    answer = {"who": {"action": "accept", "content": {"name": "Grace"}}}
    r2 = stateless_post(url, key, "tools/call", {**call, "inputResponses": answer, "requestState": r1["requestState"]})
    assert r2.status_code == 200, r2.text
    text = r2.json()["result"]["content"][0]["text"]
    assert text == "Hello, Grace! (state app-state:round-1)", text


def test_a_handshake_era_client_reaches_a_stateless_app(stateless_app):
    """The Python SDK in legacy mode: the app's input-required result reaches it as an
    elicitation request on its stream, and its answer completes the call."""
    import mcp_types

    srv, gw_id, key = stateless_app
    url = mcp_url(srv, gw_id)

    async def elicit(context, params):
        return mcp_types.ElicitResult(action="accept", content={"name": "Linus"})

    async def scenario():
        async with sdk_client(url, key, mode="legacy", elicitation_callback=elicit) as client:
            assert client.session.initialize_result is not None
            greet = await client.call_tool("greet", {"name": "Ken"})
            asked = await client.call_tool("ask_name", {})
            # The app checks Mcp-Param-Region, which toolgate derives from the arguments.
            regional = await client.call_tool("regional", {"region": "eu west é"})
            return greet, asked, regional

    greet, asked, regional = run(scenario())
    assert regional.is_error is not True and regional.content[0].text == "served in eu west é", regional
    assert "Hello, Ken!" in greet.content[0].text, greet
    assert asked.content[0].text == "Hello, Linus! (state app-state:round-1)", asked


# ------------------------------------------------------------------ the suite with a 2026-07-28 app


@pytest.fixture(scope="module")
def requirements_with_a_2026_app(tmp_path_factory):
    """(direct results, results through toolgate) of `--requirements 2026-07-28` against
    `conformance_2026_app.py` (a 2026-07-28 app on the Python SDK) and through a gateway on it."""
    out = tmp_path_factory.mktemp("conformance-2026-app")
    with python_app("conformance_2026_app.py", out / "app.log") as addr:
        direct, _ = requirements_run(f"http://localhost:{addr.rsplit(':', 1)[1]}/mcp", out / "direct")
        with gateway_for_suites("app2026", f"http://{addr}/mcp", out, name="2026 app") as (url, _, _):
            through, _ = requirements_run(url, out / "toolgate")
    return direct, through


# The required scenarios that the 2026-07-28 app (a server on the Python SDK pinned in
# requirements.txt) fails directly, because the SDK's server does not do them: toolgate cannot
# pass through what its app does not do. Pinned: a scenario that starts failing directly fails
# below, and one of these that starts passing (a newer SDK) fails as an unexpected pass, asking
# for this list to be updated.
NOT_DONE_BY_THE_2026_APP = {
    "completion-complete": "completion/complete answers Method not found",
    "input-required-result-non-tool-request": "an input-required result of prompts/get ends in an internal error",
}


def scenarios_through_the_2026_app() -> list:
    return [pytest.param(s, marks=pytest.mark.xfail(
                strict=True, raises=AssertionError,
                reason=f"the Python SDK's 2026-07-28 server does not do {s} "
                       f"({NOT_DONE_BY_THE_2026_APP[s]}): take it off NOT_DONE_BY_THE_2026_APP when it passes"))
            if s in NOT_DONE_BY_THE_2026_APP else s
            for s in required_scenarios()]


def test_the_2026_app_passes_every_required_scenario_but_the_pinned_ones_directly(requirements_with_a_2026_app):
    direct, _ = requirements_with_a_2026_app
    failing = {s for s in required_scenarios() if not passes(direct.get(s, []))}
    assert failing == set(NOT_DONE_BY_THE_2026_APP), (
        f"failing directly: {sorted(failing)}; pinned: {sorted(NOT_DONE_BY_THE_2026_APP)}")


@pytest.mark.parametrize("scenario", scenarios_through_the_2026_app())
def test_what_the_2026_app_passes_directly_passes_through_toolgate(requirements_with_a_2026_app, scenario):
    assert scenario != "suite-missing", f"conformance suite 0.2.0-alpha.12 missing: run `npm ci` in {NODE_DIR}"
    direct, through = requirements_with_a_2026_app
    failed = [f"{c.get('id')}: {c.get('errorMessage')}" for c in direct.get(scenario, []) if c.get("status") == "FAILURE"]
    assert passes(direct.get(scenario, [])), (
        f"{scenario} fails against the 2026-07-28 app directly ({failed or 'no check ran'}) and is not on "
        "NOT_DONE_BY_THE_2026_APP")
    checks = through.get(scenario, [])
    failed = [f"{c.get('id')}: {c.get('errorMessage')}" for c in checks if c.get("status") == "FAILURE"]
    assert passes(checks), f"{scenario} through toolgate: failed {failed}"


# ------------------------------------------------------------------ the handshake revision's set, both apps


@pytest.fixture(scope="module")
def requirements_2025(tmp_path_factory):
    """`--requirements 2025-11-25` directly against each app and through a gateway on it:
    {app: (direct, through)} for the 2025-11-25 fixture and the 2026-07-28 app (which also
    serves the handshake era, so a handshake-era client reaches it through toolgate's
    translation)."""
    out = tmp_path_factory.mktemp("conformance-2025")
    results = {}
    with python_app("conformance_2026_app.py", out / "app2026.log") as addr26:
        with conformance_fixture(log_dir=out) as fx:
            for app, url in (("fixture", fx.url), ("app2026", f"http://{addr26}/mcp")):
                port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
                direct, _ = requirements_run(f"http://localhost:{port}/mcp", out / app / "direct", "2025-11-25")
                with gateway_for_suites(app, url, out, name=app) as (gw_url, _, _):
                    through, _ = requirements_run(gw_url, out / app / "toolgate", "2025-11-25")
                results[app] = (direct, through)
    return results


# The scenarios of `--requirements 2025-11-25` each app does not pass directly, by name (the rest of
# the set must pass directly, and through toolgate as well).
NOT_PASSED_DIRECTLY_2025 = {
    "fixture": set(),
    # The Python SDK's 2026-07-28 server, in the handshake era: no completions, no logging level,
    # no subscriptions, and no requests of its own to the client (sampling, elicitation, log
    # messages during a call).
    "app2026": {
        "completion-complete", "elicitation-sep1034-defaults", "elicitation-sep1330-enums", "logging-set-level",
        "resources-subscribe", "resources-unsubscribe", "tools-call-elicitation", "tools-call-sampling",
        "tools-call-with-logging",
    },
}


@pytest.mark.parametrize("app", ["fixture", "app2026"])
def test_the_handshake_revision_s_set_passes_through_toolgate_as_it_passes_directly(requirements_2025, app):
    direct, through = requirements_2025[app]
    required = required_scenarios("2025-11-25")
    assert required != ["suite-missing"], f"conformance suite 0.2.0-alpha.12 missing: run `npm ci` in {NODE_DIR}"
    passing = [s for s in required if passes(direct.get(s, []))]
    # A pinned set, not a floor: a scenario that starts failing directly and one that starts
    # passing both show here, so the comparison below never quietly covers less.
    failing = set(required) - set(passing)
    assert failing == NOT_PASSED_DIRECTLY_2025[app], (
        f"{app} fails directly: {sorted(failing)}; pinned: {sorted(NOT_PASSED_DIRECTLY_2025[app])}")
    lost = {}
    for s in passing:
        checks = through.get(s, [])
        if not passes(checks):
            lost[s] = [f"{c.get('id')}: {c.get('errorMessage')}" for c in checks if c.get("status") == "FAILURE"]
    assert not lost, f"{app}: pass directly, not through toolgate: {lost}"


def test_an_app_s_limit_is_applied_from_the_headers_before_the_body_is_read():
    """A stateless `tools/call` names its tool in `Mcp-Name`: the app's per-minute limit is
    counted from the headers, so once it is spent the 429 comes before the body is read (a body
    that is not even JSON gets the 429, not a parse error); a session call is counted once too."""
    srv = start_toolgate(config(TIME_APP.replace("    builtin: time\n", "    builtin: time\n    rate_limit: 3\n")))
    try:
        gw_id, key = Api(srv).create_gateway(["time"])
        url = mcp_url(srv, gw_id)
        call = {"name": "get_current_time", "arguments": {"format": "HH"}, "_meta": META}
        for _ in range(3):
            r = stateless_post(url, key, "tools/call", call)
            assert r.status_code == 200 and "result" in r.json(), r.text
        r = stateless_post(url, key, "tools/call", call)
        assert r.status_code == 429 and r.json()["error"]["data"]["bucket"] == "app:time", r.text
        h = {"X-API-Key": key, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": REVISION, "Mcp-Method": "tools/call", "Mcp-Name": "get_current_time"}
        r = httpx2.post(url, content=b"{not json", headers=h, timeout=30)
        assert r.status_code == 429 and "retry-after" in r.headers, r.text
        # Another method's request is not counted against the app.
        assert stateless_post(url, key, "tools/list", {"_meta": META}).status_code == 200
    finally:
        srv.stop()
        srv.tmp.cleanup()
