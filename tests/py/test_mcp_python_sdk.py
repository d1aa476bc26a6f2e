"""The official Python SDK (`mcp` 2.3.0) as a client of a gateway with the built-in `time` app.

Both connect modes of `mcp.client.Client`:
  * `auto` (the default): probes `server/discover` at protocol 2026-07-28 and, on an answer that
    is not positive evidence of a modern server, falls back to `initialize`;
  * `legacy`: the `initialize` handshake directly.
"""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import Api, McpHttp, config, mcp_url, run, sdk_client, start_toolgate

MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def time_gateway():
    srv = start_toolgate(config())
    try:
        gw, key = Api(srv).create_gateway(["time"])
        yield srv, mcp_url(srv, gw), key
    finally:
        srv.stop()
        srv.tmp.cleanup()


@pytest.mark.parametrize("mode", MODES)
def test_sdk_connects_and_negotiates_latest_handshake_version(time_gateway, mode):
    _, url, key = time_gateway

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            return c.session.protocol_version, c.session.initialize_result

    version, init = run(go())
    assert version == "2025-11-25", f"mode={mode}: negotiated {version}"
    assert init is not None, f"mode={mode}: the client did not end up on the initialize handshake"
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


def test_server_discover_answers_with_the_handshake_versions(time_gateway):
    """What makes `auto` fall back: -32022 whose `supported` lists only handshake-era versions."""
    _, url, key = time_gateway
    c = McpHttp(url, key)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
    }
    r = c.post(body, headers=c.headers(**{"MCP-Protocol-Version": "2026-07-28"}))
    assert r.status_code == 400, f"{r.status_code} {r.text}"
    err = r.json()["error"]
    assert err["code"] == -32022, err
    assert r.json()["id"] == 1, r.json()
    assert set(err["data"]["supported"]) == {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}, err
    assert err["data"]["requested"] == "2026-07-28", err
