"""Per-tool limits (`tool_limits`, issue 61 part B), seen by the official Python SDK client (`mcp`)
in both protocol eras and by the TypeScript SDK client, against
`@modelcontextprotocol/server-everything` over Streamable HTTP; and shared by two instances on
one Redis.

A call past a limit is answered with a tool result marked `isError` whose text says the limit and
the wait and whose `_meta` carries `tool`, `limit`, `window` and `retry_after_ms`, or, with
`configuration.tool_limit_answer: error`, with JSON-RPC error -32010 carrying the same `data`.
`per: caller` gives each key its own bucket; a change of the limits applies to the next call; the
refusal is counted in `toolgate_tool_limited_total`, logged (-32010, 429), and `GET
/v1/rate-limit` shows each tool bucket of the caller. Bad entries are refused naming the member.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import Api, config, everything_server, http_app, mcp_url, node_bin, run, sdk_client
from test_redis_scaleout import call, instances, redis_config, redis_server

MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def everything(module_toolgate_factory):
    """(toolgate, its API) with server-everything as the only app `everything` (tools keep their
    names)."""
    with everything_server() as ev:
        srv = module_toolgate_factory(full_config=config(http_app("everything", ev.url)))
        yield srv, Api(srv)


def limited_gateway(api: Api, limits: list[dict], **configuration) -> tuple[str, str]:
    body = {"name": f"limited-{os.urandom(4).hex()}", "servers": ["everything"], "tool_limits": limits}
    if configuration:
        body["configuration"] = configuration
    data = api.ok("POST", "/v1/gateways", body, status=201)["data"]
    return data["id"], data["api_key"]


def account_key(api: Api, name: str) -> str:
    created = api.ok("POST", "/v1/api-keys", {"name": name, "scopes": ["gateways:read"]}, status=201)
    return created["data"]["key"]


async def echoes(url: str, key: str, n: int, mode: str) -> list:
    """`n` calls of `echo`: each result, or the JSON-RPC error the client raised."""
    out = []
    async with sdk_client(url, key, mode=mode) as c:
        for i in range(n):
            try:
                out.append(await c.call_tool("echo", {"message": f"m{i}"}))
            except MCPError as e:
                out.append(e.error)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_call_past_its_limit_is_a_tool_result_the_model_reads(everything, mode):
    srv, api = everything
    limits = [{"tool": "ech?", "per": "caller", "requests_per_minute": 2}]
    gw, key = limited_gateway(api, limits)
    assert api.gateway(gw)["tool_limits"] == limits, "GET shows the limits as saved"
    first, second, third = run(echoes(mcp_url(srv, gw), key, 3, mode))
    assert not first.is_error and first.content[0].text == "Echo: m0", first
    assert not second.is_error, second
    assert third.is_error, third
    text = third.content[0].text
    m = re.fullmatch(r"`echo` is limited to 2 calls a minute for you \(counted with every tool matching `ech\?`\); "
                     r"try again in (\d+) s", text)
    assert m and 1 <= int(m.group(1)) <= 30, text
    meta = third.meta
    assert meta["tool"] == "echo" and meta["limit"] == 2 and meta["window"] == "minute", meta
    assert 0 < meta["retry_after_ms"] <= 30_000 and meta["per"] == "caller", meta
    # Another tool is not counted.
    async def other():
        async with sdk_client(mcp_url(srv, gw), key, mode=mode) as c:
            return await c.call_tool("get-sum", {"a": 1, "b": 2})
    assert not run(other()).is_error
    # The refusal is in the log (-32010 under 429) and in the metric.
    entries = api.ok("GET", f"/v1/logs?gateway_id={gw}&limit=100")["data"]["logs"]
    refused = [e for e in entries if e["response"]["status"] == 429]
    assert len(refused) == 1 and refused[0]["response"]["data"]["code"] == -32010, entries
    assert "limited to 2 calls a minute" in json.dumps(refused[0]["response"]), refused[0]
    metrics = httpx2.get(srv.metrics_url, timeout=10).text
    assert f'toolgate_tool_limited_total{{gateway="{gw}",tool="echo"}} 1' in metrics, \
        [line for line in metrics.splitlines() if "tool_limited" in line]


@pytest.mark.parametrize("mode", MODES)
def test_the_gateway_may_ask_for_the_protocol_error_instead(everything, mode):
    srv, api = everything
    gw, key = limited_gateway(api, [{"tool": "echo", "per": "gateway", "requests_per_hour": 1}],
                              tool_limit_answer="error")
    assert api.gateway(gw)["configuration"]["tool_limit_answer"] == "error"
    ok, refused = run(echoes(mcp_url(srv, gw), key, 2, mode))
    assert not ok.is_error, ok
    assert refused.code == -32010, refused
    assert refused.message.startswith("`echo` is limited to 1 call an hour for everyone on this gateway; try again in")
    data = refused.data
    assert (data["tool"], data["limit"], data["window"], data["per"]) == ("echo", 1, "hour", "gateway"), data
    assert 3_000_000 < data["retry_after_ms"] <= 3_600_000, data


def test_per_caller_keys_count_apart_and_a_change_applies_to_the_next_call(everything):
    srv, api = everything
    gw, key = limited_gateway(api, [{"tool": "*", "per": "caller", "requests_per_minute": 1}])
    other = account_key(api, f"other-{os.urandom(3).hex()}")
    url = mcp_url(srv, gw)
    mine = run(echoes(url, key, 2, "legacy"))
    theirs = run(echoes(url, other, 2, "legacy"))
    assert [r.is_error for r in mine] == [False, True], mine
    assert [r.is_error for r in theirs] == [False, True], "another key has its own bucket"
    # The status API shows the caller's bucket of this gateway: spent.
    r = api.call("GET", "/v1/rate-limit", key=other)
    assert r.status_code == 200, r.text
    rows = [t for t in r.json()["data"]["tools"] if t["gateway"] == gw]
    assert rows == [{"gateway": gw, "tool": "*", "per": "caller", "window": "minute", "limit": 1, "remaining": 0,
                     "reset": rows[0]["reset"]}], rows
    # Raised: the next call goes through. Removed: no limit at all.
    api.ok("PATCH", f"/v1/gateways/{gw}", {"tool_limits": [{"tool": "*", "per": "caller", "requests_per_minute": 5}]})
    assert not run(echoes(url, key, 1, "legacy"))[0].is_error
    api.ok("PATCH", f"/v1/gateways/{gw}", {"tool_limits": []})
    assert [r.is_error for r in run(echoes(url, other, 3, "auto"))] == [False] * 3
    assert api.gateway(gw)["tool_limits"] == []


@pytest.mark.parametrize("entry,field", [
    ({"tool": "crm/*", "per": "caller", "requests_per_minute": 1}, "tool_limits[0].tool"),
    ({"tool": "*", "per": "team", "requests_per_minute": 1}, "tool_limits[0].per"),
    ({"tool": "*", "per": "caller"}, "tool_limits[0]"),
    ({"tool": "*", "per": "caller", "requests_per_day": 0}, "tool_limits[0].requests_per_day"),
    ({"tool": "*", "per": "caller", "concurrent": -1}, "tool_limits[0].concurrent"),
])
def test_a_bad_entry_is_refused_naming_the_member(everything, entry, field):
    _, api = everything
    r = api.call("POST", "/v1/gateways", {"name": f"bad-{os.urandom(3).hex()}", "servers": ["everything"],
                                          "tool_limits": [entry]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["details"]["field"] == field, r.text
    many = [{"tool": "*", "per": "caller", "requests_per_minute": 1}] * 101
    r = api.call("POST", "/v1/gateways", {"name": "many", "servers": ["everything"], "tool_limits": many})
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "tool_limits", r.text


def test_the_typescript_client_sees_the_limited_result(everything):
    srv, api = everything
    gw, key = limited_gateway(api, [{"tool": "echo", "per": "caller", "requests_per_minute": 1}])
    script = Path(__file__).resolve().parent.parent / "node" / "ts_limited_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), mcp_url(srv, gw), key], cwd=script.parent,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_limited_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["text"].startswith("`echo` is limited to 1 call a minute for you; try again in"), out
    assert out["meta"]["window"] == "minute" and out["meta"]["retry_after_ms"] > 0, out


def test_two_instances_on_redis_share_a_tool_count_exactly():
    """`rate_limits.distributed: exact`: four calls on each of two instances on one Redis, against a
    limit of 3 a minute per caller, admit exactly 3 (each instance counting alone would admit 3
    of its own 4); the other instance's status API reads the shared bucket: nothing remaining."""
    limits = "rate_limits:\n  distributed: exact\n  sync_ms: 10000\n"
    with redis_server() as redis:
        cfg = redis_config(redis.url, "toollimits", None) + limits
        with instances(cfg, 2) as (admin, (a, b)):
            body = {"name": "shared", "servers": ["time"],
                    "tool_limits": [{"tool": "get_current_time", "per": "caller", "requests_per_minute": 3}]}
            created = call(a, "POST", "/v1/gateways", admin, body)
            assert created.status_code == 201, created.text
            gw = created.json()["data"]["id"]
            made = call(a, "POST", "/v1/api-keys", admin, {"name": "caller", "scopes": ["gateways:read"]})
            assert made.status_code == 201, made.text
            key = made.json()["data"]["key"]

            async def calls(srv) -> list[bool]:
                async with sdk_client(mcp_url(srv, gw), key, mode="legacy") as c:
                    return [(await c.call_tool("get_current_time", {"format": "YYYY-MM-DD"})).is_error for _ in range(4)]

            on_a, on_b = run(calls(a)), run(calls(b))
            assert on_a == [False, False, False, True] and on_b == [True] * 4, (on_a, on_b)
            for srv in (a, b):
                r = call(srv, "GET", "/v1/rate-limit", key)
                assert r.status_code == 200, r.text
                rows = [t for t in r.json()["data"]["tools"] if t["gateway"] == gw]
                assert [(t["limit"], t["remaining"]) for t in rows] == [(3, 0)], rows
