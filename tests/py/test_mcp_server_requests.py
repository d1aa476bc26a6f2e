"""Server->client requests through the gateway: server-everything's sampling and elicitation
tools, called by the official Python SDK, whose callbacks answer what the app asked.

With the app connected by each user (`connection_scope: user`), a call goes on the caller's own
upstream session, and the app's request is answered on that session, never on the
organisation's (where the app, waiting on the caller's, would never see it).

toolgate declares `sampling` and `elicitation` to its apps (so server-everything offers those
tools at all) and relays each request to the calling client on the call's stream; a client that
did not declare the capability, or that takes JSON answers only, gets the request refused on its
behalf, so the app fails the call at once instead of waiting for an answer that cannot come.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time

import mcp_types as types
import pytest

from mcp_helpers import (
    NODE_DIR,
    TIME_APP,
    Api,
    McpHttp,
    config,
    everything_server,
    http_app,
    mcp_url,
    node_bin,
    response_message,
    run,
    sdk_client,
)
from toolgate_harness import random_key


@pytest.fixture(scope="module")
def gateway(module_toolgate_factory):
    with everything_server() as ev:
        srv = module_toolgate_factory(full_config=config(TIME_APP + http_app("everything", ev.url)))
        gw_id, key = Api(srv).create_gateway(["time", "everything"])
        yield mcp_url(srv, gw_id), key


def test_sampling_request_reaches_the_sdk_client_and_its_answer_the_app(gateway):
    url, key = gateway
    asked: list[str] = []

    async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled by pytest"),
            model="pytest-model",
            stop_reason="endTurn",
        )

    async def go():
        async with sdk_client(url, key, sampling_callback=sampling) as c:
            return await c.call_tool("everything__trigger-sampling-request", {"prompt": "what is toolgate?"})

    result = run(go())
    assert not result.is_error, result
    assert len(asked) == 1 and "what is toolgate?" in asked[0], asked
    text = result.content[0].text
    assert "sampled by pytest" in text and "pytest-model" in text, text


def test_sampling_request_reaches_the_typescript_sdk_client(gateway):
    url, key = gateway
    script = NODE_DIR / "ts_sampling_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), url, key, "everything__trigger-sampling-request"],
                       cwd=NODE_DIR, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_sampling_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(out["asked"]) == 1 and "hello from TypeScript" in out["asked"][0], out
    result = out["result"]
    assert not result.get("isError"), result
    assert "sampled by the TypeScript SDK" in result["content"][0]["text"], result


def test_elicitation_request_reaches_the_sdk_client_and_its_answer_the_app(gateway):
    url, key = gateway

    async def elicitation(context, params) -> types.ElicitResult:
        assert "fields" in params.message, params
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

    async def go():
        async with sdk_client(url, key, elicitation_callback=elicitation) as c:
            return await c.call_tool("everything__trigger-elicitation-request", {})

    result = run(go())
    assert not result.is_error, result
    texts = "\n".join(c.text for c in result.content)
    assert "- Name: Ada Lovelace" in texts and "- Agreed to terms: true" in texts, texts


def test_request_to_a_client_without_the_capability_is_refused_on_its_behalf(gateway):
    """The raw client declares no capabilities: the app's sampling request is answered by the
    gateway with an error naming the capability, and the call ends at once."""
    url, key = gateway
    c = McpHttp(url, key)
    c.initialize()
    started = time.monotonic()
    r = c.request("tools/call", {"name": "everything__trigger-sampling-request", "arguments": {"prompt": "x"}})
    msg = response_message(r)
    assert time.monotonic() - started < 10, "the app waited for an answer that could not come"
    result = msg["result"]
    assert result.get("isError") is True, msg
    assert "did not declare the sampling capability" in result["content"][0]["text"], msg


def test_request_to_a_client_taking_json_only_is_refused_on_its_behalf(gateway):
    url, key = gateway
    c = McpHttp(url, key)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": c.version, "capabilities": {"sampling": {}}, "clientInfo": {"name": "json-only", "version": "1"}}}
    h = c.headers()
    h.pop("Mcp-Session-Id", None)
    h.pop("MCP-Protocol-Version", None)
    r = c.post(body, headers=h)
    assert r.status_code == 200, r.text
    c.session_id = r.headers["mcp-session-id"]
    assert c.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    r = c.request("tools/call", {"name": "everything__trigger-sampling-request", "arguments": {"prompt": "x"}},
                  headers=c.headers(Accept="application/json"))
    assert r.headers["content-type"].startswith("application/json"), r.headers
    result = r.json()["result"]
    assert result.get("isError") is True, result
    assert "takes JSON answers only" in result["content"][0]["text"], result


@pytest.fixture(scope="module")
def per_user_gateway(module_toolgate_factory):
    """server-everything connected by each user: the Owner connects the organisation's view (the
    lists), Alice her own; yields (endpoint URL, Alice's key). The app's total timeout is short,
    so an answer that went astray fails the call in seconds."""
    keys = {"dana": random_key(), "alice": random_key()}
    digest = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    people = (
        "organizations:\n  - {id: org_su, name: Server requests, tier: enterprise}\n"
        "users:\n"
        "  - {id: usr_su_dana, email: dana@su.test, name: Dana, role: owner, organization: org_su}\n"
        "  - {id: usr_su_alice, email: alice@su.test, name: Alice, role: developer, organization: org_su}\n"
        "api_keys:\n"
        f"  - {{id: key_su_dana, name: dana, user: usr_su_dana, sha256: {digest(keys['dana'])}, scopes: ['*']}}\n"
        f"  - {{id: key_su_alice, name: alice, user: usr_su_alice, sha256: {digest(keys['alice'])}, scopes: ['*']}}\n"
    )
    with everything_server() as ev:
        app = http_app("everything", ev.url, timeouts="total_ms: 15000") + (
            "    auth_types: [api_key]\n    connection_scope: user\n")
        srv = module_toolgate_factory(full_config=config(app) + people)
        api = Api(srv)
        for who, query in (("dana", "?organization=true"), ("alice", "")):
            body = {"auth_type": "api_key", "credentials": {"api_key": f"{who}-secret"}}
            r = api.call("POST", f"/v1/apps/everything/connect{query}", body, key=keys[who])
            assert r.status_code == 200, r.text
        made = api.call("POST", "/v1/gateways", {"name": "per-user", "servers": ["everything"]}, key=keys["dana"])
        assert made.status_code == 201, made.text
        yield mcp_url(srv, made.json()["data"]["id"]), keys["alice"]


def test_a_per_user_apps_elicitation_is_answered_on_the_callers_own_upstream(per_user_gateway):
    url, key = per_user_gateway

    async def elicitation(context, params) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Alice Own", "check": True})

    async def go():
        async with sdk_client(url, key, elicitation_callback=elicitation) as c:
            return await c.call_tool("trigger-elicitation-request", {})

    result = run(go())
    texts = "\n".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, texts
    assert "- Name: Alice Own" in texts, texts


def test_a_per_user_apps_sampling_request_is_answered_on_the_callers_own_upstream(per_user_gateway):
    url, key = per_user_gateway

    async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="alice sampled"),
                                         model="alice-model", stop_reason="endTurn")

    async def go():
        async with sdk_client(url, key, sampling_callback=sampling) as c:
            return await c.call_tool("trigger-sampling-request", {"prompt": "whose upstream?"})

    result = run(go())
    texts = "\n".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, texts
    assert "alice sampled" in texts, texts
