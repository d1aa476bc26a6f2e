"""The console in a real browser (issue 43): Debian's Chromium, headless, driven by
playwright-core (tests/node/console_browser.mjs) signs in with a password and then the TOTP code,
creates a gateway with the `time` app; the official Python SDK calls a tool through it with the
key the page showed once; the browser sees the call on the logs page (and opens it) and on the
analytics page; the owner sees write forms where a viewer sees none, and the viewer's forged POST
is refused by the API's scope check. Every phase fails on a `console` error, an uncaught page
error or a Content Security Policy violation of toolgate's pages.
Screenshots of each page go to tests/artifacts/console/browser/ (`readme.png` is the picture
docs/console.png was taken from; the test never writes a tracked file), a folder of this test's
own: test_console_oauth.py writes to .../console/oauth/, so two pytest workers never clear or
write each other's. A missing Chromium fails the test, saying so."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from mcp_helpers import TIME_APP, config, mcp_url, run, sdk_client
from toolgate_harness import ROOT, ToolgateServer, random_key

PASSWORD = "console browser passphrase"
CHROMIUM = Path("/usr/bin/chromium")


def totp_now(secret: str, step: int) -> str:
    import base64
    import hmac
    import struct

    key = base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))
    mac = hmac.new(key, struct.pack(">Q", step), "sha1").digest()
    at = mac[-1] & 0xF
    return f"{(struct.unpack('>I', mac[at:at + 4])[0] & 0x7FFFFFFF) % 1_000_000:06d}"


def api(srv, method: str, path: str, key: str, body=None):
    r = httpx2.request(method, srv.base_url + path, json=body, timeout=30, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code < 300, r.text
    return r.json().get("data")


def browser(node_dir: Path, phase: str, cfg: Path) -> dict:
    node = node_dir / "node_modules" / ".bin" / "node"
    script = ROOT / "tests" / "node" / "console_browser.mjs"
    # The script imports playwright-core from the tests/node it lives beside.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    p = subprocess.run([str(node), str(script), phase, str(cfg)], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, f"{phase}: {p.stderr}\n{p.stdout}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_console_in_chromium(node_dir, tmp_path):
    assert CHROMIUM.exists(), "Chromium is missing: install the Debian package chromium (scripts/install-deps.sh --tests)"
    owner_key, viewer_key = random_key(), random_key()
    digest = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    yaml = config(TIME_APP) + (
        "organizations:\n  - {id: org_cb, name: Browser, tier: enterprise}\n"
        "users:\n"
        "  - {id: usr_cb_owner, email: owner@cb.test, name: Owner, role: owner, organization: org_cb}\n"
        "  - {id: usr_cb_viewer, email: viewer@cb.test, name: Viewer, role: viewer, organization: org_cb}\n"
        "api_keys:\n"
        f"  - {{id: key_cb_owner, name: owner, user: usr_cb_owner, sha256: {digest(owner_key)}, scopes: ['*']}}\n"
        f"  - {{id: key_cb_viewer, name: viewer, user: usr_cb_viewer, sha256: {digest(viewer_key)}, scopes: ['*']}}\n"
    )
    srv = ToolgateServer(full_config=yaml).start()
    try:
        for key in (owner_key, viewer_key):
            api(srv, "PUT", "/v1/user/password", key, {"new_password": PASSWORD})
        enrolled = api(srv, "POST", "/v1/auth/mfa/enroll", owner_key)
        secret = enrolled["secret"]
        api(srv, "POST", "/v1/auth/mfa/activate", owner_key, {"code": totp_now(secret, int(time.time()) // 30)})
        artifacts = ROOT / "tests" / "artifacts" / "console" / "browser"
        shutil.rmtree(artifacts, ignore_errors=True)
        cfg = tmp_path / "console.json"
        settings = {
            "base": srv.base_url, "artifacts": str(artifacts), "profile": str(tmp_path / "owner-profile"),
            "viewer_profile": str(tmp_path / "viewer-profile"), "email": "owner@cb.test", "password": PASSWORD,
            "totp_secret": secret, "viewer_email": "viewer@cb.test", "docs_png": str(artifacts / "readme.png"),
            "function": "get_current_time",
        }
        cfg.write_text(json.dumps(settings))
        made = browser(node_dir, "create", cfg)
        gateway_id, key = made["gateway_id"], made["key"]
        listed = api(srv, "GET", "/v1/gateways", owner_key)
        assert [g["id"] for g in listed["gateways"]] == [gateway_id], "the console's gateway is the API's"

        async def call():
            async with sdk_client(mcp_url(srv, gateway_id), key) as c:
                tools = await c.list_tools()
                name = next(t.name for t in tools.tools if t.name.endswith("get_current_time"))
                return await c.call_tool(name, {"timezone": "UTC", "format": "YYYY"})

        result = run(call())
        assert not result.is_error, result
        settings["gateway_id"] = gateway_id
        cfg.write_text(json.dumps(settings))
        seen = browser(node_dir, "verify", cfg)
        assert seen["total"] >= 1
        # The layout at 1280 and 390 px, and a tool called from the playground (issue 60).
        laid = browser(node_dir, "layout", cfg)
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", laid["answer"]), laid
        logs = api(srv, "GET", f"/v1/logs?gateway_id={gateway_id}", owner_key)["logs"]
        entry = next(e for e in logs if e.get("request_id") == laid["request_id"])
        assert entry["user_id"] == "usr_cb_owner" and entry["key_id"].startswith("web:"), entry
        for name in laid["pages"]:
            for width in (1280, 390):
                assert (artifacts / f"{name}-{width}.png").stat().st_size > 1000, (name, width)
        for name in ("playground", "playground-result", "playground-log-entry"):
            assert (artifacts / f"{name}.png").stat().st_size > 1000, name
        seen = browser(node_dir, "viewer", cfg)
        assert seen["forged"] == 403, seen
        assert all(n > 0 for n in seen["owner_forms"].values()), seen
        assert [g["id"] for g in api(srv, "GET", "/v1/gateways", owner_key)["gateways"]] == [gateway_id]
        for name in ("readme", "gateways-empty", "gateway-created", "gateway", "logs", "log-entry", "analytics", "viewer-gateway"):
            assert (artifacts / f"{name}.png").stat().st_size > 1000, name
    finally:
        srv.stop()
        srv.tmp.cleanup()


if __name__ == "__main__":
    pytest.main([__file__, "-x", "-q"])
