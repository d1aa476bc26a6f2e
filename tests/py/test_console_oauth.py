"""Connecting an OAuth app through the console in a real browser (issue 43): Debian's Chromium,
headless (tests/node/console_browser.mjs, phase `oauth`), signs in to the console, clicks
"Connect with OAuth" on the apps page, signs in and consents at the app's authorization server
(the npm `oidc-provider`, as in test_app_oauth.py), and lands back on the console's apps page
with the app `connected`; a tool call through a gateway on that app then succeeds with the
official Python SDK, with the token the console's connect obtained.

The provider sends the browser back to the server's public URL (`http://localhost:8080` in the
tests); the browser serves that origin from the toolgate under test (a route in the script), and
reaches toolgate as `localhost` too, so that its cookies are the same host's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx2

from mcp_helpers import config, mcp_url, run, sdk_client
from test_app_oauth import oauth_app, provider
from test_console_browser import CHROMIUM, PASSWORD, browser
from toolgate_harness import ToolgateServer, random_key

PUBLIC = "http://localhost:8080"  # the harness's public_url
BACK = f"{PUBLIC}/auth/console/apps/secured/oauth/back"


def test_an_oauth_app_is_connected_from_the_console_in_chromium(node_dir, tmp_path):
    assert CHROMIUM.exists(), "Chromium is missing: install the Debian package chromium (scripts/install-deps.sh --tests)"
    key = random_key()
    with provider(tmp_path, redirect=BACK) as (issuer, secret), oauth_app(tmp_path, issuer, secret) as app_url:
        app = (
            "  - id: secured\n    name: Secured\n    category: testing\n    auth_types: [oauth]\n"
            f"    url: {app_url}\n    oauth:\n      authorize_url: {issuer}/auth\n      token_url: {issuer}/token\n"
            "      client_id: toolgate-app\n      client_secret_env: TG_TEST_APP_SECRET\n      scopes: [openid]\n"
        )
        yaml = config(app) + (
            "organizations:\n  - {id: org_co, name: Console OAuth, tier: enterprise}\n"
            "users:\n  - {id: usr_co, email: owner@co.test, name: Owner, role: owner, organization: org_co}\n"
            "api_keys:\n"
            f"  - {{id: key_co, name: owner, user: usr_co, sha256: {hashlib.sha256(key.encode()).hexdigest()}, scopes: ['*']}}\n"
        )
        srv = ToolgateServer(full_config=yaml, env={"TG_TEST_APP_SECRET": secret}).start()
        try:
            def api(method: str, path: str, body=None):
                r = httpx2.request(method, srv.base_url + path, json=body, timeout=30,
                                   headers={"Authorization": f"Bearer {key}"})
                assert r.status_code < 300, r.text
                return r.json().get("data")

            api("PUT", "/v1/user/password", {"new_password": PASSWORD})
            cfg = tmp_path / "oauth.json"
            cfg.write_text(json.dumps({
                # `localhost`, the public URL's host: the cookies set on one are sent to the other.
                "base": srv.base_url.replace("127.0.0.1", "localhost"), "public_url": PUBLIC, "issuer": issuer,
                # This test's own folder (test_console_browser.py clears .../console/browser/).
                "artifacts": str(Path(__file__).resolve().parents[1] / "artifacts" / "console" / "oauth"),
                "profile": str(tmp_path / "profile"), "email": "owner@co.test", "password": PASSWORD,
                "app_name": "Secured",
            }))
            try:
                seen = browser(node_dir, "oauth", cfg)
            except AssertionError:
                print("\n".join(l for l in srv.stderr_text().splitlines() if "console" in l or "signin" in l)[-6000:])
                raise
            assert seen["status"] == "connected" and "App secured connected." in seen["notice"], seen
            detail = api("GET", "/v1/apps/secured")
            assert (detail["connection_status"], detail["current_auth"]) == ("connected", "oauth"), detail

            gateway = api("POST", "/v1/gateways", {"name": "OAuth through the console", "servers": ["secured"]})

            async def call():
                async with sdk_client(mcp_url(srv, gateway["id"]), gateway["api_key"]) as c:
                    tools = await c.list_tools()
                    name = next(t.name for t in tools.tools if t.name.endswith("whoami"))
                    return await c.call_tool(name, {})

            result = run(call())
            assert not result.is_error, result
            assert result.content[0].text == "subject: alice", result
            assert "code=" not in srv.stderr_text(), "the authorization code is never logged"
        finally:
            srv.stop()
            srv.tmp.cleanup()
