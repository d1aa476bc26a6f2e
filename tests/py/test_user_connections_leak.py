"""Per-user connections proven not to leak (issue 63, item 5; docs/identity.md "Per-user
connections"), end to end with real parts: the npm `oidc-provider` as the app's authorization
server, the MCP server of `oauth_app.py` (official Python SDK) that introspects every bearer
token at the provider and writes down, for each call of its `record` tool, the caller the
arguments name and the subject of the token the call carried; two toolgate instances on one
real redis-server; the official Python SDK client in both eras (a 2025-11-25 session, and
2026-07-28 stateless calls) and the official TypeScript SDK client (2025-11-25).

The app is `connection_scope: user`. Alice and Bob connect it through toolgate's OAuth connect
flow (PKCE, the provider's sign-in pages driven as a browser would), each with their own API key,
the authorization started on one instance and finished on the other; the organisation's own
connection (the lists' view) is a third subject. Carol never connects.

What is measured: Alice and Bob call the same tool at once, hundreds of calls each, spread over
both instances and both eras: every call the app received carries the calling user's own
subject, never the other's nor the organisation's, each call reached it once (the counts match);
Carol is refused every time (-32006 with `data.url`; -32042 for a 2025-11-25 client that declared
URL-mode elicitation; a 2026-07-28 client that declared it is asked to open the connect page in
an input-required result, and refused with `data.url` when it declines) and the app never
receives a call for her. Then Dave, unconnected, calls with a 2026-07-28 client that declared
URL-mode elicitation: asked for the connect page, he connects, the client retries, and the call
reaches the app as Dave.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import _v2026_07_28 as v2026

from mcp_helpers import NODE_DIR, mcp_url, node_bin, run, sdk_client, stateless_post
from test_app_oauth import REDIRECT, oauth_app, provider, sign_in
from test_redis_scaleout import FEED_CATCH_UP, call, followed, instances, redis_config, redis_server
from toolgate_harness import ToolgateServer, random_key

# Calls of each client; each member has six clients (two eras of the Python SDK and the
# TypeScript SDK, on each of two instances): 6 x 40 = 240 calls per member.
CALLS = 40
CONNECT_PAGE = "http://localhost:8080/auth/console/apps?connect=secured"
PEOPLE = {"olga": "owner", "alice": "developer", "bob": "viewer", "carol": "developer", "dave": "developer"}


@dataclass
class World:
    servers: list[ToolgateServer]
    issuer: str
    keys: dict[str, str]
    gw: str
    calls_log: Path

    def url(self, i: int) -> str:
        return mcp_url(self.servers[i], self.gw)

    def recorded(self) -> list[dict]:
        """Every `record` call the app received."""
        if not self.calls_log.exists():
            return []
        return [json.loads(line) for line in self.calls_log.read_text().splitlines() if line.strip()]


def people(keys: dict[str, str]) -> str:
    """The organisation, its members and each member's own API key."""
    users = "".join(f"  - {{ id: usr_{u}, email: {u}@leak.test, name: {u}, role: {role}, organization: org_leak }}\n"
                    for u, role in PEOPLE.items())
    api_keys = "".join(f"  - {{ id: key_{u}, name: key_{u}, user: usr_{u}, "
                       f"sha256: {hashlib.sha256(keys[u].encode()).hexdigest()}, scopes: [\"*\"] }}\n" for u in PEOPLE)
    return ("organizations:\n  - { id: org_leak, name: Leak, tier: enterprise }\n"
            f"users:\n{users}api_keys:\n{api_keys}")


def per_user_app(issuer: str, app_url: str) -> str:
    return (
        "  - id: secured\n    name: Secured\n    category: testing\n    auth_types: [oauth]\n"
        f"    url: {app_url}\n    connection_scope: user\n"
        f"    oauth:\n      authorize_url: {issuer}/auth\n      token_url: {issuer}/token\n"
        "      client_id: toolgate-app\n      client_secret_env: TG_TEST_APP_SECRET\n      scopes: [openid]\n"
    )


def connect(start: ToolgateServer, finish: ToolgateServer, key: str, issuer: str, login: str, query: str = "") -> None:
    """Connects `secured` through toolgate's OAuth flow as the holder of `key` (the provider's
    `login` signs in): started on `start`, finished on `finish`, once it has followed the
    pending authorization through Redis (before, it finds nothing pending: 404)."""
    started = call(start, "POST", f"/v1/apps/secured/connect{query}", key, {"auth_type": "oauth", "redirect_uri": REDIRECT})
    assert started.status_code == 200, started.text
    back = sign_in(started.json()["data"]["authorization_url"], issuer, login=login)
    body = {"state": back["state"], "code": back["code"]}
    deadline = time.monotonic() + FEED_CATCH_UP
    while (r := call(finish, "POST", f"/v1/apps/secured/connect/callback{query}", key, body)).status_code == 404:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.05)
    assert r.status_code == 200 and r.json()["data"]["status"] == "connected", r.text


def own_status(srv: ToolgateServer, key: str) -> str:
    return call(srv, "GET", "/v1/apps/secured", key).json()["data"]["own_connection_status"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("leak")
    keys = {u: random_key() for u in PEOPLE}
    with contextlib.ExitStack() as stack:
        issuer, secret = stack.enter_context(provider(tmp))
        app_url = stack.enter_context(oauth_app(tmp, issuer, secret))
        redis = stack.enter_context(redis_server())
        cfg = redis_config(redis.url, f"tg{secrets.token_hex(3)}", apps=per_user_app(issuer, app_url)) + people(keys)
        _, servers = stack.enter_context(instances(cfg, 2, env={"TG_TEST_APP_SECRET": secret}))
        a, b = servers
        # The organisation's own connection, the catalogue's view, is a subject of its own.
        connect(a, a, keys["olga"], issuer, "org-robot", "?organization=true")
        connect(a, b, keys["alice"], issuer, "alice")
        connect(b, a, keys["bob"], issuer, "bob")
        for srv in servers:
            for who in ("alice", "bob"):
                followed(lambda: own_status(srv, keys[who]) == "connected")
        assert own_status(a, keys["carol"]) == "none"
        created = call(a, "POST", "/v1/gateways", keys["olga"], {"name": "leak", "servers": ["secured"]})
        assert created.status_code == 201, created.text
        gw = created.json()["data"]["id"]
        followed(lambda: call(b, "GET", f"/v1/gateways/{gw}", keys["olga"]).status_code == 200)
        yield World(servers, issuer, keys, gw, tmp / "app-calls.jsonl")


async def sdk_calls(url: str, key: str, caller: str, tag: str, mode: str) -> list[tuple[str, str]]:
    """`CALLS` calls of `record` by one Python SDK client, four at a time: (tag, text) each."""
    async with sdk_client(url, key, mode=mode) as c:
        async def one(t: str) -> tuple[str, str]:
            r = await c.call_tool("record", {"caller": caller, "tag": t})
            assert not r.is_error, r
            return t, r.content[0].text

        out = []
        for i in range(0, CALLS, 4):
            out += await asyncio.gather(*(one(f"{tag}-{j}") for j in range(i, min(i + 4, CALLS))))
        return out


async def sdk_refused(url: str, key: str, mode: str, declare_url: bool, asked: list[str]) -> list:
    """`CALLS // 4` calls of `record` by Carol, each refused: the error of each. With
    `declare_url` the client takes URL-mode elicitations (its callback declines, noting the URL)."""
    async def decline(context, params) -> types.ElicitResult:
        asked.append(f"{params.mode} {params.url}")
        return types.ElicitResult(action="decline")

    extra = {"elicitation_callback": decline} if declare_url else {}
    errors = []
    async with sdk_client(url, key, mode=mode, **extra) as c:
        for i in range(CALLS // 4):
            try:
                await c.call_tool("record", {"caller": "carol", "tag": f"carol-{mode}-{declare_url}-{i}"})
                errors.append(None)
            except MCPError as e:
                errors.append(e.error)
    return errors


async def ts_calls(url: str, key: str, caller: str, tag: str) -> list[dict]:
    """`CALLS` calls of `record` by the TypeScript SDK client (`tests/node/ts_caller_client.mjs`)."""
    p = await asyncio.create_subprocess_exec(
        str(node_bin()), str(NODE_DIR / "ts_caller_client.mjs"), url, key, caller, tag, str(CALLS),
        cwd=NODE_DIR, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), 300)
    assert p.returncode == 0, f"ts_caller_client.mjs exited {p.returncode}: {out.decode()} {err.decode()}"
    return json.loads(out.decode().strip().splitlines()[-1])["calls"]


def test_two_members_calls_at_once_each_reach_the_app_as_themselves_and_an_unconnected_one_never(world):
    async def everyone():
        answered, refused, asked = {}, {}, []
        jobs, names = [], []
        for i in range(2):
            url = world.url(i)
            for who in ("alice", "bob"):
                for mode in ("legacy", "auto"):
                    names.append(("answered", who, f"{who}-{mode}-{i}"))
                    jobs.append(sdk_calls(url, world.keys[who], who, f"{who}-{mode}-{i}", mode))
                names.append(("ts", who, f"{who}-ts-{i}"))
                jobs.append(ts_calls(url, world.keys[who], who, f"{who}-ts-{i}"))
            for mode in ("legacy", "auto"):
                for declare_url in (False, True):
                    names.append(("refused", mode, declare_url))
                    jobs.append(sdk_refused(url, world.keys["carol"], mode, declare_url, asked))
            names.append(("ts", "carol", f"carol-ts-{i}"))
            jobs.append(ts_calls(url, world.keys["carol"], "carol", f"carol-ts-{i}"))
        for name, result in zip(names, await asyncio.gather(*jobs)):
            if name[0] == "refused":
                refused.setdefault(name[1:], []).extend(result)
            else:
                answered[name] = result
        return answered, refused, asked

    answered, refused, asked = run(everyone())

    # Every answer Alice and Bob got is their own call, answered as themselves.
    sent = collections.Counter()
    for (kind, who, tag), calls in answered.items():
        if who == "carol":
            continue
        for call_ in calls:
            if kind == "ts":
                assert "code" not in call_ and not call_["isError"], call_
                t, text = call_["tag"], call_["text"]
            else:
                t, text = call_
            assert text == f"{t} as {who}", (who, t, text)
            sent[t] += 1
    assert len(sent) == 2 * 2 * 3 * CALLS and set(sent.values()) == {1}, "every call was answered once"

    # What the app received: each call once, each with its own caller's subject (checked at the
    # provider by the app), never the other member's, nor the organisation's, nor Carol's.
    recorded = world.recorded()
    by_subject = collections.Counter(r["subject"] for r in recorded)
    assert by_subject == {"alice": 2 * 3 * CALLS, "bob": 2 * 3 * CALLS}, by_subject
    for r in recorded:
        assert r["subject"] == r["caller"], f"a call of {r['caller']} reached the app as {r['subject']}: {r}"
    assert collections.Counter(r["tag"] for r in recorded) == sent, "the app received each call once, no other"

    # Carol is refused every time, told where to connect, and never reaches the app.
    for (mode, declare_url), errors in refused.items():
        assert len(errors) == 2 * (CALLS // 4), (mode, declare_url)
        for e in errors:
            assert e is not None, f"a call of Carol's was answered ({mode}, url-mode: {declare_url})"
            if mode == "legacy" and declare_url:
                assert e.code == -32042, e
                (elicitation,) = e.data["elicitations"]
                assert elicitation["mode"] == "url", e
                # The page with the elicitation's id, by which it checks the person is Carol.
                assert elicitation["url"] == f"{CONNECT_PAGE}&elicitation={elicitation['elicitationId']}", e
            else:
                # A 2026-07-28 client that declared URL mode was asked first, and declined.
                assert e.code == -32006 and e.data["url"] == CONNECT_PAGE, e
                assert CONNECT_PAGE in e.message, e
    assert asked == [f"url {CONNECT_PAGE}"] * (2 * (CALLS // 4)), asked
    for i in range(2):
        for c in answered[("ts", "carol", f"carol-ts-{i}")]:
            assert c.get("code") == -32006 and c.get("url") == CONNECT_PAGE, c
    assert not [r for r in recorded if "carol" in (r["caller"], r["subject"])], "the app never hears of Carol"


def test_a_stateless_client_is_asked_for_the_connect_page_and_its_retry_goes_through_once_connected(world):
    """2026-07-28 has no -32042: a client that declared URL-mode elicitation gets an
    input-required result asking for the connect page (checked against the revision's schema);
    once the person has connected there, the client's retry reaches the app as them."""
    url, key = world.url(0), world.keys["dave"]
    caps = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}}
    params = {"name": "record", "arguments": {"caller": "dave", "tag": "dave-raw"}, "_meta": caps}
    r = stateless_post(url, key, "tools/call", params)
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    typed = v2026.InputRequiredResult.model_validate(result)
    assert typed.result_type == "input_required" and typed.request_state is None, result
    ((name, ask),) = typed.input_requests.items()
    assert isinstance(ask, v2026.ElicitRequest) and isinstance(ask.params, v2026.ElicitRequestURLParams), ask
    assert (name, ask.params.url) == ("connect_secured", CONNECT_PAGE), result
    assert "secured" in ask.params.message, result
    # Declined: refused with where to connect, not asked again.
    params["inputResponses"] = {name: {"action": "decline"}}
    declined = stateless_post(url, key, "tools/call", params).json()
    assert declined["error"]["code"] == -32006 and declined["error"]["data"]["url"] == CONNECT_PAGE, declined

    # The official SDK client: its callback is where the person opens the page and connects.
    asked = []

    async def open_the_page(context, p) -> types.ElicitResult:
        asked.append((p.mode, p.url))
        await asyncio.to_thread(connect, world.servers[0], world.servers[0], key, world.issuer, "dave")
        return types.ElicitResult(action="accept")

    async def go():
        async with sdk_client(url, key, mode="auto", elicitation_callback=open_the_page) as c:
            return await c.call_tool("record", {"caller": "dave", "tag": "dave-elicited"})

    done = run(go())
    assert asked == [("url", CONNECT_PAGE)], asked
    assert not done.is_error and done.content[0].text == "dave-elicited as dave", done
    dave = [r for r in world.recorded() if r["caller"] == "dave"]
    assert dave == [{"caller": "dave", "tag": "dave-elicited", "subject": "dave"}], dave
