"""Connecting an app that requires OAuth (`POST /v1/apps/{id}/connect` with `auth_type: oauth`,
then `POST /v1/apps/{id}/connect/callback`), end to end with real parts: the npm `oidc-provider`
as the app's authorization server (its development sign-in and consent pages, driven over
HTTP as a browser would), and an MCP server built on the official Python SDK that refuses any
request without a live bearer token of that provider (`oauth_app.py`).

What is measured: the authorization URL carries PKCE (S256) and a fresh state; the callback
refuses a wrong state, exchanges the code (client secret and PKCE verifier) and connects the
app once (a replay finds nothing pending); calls through a gateway reach the app with the
token; a token the app refuses (revoked at the provider) is renewed with the refresh token and
the call retried, invisibly to the client; a token past its life is renewed before use; and
when the provider refuses the renewal, the call fails with a clear error and the connection is
marked `error`.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import secrets
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx2
import pytest

from mcp_helpers import NODE_DIR, VENV, Api, McpHttp, ToolgateServer, config, mcp_url, node_bin, wait_for_port

REDIRECT = "http://localhost/after-sign-in"


@contextlib.contextmanager
def provider(tmp: Path, token_ttl: int = 3600, signin_redirect: str | None = None, redirect: str = REDIRECT,
             token_exchange: bool = False):
    """oidc-provider with one confidential client, `toolgate-app` sending the browser back to
    `redirect` (two with `signin_redirect`, the redirect URI of toolgate's web sign-in): yields
    (issuer URL, client secret). `token_exchange`: the client may also use client_credentials and
    token exchange (RFC 8693, registered by `oauth_provider.mjs`)."""
    script = NODE_DIR / "oauth_provider.mjs"
    if not (NODE_DIR / "node_modules" / "oidc-provider").exists():
        raise AssertionError(f"oidc-provider missing: run `npm ci` in {NODE_DIR} (tests/run.sh does)")
    secret = secrets.token_urlsafe(24)
    env = dict(os.environ, CLIENT_SECRET=secret, REDIRECT_URI=redirect, ACCESS_TOKEN_TTL=str(token_ttl))
    if signin_redirect:
        env["SIGNIN_REDIRECT_URI"] = signin_redirect
    if token_exchange:
        env["TOKEN_EXCHANGE"] = "1"
    log = open(tmp / "provider.log", "ab")
    proc = subprocess.Popen([str(node_bin()), str(script)], cwd=NODE_DIR, env=env, stdout=log, stderr=log)
    try:
        yield f"http://{wait_for_port(proc, 'oidc-provider')}", secret
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def oauth_app(tmp: Path, issuer: str, secret: str):
    """The MCP server that wants the provider's bearer tokens: yields its MCP URL. Its `record`
    tool writes to `tmp/app-calls.jsonl`."""
    log = open(tmp / "app.log", "ab")
    env = dict(os.environ, CLIENT_SECRET=secret, CALL_LOG=str(tmp / "app-calls.jsonl"))
    proc = subprocess.Popen([str(VENV / "bin" / "python"), str(Path(__file__).parent / "oauth_app.py"), issuer],
                            env=env, stdout=log, stderr=log)
    try:
        yield f"http://{wait_for_port(proc, 'oauth_app.py')}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def world(tmp: Path, token_ttl: int = 3600, discover: bool = False):
    """The provider, the app, and toolgate with the app configured: yields (toolgate, issuer).
    `discover`: the app's authorization server is not configured but discovered from the app."""
    with provider(tmp, token_ttl) as (issuer, secret), oauth_app(tmp, issuer, secret) as app_url:
        endpoints = "" if discover else f"      authorize_url: {issuer}/auth\n      token_url: {issuer}/token\n"
        app = (
            "  - id: secured\n    name: Secured\n    category: testing\n    auth_types: [oauth]\n"
            f"    url: {app_url}\n"
            f"    oauth:\n{endpoints}"
            "      client_id: toolgate-app\n      client_secret_env: TG_TEST_APP_SECRET\n      scopes: [openid]\n"
        )
        srv = ToolgateServer(full_config=config(app), env={"TG_TEST_APP_SECRET": secret}).start()
        try:
            yield srv, issuer
        finally:
            srv.stop()
            srv.tmp.cleanup()


def sign_in(authorization_url: str, issuer: str, redirect: str = REDIRECT, login: str = "alice") -> dict[str, str]:
    """Follows the provider's pages as a browser would (any login signs in; consent given) until
    it sends the browser to `redirect`: returns that redirect's query parameters."""
    browser = httpx2.Client(timeout=10)
    url = authorization_url
    for _ in range(12):
        r = browser.get(url)
        if r.status_code == 200:
            form = re.search(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', r.text, re.S)
            assert form, f"a page without a form at {url}: {r.text[:500]}"
            fields = {n: html.unescape(v) for n, v in
                      re.findall(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', form.group(2))}
            if 'name="login"' in form.group(2):
                fields.update(login=login, password="any")
            action = form.group(1)
            r = browser.post(action if action.startswith("http") else issuer + action, data=fields)
        assert r.status_code in (302, 303), f"{url}: {r.status_code} {r.text[:500]}"
        location = r.headers["location"]
        if location.startswith(redirect):
            return {k: v[0] for k, v in parse_qs(urlparse(location).query).items()}
        url = location if location.startswith("http") else issuer + location
    raise AssertionError("the provider never sent the browser back")


def connect(srv: ToolgateServer, issuer: str) -> dict:
    """Connects `secured` for the admin's organisation; returns the callback's answer."""
    api = Api(srv)
    started = api.ok("POST", "/v1/apps/secured/connect", {"auth_type": "oauth", "redirect_uri": REDIRECT})["data"]
    back = sign_in(started["authorization_url"], issuer)
    r = api.call("POST", "/v1/apps/secured/connect/callback", {"state": back["state"], "code": back["code"]})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def gateway_client(srv: ToolgateServer) -> McpHttp:
    gw, key = Api(srv).create_gateway(["secured"])
    client = McpHttp(mcp_url(srv, gw), key)
    client.initialize()
    return client


def tool_name(client: McpHttp, suffix: str) -> str:
    tools = client.rpc("tools/list")["result"]["tools"]
    names = [t["name"] for t in tools if t["name"].endswith(suffix)]
    assert names, tools
    return names[0]


def text_of(answer: dict) -> str:
    assert "result" in answer and not answer["result"].get("isError"), answer
    return answer["result"]["content"][0]["text"]


@pytest.mark.parametrize("discover", [False, True], ids=["configured", "discovered"])
def test_an_oauth_app_is_connected_with_pkce_and_called_with_its_token(tmp_path, discover):
    """Configured: the endpoints come from YAML. Discovered: toolgate reads the app's 401 challenge,
    its protected-resource metadata (RFC 9728, served by the Python SDK) and the provider's
    metadata (oidc-provider's discovery document), and asks for tokens for the app's resource."""
    with world(tmp_path, discover=discover) as (srv, issuer):
        api = Api(srv)
        started = api.ok("POST", "/v1/apps/secured/connect", {"auth_type": "oauth", "redirect_uri": REDIRECT})["data"]
        assert started["status"] == "pending", started
        query = {k: v[0] for k, v in parse_qs(urlparse(started["authorization_url"]).query).items()}
        assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43, query
        assert query["client_id"] == "toolgate-app" and query["redirect_uri"] == REDIRECT, query
        assert started["authorization_url"].startswith(f"{issuer}/auth?"), started
        if discover:
            assert query["resource"].endswith("/mcp") and query["resource"].startswith("http://127.0.0.1:"), query
            deadline = time.monotonic() + 3  # the process log is written in batches
            while "discovered the app's authorization server" not in srv.stderr_text():
                assert time.monotonic() < deadline, "the discovery is not logged"
                time.sleep(0.05)
        else:
            assert "resource" not in query, query
        back = sign_in(started["authorization_url"], issuer)
        assert back["state"] == query["state"] and "code" in back, (back, query)

        # A wrong state is refused and leaves the authorization pending.
        r = api.call("POST", "/v1/apps/secured/connect/callback", {"state": "0" * 64, "code": back["code"]})
        assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "state", r.text
        assert api.ok("GET", "/v1/apps/secured")["data"]["connection_status"] == "pending"

        r = api.call("POST", "/v1/apps/secured/connect/callback", {"state": back["state"], "code": back["code"]})
        assert r.status_code == 200, r.text
        assert r.json()["data"]["status"] == "connected", r.text
        detail = api.ok("GET", "/v1/apps/secured")["data"]
        assert (detail["status"], detail["connection_status"], detail["current_auth"]) == ("connected", "connected", "oauth")
        # Once: the same answer again finds nothing pending.
        again = api.call("POST", "/v1/apps/secured/connect/callback", {"state": back["state"], "code": back["code"]})
        assert again.status_code == 404, again.text

        client = gateway_client(srv)
        assert text_of(client.rpc("tools/call", {"name": tool_name(client, "whoami"), "arguments": {}})) == "subject: alice"
        audience = text_of(client.rpc("tools/call", {"name": tool_name(client, "token_audience"), "arguments": {}}))
        # Discovered: the token was minted for this app alone (RFC 8707); configured: for no resource.
        assert audience == (f"audience: {query['resource']}" if discover else "audience: None"), audience
        assert back["code"] not in srv.stderr_text(), "the code is never logged"


def test_a_token_the_app_refuses_is_renewed_and_the_call_retried(tmp_path):
    with world(tmp_path) as (srv, issuer):
        connect(srv, issuer)
        client = gateway_client(srv)
        whoami, refuse = tool_name(client, "whoami"), tool_name(client, "refuse_this_token")
        assert text_of(client.rpc("tools/call", {"name": refuse, "arguments": {}})) == "refused from now on"
        # The app now refuses that token (401): toolgate renews it and retries, unseen.
        assert text_of(client.rpc("tools/call", {"name": whoami, "arguments": {}})) == "subject: alice"
        assert "renewed the app's OAuth access token" in srv.stderr_text()
        assert Api(srv).ok("GET", "/v1/apps/secured")["data"]["connection_status"] == "connected"


def test_a_token_past_its_life_is_renewed_before_use(tmp_path):
    # A 12 s token is renewed from 6 s after it was issued (half its life, as it is under
    # RENEW_AHEAD_SECS), whole seconds: the first call has 5 s, however busy the machine.
    with world(tmp_path, token_ttl=12) as (srv, issuer):
        connect(srv, issuer)
        issued_by = time.monotonic()
        client = gateway_client(srv)
        whoami = tool_name(client, "whoami")
        assert text_of(client.rpc("tools/call", {"name": whoami, "arguments": {}})) == "subject: alice"
        assert time.monotonic() - issued_by < 5, "the first call came too late to find the token fresh"
        assert "renewed the app's OAuth access token" not in srv.stderr_text()
        time.sleep(max(0.0, issued_by + 7 - time.monotonic()))
        assert text_of(client.rpc("tools/call", {"name": whoami, "arguments": {}})) == "subject: alice"
        assert "renewed the app's OAuth access token" in srv.stderr_text()


def test_a_renewal_the_provider_refuses_fails_the_call_clearly_and_marks_the_connection(tmp_path):
    # Revoking the token at the provider revokes its grant: the refresh token dies with it.
    with world(tmp_path) as (srv, issuer):
        connect(srv, issuer)
        client = gateway_client(srv)
        whoami, forget = tool_name(client, "whoami"), tool_name(client, "forget_my_token")
        text_of(client.rpc("tools/call", {"name": forget, "arguments": {}}))
        answer = client.rpc("tools/call", {"name": whoami, "arguments": {}})
        said = str(answer.get("error") or answer.get("result"))
        assert "invalid_grant" in said and "secured" in said, answer
        detail = Api(srv).ok("GET", "/v1/apps/secured")["data"]
        assert (detail["status"], detail["connection_status"]) == ("available", "error"), detail


@pytest.mark.parametrize("flaw", ["wrong issuer", "no S256", "no authorization server"])
def test_an_app_whose_oauth_metadata_is_unusable_is_refused_at_connect_with_the_reason(flaw):
    """Metadata that does not hold together (RFC 8414's issuer check, PKCE S256 required by the MCP
    authorization specification, RFC 9728's authorization_servers) stops the connect with a 503
    naming the flaw; nothing is left pending."""
    import http.server
    import json
    import threading

    class Metadata(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 (the MCP endpoint: a challenge naming the metadata)
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.answer(401, {"error": "invalid_token"}, [(
                "WWW-Authenticate", f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"')])

        def do_GET(self):  # noqa: N802
            if self.path == "/.well-known/oauth-protected-resource/mcp":
                servers = [] if flaw == "no authorization server" else [base]
                return self.answer(200, {"resource": f"{base}/mcp", "authorization_servers": servers})
            if self.path == "/.well-known/oauth-authorization-server":
                return self.answer(200, {
                    "issuer": "https://elsewhere.example" if flaw == "wrong issuer" else base,
                    "authorization_endpoint": f"{base}/authorize", "token_endpoint": f"{base}/token",
                    "code_challenge_methods_supported": ["plain"] if flaw == "no S256" else ["S256"]})
            self.answer(404, {})

    meta = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    base = f"http://127.0.0.1:{meta.server_address[1]}"
    threading.Thread(target=meta.serve_forever, daemon=True).start()
    app = ("  - id: secured\n    name: Secured\n    category: testing\n    auth_types: [oauth]\n"
           f"    url: {base}/mcp\n    oauth:\n      client_id: toolgate-app\n")
    srv = ToolgateServer(full_config=config(app)).start()
    try:
        r = Api(srv).call("POST", "/v1/apps/secured/connect", {"auth_type": "oauth", "redirect_uri": REDIRECT})
        assert r.status_code == 503, r.text
        message = r.json()["error"]["message"]
        expected = {"wrong issuer": "is not", "no S256": "S256", "no authorization server": "names no authorization server"}
        assert "could not be discovered" in message and expected[flaw] in message, message
        assert Api(srv).ok("GET", "/v1/apps/secured")["data"]["connection_status"] != "pending"
    finally:
        srv.stop()
        srv.tmp.cleanup()
        meta.shutdown()
