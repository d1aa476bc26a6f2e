"""Token exchange (RFC 8693, an app's `oauth.token_exchange`), end to end with real parts: the npm
`oidc-provider` as the authorization server of both the callers and the app, and an MCP server on
the official Python SDK (`oauth_app.py`) that introspects every bearer token at the provider and
answers `whoami` with the token's subject.

oidc-provider has no token exchange of its own: `oauth_provider.mjs` registers the grant
(`registerGrantType`) following RFC 8693 section 2 (the subject token must be a live JWT or access
token of the provider, `resource` one it serves, else `invalid_target`; the issued token's
audience is the resource and its subject the subject token's). toolgate is the client side
tested here.

The callers sign in at the provider (a code grant with PKCE for the gateway's resource) and call
an OAuth gateway (`gateway_oauth` trusts the provider) with the JWT they got; toolgate exchanges
it for a token of the app. The organisation's own connection (an API key: a client-credentials
token of the provider) serves the catalogue's lists only.

What is measured: two users' concurrent calls (hundreds) each reach the app as themselves; the
provider is asked once per caller (the cache is used, never across callers); an API key and a
gateway key are refused, saying they cannot be exchanged; a provider's refusal (`invalid_target`)
is a JSON-RPC error naming it, counted in `toolgate_token_exchanges_total`; an unreachable token
endpoint is -32004; the caller's token is never in toolgate's log.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import httpx2

from mcp_helpers import Api, McpHttp, config, on_port, response_message, start_on_a_chosen_port
from test_app_oauth import REDIRECT, oauth_app, provider, sign_in

CALLS_PER_USER = 150


@contextlib.contextmanager
def world(tmp: Path):
    """The provider (with token exchange), the app, and toolgate with three exchanging apps on
    it: `secured` (the app's URL as the resource), `elsewhere` (a resource the provider does not
    serve) and `unreachable` (a token endpoint where nothing listens). Yields (toolgate, issuer,
    client secret, app URL)."""
    with provider(tmp, token_exchange=True) as (issuer, secret), oauth_app(tmp, issuer, secret) as app_url:
        apps = ""
        for app_id, exchange in (("secured", "{}"), ("elsewhere", "{resource: 'http://elsewhere.example/mcp'}"),
                                 ("unreachable", "{token_endpoint: 'http://127.0.0.1:9/token'}")):
            apps += (
                f"  - id: {app_id}\n    name: {app_id}\n    category: testing\n    auth_types: [api_key]\n"
                f"    url: {app_url}\n    oauth:\n      client_id: toolgate-app\n"
                f"      client_secret_env: TG_TEST_APP_SECRET\n      token_exchange: {exchange}\n"
            )
        trust = f"gateway_oauth:\n  issuer: {issuer}\n  scopes: [mcp]\n"
        srv = start_on_a_chosen_port(lambda port: on_port(config(apps), port) + trust,
                                     env={"TG_TEST_APP_SECRET": secret})
        try:
            yield srv, issuer, secret, app_url
        finally:
            srv.stop()
            srv.tmp.cleanup()


def connect_for_lists(srv, issuer: str, secret: str, app_url: str, app_id: str) -> None:
    """The organisation's connection of `app_id`: a client-credentials token for the app."""
    r = httpx2.post(f"{issuer}/token", data={"grant_type": "client_credentials", "client_id": "toolgate-app",
                                             "client_secret": secret, "resource": app_url}, timeout=10)
    assert r.status_code == 200, r.text
    body = {"auth_type": "api_key", "credentials": {"api_key": r.json()["access_token"]}}
    Api(srv).ok("POST", f"/v1/apps/{app_id}/connect", body)


def caller_token(issuer: str, resource: str, login: str) -> str:
    """A JWT access token of `login` for the gateway `resource`: a public client registered at
    the provider, signed in with the code grant and PKCE (RFC 7636) for that resource (RFC 8707)."""
    reg = httpx2.post(f"{issuer}/reg", json={
        "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "grant_types": ["authorization_code"],
        "response_types": ["code"], "client_name": f"caller {login}"}, timeout=10)
    assert reg.status_code == 201, reg.text
    client_id = reg.json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = urlencode({"client_id": client_id, "response_type": "code", "redirect_uri": REDIRECT, "scope": "mcp",
                       "code_challenge": challenge, "code_challenge_method": "S256", "resource": resource,
                       "state": secrets.token_urlsafe(8)})
    back = sign_in(f"{issuer}/auth?{query}", issuer, login=login)
    r = httpx2.post(f"{issuer}/token", data={"grant_type": "authorization_code", "code": back["code"],
                                             "redirect_uri": REDIRECT, "code_verifier": verifier,
                                             "client_id": client_id, "resource": resource}, timeout=10)
    assert r.status_code == 200, r.text
    token = r.json()["access_token"]
    assert token.count(".") == 2, "a JWT access token (RFC 9068) for the gateway"
    return token


def session(url: str, token: str | None = None, key: str | None = None) -> McpHttp:
    c = McpHttp(url, key)
    if token:
        c.client.headers["Authorization"] = f"Bearer {token}"
    r = c.initialize()
    assert r.status_code == 200, r.text
    return c


IDS = itertools.count(1000)
IDS_LOCK = threading.Lock()


def call(c: McpHttp, tool: str) -> dict:
    """One `tools/call` of `tool` (no arguments), with an id of its own across threads."""
    with IDS_LOCK:
        rid = next(IDS)
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    answer = response_message(c.post(body))
    assert answer["id"] == rid, answer
    return answer


def whoami(c: McpHttp, app_id: str) -> str:
    tools = [t["name"] for t in c.rpc("tools/list")["result"]["tools"]]
    names = [n for n in tools if n.endswith("whoami") and (n == "whoami" or n.startswith(app_id))]
    assert len(names) == 1, tools
    return names[0]


def exchanges(issuer: str) -> dict:
    return httpx2.get(f"{issuer}/test/exchanges", timeout=10).json()


def metric(srv, app_id: str, outcome: str) -> int:
    wanted = f'toolgate_token_exchanges_total{{app="{app_id}",outcome="{outcome}"}} '
    lines = [ln for ln in httpx2.get(srv.metrics_url, timeout=10).text.splitlines() if ln.startswith(wanted)]
    return int(float(lines[0].split()[-1])) if lines else 0


def test_each_caller_reaches_the_app_as_themselves_through_one_exchange_each(tmp_path):
    with world(tmp_path) as (srv, issuer, secret, app_url):
        for app_id in ("secured", "elsewhere"):
            connect_for_lists(srv, issuer, secret, app_url, app_id)
        api = Api(srv)
        gw, gateway_key = api.create_gateway(["secured", "elsewhere"], configuration={"auth": "oauth"})
        url = f"{srv.base_url}/gateway/{gw}/mcp"
        tokens = {login: caller_token(issuer, url, login) for login in ("alice", "bob")}
        sessions = {login: session(url, token) for login, token in tokens.items()}
        tool = whoami(sessions["alice"], "secured")

        # Two users' calls, interleaved and concurrent: each reaches the app as its own subject.
        jobs = [login for _ in range(CALLS_PER_USER) for login in ("alice", "bob")]
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda login: (login, call(sessions[login], tool)), jobs))
        for login, answer in answers:
            assert "result" in answer and not answer["result"].get("isError"), answer
            assert answer["result"]["content"][0]["text"] == f"subject: {login}", (login, answer)

        # The provider was asked once per caller: the cache serves the rest, and concurrent
        # calls of one caller waited for one exchange.
        assert exchanges(issuer) == {"issued": 2, "refused": 0}, exchanges(issuer)
        assert metric(srv, "secured", "issued") == 2

        # An API key and a gateway key name no token to exchange: refused, saying so and what to
        # use; the provider is not asked.
        for key, what in ((srv.admin_key, "an API key"), (gateway_key, "a gateway key")):
            answer = call(session(url, key=key), tool)
            error = answer.get("error")
            assert error and error["code"] == -32006, answer
            assert f"{what} cannot be exchanged" in error["message"], error
            assert "sign in with OAuth" in error["message"], error
            assert error["data"] == {"app": "secured", "reason": "credential_not_exchangeable"}, error
        assert metric(srv, "secured", "unexchangeable") == 2
        assert exchanges(issuer)["issued"] == 2

        # A refused exchange: the provider serves no `http://elsewhere.example/mcp`.
        refused = call(sessions["alice"], whoami(sessions["alice"], "elsewhere"))
        error = refused.get("error")
        assert error and error["code"] == -32006, refused
        assert "refused to exchange the caller's token: invalid_target" in error["message"], error
        assert error["data"]["error"] == "invalid_target" and error["data"]["app"] == "elsewhere", error
        assert exchanges(issuer)["refused"] == 1
        assert metric(srv, "elsewhere", "refused") == 1

        # The refusal is logged (the process log is written in batches), the callers' tokens never.
        deadline = time.monotonic() + 5
        while "could not be exchanged" not in srv.stderr_text():
            assert time.monotonic() < deadline, "the refusal is not logged"
            time.sleep(0.05)
        logs = srv.stderr_text()
        assert "invalid_target" in logs
        for token in tokens.values():
            assert token not in logs and token.split(".")[2] not in logs


def test_an_unreachable_token_endpoint_fails_the_call_with_32004_and_is_counted(tmp_path):
    """Nothing listens where `unreachable` exchanges: the call fails with -32004 naming the app
    and the cause, the organisation's connection is never used instead, and the failure is
    counted (`failed`) and logged without the caller's token."""
    with world(tmp_path) as (srv, issuer, secret, app_url):
        connect_for_lists(srv, issuer, secret, app_url, "unreachable")
        gw, _ = Api(srv).create_gateway(["unreachable"], configuration={"auth": "oauth"})
        url = f"{srv.base_url}/gateway/{gw}/mcp"
        token = caller_token(issuer, url, "dave")
        c = session(url, token)
        answer = call(c, whoami(c, "unreachable"))
        error = answer.get("error")
        assert error and error["code"] == -32004, answer
        assert "`unreachable`: the caller's token could not be exchanged" in error["message"], error
        assert "cannot be reached" in error["message"], error
        assert error["data"] == {"app": "unreachable"}, error
        assert metric(srv, "unreachable", "failed") == 1
        assert exchanges(issuer) == {"issued": 0, "refused": 0}, "the provider was never asked"
        deadline = time.monotonic() + 5
        while "could not be exchanged" not in srv.stderr_text():
            assert time.monotonic() < deadline, "the failure is not logged"
            time.sleep(0.05)
        assert token not in srv.stderr_text() and token.split(".")[2] not in srv.stderr_text()


def test_an_exchanged_token_is_renewed_when_due_and_an_expired_subject_token_is_refused(tmp_path):
    """The provider's tokens live `ttl` s: an exchanged token is used for half its life, then
    exchanged again; once the caller's own JWT has expired (the gateway's leeway still takes it),
    the provider refuses it with `invalid_grant`, which the caller is told. The client
    authenticates with HTTP Basic here (`client_auth: client_secret_basic`)."""
    ttl = 4
    with provider(tmp_path, token_ttl=ttl, token_exchange=True) as (issuer, secret), \
            oauth_app(tmp_path, issuer, secret) as app_url:
        apps = (
            "  - id: secured\n    name: secured\n    category: testing\n    auth_types: [api_key]\n"
            f"    url: {app_url}\n    oauth:\n      client_id: toolgate-basic\n"
            "      client_secret_env: TG_TEST_APP_SECRET\n      token_exchange: {client_auth: client_secret_basic}\n"
        )
        trust = f"gateway_oauth:\n  issuer: {issuer}\n  scopes: [mcp]\n  leeway_secs: 60\n"
        srv = start_on_a_chosen_port(lambda port: on_port(config(apps), port) + trust,
                                     env={"TG_TEST_APP_SECRET": secret})
        try:
            connect_for_lists(srv, issuer, secret, app_url, "secured")
            gw, _ = Api(srv).create_gateway(["secured"], configuration={"auth": "oauth"})
            url = f"{srv.base_url}/gateway/{gw}/mcp"
            token = caller_token(issuer, url, "carol")
            c = session(url, token)
            tool = whoami(c, "secured")
            issued_at = time.monotonic()
            assert call(c, tool)["result"]["content"][0]["text"] == "subject: carol"
            assert call(c, tool)["result"]["content"][0]["text"] == "subject: carol"
            assert exchanges(issuer) == {"issued": 1, "refused": 0}, "the second call used the cached token"

            # Half the exchanged token's life later it is due: exchanged again, still as carol.
            time.sleep(max(0.0, issued_at + ttl / 2 + 0.2 - time.monotonic()))
            assert call(c, tool)["result"]["content"][0]["text"] == "subject: carol"
            renewed_at = time.monotonic()
            assert exchanges(issuer) == {"issued": 2, "refused": 0}

            # Past the caller's own token's life (whole seconds: up to one early) and the renewed
            # token's due time, the provider is asked again and refuses to exchange it.
            time.sleep(max(0.0, claims_exp(token) + 1 - time.time(), renewed_at + ttl / 2 + 0.2 - time.monotonic()))
            answer = call(c, tool)
            assert answer.get("error", {}).get("data", {}).get("error") == "invalid_grant", answer
            assert "refused to exchange the caller's token: invalid_grant" in answer["error"]["message"], answer
            assert metric(srv, "secured", "refused") == 1 and metric(srv, "secured", "issued") == 2
        finally:
            srv.stop()
            srv.tmp.cleanup()


def claims_exp(token: str) -> float:
    payload = token.split(".")[1]
    return float(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"])
