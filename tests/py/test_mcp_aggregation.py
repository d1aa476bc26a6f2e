"""One gateway mixing the three transports (Decision 5 names, every upstream field kept):

  * `time`: toolgate's built-in app;
  * `clock`: `mcp-server-time` (the Python reference server) over stdio;
  * `everything`: `@modelcontextprotocol/server-everything` over Streamable HTTP.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest

from mcp_helpers import (
    TIME_APP,
    VENV,
    Api,
    McpHttp,
    config,
    everything_server,
    http_app,
    list_all,
    mcp_url,
    response_message,
    run,
    sdk_client,
    sse_messages,
    start_toolgate,
    stdio_time_app,
)


@pytest.fixture(scope="module")
def mixed(module_toolgate_factory):
    """(server, api, everything, gateway id, key) for a gateway of time + clock + everything."""
    with everything_server() as ev:
        srv = module_toolgate_factory(
            full_config=config(TIME_APP + stdio_time_app("clock") + http_app("everything", ev.url))
        )
        api = Api(srv)
        gw_id, key = api.create_gateway(["time", "clock", "everything"])
        yield srv, api, ev, gw_id, key


@pytest.fixture
def client(mixed):
    srv, _, _, gw_id, key = mixed
    c = McpHttp(mcp_url(srv, gw_id), key)
    c.initialize()
    yield c
    c.close()


def direct_everything_tools(url: str) -> list[dict]:
    c = McpHttp(url, None)
    c.initialize()
    return list_all(c, "tools/list", "tools")


def direct_stdio_tools() -> list[dict]:
    """tools/list of mcp-server-time, asked directly over stdio."""
    exe = VENV / "bin" / "mcp-server-time"
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    p = subprocess.Popen([str(exe), "--local-timezone", "UTC"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        for line in lines:
            p.stdin.write(json.dumps(line) + "\n")
            p.stdin.flush()
            if "id" in line:
                while True:
                    msg = json.loads(p.stdout.readline())
                    if msg.get("id") == line["id"]:
                        break
        return msg["result"]["tools"]
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------ tools


def test_tools_of_all_three_transports_are_named_app__tool(client):
    names = {t["name"] for t in list_all(client, "tools/list", "tools")}
    for expected in ["time__get_current_time", "clock__get_current_time", "clock__convert_time",
                     "everything__echo", "everything__get-sum", "everything__trigger-long-running-operation"]:
        assert expected in names, f"{expected} missing from {sorted(names)}"
    assert all("__" in n for n in names), sorted(names)


def test_every_field_of_http_upstream_tools_is_kept(mixed, client):
    _, _, ev, _, _ = mixed
    upstream = {t["name"]: t for t in direct_everything_tools(ev.url)}
    exposed = {t["name"]: t for t in list_all(client, "tools/list", "tools")}
    assert upstream, "server-everything listed no tools"
    for name, tool in upstream.items():
        mine = exposed.get(f"everything__{name}")
        assert mine is not None, f"everything__{name} missing"
        assert {**mine, "name": name} == tool, f"fields differ for {name}:\nupstream {tool}\ngateway  {mine}"
    assert any("annotations" in t for t in upstream.values()), "fixture check: some tool has annotations"
    assert any("outputSchema" in t for t in upstream.values()), "fixture check: some tool has outputSchema"


def test_every_field_of_stdio_upstream_tools_is_kept(client):
    upstream = {t["name"]: t for t in direct_stdio_tools()}
    exposed = {t["name"]: t for t in list_all(client, "tools/list", "tools")}
    assert set(upstream) == {"get_current_time", "convert_time"}, upstream.keys()
    for name, tool in upstream.items():
        assert {**exposed[f"clock__{name}"], "name": name} == tool, f"fields differ for {name}"


def test_call_is_routed_to_the_builtin_app(client):
    msg = client.rpc("tools/call", {"name": "time__get_current_time",
                                    "arguments": {"format": "YYYY", "timezone": "Asia/Tokyo"}})
    assert msg["result"]["structuredContent"]["timezone"] == "Asia/Tokyo", msg


def test_call_is_routed_to_the_stdio_app(client):
    msg = client.rpc("tools/call", {"name": "clock__get_current_time", "arguments": {"timezone": "Europe/Paris"}})
    assert msg["result"].get("isError", False) is False, msg
    assert msg["result"]["structuredContent"]["timezone"] == "Europe/Paris", msg
    assert "day_of_week" in msg["result"]["structuredContent"], msg


def test_call_is_routed_to_the_http_app(client):
    msg = client.rpc("tools/call", {"name": "everything__get-sum", "arguments": {"a": 19, "b": 23}})
    assert "42" in msg["result"]["content"][0]["text"], msg


def test_stdio_tool_error_is_relayed(client):
    msg = client.rpc("tools/call", {"name": "clock__get_current_time", "arguments": {"timezone": "Not/AZone"}})
    assert msg["result"]["isError"] is True, msg


def test_progress_is_relayed_as_sse(client):
    params = {"name": "everything__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 3},
              "_meta": {"progressToken": "tok-7"}}
    r = client.request("tools/call", params)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.headers
    msgs = sse_messages(r.text)
    progress = [m["params"] for m in msgs if m.get("method") == "notifications/progress"]
    assert [p["progress"] for p in progress] == [1, 2, 3], msgs
    assert all(p["progressToken"] == "tok-7" and p["total"] == 3 for p in progress), progress
    assert msgs[-1]["id"] == client._next_id and "completed" in msgs[-1]["result"]["content"][0]["text"], msgs


def test_progress_reaches_the_python_sdk_callback(mixed):
    srv, _, _, gw_id, key = mixed
    seen = []

    async def go():
        async def on_progress(progress, total, message):
            seen.append((progress, total))

        async with sdk_client(mcp_url(srv, gw_id), key) as c:
            return await c.call_tool("everything__trigger-long-running-operation", {"duration": 1, "steps": 2},
                                     progress_callback=on_progress)

    r = run(go())
    assert "completed" in r.content[0].text, r
    assert seen == [(1, 2), (2, 2)], seen


def test_long_call_without_progress_token_still_answers(client):
    r = client.request("tools/call", {"name": "everything__trigger-long-running-operation",
                                      "arguments": {"duration": 0.3, "steps": 2}})
    assert "completed" in response_message(r)["result"]["content"][0]["text"], r.text


# ------------------------------------------------------------------ allowed_tools


def test_allowed_tools_hides_tools_and_calling_one_is_unknown(mixed):
    srv, api, _, _, _ = mixed
    gw_id, key = api.create_gateway(
        ["time", "clock", "everything"], allowed_tools={"everything": ["echo"], "clock": ["convert_time"], "time": "*"}
    )
    c = McpHttp(mcp_url(srv, gw_id), key)
    c.initialize()
    names = {t["name"] for t in list_all(c, "tools/list", "tools")}
    assert names == {"time__get_current_time", "clock__convert_time", "everything__echo"}, names
    for hidden in ["everything__get-sum", "clock__get_current_time"]:
        msg = c.rpc("tools/call", {"name": hidden, "arguments": {"a": 1, "b": 2}})
        assert msg["error"] == {"code": -32602, "message": f"Unknown tool: {hidden}"}, msg
    assert "Echo: ok" in c.rpc("tools/call", {"name": "everything__echo", "arguments": {"message": "ok"}})[
        "result"]["content"][0]["text"]
    functions = {s["id"]: s["functions"] for s in api.gateway(gw_id)["servers"]}
    assert functions["everything"] == ["echo"] and functions["clock"] == ["convert_time"], functions


def test_tool_of_another_gateway_is_unknown(mixed, mcp_session):
    srv, api, _, _, _ = mixed
    gw_id, key, c = mcp_session(srv, ["time"])
    for name in ["everything__echo", "echo"]:
        msg = c.rpc("tools/call", {"name": name, "arguments": {"message": "x"}})
        assert msg["error"]["code"] == -32602, msg


# ------------------------------------------------------------------ resources and prompts


def test_resources_of_the_http_app_are_listed_and_readable(client):
    resources = list_all(client, "resources/list", "resources")
    uris = [r["uri"] for r in resources]
    doc = next((u for u in uris if u.startswith("demo://resource/static/document/")), None)
    assert doc, f"server-everything's documents missing: {uris}"
    msg = client.rpc("resources/read", {"uri": doc})
    contents = msg["result"]["contents"]
    assert contents[0]["uri"] == doc and contents[0]["text"], msg


def test_resource_templates_are_listed_and_readable(client):
    templates = [t["uriTemplate"] for t in list_all(client, "resources/templates/list", "resourceTemplates")]
    assert "demo://resource/dynamic/text/{resourceId}" in templates, templates
    msg = client.rpc("resources/read", {"uri": "demo://resource/dynamic/text/3"})
    assert msg["result"]["contents"][0]["uri"] == "demo://resource/dynamic/text/3", msg
    blob = client.rpc("resources/read", {"uri": "demo://resource/dynamic/blob/2"})["result"]["contents"][0]
    assert base64.b64decode(blob["blob"]), blob


def test_unknown_resource_is_reported_not_found(client):
    msg = client.rpc("resources/read", {"uri": "secret://elsewhere/1"})
    # A URI that several apps could serve and none claims (src/mcp/README.md, which app a
    # resource URI goes to): -32002 "Resource not found".
    assert "error" in msg and msg["error"]["code"] == -32002, msg


def test_prompts_are_aggregated_and_gettable(client):
    names = {p["name"] for p in list_all(client, "prompts/list", "prompts")}
    assert {"everything__simple-prompt", "everything__args-prompt"} <= names, names
    msg = client.rpc("prompts/get", {"name": "everything__simple-prompt"})
    assert msg["result"]["messages"][0]["content"]["text"], msg
    msg = client.rpc("prompts/get", {"name": "everything__args-prompt", "arguments": {"city": "Lyon"}})
    assert "Lyon" in json.dumps(msg["result"]), msg


def test_unknown_prompt_is_invalid_params(client):
    msg = client.rpc("prompts/get", {"name": "everything__nope"})
    assert msg["error"]["code"] == -32602, msg


# ------------------------------------------------------------------ a failing app


def test_failing_app_drops_out_and_the_others_keep_working(tmp_path, mcp_session):
    with everything_server() as ev:
        srv = start_toolgate(config(TIME_APP + stdio_time_app("clock") + http_app(
            "everything", ev.url, timeouts="connect_ms: 1000, first_byte_ms: 3000, total_ms: 5000")))
        try:
            api = Api(srv)
            gw_id, key, c = mcp_session(srv, ["time", "clock", "everything"])
            assert c.rpc("tools/call", {"name": "everything__echo", "arguments": {"message": "a"}})["result"]
            statuses = {s["id"]: s["status"] for s in api.gateway(gw_id)["servers"]}
            assert statuses == {"time": "connected", "clock": "connected", "everything": "connected"}, statuses

            ev.stop()

            msg = c.rpc("tools/call", {"name": "everything__echo", "arguments": {"message": "b"}})
            # The app is unavailable: -32004, naming it (src/mcp/README.md's error table).
            assert msg.get("error", {}).get("code") == -32004 and "everything" in msg["error"]["message"], \
                f"a dead app must yield an error: {msg}"
            ok = c.rpc("tools/call", {"name": "time__get_current_time", "arguments": {"format": "YYYY"}})
            assert ok["result"].get("isError", False) is False, ok
            ok = c.rpc("tools/call", {"name": "clock__get_current_time", "arguments": {"timezone": "UTC"}})
            assert ok["result"].get("isError", False) is False, ok

            servers = {s["id"]: s for s in api.gateway(gw_id)["servers"]}
            assert servers["everything"]["status"] not in ("connected",), f"dead app shown connected: {servers}"
            assert servers["time"]["status"] == "connected" and servers["clock"]["status"] == "connected", servers
            names = {t["name"] for t in list_all(c, "tools/list", "tools")}
            assert not any(n.startswith("everything__") for n in names), f"dead app's tools still listed: {names}"
            assert "time__get_current_time" in names and "clock__convert_time" in names, names
        finally:
            srv.stop()
            srv.tmp.cleanup()


def test_tools_list_is_paginated_with_cursors(mcp_session):
    srv = start_toolgate(config(TIME_APP + stdio_time_app("clock"), mcp="  page_size: 2\n"))
    try:
        gw_id, key, c = mcp_session(srv, ["time", "clock"])
        first = c.rpc("tools/list")["result"]
        assert len(first["tools"]) == 2 and first.get("nextCursor"), first
        second = c.rpc("tools/list", {"cursor": first["nextCursor"]})["result"]
        assert len(second["tools"]) == 1 and "nextCursor" not in second, second
        names = {t["name"] for t in first["tools"] + second["tools"]}
        assert names == {"time__get_current_time", "clock__get_current_time", "clock__convert_time"}, names
        bad = c.rpc("tools/list", {"cursor": "not-a-cursor"})
        assert bad["error"]["code"] == -32602, bad
    finally:
        srv.stop()
        srv.tmp.cleanup()


# ------------------------------------------------------------------ fan-out discipline


class HangingApp:
    """A TCP server that accepts connections and never answers: an app that hangs."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.held: list = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def test_a_hanging_app_delays_the_others_tools_by_the_list_deadline_only(mcp_session):
    """5 apps, one of which never answers: `tools/list` waits for it `mcp.list_deadline_ms`, not
    its own timeouts (30 s to the first byte), and lists the four others' tools."""
    import time

    hang = HangingApp()
    builtins = "".join(
        f"  - id: t{i}\n    name: Time {i}\n    description: d\n    category: utilities\n    builtin: time\n" for i in range(4)
    )
    srv = start_toolgate(config(builtins + http_app("stuck", hang.url, name="Stuck"), mcp="  list_deadline_ms: 1000\n"))
    try:
        gw_id, key, c = mcp_session(srv, ["t0", "t1", "stuck", "t2", "t3"])
        started = time.monotonic()
        tools = [t["name"] for t in list_all(c, "tools/list", "tools")]
        elapsed = time.monotonic() - started
        assert tools == [f"t{i}__get_current_time" for i in range(4)], tools
        assert 0.9 <= elapsed < 3.0, f"tools/list took {elapsed:.2f} s with a 1 s list deadline"
        # The stuck app is named, with the reason, when one of its tools is called.
        r = c.rpc("tools/call", {"name": "stuck__anything", "arguments": {}})
        assert r["error"]["code"] == -32004 and "list_deadline_ms" in r["error"]["message"], r
    finally:
        srv.stop()
        srv.tmp.cleanup()
        hang.close()
