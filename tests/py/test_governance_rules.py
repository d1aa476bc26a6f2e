"""A gateway's per-tool rules seen by the official Python SDK client (`mcp`): a call a rule
denies is a JSON-RPC error naming the rule, in both connect modes, and the list the client gets
leaves out the tool no call of this caller may reach."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import TIME_APP, Api, config, mcp_url, run, sdk_client

MODES = ["auto", "legacy"]

CLOCK_APP = """\
  - id: clock
    name: Clock
    description: The built-in time app again, under another id
    category: utilities
    builtin: time
"""

RULES = [
    {"name": "no-clock", "effect": "deny", "when": 'app == "clock"'},
    {"name": "utc-only", "effect": "deny", "when": 'has(args.timezone) && args.timezone != "UTC"'},
]


@pytest.fixture(scope="module")
def ruled_gateway(module_toolgate_factory):
    """A gateway of time and clock with RULES: (endpoint URL, key)."""
    srv = module_toolgate_factory(full_config=config(apps=TIME_APP + CLOCK_APP))
    api = Api(srv)
    gw, key = api.create_gateway(["time", "clock"])
    api.ok("PATCH", f"/v1/gateways/{gw}", {"rules": RULES})
    return mcp_url(srv, gw), key


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_sees_the_rule_that_denied_its_call(ruled_gateway, mode):
    url, key = ruled_gateway

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            listed = [t.name for t in (await c.list_tools()).tools]
            allowed = await c.call_tool("time__get_current_time", {"format": "YYYY", "timezone": "UTC"})
            errors = []
            for name, args in [
                ("clock__get_current_time", {"format": "YYYY"}),
                ("time__get_current_time", {"format": "YYYY", "timezone": "Asia/Tokyo"}),
            ]:
                try:
                    await c.call_tool(name, args)
                    errors.append(None)
                except MCPError as e:
                    errors.append(e.error)
            return listed, allowed, errors

    listed, allowed, (clock, tokyo) = run(go())
    assert listed == ["time__get_current_time"], f"the clock app's tool is never callable: {listed}"
    assert not allowed.is_error, allowed
    assert clock is not None and tokyo is not None, "a denied call did not raise MCPError"
    assert (clock.code, clock.message) == (-32012, "Tool call denied by rule `no-clock`"), clock
    assert clock.data == {"rule": "no-clock", "tool": "clock__get_current_time"}, clock
    assert (tokyo.code, tokyo.message) == (-32012, "Tool call denied by rule `utc-only`"), tokyo
