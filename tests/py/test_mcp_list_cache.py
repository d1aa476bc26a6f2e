"""The list cache, proven with search in (issue 61 part C; docs/mcp.md "Lists and their cache"
and "Search instead of a thousand tools"). `test_tool_overrides.py` proves it for gateways that
list all; here the gateway is in search mode, where one cached catalogue (and its one search
index) answers every caller: what each session found stays its own and within what its rules let
it see, two apps of different `ttlMs` give the smaller, an override change reaches the next
search and list, and `call_tool` reaches a 2026-07-28 app's tool that declares `Mcp-Param-*`
headers its caller could not send.
"""

from __future__ import annotations

import os

import pytest

from mcp_helpers import (
    STATELESS,
    Api,
    config,
    http_app,
    mcp_url,
    python_app,
    run,
    sdk_client,
    start_toolgate,
    stateless_post,
)

META = {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}}


def search_gateway(api: Api, **extra) -> tuple[str, str]:
    body = {"name": f"cache-{os.urandom(4).hex()}", "servers": ["everything"],
            "configuration": {"discovery": "search"}, **extra}
    data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
    return data["id"], data["api_key"]


def test_what_a_session_found_is_its_own_and_within_its_callers_rules(everything):
    srv, api = everything
    rules = [{"name": "keys-no-sum", "effect": "deny", "when": 'tool == "get-sum" && caller.kind == "gateway_key"'}]
    gw, gw_key = search_gateway(api, rules=rules)
    url = mcp_url(srv, gw)

    async def searched(key):
        async with sdk_client(url, key, mode="legacy") as c:
            await c.call_tool("search_tools", {"query": "get sum echo", "limit": 50})
            return {t.name for t in (await c.list_tools()).tools}

    async def fresh(key):
        async with sdk_client(url, key, mode="legacy") as c:
            return [t.name for t in (await c.list_tools()).tools]

    async def go():
        # Alternating callers on the one cached catalogue, then sessions that never searched.
        lists = [await searched(k) for k in [gw_key, srv.admin_key] * 2]
        return lists, await fresh(gw_key), await fresh(srv.admin_key)

    lists, fresh_key, fresh_admin = run(go())
    for i, listed in enumerate(lists):
        assert "search_tools" in listed and "echo" in listed, (i, listed)
        assert ("get-sum" in listed) == (i % 2 == 1), (i, listed)
    assert fresh_key == fresh_admin == ["search_tools"], "a session's finds are not another's"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_override_change_reaches_the_next_search_and_list(everything, mode):
    srv, api = everything
    gw, key = search_gateway(api, tool_overrides=[{"tool": "echo", "name": "say", "description": "Says it back"}])
    url = mcp_url(srv, gw)

    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            first = await c.call_tool("search_tools", {"query": "says it back"})
            api.ok("PATCH", f"/v1/gateways/{gw}",
                   {"tool_overrides": [{"tool": "echo", "name": "repeat", "description": "Repeats what it is told"}]})
            second = await c.call_tool("search_tools", {"query": "repeats what it is told"})
            listed = [t.name for t in (await c.list_tools(cache_mode="bypass")).tools]
            return first, second, listed

    first, second, listed = run(go())
    names = lambda r: [t["name"] for t in r.structured_content["tools"]]  # noqa: E731
    assert names(first)[0] == "say", names(first)
    assert names(second)[0] == "repeat" and "say" not in names(second), names(second)
    if mode == "legacy":
        assert "repeat" in listed and "say" not in listed, "a found tool no longer callable is not listed"
    else:
        assert listed == ["search_tools", "call_tool"], listed


def test_two_apps_of_different_ttls_give_the_smaller_and_call_tool_reaches_a_param_header_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("STATELESS_APP_TTL_MS", "7000")
    with python_app("stateless_app.py", tmp_path / "slow.log") as slow:
        monkeypatch.setenv("STATELESS_APP_TTL_MS", "3000")
        with python_app("stateless_app.py", tmp_path / "fast.log") as fast:
            apps = http_app("slow", f"http://{slow}/mcp", name="Slow") + http_app("fast", f"http://{fast}/mcp", name="Fast")
            srv = start_toolgate(config(apps))
            try:
                api = Api(srv)
                body = {"name": "two-ttls-search", "servers": ["slow", "fast"], "configuration": {"discovery": "search"}}
                data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
                url, key = mcp_url(srv, data["id"]), data["api_key"]
                for _ in range(2):
                    result = stateless_post(url, key, "tools/list", {"_meta": META}).json()["result"]
                    assert result["ttlMs"] == 3000 and result["cacheScope"] == "private", result
                    assert [t["name"] for t in result["tools"]] == ["search_tools", "call_tool"], result
                found = stateless_post(url, key, "tools/call",
                                       {"name": "search_tools", "arguments": {"query": "greets name"}, "_meta": META})
                tools = found.json()["result"]["structuredContent"]["tools"]
                assert {"slow__greet", "fast__greet"} <= {t["name"] for t in tools}, tools
                call = {"name": "call_tool", "arguments": {"name": "fast__regional", "arguments": {"region": "eu"}},
                        "_meta": META}
                r = stateless_post(url, key, "tools/call", call)
                assert r.status_code == 200 and "served in eu" in r.text, r.text
            finally:
                srv.stop()
                srv.tmp.cleanup()
