"""The official Python SDK (`mcp` 2.3.0) as a client of a gateway with the built-in `time` app.

Both connect modes of `mcp.client.Client`:
  * `auto` (the default): probes `server/discover` at protocol 2026-07-28; toolgate answers it,
    so the client stays on the stateless revision (no `initialize`, no session);
  * `legacy`: the `initialize` handshake directly.
"""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import McpHttp, run, sdk_client

MODES = ["auto", "legacy"]


def test_sdk_auto_mode_stays_on_the_stateless_revision(time_gateway):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode="auto") as c:
            return c.session.protocol_version, c.session.initialize_result, c.session.discover_result

    version, init, discovered = run(go())
    assert version == "2026-07-28", f"auto: negotiated {version}"
    assert init is None, "auto: the client fell back to the initialize handshake"
    assert discovered is not None and discovered.capabilities.tools.list_changed is True, discovered


def test_sdk_legacy_mode_negotiates_the_latest_handshake_version(time_gateway):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode="legacy") as c:
            return c.session.protocol_version, c.session.initialize_result

    version, init = run(go())
    assert version == "2025-11-25", f"legacy: negotiated {version}"
    assert init is not None, "legacy: the client did not end up on the initialize handshake"
    assert init.server_info.name == "toolgate"
    assert init.capabilities.tools is not None and init.capabilities.tools.list_changed is True


@pytest.mark.parametrize("mode", MODES)
def test_sdk_lists_the_time_tool_with_its_schema(time_gateway, mode):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            return await c.list_tools()

    tools = {t.name: t for t in run(go()).tools}
    assert list(tools) == ["get_current_time"], f"single-app gateway keeps upstream names: {list(tools)}"
    schema = tools["get_current_time"].input_schema
    assert set(schema["properties"]) >= {"format", "timezone"}, schema
    assert schema.get("required") == ["format"], schema


@pytest.mark.parametrize("mode", MODES)
def test_sdk_calls_get_current_time_with_format_and_timezone(time_gateway, mode):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            return await c.call_tool("get_current_time", {"format": "YYYY-MM-DD HH:mm:ss", "timezone": "Asia/Kolkata"})

    r = run(go())
    assert r.is_error is False, r
    text = r.content[0].text
    assert len(text) == 19 and text[4] == "-" and text[10] == " " and text[13] == ":", f"not YYYY-MM-DD HH:mm:ss: {text!r}"
    assert r.structured_content["timezone"] == "Asia/Kolkata", r.structured_content
    assert r.structured_content["iso8601"].endswith("+05:30"), r.structured_content


@pytest.mark.parametrize("mode", MODES)
def test_sdk_unknown_timezone_is_a_tool_error(time_gateway, mode):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            return await c.call_tool("get_current_time", {"format": "YYYY", "timezone": "Mars/Olympus_Mons"})

    r = run(go())
    assert r.is_error is True, f"an unknown zone must be an isError result: {r}"
    assert "Mars/Olympus_Mons" in r.content[0].text, r.content


@pytest.mark.parametrize("mode", MODES)
def test_sdk_unknown_tool_is_error_32602(time_gateway, mode):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            try:
                await c.call_tool("no_such_tool", {})
            except MCPError as e:
                return e.error
        return None

    err = run(go())
    assert err is not None, "calling an unknown tool did not raise MCPError"
    assert err.code == -32602, err
    assert err.message == "Unknown tool: no_such_tool", err


def test_server_discover_names_both_eras_and_the_gateway(time_gateway):
    """What keeps `auto` stateless: a discover result listing 2026-07-28 (and the handshake versions)."""
    _, url, key = time_gateway
    c = McpHttp(url, key)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
    r = c.post(body, headers=c.headers(**{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}))
    assert r.status_code == 200, f"{r.status_code} {r.text}"
    result = r.json()["result"]
    assert r.json()["id"] == 1, r.json()
    assert result["supportedVersions"][0] == "2026-07-28", result
    assert {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"} <= set(result["supportedVersions"]), result
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolgate", result
    # Asked at a version of neither era: -32022 naming both lists.
    meta["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    r = c.post(body, headers=c.headers(**{"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "server/discover"}))
    assert r.status_code == 400 and r.json()["error"]["code"] == -32022, r.text
    assert r.json()["error"]["data"]["requested"] == "2099-01-01", r.text
