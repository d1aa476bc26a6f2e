"""OAuth for MCP clients on a gateway that opts in (`configuration.auth: oauth`, `gateway_oauth:`
in the server's configuration), end to end with real parts: the npm `oidc-provider` as the
issuer (dynamic client registration, its development sign-in and consent pages driven over HTTP
as a browser would, JWT access tokens for the gateway's resource), and the official Python SDK's
OAuth client (`OAuthClientProvider`), which finds everything from the gateway's 401.

What is measured: the 401 points at the gateway's protected-resource metadata (RFC 9728), which
names the issuer and the scope; the SDK registers, signs in with PKCE and the gateway's resource
(RFC 8707), and calls tools with its token; the token never reaches the app; the token is
refused by another gateway (its audience is this one), a gateway that takes API keys only still
answers a Bearer header as the specification says (and has no metadata); an expired token is
refused with `error="invalid_token"` and the SDK renews it with its refresh token; an API key
still works on an OAuth gateway; without an external issuer a gateway takes toolgate's own
tokens only (those are tested in test_oauth_server.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from mcp_helpers import ACCEPT_BOTH, Api, ToolgateServer, config, on_port, start_on_a_chosen_port, wait_for_port
from test_app_oauth import REDIRECT, provider, sign_in

HERE = Path(__file__).parent
TOKEN_TTL = 6


@contextlib.contextmanager
def trace_app(tmp: Path):
    """The app: an MCP server that reports the headers it was called with."""
    log = open(tmp / "trace_app.log", "ab")
    proc = subprocess.Popen([sys.executable, str(HERE / "trace_upstream.py")], stdout=log, stderr=log)
    try:
        yield f"http://{wait_for_port(proc, 'trace_upstream.py (MCP server over HTTP)')}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def world(tmp: Path):
    """The issuer, the app, and toolgate trusting the issuer: yields (toolgate, issuer)."""
    with provider(tmp, TOKEN_TTL) as (issuer, _secret), trace_app(tmp) as app_url:
        apps = (
            "  - id: tracer\n    name: Tracer\n    description: reports its headers\n    category: testing\n"
            f"    url: {app_url}\n"
        )
        trust = f"gateway_oauth:\n  issuer: {issuer}\n  scopes: [mcp]\n  leeway_secs: 0\n"
        srv = start_on_a_chosen_port(lambda port: on_port(config(apps), port) + trust)
        try:
            yield srv, issuer
        finally:
            srv.stop()
            srv.tmp.cleanup()


class Memory:
    """The SDK's token storage, kept in memory so the test can read what it holds."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


def oauth(url: str, issuer: str, storage: Memory):
    """The SDK's OAuth client for `url`; its browser is `sign_in` (any user, consent given)."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    back: dict[str, str] = {}

    async def redirect(authorization_url: str) -> None:
        back.clear()
        back.update(await asyncio.to_thread(sign_in, authorization_url, issuer))

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=back["code"], state=back.get("state"), iss=back.get("iss"))

    metadata = OAuthClientMetadata(
        client_name="toolgate tests", redirect_uris=[REDIRECT], grant_types=["authorization_code", "refresh_token"],
        response_types=["code"], token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(url, metadata, storage, redirect_handler=redirect, callback_handler=callback)


async def call_tracer(url: str, issuer: str, storage: Memory) -> dict:
    """Connects with the SDK (signing in when it must), lists the tools and calls the tracer."""
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(auth=oauth(url, issuer, storage)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            assert tools == ["trace_context"], tools
            answer = await client.call_tool("trace_context", {})
            assert not answer.is_error, answer
            return json.loads(answer.content[0].text)


def post(url: str, headers: dict[str, str]) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    return httpx2.post(url, json=body, headers={"Accept": ACCEPT_BOTH, **headers}, timeout=10)


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_an_sdk_client_signs_in_from_the_gateways_challenge_and_its_token_is_for_that_gateway_alone(tmp_path):
    with world(tmp_path) as (srv, issuer):
        api = Api(srv)
        gw, key = api.create_gateway(["tracer"], configuration={"auth": "oauth"})
        other, _ = api.create_gateway(["tracer"], configuration={"auth": "oauth"})
        plain, _ = api.create_gateway(["tracer"])
        url = f"{srv.base_url}/gateway/{gw}/mcp"
        detail = api.ok("GET", f"/v1/gateways/{gw}")["data"]
        assert detail["configuration"]["auth"] == "oauth", detail

        # Without a credential: a 401 naming where the metadata is, and the scope to ask for.
        r = post(url, {})
        metadata_url = f"{srv.base_url}/.well-known/oauth-protected-resource/gateway/{gw}/mcp"
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}", scope="mcp"', r.headers
        prm = httpx2.get(metadata_url, timeout=10)
        assert prm.status_code == 200, prm.text
        # The configured issuer first (the SDK takes the first), then toolgate's own.
        assert prm.json() == {"resource": url, "authorization_servers": [issuer, srv.base_url],
                              "bearer_methods_supported": ["header"], "scopes_supported": ["mcp"]}, prm.json()

        # The SDK does the rest: metadata, registration, sign-in with PKCE, token, calls.
        storage = Memory()
        seen = asyncio.run(call_tracer(url, issuer, storage))
        assert seen["authorization"] is None, f"the client's token reached the app: {seen}"
        assert storage.client_info is not None and storage.client_info.client_id, "registered dynamically"
        token = storage.tokens.access_token
        c = claims(token)
        assert (c["iss"], c["aud"], c["scope"], c["sub"]) == (issuer, url, "mcp", "alice"), c

        # The token is this gateway's: another gateway refuses it, naming why.
        r = post(f"{srv.base_url}/gateway/{other}/mcp", {"Authorization": f"Bearer {token}"})
        assert r.status_code == 401, r.text
        assert 'error="invalid_token"' in r.headers["www-authenticate"], r.headers
        assert f"/gateway/{other}/mcp" in r.headers["www-authenticate"], r.headers
        # A gateway of API keys only answers a Bearer header as the specification says, and
        # has no metadata.
        r = post(f"{srv.base_url}/gateway/{plain}/mcp", {"Authorization": f"Bearer {token}"})
        assert r.status_code == 401 and "www-authenticate" not in r.headers, (r.status_code, r.headers)
        assert "X-API-Key" in r.json()["error"]["message"], r.text
        assert httpx2.get(f"{srv.base_url}/.well-known/oauth-protected-resource/gateway/{plain}/mcp").status_code == 404
        # Not a token at all, and a token in another scheme.
        for header, error in ((f"Bearer {token[:-4]}xxxx", "invalid_token"), ("Basic YTpi", "invalid_request")):
            r = post(url, {"Authorization": header})
            assert r.status_code == 401 and f'error="{error}"' in r.headers["www-authenticate"], (header, r.headers)
        # The gateway's own API key still works beside OAuth.
        assert post(url, {"X-API-Key": key}).status_code == 200

        # Expired (the issuer's tokens live TOKEN_TTL s, no leeway): refused; the SDK renews it.
        time.sleep(max(0.0, c["exp"] - time.time()) + 1.5)
        r = post(url, {"Authorization": f"Bearer {token}"})
        assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"], (r.status_code, r.headers)
        refresh = storage.tokens.refresh_token
        assert refresh, "the issuer gave a refresh token"
        asyncio.run(call_tracer(url, issuer, storage))
        assert storage.tokens.access_token != token, "a new access token"
        assert claims(storage.tokens.access_token)["aud"] == url


def test_without_an_external_issuer_a_gateway_takes_only_toolgates_own_tokens(tmp_path):
    with ToolgateServer(full_config=config()) as srv:
        r = Api(srv).call("POST", "/v1/gateways", {"name": "g", "servers": ["time"], "configuration": {"auth": "oauth"}})
        assert r.status_code == 201, r.text
        url = f"{srv.base_url}/gateway/{r.json()['data']['id']}/mcp"
        # A JWT of some issuer: no issuer is configured whose tokens this gateway takes.
        refused = post(url, {"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"})
        assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"], refused.headers
        assert "scope=" not in refused.headers["www-authenticate"], "no scope is required of toolgate's tokens"
        r = Api(srv).call("POST", "/v1/gateways", {"name": "g", "servers": ["time"], "configuration": {"auth": "saml"}})
        assert r.status_code == 400, r.text
