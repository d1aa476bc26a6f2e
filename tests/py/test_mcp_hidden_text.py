"""Clean descriptions (issue 42, item 2): hidden text in what an app sends for its tools,
prompts and resources never reaches a client.

The app is `hidden_text_server.py`, a stdio server on the official Python SDK that hides one
class of hidden text (tag characters, zero-width, bidirectional controls, ANSI escapes, other
controls, variation selectors, private use) in a tool's description, that tool's `query`
property's description and a prompt's description. The clients are the official Python SDK's,
in both connect modes, and the official TypeScript SDK's (`tests/node/ts_hidden_text_client.mjs`).
A `strip` gateway (the default) lists the exact clean text. A `block` gateway without pins
(`tool_policy: off`) does not list what carries hidden text, and a call of it is a JSON-RPC error
naming the finding; under pins (a new gateway's `tool_policy: pin`) such a tool is a pending
change of kind `hidden_text` instead (-32011 naming the tool and the finding), served stripped of
its hidden text once an admin approves it. Prompts under `block` are withheld either way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import NODE_DIR, Api, config, mcp_url, node_bin, run, sdk_client

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hidden_text_server import CLEAN, SAMPLES  # noqa: E402

MODES = ["auto", "legacy"]

APP = f"""\
  - id: hider
    name: Hider
    description: an app that hides text in its definitions
    category: testing
    command: {json.dumps([sys.executable, str(HERE / "hidden_text_server.py")])}
"""

# How the gateway names each class in a refusal.
NAMED = {
    "tag": "a Unicode tag character (U+E0049)",
    "zero_width": "a zero-width character (U+200B)",
    "bidi": "a bidirectional control (U+202E)",
    "ansi_escape": "an ANSI escape sequence (U+001B)",
    "control": "a control character (U+0000)",
    "variation_selector": "a variation selector (U+FE01)",
    "private_use": "a private-use character (U+E000)",
}


@pytest.fixture(scope="module")
def srv(module_toolgate_factory):
    # The Python app starts slowly on a busy machine: give its first lists time.
    s = module_toolgate_factory(full_config=config(APP, mcp="  list_deadline_ms: 30000\n"))
    api = Api(s)
    strip_gw, strip_key = api.create_gateway(["hider"])
    block_gw, block_key = api.create_gateway(["hider"], configuration={"description_policy": "block"})
    off_gw, off_key = api.create_gateway(["hider"], configuration={"description_policy": "block", "tool_policy": "off"})
    return s, (strip_gw, strip_key), (block_gw, block_key), (off_gw, off_key)


def lists(url: str, key: str, mode: str):
    async def go():
        async with sdk_client(url, key, mode=mode) as c:
            return (await c.list_tools()).tools, (await c.list_prompts()).prompts, (await c.list_resources()).resources

    return run(go())


@pytest.mark.parametrize("mode", MODES)
def test_strip_lists_the_exact_clean_text_of_every_class(srv, mode):
    s, (gw, key), _, _ = srv
    tools, prompts, resources = lists(mcp_url(s, gw), key, mode)
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {f"hide_{c}" for c in SAMPLES} | {"clean_tool"}, sorted(by_name)
    for cls, (description, prop, _) in CLEAN.items():
        tool = by_name[f"hide_{cls}"]
        assert tool.description == description, (cls, tool.description)
        assert tool.input_schema["properties"]["query"]["description"] == prop, (cls, tool.input_schema)
    assert by_name["clean_tool"].description == "Nothing hidden here."
    prompt_by_name = {p.name: p for p in prompts}
    for cls, (_, _, description) in CLEAN.items():
        assert prompt_by_name[f"hide_{cls}"].description == description, cls
    assert [(r.uri, r.description) for r in resources] == [("memo://hidden", "A memo. Read it.")]

    async def call():
        async with sdk_client(mcp_url(s, gw), key, mode=mode) as c:
            return await c.call_tool("hide_tag", {"query": "q"})

    result = run(call())
    assert result.is_error is not True and result.content[0].text == "tag: q", result


@pytest.mark.parametrize("mode", MODES)
def test_block_without_pins_withholds_each_class_and_a_call_names_the_finding(srv, mode):
    s, _, _, (gw, key) = srv
    url = mcp_url(s, gw)
    tools, prompts, resources = lists(url, key, mode)
    assert [t.name for t in tools] == ["clean_tool"]
    assert [p.name for p in prompts] == ["clean_prompt"]
    assert resources == []

    async def refusals():
        errors = {}
        async with sdk_client(url, key, mode=mode) as c:
            for cls in SAMPLES:
                try:
                    await c.call_tool(f"hide_{cls}", {"query": "q"})
                except MCPError as e:
                    errors[("tool", cls)] = e.error
                try:
                    await c.get_prompt(f"hide_{cls}")
                except MCPError as e:
                    errors[("prompt", cls)] = e.error
            clean = await c.call_tool("clean_tool", {"query": "q"})
        return errors, clean

    errors, clean = run(refusals())
    assert clean.content[0].text == "clean: q", clean
    for cls in SAMPLES:
        err = errors.get(("tool", cls))
        assert err is not None, f"calling hide_{cls} on a block gateway did not fail"
        assert err.code == -32602, err
        want = f"tool `hide_{cls}` is withheld: its description contains {NAMED[cls]} at character "
        assert err.message.startswith(want), (err.message, want)
        findings = err.data["withheld"]["findings"]
        assert {(f["field"], f["class"]) for f in findings} == {
            ("description", cls),
            ("inputSchema.properties.query.description", cls),
        }, findings
        assert err.data["withheld"]["kind"] == "tool" and err.data["withheld"]["name"] == f"hide_{cls}"
        perr = errors.get(("prompt", cls))
        assert perr is not None and perr.code == -32602, perr
        assert perr.message.startswith(f"prompt `hide_{cls}` is withheld: its description contains {NAMED[cls]}")
        # The message itself carries nothing hidden.
        assert all(ch.isprintable() for ch in err.message + perr.message), err.message


@pytest.mark.parametrize("mode", MODES)
def test_block_under_pins_holds_each_tool_as_a_hidden_text_change(srv, mode):
    s, _, (gw, key), _ = srv
    url = mcp_url(s, gw)
    tools, prompts, _ = lists(url, key, mode)
    assert [t.name for t in tools] == ["clean_tool"]
    assert [p.name for p in prompts] == ["clean_prompt"]

    async def refusals():
        errors = {}
        async with sdk_client(url, key, mode=mode) as c:
            for cls in SAMPLES:
                for what, call in (("tool", c.call_tool(f"hide_{cls}", {"query": "q"})),
                                   ("prompt", c.get_prompt(f"hide_{cls}"))):
                    try:
                        await call
                    except MCPError as e:
                        errors[(what, cls)] = e.error
        return errors

    errors = run(refusals())
    for cls in SAMPLES:
        err = errors.get(("tool", cls))
        assert err is not None, f"calling hide_{cls} on a block gateway did not fail"
        assert err.code == -32011, err
        assert err.message.startswith(f"Tool `hide_{cls}` awaits approval: its description contains {NAMED[cls]}"), err
        assert all(ch.isprintable() for ch in err.message), err.message
        assert err.data["tool"] == f"hide_{cls}" and err.data["reason"] == "hidden_text", err.data
        assert {f["class"] for f in err.data["findings"]} == {cls}, err.data
        perr = errors.get(("prompt", cls))
        assert perr is not None and perr.code == -32602, perr
        assert perr.message.startswith(f"prompt `hide_{cls}` is withheld: its description contains {NAMED[cls]}")

    changes = Api(s).ok("GET", f"/v1/gateways/{gw}/tool-changes")["data"]["tool_changes"]
    by_tool = {c["tool"]: c for c in changes}
    assert set(by_tool) == {f"hide_{cls}" for cls in SAMPLES}, sorted(by_tool)
    for cls in SAMPLES:
        c = by_tool[f"hide_{cls}"]
        assert c["kind"] == "hidden_text" and c["classes"] == [cls], c
        assert c["findings"][0].startswith(f"its description contains {NAMED[cls]}"), c


def test_an_approved_hidden_text_tool_is_served_stripped(srv):
    """The official Python SDK client does not see the tool, an admin approves the change, the
    client sees it (and can call it) without the hidden text."""
    s = srv[0]
    api = Api(s)
    gw, key = api.create_gateway(["hider"], configuration={"description_policy": "block"})
    url = mcp_url(s, gw)
    for mode in MODES:
        assert "hide_tag" not in {t.name for t in lists(url, key, mode)[0]}, mode
    changes = api.ok("GET", f"/v1/gateways/{gw}/tool-changes")["data"]["tool_changes"]
    (change,) = [c for c in changes if c["tool"] == "hide_tag"]
    d = api.ok("POST", f"/v1/gateways/{gw}/tool-changes/{change['id']}/approve")["data"]
    assert d["decision"] == "approved", d
    description, prop, _ = CLEAN["tag"]
    for mode in MODES:
        by_name = {t.name: t for t in lists(url, key, mode)[0]}
        assert set(by_name) == {"hide_tag", "clean_tool"}, (mode, sorted(by_name))
        assert by_name["hide_tag"].description == description, by_name["hide_tag"]
        assert by_name["hide_tag"].input_schema["properties"]["query"]["description"] == prop

        async def call():
            async with sdk_client(url, key, mode=mode) as c:
                return await c.call_tool("hide_tag", {"query": "q"})

        assert run(call()).content[0].text == "tag: q"


def test_the_finding_is_counted_and_logged(srv):
    s, (strip_gw, strip_key), (block_gw, block_key), _ = srv
    # Each gateway's catalogue is built (and its findings counted) on its first list.
    lists(mcp_url(s, strip_gw), strip_key, "legacy")
    lists(mcp_url(s, block_gw), block_key, "legacy")
    text = httpx2.get(s.metrics_url, timeout=10).text
    for cls in SAMPLES:
        for action in ("stripped", "withheld"):
            line = next(
                (l for l in text.splitlines() if l.startswith("toolgate_hidden_text_total{")
                 and f'class="{cls}"' in l and f'action="{action}"' in l),
                None,
            )
            assert line is not None and float(line.rsplit(" ", 1)[1]) > 0, (cls, action, line)
    log = s.stderr_text()
    warned = [l for l in log.splitlines() if "hidden text in an app's definition" in l]
    assert any(strip_gw in l and "hider" in l and "hide_tag" in l and "tag" in l for l in warned), warned[:3]
    assert any(block_gw in l and "withheld" in l for l in warned), warned[:3]


def test_the_policy_is_validated_and_defaults_to_strip(srv):
    s, (strip_gw, _), (block_gw, _), _ = srv
    api = Api(s)
    assert api.gateway(strip_gw)["configuration"]["description_policy"] == "strip"
    assert api.gateway(block_gw)["configuration"]["description_policy"] == "block"
    r = api.call("PATCH", f"/v1/gateways/{strip_gw}", {"configuration": {"description_policy": "hide"}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "VALIDATION_ERROR" and err["details"]["field"] == "configuration.description_policy", err


def run_ts_client(url: str, key: str) -> dict:
    script = NODE_DIR / "ts_hidden_text_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), url, key], cwd=NODE_DIR, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, f"ts_hidden_text_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_typescript_sdk_sees_the_same(srv):
    s, (strip_gw, strip_key), _, (block_gw, block_key) = srv
    stripped = run_ts_client(mcp_url(s, strip_gw), strip_key)
    by_name = {t["name"]: t for t in stripped["tools"]}
    for cls, (description, prop, prompt) in CLEAN.items():
        assert by_name[f"hide_{cls}"]["description"] == description, cls
        assert by_name[f"hide_{cls}"]["inputSchema"]["properties"]["query"]["description"] == prop, cls
        assert stripped["calls"][f"hide_{cls}"] == {"text": f"{cls}: q"}, stripped["calls"]
    assert {p["name"]: p["description"] for p in stripped["prompts"]}["hide_tag"] == CLEAN["tag"][2]
    blocked = run_ts_client(mcp_url(s, block_gw), block_key)
    assert [t["name"] for t in blocked["tools"]] == ["clean_tool"], blocked["tools"]
    assert [p["name"] for p in blocked["prompts"]] == ["clean_prompt"], blocked["prompts"]
    assert blocked["calls"]["clean_tool"] == {"text": "clean: q"}
    for cls in SAMPLES:
        call = blocked["calls"][f"hide_{cls}"]
        assert call["code"] == -32602, call
        assert f"tool `hide_{cls}` is withheld: its description contains {NAMED[cls]}" in call["message"], call
        assert call["data"]["withheld"]["findings"][0]["class"] == cls, call
