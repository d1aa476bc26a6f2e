"""The console's tool playground (issue 60, A.2), as a browser drives it over HTTP: a signed-in
owner picks the built-in time app's tool on the gateway's page, fills the form made from its
input schema and calls it; the result is shown, and the call is in /v1/logs with the user and
the web session as its caller, found by the request id the page shows, and linked from the page.
A rule of the gateway that denies the call denies it from the playground too; a viewer sees no
form and their forged POST is refused; the MCP endpoint does not take the console's cookie."""

from __future__ import annotations

import hashlib
import html
import re

import httpx2

from mcp_helpers import TIME_APP, Api, config
from test_web_signin import Browser
from toolgate_harness import ToolgateServer, random_key

PASSWORD = "console playground passphrase"
DENY_TOKYO = {"name": "no-tokyo", "effect": "deny", "when": 'has(args.timezone) && args.timezone == "Asia/Tokyo"'}


def start():
    owner_key, viewer_key = random_key(), random_key()
    digest = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    yaml = config(TIME_APP) + (
        "organizations:\n  - {id: org_pg, name: Playground, tier: enterprise}\n"
        "users:\n"
        "  - {id: usr_pg_owner, email: owner@pg.test, name: Owner, role: owner, organization: org_pg}\n"
        "  - {id: usr_pg_viewer, email: viewer@pg.test, name: Viewer, role: viewer, organization: org_pg}\n"
        "api_keys:\n"
        f"  - {{id: key_pg_owner, name: owner, user: usr_pg_owner, sha256: {digest(owner_key)}, scopes: ['*']}}\n"
        f"  - {{id: key_pg_viewer, name: viewer, user: usr_pg_viewer, sha256: {digest(viewer_key)}, scopes: ['*']}}\n"
    )
    srv = ToolgateServer(full_config=yaml).start()
    for key in (owner_key, viewer_key):
        r = httpx2.put(srv.base_url + "/v1/user/password", json={"new_password": PASSWORD},
                       headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 200, r.text
    return srv, owner_key


def signed_in(srv, email: str) -> Browser:
    b = Browser(srv)
    assert b.sign_in(email, PASSWORD).status_code == 303
    return b


def call(b: Browser, gw: str, csrf: str, **args) -> httpx2.Response:
    form = {"csrf": csrf, "tool": "get_current_time"} | {f"arg.{k}": v for k, v in args.items()}
    return b.request("POST", f"/auth/console/gateways/{gw}/call", data=form)


def test_a_tool_called_from_the_playground_is_a_call_of_the_user_with_its_log_entry_and_rules():
    srv, owner_key = start()
    try:
        api = Api(srv)
        made = api.call("POST", "/v1/gateways", {"name": "playground", "servers": ["time"]}, key=owner_key)
        assert made.status_code == 201, made.text
        gw = made.json()["data"]["id"]
        owner = signed_in(srv, "owner@pg.test")
        page = owner.request("GET", f"/auth/console/gateways/{gw}")
        assert page.status_code == 200, page.text
        # The form is made from the tool's input schema: its two string arguments, `format` required.
        assert f'action="/auth/console/gateways/{gw}/call"' in page.text, page.text
        assert 'name="arg.format" type="text" required' in page.text and 'name="arg.timezone" type="text"' in page.text
        csrf = owner.jar["toolgate_csrf"]

        done = call(owner, gw, csrf, format="YYYY", timezone="UTC")
        assert done.status_code == 200, done.text
        assert 'id="call-ok"' in done.text, done.text
        assert re.search(r'<code id="call-text-0">\d{4}</code>', done.text), done.text
        request_id = re.search(r'<span class="id" id="request-id">([0-9a-f-]{36})</span>', done.text).group(1)
        logs = api.call("GET", f"/v1/logs?gateway_id={gw}", key=owner_key).json()["data"]["logs"]
        entry = next(e for e in logs if e.get("request_id") == request_id)
        assert entry["function"] == "get_current_time" and entry["status"] == "success", entry
        assert entry["user_id"] == "usr_pg_owner" and entry["key_id"].startswith("web:ws_"), entry
        assert f'id="call-log" href="/auth/console/logs/{entry["id"]}"' in done.text, done.text

        # A bad argument is the form's 400, naming the field; no call is made.
        bad = owner.request("POST", f"/auth/console/gateways/{gw}/call",
                            data={"csrf": csrf, "tool": "get_current_time", "arg.format": "YYYY", "arg.nope": "{"})
        assert bad.status_code == 400 and "nope" in bad.text, bad.text

        # The gateway's rules decide a playground call as any call.
        assert api.call("PATCH", f"/v1/gateways/{gw}", {"rules": [DENY_TOKYO]}, key=owner_key).status_code == 200
        denied = call(owner, gw, csrf, format="YYYY", timezone="Asia/Tokyo")
        assert denied.status_code == 200 and 'id="call-error"' in denied.text, denied.text
        assert "no-tokyo" in html.unescape(denied.text), denied.text
        assert 'id="call-ok"' in call(owner, gw, csrf, format="YYYY", timezone="UTC").text

        # Without the console's form the session is nothing to the MCP endpoint.
        cookie = "; ".join(f"{k}={v}" for k, v in owner.jar.items())
        mcp = httpx2.post(f"{srv.base_url}/gateway/{gw}/mcp", timeout=30, headers={
            "Cookie": cookie, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert mcp.status_code == 401, mcp.text

        # A viewer reads the gateway but tries no tool: no form, and a forged POST is refused.
        viewer = signed_in(srv, "viewer@pg.test")
        seen = viewer.request("GET", f"/auth/console/gateways/{gw}")
        assert seen.status_code == 200 and "/call\"" not in seen.text and "gateways:write" in seen.text, seen.text
        before = len(api.call("GET", f"/v1/logs?gateway_id={gw}", key=owner_key).json()["data"]["logs"])
        forged = call(viewer, gw, viewer.jar["toolgate_csrf"], format="YYYY")
        assert forged.status_code == 403 and "INSUFFICIENT_SCOPE" in forged.text, forged.text
        assert len(api.call("GET", f"/v1/logs?gateway_id={gw}", key=owner_key).json()["data"]["logs"]) == before
    finally:
        srv.stop()
        srv.tmp.cleanup()
