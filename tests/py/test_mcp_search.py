"""`configuration.discovery: "search"` (issue 61 part D, docs/mcp.md "Search instead of a
thousand tools"), seen by the official Python SDK client (`mcp`) in both protocol eras and by the
official TypeScript client, against `@modelcontextprotocol/server-everything` over Streamable
HTTP.

In a session the list is `search_tools` and the tools found; a search adds its matches and tells
the client its list changed, and the client calls the found tool by its own definition. Without
a session (2026-07-28) the list is `search_tools` and `call_tool`; a search carries each tool's
whole definition (annotations, output schema) and `call_tool` is the call of the tool it names:
its rules, pins and log entry are that tool's. A search never returns a tool the caller could not
call (a rule denying it, a tool awaiting approval), and two callers under a rule that reads the
caller never see each other's results.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import (
    STATELESS,
    Api,
    McpHttp,
    mcp_url,
    messages_on_stream_while,
    node_bin,
    response_message,
    run,
    sdk_client,
    stateless_post,
)

SEARCH = {"discovery": "search"}
META = {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}}


def search_gateway(api: Api, configuration: dict | None = None, **extra) -> tuple[str, str]:
    body = {"name": f"search-{os.urandom(4).hex()}", "servers": ["everything"],
            "configuration": {**SEARCH, **(configuration or {})}, **extra}
    data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
    return data["id"], data["api_key"]


def found_names(result) -> list[str]:
    return [t["name"] for t in result.structured_content["tools"]]


async def call_error(c, name: str, args: dict):
    """The JSON-RPC error of a call the client raises for (None if it did not raise)."""
    try:
        await c.call_tool(name, args)
    except MCPError as e:
        return e.error
    return None


def test_discovery_is_a_gateway_setting_checked_and_shown(everything):
    srv, api = everything
    gw, _ = search_gateway(api)
    assert api.gateway(gw)["configuration"]["discovery"] == "search"
    r = api.call("PATCH", f"/v1/gateways/{gw}", {"configuration": {"discovery": "some"}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "VALIDATION_ERROR" and err["details"]["field"] == "configuration.discovery", err
    api.ok("PATCH", f"/v1/gateways/{gw}", {"configuration": {"discovery": "all"}})
    assert api.gateway(gw)["configuration"].get("discovery", "all") == "all"
    r = api.call("POST", "/v1/gateways", {"name": "bad-discovery", "servers": ["everything"],
                                          "configuration": {"discovery": 3}})
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "configuration.discovery", r.text


def test_a_session_lists_what_it_found_and_calls_it_by_its_own_definition(everything):
    srv, api = everything
    gw, key = search_gateway(api)
    seen: list[str] = []

    async def on_message(message):
        method = getattr(getattr(message, "root", message), "method", None)
        if method:
            seen.append(method)

    async def go():
        async with sdk_client(mcp_url(srv, gw), key, mode="legacy", message_handler=on_message) as c:
            before = [t.name for t in (await c.list_tools()).tools]
            found = await c.call_tool("search_tools", {"query": "sum of two numbers", "limit": 3})
            notified = list(seen)
            after = {t.name: t for t in (await c.list_tools()).tools}
            summed = await c.call_tool("get-sum", {"a": 2, "b": 3})
            again = await c.call_tool("search_tools", {"query": "sum", "limit": 1})
            bad = await c.call_tool("search_tools", {"query": "sum", "limit": 500})
            no_call_tool = await call_error(c, "call_tool", {"name": "get-sum", "arguments": {"a": 1, "b": 1}})
            return before, found, notified, after, summed, again, bad, no_call_tool

    before, found, notified, after, summed, again, bad, no_call_tool = run(go())
    assert before == ["search_tools"], before
    names = found_names(found)
    assert names[0] == "get-sum" and len(names) <= 3, names
    assert not found.is_error and "get-sum" in found.content[0].text, found
    assert "notifications/tools/list_changed" in notified, notified
    assert list(after)[0] == "search_tools" and set(names) <= set(after), list(after)
    assert len(after) == 1 + len(names), "only what was found is listed"
    tool = after["get-sum"]
    assert set(tool.input_schema["properties"]) == {"a", "b"}, tool.input_schema
    assert tool.annotations.read_only_hint is True and tool.annotations.destructive_hint is False, tool.annotations
    assert summed.content[0].text == "The sum of 2 and 3 is 5.", summed
    assert found_names(again) == ["get-sum"], found_names(again)
    assert bad.is_error and "limit must be 1-50" in bad.content[0].text, bad
    assert no_call_tool is not None and no_call_tool.code == -32602, "a session has no call_tool"


def test_without_a_session_search_carries_definitions_and_call_tool_is_the_inner_call(everything):
    srv, api = everything
    gw, key = search_gateway(api)

    async def go():
        async with sdk_client(mcp_url(srv, gw), key, mode="auto") as c:
            listed = [t.name for t in (await c.list_tools()).tools]
            found = await c.call_tool("search_tools", {"query": "structured content weather"})
            summed = await c.call_tool("call_tool", {"name": "get-sum", "arguments": {"a": 4, "b": 5}})
            unknown = await call_error(c, "call_tool", {"name": "no-such-tool", "arguments": {}})
            shapeless = await call_error(c, "call_tool", {"arguments": {}})
            return listed, found, summed, unknown, shapeless

    listed, found, summed, unknown, shapeless = run(go())
    assert listed == ["search_tools", "call_tool"], listed
    tools = {t["name"]: t for t in found.structured_content["tools"]}
    structured = tools["get-structured-content"]
    assert structured["annotations"]["readOnlyHint"] is True, structured
    assert "outputSchema" in structured and "inputSchema" in structured, structured
    assert summed.content[0].text == "The sum of 4 and 5 is 9.", summed
    assert unknown is not None and (unknown.code, unknown.message) == (-32602, "Unknown tool: no-such-tool"), unknown
    assert shapeless is not None and shapeless.code == -32602, shapeless
    # The log names the tool inside call_tool, never call_tool.
    logs = api.ok("GET", f"/v1/logs?gateway_id={gw}&limit=100")["data"]["logs"]
    functions = {e.get("function") for e in logs}
    assert "get-sum" in str(functions) and "call_tool" not in str(functions), functions
    ok = [e for e in logs if "get-sum" in str(e.get("function")) and e.get("status") == "success"]
    assert ok and ok[0]["request"]["params"] == {"a": 4, "b": 5}, logs[:3]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_search_never_returns_a_tool_a_rule_denies_its_caller(everything, mode):
    srv, api = everything
    rules = [{"name": "keys-no-sum", "effect": "deny", "when": 'tool == "get-sum" && caller.kind == "gateway_key"'}]
    gw, gw_key = search_gateway(api, rules=rules)
    url = mcp_url(srv, gw)

    async def names(key):
        async with sdk_client(url, key, mode=mode) as c:
            return found_names(await c.call_tool("search_tools", {"query": "get sum", "limit": 50}))

    async def go():
        # Alternating, so that every search after the first reads the cached catalogue's index.
        return [await names(k) for k in [gw_key, srv.admin_key] * 2]

    for i, found in enumerate(run(go())):
        if i % 2 == 0:
            assert "get-sum" not in found and found, (i, found)
        else:
            assert found[0] == "get-sum", (i, found)


def test_call_tool_goes_through_the_inner_tools_rules_and_log(everything):
    srv, api = everything
    rules = [{"name": "no-sum", "effect": "deny", "when": 'tool == "get-sum"'}]
    gw, key = search_gateway(api, rules=rules)

    async def go():
        async with sdk_client(mcp_url(srv, gw), key, mode="auto") as c:
            denied = await call_error(c, "call_tool", {"name": "get-sum", "arguments": {"a": 1, "b": 2}})
            echoed = await c.call_tool("call_tool", {"name": "echo", "arguments": {"message": "hi"}})
            return denied, echoed

    denied, echoed = run(go())
    assert denied is not None, "call_tool slipped past the rule of the tool inside it"
    assert (denied.code, denied.message) == (-32012, "Tool call denied by rule `no-sum`"), denied
    assert denied.data == {"rule": "no-sum", "tool": "get-sum"}, denied.data
    assert echoed.content[0].text == "Echo: hi", echoed
    logs = api.ok("GET", f"/v1/logs?gateway_id={gw}&limit=100")["data"]["logs"]
    refused = [e for e in logs if "get-sum" in str(e.get("function"))]
    assert refused and refused[0]["status"] != "success", logs[:3]


def test_a_tool_awaiting_approval_is_neither_found_nor_called(everything):
    srv, api = everything
    gw, key = search_gateway(api, configuration={"tool_policy": "approve"})
    url = mcp_url(srv, gw)
    r = stateless_post(url, key, "tools/call", {"name": "search_tools", "arguments": {"query": "sum"}, "_meta": META})
    result = r.json()["result"]
    assert result["structuredContent"]["tools"] == [], result
    r = stateless_post(url, key, "tools/call",
                       {"name": "call_tool", "arguments": {"name": "get-sum", "arguments": {"a": 1, "b": 2}},
                        "_meta": META})
    error = r.json()["error"]
    assert error["code"] == -32011 and "get-sum" in error["message"], error


def test_the_typescript_client_sees_the_list_change_and_calls_the_found_tool(everything):
    srv, api = everything
    gw, key = search_gateway(api)
    script = Path(__file__).resolve().parent.parent / "node" / "ts_search_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), mcp_url(srv, gw), key], cwd=script.parent,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_search_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stdout}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["before"] == ["search_tools"], out
    assert "get-sum" in out["changed"] and out["sum"] == "The sum of 6 and 7 is 13.", out


def test_a_json_only_client_is_told_on_its_get_stream_and_other_sessions_are_not(everything):
    srv, api = everything
    gw, key = search_gateway(api)
    url = mcp_url(srv, gw)
    searcher, other = McpHttp(url, key), McpHttp(url, key)
    searcher.initialize()
    other.initialize()
    json_only = searcher.headers(Accept="application/json")
    answers = []

    def search():
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "search_tools", "arguments": {"query": "echo"}}}
        answers.append(searcher.post(body, headers=json_only))

    try:
        seen = messages_on_stream_while(searcher, search, "notifications/tools/list_changed")
        assert [m["method"] for m in seen] == ["notifications/tools/list_changed"], seen
        r = answers[0]
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.headers
        assert response_message(r)["result"]["structuredContent"]["tools"][0]["name"] == "echo", r.text
        # Another session's stream hears nothing of another's finds (a search that finds get-sum).
        def again():
            searcher.post({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                           "params": {"name": "search_tools", "arguments": {"query": "sum"}}}, headers=json_only)
            other.post({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
            api.ok("PATCH", f"/v1/gateways/{gw}", {"description": "changed"})
        # The gateway's change tells every session (three lists); the searcher's find is not among them.
        heard = messages_on_stream_while(other, again, "notifications/resources/list_changed")
        assert [m["method"] for m in heard] == ["notifications/tools/list_changed", "notifications/prompts/list_changed",
                                                 "notifications/resources/list_changed"], heard
        listed = [t["name"] for t in searcher.rpc("tools/list")["result"]["tools"]]
        assert listed[:2] == ["search_tools", "echo"] and "get-sum" in listed, listed
    finally:
        searcher.close()
        other.close()
