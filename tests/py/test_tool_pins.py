"""Pinned tool definitions (`docs/governance.md`) seen by the official clients: a real MCP server
on the official Python SDK (`changing_tools_server.py`) changes a tool's description between two
lists (a rug pull) and adds a tool; through a gateway with `tool_policy: pin` (a new gateway's
default), the official Python SDK client and the TypeScript SDK client (`tests/node/
ts_pins_client.mjs`) neither list nor can call the changed or added tool until an admin approves
it, then they can.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import (
    NODE_DIR,
    Api,
    config,
    mcp_url,
    methods_on_stream_while,
    node_bin,
    run,
    sdk_client,
    start_toolgate,
)

MODES = ["auto", "legacy"]

CHANGING_APP = f"""\
  - id: chg
    name: Changing
    description: a stdio server whose tool definitions change at run time
    category: testing
    timeouts: {{ connect_ms: 60000 }}
    command: [{json.dumps(sys.executable)}, {json.dumps(str(Path(__file__).parent / "changing_tools_server.py"))}]
"""


@pytest.fixture(scope="module")
def srv():
    # The app is a Python process started on first use: give its first list time on a busy machine.
    s = start_toolgate(config(CHANGING_APP, mcp="  list_deadline_ms: 30000\n"))
    yield s
    s.stop()
    s.tmp.cleanup()


def ts_client(url: str, key: str, tool: str, expect: str) -> dict:
    script = NODE_DIR / "ts_pins_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), url, key, tool, expect], cwd=NODE_DIR,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_pins_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


async def listed(url: str, key: str, mode: str = "auto") -> dict:
    async with sdk_client(url, key, mode=mode) as c:
        return {t.name: t for t in (await c.list_tools()).tools}


async def call(url: str, key: str, tool: str, args: dict, mode: str = "auto"):
    """The tool's result, or the MCPError's error when the call is refused."""
    async with sdk_client(url, key, mode=mode) as c:
        try:
            return await c.call_tool(tool, args)
        except MCPError as e:
            return e.error


def until(what: str, check, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def pending(api: Api, gw: str) -> list[dict]:
    return api.ok("GET", f"/v1/gateways/{gw}/tool-changes")["data"]["tool_changes"]


def approve(api: Api, gw: str, change: dict) -> None:
    d = api.ok("POST", f"/v1/gateways/{gw}/tool-changes/{change['id']}/approve")["data"]
    assert d["decision"] == "approved", d


def assert_held(url: str, key: str, tool: str, args: dict) -> None:
    for mode in MODES:
        assert tool not in run(listed(url, key, mode)), f"{tool} is listed ({mode})"
        err = run(call(url, key, tool, args, mode))
        assert getattr(err, "code", None) == -32011, f"{mode}: {err}"
        assert tool in err.message and "awaits approval" in err.message, err
    ts_client(url, key, tool, "held")


def test_a_rug_pull_is_held_back_until_approved(srv):
    api = Api(srv)
    gw, key = api.create_gateway(["chg"])
    assert api.gateway(gw)["configuration"]["tool_policy"] == "pin"
    url = mcp_url(srv, gw)
    first = run(listed(url, key))
    assert "send_email" in first and first["send_email"].description == "Sends an e-mail.", list(first)
    assert run(call(url, key, "send_email", {"to": "a@b.test"})).content[0].text == "sent to a@b.test"

    # The server changes the description and announces it; the next list has it.
    assert run(call(url, key, "rug_pull", {})).content[0].text == "send_email changed"
    until("send_email held back", lambda: "send_email" not in run(listed(url, key)))
    assert_held(url, key, "send_email", {"to": "a@b.test"})

    (change,) = until("the change is listed", lambda: pending(api, gw))
    assert change["tool"] == "send_email" and change["kind"] == "changed", change
    assert change["diff"]["description"]["old"] == "Sends an e-mail.", change
    assert "BCC" in change["diff"]["description"]["new"], change

    approve(api, gw, change)
    tools = run(listed(url, key))
    assert "BCC" in tools["send_email"].description, "the approved definition is served"
    assert run(call(url, key, "send_email", {"to": "c@d.test"})).content[0].text == "sent to c@d.test"
    out = ts_client(url, key, "send_email", "served")
    assert "BCC" in out["description"], out
    assert pending(api, gw) == []


def test_an_added_tool_is_held_back_until_approved(srv):
    api = Api(srv)
    gw, key = api.create_gateway(["chg"], name="added-tool")
    url = mcp_url(srv, gw)
    assert "exfiltrate" not in run(listed(url, key))
    assert run(call(url, key, "add_tool", {})).content[0].text == "exfiltrate added"
    (change,) = until("the addition is listed", lambda: [c for c in (run(listed(url, key)) and pending(api, gw))
                                                        if c["tool"] == "exfiltrate"])
    assert change["kind"] == "added", change
    assert_held(url, key, "exfiltrate", {"text": "x"})

    approve(api, gw, change)
    assert "exfiltrate" in run(listed(url, key))
    assert run(call(url, key, "exfiltrate", {"text": "x"})).content[0].text == "exfiltrated x"
    ts_client(url, key, "exfiltrate", "served")


def test_off_serves_every_change_as_before(srv):
    api = Api(srv)
    gw, key = api.create_gateway(["chg"], configuration={"tool_policy": "off"}, name="off")
    url = mcp_url(srv, gw)
    assert "send_email" in run(listed(url, key))
    # The test makes the changes itself (the app is shared by the module's tests, and changing
    # it twice changes nothing more): the changed and the added tool are served at once.
    assert run(call(url, key, "rug_pull", {})).content[0].text == "send_email changed"
    assert run(call(url, key, "add_tool", {})).content[0].text == "exfiltrate added"
    tools = until("the changes are served", lambda: (t := run(listed(url, key))) and "exfiltrate" in t and t)
    assert "BCC" in tools["send_email"].description, tools
    assert run(call(url, key, "exfiltrate", {"text": "x"})).content[0].text == "exfiltrated x"
    assert pending(api, gw) == []


def test_approving_a_change_tells_the_open_streams(srv, mcp_session):
    """docs/governance.md: approving pins the definition and the gateway's clients with an open
    GET stream get `notifications/tools/list_changed`."""
    api = Api(srv)
    gw, _, c = mcp_session(srv, ["chg"], configuration={"tool_policy": "approve"}, name="approve-stream")
    assert c.rpc("tools/list")["result"]["tools"] == [], "nothing approved yet"
    change = until("the pending changes are listed", lambda: next(
        (x for x in pending(api, gw) if x["tool"] == "rug_pull"), None))

    seen = methods_on_stream_while(c, lambda: approve(api, gw, change), "notifications/tools/list_changed")
    assert seen == ["notifications/tools/list_changed"], f"the open stream heard {seen}"
    assert [t["name"] for t in c.rpc("tools/list")["result"]["tools"]] == ["rug_pull"]
