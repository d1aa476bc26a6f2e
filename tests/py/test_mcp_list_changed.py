"""An app whose own tool list changes: its `notifications/tools/list_changed` makes the gateway
drop its cached lists (even with a long `cache_ttl`) and reaches the clients' open GET streams,
so a client sees the new tool as it would talking to the app directly.

The app is a stdio server on the official Python SDK (`dynamic_tools_server.py`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mcp_helpers import TIME_APP, Api, McpHttp, config, mcp_url, start_toolgate

DYNAMIC_APP = f"""\
  - id: dyn
    name: Dynamic
    description: a stdio server whose tools change at run time
    category: testing
    command: [{json.dumps(sys.executable)}, {json.dumps(str(Path(__file__).parent / "dynamic_tools_server.py"))}]
"""


def tool_names(c: McpHttp) -> set[str]:
    return {t["name"] for t in c.rpc("tools/list")["result"]["tools"]}


def test_app_list_changed_refreshes_the_catalogue_and_reaches_open_streams():
    srv = start_toolgate(config(TIME_APP + DYNAMIC_APP))
    try:
        api = Api(srv)
        # A cache that would hide the new tool for an hour if the announcement were ignored.
        gw_id, key = api.create_gateway(["time", "dyn"], configuration={"cache_enabled": True, "cache_ttl": 3600})
        c = McpHttp(mcp_url(srv, gw_id), key)
        c.initialize()
        before = tool_names(c)
        assert "dyn__add_tool" in before and "dyn__extra" not in before, before

        seen: list[str] = []
        with c.client.stream("GET", c.url, headers=c.headers(Accept="text/event-stream"), timeout=20) as r:
            assert r.status_code == 200, r.status_code
            lines = r.iter_lines()
            assert next(lines).startswith(":"), "the stream opens with a comment"
            added = c.rpc("tools/call", {"name": "dyn__add_tool", "arguments": {"name": "extra"}})
            assert added["result"]["content"][0]["text"] == "added extra", added
            # The stream carries keep-alive comments, so a read timeout alone would never end it.
            deadline = time.monotonic() + 10
            for line in lines:
                if time.monotonic() > deadline:
                    break
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:])["method"])
                    if "notifications/tools/list_changed" in seen:
                        break
        assert "notifications/tools/list_changed" in seen, f"no list_changed on the open stream within 10 s: {seen}"

        after = tool_names(c)
        assert after == before | {"dyn__extra"}, after
        called = c.rpc("tools/call", {"name": "dyn__extra", "arguments": {"text": "hi"}})["result"]
        assert called.get("isError", False) is False and called["content"][0]["text"] == "extra: hi", called
        functions = {s["id"]: s["functions"] for s in api.gateway(gw_id)["servers"]}
        assert "extra" in functions["dyn"], functions
    finally:
        srv.stop()
        srv.tmp.cleanup()
