"""A missing connection is a link (issue 63, docs/identity.md), end to end with real parts: the
official Python `mcp` SDK client, declaring URL-mode elicitation (2025-11-25), calls a tool of an
app connected by each user (`connection_scope: user`) before its user has connected it and gets
-32042 with the console's connect page as the elicitation's URL. Another member opening that URL
in Chromium (tests/node/console_browser.mjs, phase `link`) is refused. The caller opens it, signs
in to the console there, connects with OAuth at the app's authorization server (the npm
`oidc-provider`), and is back on the apps page; the client receives
`notifications/elicitation/complete` for its elicitation, retries, and the call reaches the app
(`oauth_app.py`, which checks every token at the provider) with the caller's own token: the app
names the caller's subject, not the organisation's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
from mcp.shared.exceptions import MCPError

from mcp_helpers import config, mcp_url, run, sdk_client
from test_app_oauth import oauth_app, provider, sign_in
from test_console_browser import CHROMIUM, PASSWORD, browser
from toolgate_harness import ToolgateServer, random_key

PUBLIC = "http://localhost:8080"  # the harness's public_url
BACK = f"{PUBLIC}/auth/console/apps/secured/oauth/back"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_a_missing_connection_is_a_link_its_caller_completes_in_chromium(node_dir, tmp_path):
    assert CHROMIUM.exists(), "Chromium is missing: install the Debian package chromium (scripts/install-deps.sh --tests)"
    keys = {name: random_key() for name in ("owner", "carol", "bob")}
    with provider(tmp_path, redirect=BACK) as (issuer, secret), oauth_app(tmp_path, issuer, secret) as app_url:
        app = (
            "  - id: secured\n    name: Secured\n    category: testing\n    auth_types: [oauth]\n"
            f"    url: {app_url}\n    connection_scope: user\n    list_as: organization\n"
            f"    oauth:\n      authorize_url: {issuer}/auth\n      token_url: {issuer}/token\n"
            "      client_id: toolgate-app\n      client_secret_env: TG_TEST_APP_SECRET\n      scopes: [openid]\n"
        )
        yaml = config(app) + (
            "organizations:\n  - {id: org_cl, name: Connect link, tier: enterprise}\n"
            "users:\n"
            "  - {id: usr_cl_owner, email: owner@cl.test, name: Owner, role: owner, organization: org_cl}\n"
            "  - {id: usr_cl_carol, email: carol@cl.test, name: Carol, role: viewer, organization: org_cl}\n"
            "  - {id: usr_cl_bob, email: bob@cl.test, name: Bob, role: viewer, organization: org_cl}\n"
            "api_keys:\n"
            + "".join(
                f"  - {{id: key_cl_{n}, name: {n}, user: usr_cl_{n}, sha256: {digest(k)}, scopes: ['*']}}\n"
                for n, k in keys.items()
            )
        )
        srv = ToolgateServer(full_config=yaml, env={"TG_TEST_APP_SECRET": secret}).start()
        try:
            def api(who: str, method: str, path: str, body=None):
                r = httpx2.request(method, srv.base_url + path, json=body, timeout=30,
                                   headers={"Authorization": f"Bearer {keys[who]}"})
                assert r.status_code < 300, r.text
                return r.json().get("data")

            for who in ("carol", "bob"):
                api(who, "PUT", "/v1/user/password", {"new_password": PASSWORD})
            # The organisation's own connection, the view the catalogue is read with: its Owner's.
            started = api("owner", "POST", "/v1/apps/secured/connect?organization=true",
                          {"auth_type": "oauth", "redirect_uri": BACK})
            back = sign_in(started["authorization_url"], issuer, redirect=BACK, login="org-lister")
            api("owner", "POST", "/v1/apps/secured/connect/callback?organization=true",
                {"state": back["state"], "code": back["code"]})
            gateway = api("owner", "POST", "/v1/gateways", {"name": "Per user", "servers": ["secured"]})

            def in_chromium(who: str, url: str, refused: bool) -> dict:
                cfg = tmp_path / f"link-{who}.json"
                cfg.write_text(json.dumps({
                    "base": srv.base_url.replace("127.0.0.1", "localhost"), "public_url": PUBLIC, "issuer": issuer,
                    "artifacts": str(Path(__file__).resolve().parents[1] / "artifacts" / "console" / "link"),
                    "profile": str(tmp_path / f"profile-{who}"), "email": f"{who}@cl.test", "password": PASSWORD,
                    "url": url, "refused": refused, "login": who, "app_id": "secured",
                }))
                try:
                    return browser(node_dir, "link", cfg)
                except AssertionError:
                    print("\n".join(l for l in srv.stderr_text().splitlines() if "console" in l or "elicit" in l)[-6000:])
                    raise

            async def scenario():
                completed: list[str] = []
                told = anyio.Event()

                async def on_message(message) -> None:
                    if isinstance(message, types.ElicitCompleteNotification):
                        completed.append(message.params.elicitation_id)
                        told.set()

                async def on_elicit(context, params):
                    return types.ElicitResult(action="cancel")

                # The handshake era (2025-11-25): the client declares URL-mode elicitation.
                async with sdk_client(mcp_url(srv, gateway["id"]), keys["carol"], mode="legacy",
                                      elicitation_callback=on_elicit, message_handler=on_message) as c:
                    tools = await c.list_tools()
                    name = next(t.name for t in tools.tools if t.name.endswith("whoami"))
                    try:
                        await c.call_tool(name, {})
                        raise AssertionError("a call without the caller's connection went through")
                    except MCPError as e:
                        assert e.code == -32042, e
                        asked = e.data["elicitations"][0]
                    assert asked["mode"] == "url", asked
                    url = asked["url"]
                    assert url == f"{PUBLIC}/auth/console/apps?connect=secured&elicitation={asked['elicitationId']}", url

                    # Bob, another member, opens Carol's link: refused, nothing completed.
                    seen = await anyio.to_thread.run_sync(in_chromium, "bob", url, True)
                    assert seen["status"] == 403 and "another person" in seen["text"], seen
                    assert not completed, completed

                    # Carol opens it, signs in, connects with OAuth: her client is told.
                    seen = await anyio.to_thread.run_sync(in_chromium, "carol", url, False)
                    assert "App secured connected. Your MCP client was told" in seen["notice"], seen
                    assert seen["own"] == "connected", seen
                    with anyio.fail_after(30):
                        await told.wait()
                    assert completed == [asked["elicitationId"]], completed

                    # The client retries: the app is reached with Carol's own token.
                    result = await c.call_tool(name, {})
                    assert not result.is_error, result
                    return result.content[0].text

            assert run(scenario()) == "subject: carol", "the app saw the caller's own subject"
            bob = httpx2.get(srv.base_url + "/v1/apps/secured", timeout=30,
                             headers={"Authorization": f"Bearer {keys['bob']}"}).json()["data"]
            assert bob["own_connection_status"] == "none", "Bob's refused visit connected nothing"
            assert "code=" not in srv.stderr_text(), "the authorization code is never logged"
        finally:
            srv.stop()
            srv.tmp.cleanup()
