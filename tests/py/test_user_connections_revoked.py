"""The end of users' own connections of an app (`connection_scope: user`, docs/identity.md
"Per-user connections"), end to end with real parts: the npm `oidc-provider` as the app's
authorization server (revocation, RFC 7009, and introspection, RFC 7662, enabled) and an MCP
server on the official Python SDK that introspects every bearer token (`oauth_app.py`).

Each member connects the app with OAuth as themself and calls it once; then one is removed from
the team, one changes their password, one removes their own connection. What is measured: the
provider says each of their tokens is no longer active (introspection's `active: false`), with the
revocation endpoint configured (`oauth.revocation_url`) and discovered (the provider's metadata's
`revocation_endpoint`); the organisation's own connection, which nobody ended, stays active.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path

import httpx2
import pytest

from mcp_helpers import Api, McpHttp, ToolgateServer, config, mcp_url
from test_app_oauth import REDIRECT, oauth_app, provider, sign_in, text_of, tool_name
from toolgate_harness import random_key

MEMBERS = {"dana": "owner", "alice": "developer", "bob": "viewer", "carol": "developer"}


@contextlib.contextmanager
def world(tmp: Path, discover: bool):
    """The provider, the app, and toolgate with `secured` connected by each user: yields
    (toolgate, issuer, client secret, app URL, member keys by name)."""
    keys = {name: random_key() for name in MEMBERS}
    digest = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    with provider(tmp) as (issuer, secret), oauth_app(tmp, issuer, secret) as app_url:
        endpoints = "" if discover else (
            f"      authorize_url: {issuer}/auth\n      token_url: {issuer}/token\n"
            f"      revocation_url: {issuer}/token/revocation\n")
        app = (
            "  - id: secured\n    name: Secured\n    category: testing\n    auth_types: [oauth]\n"
            f"    url: {app_url}\n    connection_scope: user\n"
            f"    oauth:\n{endpoints}"
            "      client_id: toolgate-app\n      client_secret_env: TG_TEST_APP_SECRET\n      scopes: [openid]\n"
        )
        people = "organizations:\n  - {id: org_rv, name: Revoked, tier: enterprise}\nusers:\n" + "".join(
            f"  - {{id: usr_{n}, email: {n}@rv.test, name: {n}, role: {r}, organization: org_rv}}\n"
            for n, r in MEMBERS.items()) + "api_keys:\n" + "".join(
            f"  - {{id: key_{n}, name: {n}, user: usr_{n}, sha256: {digest(keys[n])}, scopes: ['*']}}\n"
            for n in MEMBERS)
        srv = ToolgateServer(full_config=config(app) + people, env={"TG_TEST_APP_SECRET": secret}).start()
        try:
            yield srv, issuer, secret, app_url, keys
        finally:
            srv.stop()
            srv.tmp.cleanup()


def connect(srv: ToolgateServer, issuer: str, key: str, login: str, query: str = "") -> None:
    """Connects `secured` with OAuth for the caller of `key` (signed in at the provider as `login`)."""
    api = Api(srv)
    body = {"auth_type": "oauth", "redirect_uri": REDIRECT}
    started = api.call("POST", f"/v1/apps/secured/connect{query}", body, key=key)
    assert started.status_code == 200, started.text
    back = sign_in(started.json()["data"]["authorization_url"], issuer, login=login)
    done = api.call("POST", f"/v1/apps/secured/connect/callback{query}", {"state": back["state"], "code": back["code"]},
                    key=key)
    assert done.status_code == 200 and done.json()["data"]["status"] == "connected", done.text


def active(issuer: str, secret: str, token: str) -> bool:
    r = httpx2.post(f"{issuer}/token/introspection",
                    data={"token": token, "client_id": "toolgate-app", "client_secret": secret}, timeout=10)
    assert r.status_code == 200, r.text
    return bool(r.json().get("active"))


@pytest.mark.parametrize("discover", [False, True], ids=["configured", "discovered"])
def test_ended_connections_have_their_tokens_revoked_at_the_provider(tmp_path, discover):
    with world(tmp_path, discover) as (srv, issuer, secret, app_url, keys):
        connect(srv, issuer, keys["dana"], "org", "?organization=true")
        for who in ("alice", "bob", "carol"):
            connect(srv, issuer, keys[who], who)
        made = Api(srv).call("POST", "/v1/gateways", {"name": "revoked", "servers": ["secured"]}, key=keys["dana"])
        assert made.status_code == 201, made.text
        gw = made.json()["data"]["id"]
        for who in ("alice", "bob", "carol"):
            client = McpHttp(mcp_url(srv, gw), keys[who])
            client.initialize()
            assert text_of(client.rpc("tools/call", {"name": tool_name(client, "whoami"), "arguments": {}})) == \
                f"subject: {who}"
        seen = httpx2.get(app_url.removesuffix("/mcp") + "/test/tokens", timeout=10).json()
        tokens = {who: seen[who] for who in ("alice", "bob", "carol", "org")}
        assert all(active(issuer, secret, t) for ts in tokens.values() for t in ts), "live before"

        api = Api(srv)
        assert api.call("DELETE", "/v1/team/members/usr_alice", key=keys["dana"]).status_code == 200
        r = api.call("PUT", "/v1/user/password", {"new_password": "a long new passphrase for bob"}, key=keys["bob"])
        assert r.status_code == 200, r.text
        assert api.call("DELETE", "/v1/apps/secured/connection", key=keys["carol"]).status_code == 200

        ended = [t for who in ("alice", "bob", "carol") for t in tokens[who]]
        deadline = time.monotonic() + 15
        while any(active(issuer, secret, t) for t in ended):
            assert time.monotonic() < deadline, "an ended connection's token is still active at the provider"
            time.sleep(0.1)
        assert all(active(issuer, secret, t) for t in tokens["org"]), "the organisation's connection goes on"
        counted = 'toolgate_token_revocations_total{app="secured",outcome="revoked"} 3'
        while counted not in (metrics := httpx2.get(srv.metrics_url, timeout=10).text):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.1)
        logs = srv.stderr_text()
        assert not any(t in logs for ts in tokens.values() for t in ts), "no token is logged"
