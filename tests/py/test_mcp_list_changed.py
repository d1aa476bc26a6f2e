"""An app whose own lists change: its `notifications/*/list_changed` makes the gateway drop its
cached lists (even with a long `cache_ttl`) and reaches the clients' open GET streams, so a
client sees the new tool or resource as it would talking to the app directly; and resource
subscriptions, kept per client session in front of the app's one upstream session.

The apps: a stdio server on the official Python SDK (`dynamic_tools_server.py`), and
server-everything over Streamable HTTP, which announces new resources and resource updates on
its own GET stream, outside any call.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx2

from mcp_helpers import (
    STATELESS,
    STDIO_START,
    TIME_APP,
    Api,
    McpHttp,
    ToolgateServer,
    config,
    everything_server,
    http_app,
    list_all,
    mcp_url,
    messages_on_stream_while,
    methods_on_stream_while,
    open_stream,
    response_message,
)

DYNAMIC_APP = f"""\
  - id: dyn
    name: Dynamic
    description: a stdio server whose tools change at run time
    category: testing
    command: [{json.dumps(sys.executable)}, {json.dumps(str(Path(__file__).parent / "dynamic_tools_server.py"))}]
{STDIO_START}"""


def tool_names(c: McpHttp) -> set[str]:
    return {t["name"] for t in c.rpc("tools/list")["result"]["tools"]}


def resource_uris(c: McpHttp) -> set[str]:
    return {r["uri"] for r in list_all(c, "resources/list", "resources")}


def silent_for(lines) -> list[str]:
    """The methods an open stream's lines carry until it stays silent for its read timeout."""
    heard = []
    try:
        for line in lines:
            if line.startswith("data:"):
                heard.append(json.loads(line[5:])["method"])
    except httpx2.ReadTimeout:
        pass  # silence for the read timeout: nothing more came
    return heard


def test_app_list_changed_refreshes_the_catalogue_and_reaches_open_streams():
    with ToolgateServer(full_config=config(TIME_APP + DYNAMIC_APP)) as srv:
        api = Api(srv)
        # A cache that would hide the new tool for an hour if the announcement were ignored;
        # `tool_policy: off`, so that the added tool is served without an approval
        # (`test_tool_pins.py` tests the approval).
        gw_id, key = api.create_gateway(
            ["time", "dyn"], configuration={"cache_enabled": True, "cache_ttl": 3600, "tool_policy": "off"}
        )
        c = McpHttp(mcp_url(srv, gw_id), key)
        c.initialize()
        before = tool_names(c)
        assert "dyn__add_tool" in before and "dyn__extra" not in before, before

        def add():
            added = c.rpc("tools/call", {"name": "dyn__add_tool", "arguments": {"name": "extra"}})
            assert added["result"]["content"][0]["text"] == "added extra", added

        seen = methods_on_stream_while(c, add, "notifications/tools/list_changed")
        assert "notifications/tools/list_changed" in seen, f"no list_changed on the open stream within 10 s: {seen}"

        after = tool_names(c)
        assert after == before | {"dyn__extra"}, after
        called = c.rpc("tools/call", {"name": "dyn__extra", "arguments": {"text": "hi"}})["result"]
        assert called.get("isError", False) is False and called["content"][0]["text"] == "extra: hi", called
        functions = {s["id"]: s["functions"] for s in api.gateway(gw_id)["servers"]}
        assert "extra" in functions["dyn"], functions


def everything_config(ev) -> str:
    return config(TIME_APP + http_app("everything", ev.url))


def test_http_app_announcing_on_its_own_get_stream_reaches_open_streams(mcp_session):
    """server-everything registers a session resource when `gzip-file-as-resource` runs and
    announces it on its standalone GET stream, not in the call's answer: only a gateway that
    holds that stream open hears it."""
    with everything_server() as ev, ToolgateServer(full_config=everything_config(ev)) as srv:
        api = Api(srv)
        gw_id, key, c = mcp_session(srv, ["time", "everything"], configuration={"cache_enabled": True, "cache_ttl": 3600})
        assert not any("toolgate-test" in u for u in resource_uris(c))

        # The gateway opens its GET stream to the app right after the upstream session (just
        # made by the listing above); an announcement made before that stream is up is lost
        # by the app, so a second resource is made if the first went unheard.
        seen: list[str] = []
        for attempt in range(3):
            uri = f"demo://resource/session/toolgate-test-{attempt}.gz"

            def gzip():
                args = {"name": f"toolgate-test-{attempt}.gz", "data": "data:text/plain;base64,aGVsbG8=",
                        "outputType": "resourceLink"}
                out = c.rpc("tools/call", {"name": "everything__gzip-file-as-resource", "arguments": args})["result"]
                assert out.get("isError", False) is False and out["content"][0]["uri"] == uri, out

            seen = methods_on_stream_while(c, gzip, "notifications/resources/list_changed")
            if "notifications/resources/list_changed" in seen:
                break
        assert "notifications/resources/list_changed" in seen, f"no list_changed on the open stream within 10 s: {seen}"
        assert uri in resource_uris(c), "the gateway still lists the app's old resources"


def two_clients_and_a_document(srv) -> tuple[McpHttp, McpHttp, str]:
    """Two initialized clients of one gateway in front of server-everything, and a resource."""
    gw_id, key = Api(srv).create_gateway(["time", "everything"])
    a, b = McpHttp(mcp_url(srv, gw_id), key), McpHttp(mcp_url(srv, gw_id), key)
    caps = response_message(a.initialize())["result"]["capabilities"]
    assert caps["resources"].get("subscribe") is True, caps
    b.initialize()
    uri = sorted(u for u in resource_uris(a) if u.startswith("demo://resource/static/document/"))[0]
    return a, b, uri


def toggle_updates(c: McpHttp):
    """server-everything sends an update for each subscribed resource at once, then every 5 s,
    on its own GET stream."""
    toggled = c.rpc("tools/call", {"name": "everything__toggle-subscriber-updates", "arguments": {}})
    assert toggled["result"].get("isError", False) is False, toggled


def test_resource_updates_reach_the_subscribed_session_only():
    """Two clients share server-everything's one upstream session; only the one that subscribed
    to a resource hears `notifications/resources/updated` for it, on its own GET stream."""
    with everything_server() as ev, ToolgateServer(full_config=everything_config(ev)) as srv:
        a, b, uri = two_clients_and_a_document(srv)
        assert a.rpc("resources/subscribe", {"uri": uri})["result"] == {}
        with open_stream(b, read_timeout=3.0) as rb:
            b_lines = rb.iter_lines()
            assert next(b_lines).startswith(":")
            heard_by_a = messages_on_stream_while(a, lambda: toggle_updates(a), "notifications/resources/updated", 12)
            heard_by_b = silent_for(b_lines)
        updated = [m["params"] for m in heard_by_a if m["method"] == "notifications/resources/updated"]
        assert updated == [{"uri": uri}], f"the subscriber heard no update for {uri}: {updated}"
        assert "notifications/resources/updated" not in heard_by_b, heard_by_b
        assert a.rpc("resources/unsubscribe", {"uri": uri})["result"] == {}


def test_one_session_unsubscribing_leaves_the_others_subscribed():
    """The gateway answers an unsubscribe itself while another session still wants the updates:
    forwarded, it would unsubscribe the one upstream session both share."""
    with everything_server() as ev, ToolgateServer(full_config=everything_config(ev)) as srv:
        a, b, uri = two_clients_and_a_document(srv)
        for c in (a, b):
            assert c.rpc("resources/subscribe", {"uri": uri})["result"] == {}
        toggle_updates(a)
        assert a.rpc("resources/unsubscribe", {"uri": uri})["result"] == {}
        # The next periodic update (5 s) still reaches b.
        heard = messages_on_stream_while(b, lambda: None, "notifications/resources/updated", 12)
        assert {"method": "notifications/resources/updated", "params": {"uri": uri}, "jsonrpc": "2.0"} in heard, heard


def test_a_management_change_reaches_the_cache_and_open_streams_through_the_change_feed(mcp_session):
    """The handlers no longer invalidate anything themselves: `State` publishes the change and
    the MCP runtime, a listener of the feed, drops the gateway's cached catalogue and tells its
    open streams before the management API answers. With an hour-long cache, the next
    `tools/list` after the PATCH must already show the new allow-list."""
    with ToolgateServer(full_config=config(TIME_APP + DYNAMIC_APP)) as srv:
        api = Api(srv)
        gw_id, key, c = mcp_session(srv, ["time", "dyn"], configuration={"cache_enabled": True, "cache_ttl": 3600})
        before = tool_names(c)
        assert "dyn__add_tool" in before and any(n.startswith("time__") for n in before), before

        def restrict():
            api.ok("PATCH", f"/v1/gateways/{gw_id}", {"allowed_tools": {"time": "*", "dyn": []}})

        seen = methods_on_stream_while(c, restrict, "notifications/tools/list_changed")
        assert "notifications/tools/list_changed" in seen, f"no list_changed on the open stream: {seen}"
        after = tool_names(c)
        assert after and all(n.startswith("time__") for n in after), f"the cached catalogue was served: {after}"

        # Removing the app from the gateway the same way.
        api.ok("PATCH", f"/v1/gateways/{gw_id}", {"servers": ["dyn"], "allowed_tools": {}})
        # A single-app gateway names the app's tools as the app does.
        names = tool_names(c)
        assert "add_tool" in names and not any("current_time" in n for n in names), names


def test_a_stateless_listen_stream_hears_only_the_kinds_it_asked_for():
    """`subscriptions/listen` (2026-07-28) frames its own notifications (each carries the
    request's id as its subscription id) from the gateway's one message of three: asked for
    tools and resources, it hears those two of a management change, not prompts."""
    with ToolgateServer(full_config=config(TIME_APP)) as srv:
        api = Api(srv)
        gw_id, key = api.create_gateway(["time"])
        params = {
            "notifications": {"toolsListChanged": True, "resourcesListChanged": True},
            "_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}},
        }
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": STATELESS,
            "Mcp-Method": "subscriptions/listen",
            "X-API-Key": key,
        }
        body = {"jsonrpc": "2.0", "id": 41, "method": "subscriptions/listen", "params": params}
        with httpx2.Client() as client, client.stream(
            "POST", mcp_url(srv, gw_id), json=body, headers=headers, timeout=httpx2.Timeout(5.0, read=3.0)
        ) as r:
            assert r.status_code == 200, r.read()
            lines = r.iter_lines()
            ack = next(json.loads(line[5:]) for line in lines if line.startswith("data:"))
            assert ack["method"] == "notifications/subscriptions/acknowledged", ack
            assert ack["params"]["notifications"] == {"toolsListChanged": True, "resourcesListChanged": True}, ack
            api.ok("PATCH", f"/v1/gateways/{gw_id}", {"description": "changed"})
            heard = []
            try:
                for line in lines:
                    if line.startswith("data:"):
                        heard.append(json.loads(line[5:]))
            except httpx2.ReadTimeout:
                pass  # silence for the read timeout: nothing more came
        assert [m["method"] for m in heard] == [
            "notifications/tools/list_changed",
            "notifications/resources/list_changed",
        ], heard
        assert all(m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 41 for m in heard), heard


class DroppingStreamApp:
    """A Streamable HTTP app (raw HTTP, JSON answers) whose standalone GET stream the test can
    close, and whose tool list the test can change while no stream is open: the app's
    announcement then has nowhere to go (an app without an event store drops it, as the Python
    SDK's does). Runs in this process; `url` is its endpoint."""

    def __init__(self):
        import http.server
        import threading

        app = self
        self.tools = ["before_tool"]
        self.gets = 0
        self.drop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, status: int, body: bytes = b"", session: bool = False):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if session:
                    self.send_header("Mcp-Session-Id", "drop-1")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                app.gets += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b": open\n\n")
                self.wfile.flush()
                while not app.drop.wait(0.05):
                    pass
                self.close_connection = True

            def do_DELETE(self):  # noqa: N802
                self.answer(200)

            def do_POST(self):  # noqa: N802
                msg = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
                if msg.get("id") is None:
                    return self.answer(202)
                method = msg.get("method")
                if method == "initialize":
                    result = {"protocolVersion": msg["params"]["protocolVersion"],
                              "capabilities": {"tools": {"listChanged": True}},
                              "serverInfo": {"name": "dropping", "version": "1"}}
                elif method == "tools/list":
                    result = {"tools": [{"name": t, "inputSchema": {"type": "object"}} for t in app.tools]}
                elif method in ("prompts/list", "resources/list", "resources/templates/list"):
                    result = {{"prompts/list": "prompts", "resources/list": "resources"}.get(method, "resourceTemplates"): []}
                elif method == "ping":
                    result = {}
                else:
                    error = {"code": -32601, "message": "Method not found"}
                    return self.answer(200, json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": error}).encode())
                body = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
                self.answer(200, json.dumps(body).encode(), session=method == "initialize")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.drop.set()
        self.server.shutdown()


def test_a_change_made_while_the_app_s_stream_was_closed_is_found_when_it_opens_again(mcp_session):
    """An app's announcement made while toolgate's GET stream to it is closed is lost; so when
    the stream opens again toolgate reads the app's lists again, and a difference reaches the
    clients' open streams and the catalogue at once, not at the cache's expiry a minute later.
    A stream that opens again on unchanged lists tells the clients nothing."""
    app = DroppingStreamApp()
    try:
        with ToolgateServer(full_config=config(http_app("drop", app.url, name="Dropping"))) as srv:
            # Served as the app lists them (a pinning gateway would hold the new tool back).
            gw_id, key, c = mcp_session(srv, ["drop"], configuration={"tool_policy": "off"})
            assert {n.rsplit("__", 1)[-1] for n in tool_names(c)} == {"before_tool"}, tool_names(c)
            deadline = time.monotonic() + 10
            while app.gets == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert app.gets == 1, "toolgate did not open its GET stream to the app"

            def drop_and_reopen(change: bool):
                before = app.gets
                app.drop.set()
                if change:
                    app.tools = ["after_tool"]
                time.sleep(0.2)
                app.drop.clear()
                deadline = time.monotonic() + 10
                while app.gets == before and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert app.gets > before, "toolgate did not open its GET stream again"

            # Unchanged lists: the client's stream hears nothing.
            with open_stream(c, read_timeout=4) as r:
                lines = r.iter_lines()
                assert next(lines).startswith(":")
                drop_and_reopen(change=False)
                assert "notifications/tools/list_changed" not in silent_for(lines)

            seen = methods_on_stream_while(c, lambda: drop_and_reopen(change=True), "notifications/tools/list_changed")
            assert "notifications/tools/list_changed" in seen, f"no list_changed within 10 s: {seen}"
            assert {n.rsplit("__", 1)[-1] for n in tool_names(c)} == {"after_tool"}, tool_names(c)
    finally:
        app.close()
