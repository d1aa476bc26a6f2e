"""Shaped tools (`tool_overrides`, issue 61 part A) and the list cache with them in (part C),
seen by the official Python SDK client (`mcp`) in both protocol eras, against
`@modelcontextprotocol/server-everything` over Streamable HTTP.

A shaped tool is listed under its alias with the gateway's text, its fixed and hidden arguments
gone from its schema; a call by the alias reaches the app's tool with the fixed values and the
defaults put in; a call that sends a fixed or hidden argument is -32602; the app's name is
unknown. A rule that denied the app's tool still denies its alias. The overrides are checked
against the app's schemas when saved (400 naming the member), shown by GET, and a change of
them reaches the next list of an open session. Each caller's list is its own under a rule that
reads the caller, however often the cached catalogue answers; a list of two apps carries the
smaller of their `ttlMs`.
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
    config,
    http_app,
    mcp_url,
    node_bin,
    python_app,
    run,
    sdk_client,
    start_toolgate,
    stateless_post,
)

MODES = ["auto", "legacy"]

OVERRIDES = [
    {"tool": "echo", "name": "say", "description": "Says the message back"},
    {"tool": "get-sum", "name": "add-ten", "title": "Add ten", "description": "Adds ten to a number",
     "fixed_arguments": {"b": 10}},
    {"tool": "get-annotated-message", "name": "status-note",
     "default_arguments": {"messageType": "success"}, "hidden_arguments": ["includeImage"]},
]


def shaped_gateway(api: Api, **extra) -> tuple[str, str]:
    body = {"name": f"shaped-{os.urandom(4).hex()}", "servers": ["everything"], "tool_overrides": OVERRIDES, **extra}
    data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
    return data["id"], data["api_key"]


async def call_error(c, name: str, args: dict):
    """The JSON-RPC error of a call the client raises for (None if it did not raise)."""
    try:
        await c.call_tool(name, args)
    except MCPError as e:
        return e.error
    return None


@pytest.mark.parametrize("mode", MODES)
def test_a_shaped_tool_is_listed_and_called_as_the_override_says(everything, mode):
    srv, api = everything
    gw, key = shaped_gateway(api)
    assert api.gateway(gw)["tool_overrides"] == OVERRIDES, "GET shows the overrides as saved"

    async def go():
        async with sdk_client(mcp_url(srv, gw), key, mode=mode) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            said = await c.call_tool("say", {"message": "hi"})
            added = await c.call_tool("add-ten", {"a": 5})
            noted = await c.call_tool("status-note", {})
            errors = [
                await call_error(c, "add-ten", {"a": 5, "b": 1}),
                await call_error(c, "status-note", {"includeImage": True}),
                await call_error(c, "echo", {"message": "hi"}),
            ]
            return tools, said, added, noted, errors

    tools, said, added, noted, (fixed, hidden, old) = run(go())
    assert {"say", "add-ten", "status-note"} <= set(tools), sorted(tools)
    assert not {"echo", "get-sum", "get-annotated-message"} & set(tools), "the app's names are gone"
    add = tools["add-ten"]
    assert (add.title, add.description) == ("Add ten", "Adds ten to a number"), add
    assert set(add.input_schema["properties"]) == {"a"} and add.input_schema["required"] == ["a"], add.input_schema
    note = tools["status-note"].input_schema
    assert "includeImage" not in note["properties"], note
    assert note["properties"]["messageType"]["default"] == "success" and not note.get("required"), note
    assert tools["say"].description == "Says the message back"
    assert said.content[0].text == "Echo: hi", said
    assert added.content[0].text == "The sum of 5 and 10 is 15.", added
    assert noted.content[0].text == "Operation completed successfully", noted
    assert len(noted.content) == 1, "the hidden argument was not sent: no image"
    assert fixed is not None and fixed.code == -32602 and "`b`" in fixed.message, fixed
    assert hidden is not None and hidden.code == -32602 and "`includeImage`" in hidden.message, hidden
    assert old is not None and old.code == -32602 and "Unknown tool: echo" in old.message, old
    # The log records the app's function, with the arguments the app was sent.
    entries = api.ok("GET", f"/v1/logs?gateway_id={gw}&limit=100")["data"]["logs"]
    sums = [e for e in entries if "get-sum" in str(e.get("function")) and e.get("status") == "success"]
    assert sums and sums[0]["request"]["params"] == {"a": 5, "b": 10}, entries[:3]


@pytest.mark.parametrize("mode", MODES)
def test_a_deny_rule_on_the_apps_tool_still_applies_to_its_alias(everything, mode):
    srv, api = everything
    rules = [{"name": "no-echo", "effect": "deny", "when": 'tool == "echo"'}]
    gw, key = shaped_gateway(api, rules=rules)

    async def go():
        async with sdk_client(mcp_url(srv, gw), key, mode=mode) as c:
            listed = [t.name for t in (await c.list_tools()).tools]
            return listed, await call_error(c, "say", {"message": "hi"}), await c.call_tool("add-ten", {"a": 1})

    listed, denied, other = run(go())
    assert "say" not in listed and "add-ten" in listed, listed
    assert denied is not None, "the alias slipped past the rule that named the app's tool"
    assert (denied.code, denied.message) == (-32012, "Tool call denied by rule `no-echo`"), denied
    assert denied.data == {"rule": "no-echo", "tool": "say"}, denied.data
    assert other.content[0].text == "The sum of 1 and 10 is 11.", other


def test_overrides_that_do_not_fit_the_tools_are_refused_naming_the_member(everything):
    srv, api = everything
    gw, _ = shaped_gateway(api)
    cases = [
        ([{"tool": "echo", "name": "get-sum"}], "tool_overrides[0].name", "another tool"),
        ([{"tool": "echo", "name": "x"}, {"tool": "get-sum", "name": "x"}], "tool_overrides[1].name", "another override"),
        ([{"tool": "get-sum", "fixed_arguments": {"c": 1}}], "tool_overrides[0].fixed_arguments.c", "not an argument"),
        ([{"tool": "get-sum", "fixed_arguments": {"b": "ten"}}], "tool_overrides[0].fixed_arguments.b", "type number"),
        ([{"tool": "get-sum", "default_arguments": {"a": True}}], "tool_overrides[0].default_arguments.a", "type number"),
        ([{"tool": "get-annotated-message", "fixed_arguments": {"messageType": "loud"}}],
         "tool_overrides[0].fixed_arguments.messageType", "one of"),
        ([{"tool": "echo", "hidden_arguments": ["message"]}], "tool_overrides[0].hidden_arguments[0]", "required"),
        ([{"tool": "nope", "name": "x"}], "tool_overrides[0].tool", "not a tool"),
        ([{"tool": "echo", "name": "has space"}], "tool_overrides[0].name", "characters"),
    ]
    for overrides, field, issue in cases:
        r = api.call("PATCH", f"/v1/gateways/{gw}", {"tool_overrides": overrides})
        assert r.status_code == 400, (overrides, r.text)
        err = r.json()["error"]
        assert err["code"] == "VALIDATION_ERROR" and err["details"]["field"] == field, (overrides, err)
        assert issue in err["details"]["issue"], (overrides, err)
    assert api.gateway(gw)["tool_overrides"] == OVERRIDES, "a refused change left the overrides as they were"
    r = api.call("POST", "/v1/gateways", {"name": "bad-shape", "servers": ["everything"],
                                          "tool_overrides": [{"tool": "get-sum", "fixed_arguments": {"c": 1}}]})
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "tool_overrides[0].fixed_arguments.c"


@pytest.mark.parametrize("mode", MODES)
def test_an_override_change_reaches_the_next_list(everything, mode):
    srv, api = everything
    gw, key = shaped_gateway(api)

    async def described():
        # A client of its own per list: what the gateway answers, not what a client kept.
        async with sdk_client(mcp_url(srv, gw), key, mode=mode) as c:
            return {t.name: t.description for t in (await c.list_tools()).tools}

    async def go():
        before, again = await described(), await described()
        changed = [dict(OVERRIDES[0], description="Repeats what it is told"), *OVERRIDES[1:2]]
        api.ok("PATCH", f"/v1/gateways/{gw}", {"tool_overrides": changed})
        after = await described()
        api.ok("PATCH", f"/v1/gateways/{gw}", {"tool_overrides": []})
        return before, again, after, set(await described())

    before, again, after, plain = run(go())
    assert before == again and before["say"] == "Says the message back", before
    assert after["say"] == "Repeats what it is told", after
    assert "status-note" not in after and "get-annotated-message" in after, "the dropped override is gone"
    assert {"echo", "get-sum"} <= plain and not {"say", "add-ten"} & plain, plain


@pytest.mark.parametrize("mode", MODES)
def test_two_callers_under_a_caller_rule_never_see_each_others_list(everything, mode):
    srv, api = everything
    rules = [{"name": "keys-no-say", "effect": "deny", "when": 'tool == "say" && caller.kind == "gateway_key"'}]
    gw, gw_key = shaped_gateway(api, rules=rules)
    url = mcp_url(srv, gw)

    async def names(key):
        async with sdk_client(url, key, mode=mode) as c:
            return {t.name for t in (await c.list_tools()).tools}

    async def go():
        # Alternating, so that each list after the first is answered from the cached catalogue.
        return [await names(k) for k in [gw_key, srv.admin_key] * 3]

    seen = run(go())
    for i, listed in enumerate(seen):
        if i % 2 == 0:
            assert "say" not in listed and "add-ten" in listed, (i, listed)
        else:
            assert {"say", "add-ten"} <= listed, (i, listed)
    if mode == "auto":
        meta = {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}}
        for key in (gw_key, srv.admin_key):
            result = stateless_post(url, key, "tools/list", {"_meta": meta}).json()["result"]
            assert result["cacheScope"] == "private", result


def test_a_list_of_two_apps_keeps_the_smaller_ttl(tmp_path, monkeypatch):
    logs = tmp_path
    monkeypatch.setenv("STATELESS_APP_TTL_MS", "7000")
    with python_app("stateless_app.py", logs / "slow.log") as slow:
        monkeypatch.setenv("STATELESS_APP_TTL_MS", "3000")
        with python_app("stateless_app.py", logs / "fast.log") as fast:
            apps = http_app("slow", f"http://{slow}/mcp", name="Slow") + http_app("fast", f"http://{fast}/mcp", name="Fast")
            srv = start_toolgate(config(apps))
            try:
                api = Api(srv)
                body = {"name": "two-ttls", "servers": ["slow", "fast"],
                        "tool_overrides": [{"tool": "slow__greet", "name": "hello"}]}
                data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
                url = mcp_url(srv, data["id"])
                meta = {"io.modelcontextprotocol/protocolVersion": STATELESS,
                        "io.modelcontextprotocol/clientCapabilities": {}}
                for _ in range(2):
                    result = stateless_post(url, data["api_key"], "tools/list", {"_meta": meta}).json()["result"]
                    assert result["ttlMs"] == 3000 and result["cacheScope"] == "private", result
                    names = {t["name"] for t in result["tools"]}
                    assert {"hello", "fast__greet"} <= names and "slow__greet" not in names, names
                r = stateless_post(url, data["api_key"], "tools/call",
                                   {"name": "hello", "arguments": {"name": "Ada"}, "_meta": meta})
                assert "Hello, Ada! (from a 2026-07-28 app)" in r.text, r.text
            finally:
                srv.stop()
                srv.tmp.cleanup()


def test_the_typescript_client_lists_and_calls_a_shaped_tool(everything):
    srv, api = everything
    gw, key = shaped_gateway(api)
    script = Path(__file__).resolve().parent.parent / "node" / "ts_shaped_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), mcp_url(srv, gw), key], cwd=script.parent,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_shaped_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["sum"] == "The sum of 2 and 10 is 12." and "say" in out["tools"], out
