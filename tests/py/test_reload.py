"""Reloading the configuration file in place (SIGHUP and `POST /v1/admin/reload`): valid changes
to the sections that change in place apply with connections and MCP sessions kept; an invalid
file is refused naming the field, a change that needs a new process is refused naming the
section, and either way the running configuration stays; only the operator may reload."""

from __future__ import annotations

import hashlib
import os
import signal
import time

import httpx2

from mcp_helpers import TIME_APP, Api, ToolgateServer, config, mcp_url
from toolgate_harness import random_key
from test_upgrade import CALL, _headers, _open_session

TIERS = ("rate_limits:\n  tiers:\n"
         "    tiny: {{ requests_per_hour: unlimited, requests_per_minute: 600, burst: {burst}, concurrent: 20 }}\n"
         "limits:\n  bootstrap_tier: tiny\n")


def limit_of(client: httpx2.Client, key: str) -> int:
    r = client.get("/v1/rate-limit", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return int(r.headers["x-ratelimit-limit"])


def within(seconds: float, probe) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"not seen within {seconds} s"
        time.sleep(0.05)


def test_reload_applies_in_place_refuses_what_it_cannot_and_keeps_connections_and_sessions():
    base = config(TIME_APP, server="  grace_period_secs: 3\n")
    srv = ToolgateServer(full_config=base + TIERS.format(burst=5)).start()
    try:
        api = Api(srv)
        admin = srv.admin_key
        gw, key = api.create_gateway(["time"])
        url = mcp_url(srv, gw)
        sid = _open_session(url, key)
        kept = httpx2.Client(base_url=srv.base_url, timeout=10)  # one kept-alive connection throughout
        assert limit_of(kept, admin) == 5
        other_origin = dict(_headers(key, sid), Origin="http://other.example")
        r = httpx2.post(url, json=dict(CALL, id=2), headers=other_origin, timeout=10)
        assert r.status_code == 403, r.text

        def reload() -> httpx2.Response:
            return kept.post("/v1/admin/reload", headers={"Authorization": f"Bearer {admin}"})

        # Unchanged file: nothing to apply.
        r = reload()
        assert r.status_code == 200 and r.json()["data"]["changed"] == [], r.text

        # In place: a bigger bucket, a second app, and a tenant declared with its owner's key.
        tenant_key = random_key()
        tenant = (
            "organizations:\n  - { id: org_tenant, name: Tenant, tier: tiny }\n"
            "users:\n  - { id: usr_tenant, email: t@tenant.example, name: T, role: owner, organization: org_tenant }\n"
            "api_keys:\n  - id: key_tenant\n    name: tenant admin\n    user: usr_tenant\n"
            f"    sha256: {hashlib.sha256(tenant_key.encode()).hexdigest()}\n    scopes: [\"admin\", \"apps:read\"]\n"
        )
        second_app = "  - { id: clock, name: Clock, builtin: time }\n"
        srv.config_path.write_text(config(TIME_APP + second_app, server="  grace_period_secs: 3\n")
                                   .replace("http://allowed.example", "http://other.example")
                                   + TIERS.format(burst=50) + tenant)
        r = reload()
        assert r.status_code == 200, r.text
        changed = set(r.json()["data"]["changed"])
        assert changed == {"apps", "mcp", "rate_limits", "organizations", "users", "api_keys"}, r.text
        assert limit_of(kept, admin) == 50
        r = httpx2.post(url, json=dict(CALL, id=2), headers=other_origin, timeout=10)
        assert r.status_code == 200, f"the new allowed origin: {r.text}"
        old_origin = dict(other_origin, Origin="http://allowed.example")
        r = httpx2.post(url, json=dict(CALL, id=2), headers=old_origin, timeout=10)
        assert r.status_code == 403, f"the old allowed origin: {r.text}"
        apps = kept.get("/v1/apps", headers={"Authorization": f"Bearer {admin}"}).json()["data"]
        assert "clock" in str(apps), apps
        gw2, key2 = api.create_gateway(["clock"], name="with-the-new-app")
        sid2 = _open_session(mcp_url(srv, gw2), key2)
        r = httpx2.post(mcp_url(srv, gw2), json=dict(CALL, id=3), headers=_headers(key2, sid2), timeout=10)
        assert r.status_code == 200 and '"result"' in r.text, r.text
        # The session opened before the reload goes on.
        r = httpx2.post(url, json=dict(CALL, id=4), headers=_headers(key, sid), timeout=10)
        assert r.status_code == 200 and '"result"' in r.text, r.text
        # The declared tenant's key works; the configuration is not the tenant's: 404.
        t = kept.get("/v1/apps", headers={"Authorization": f"Bearer {tenant_key}"})
        assert t.status_code == 200, t.text
        t = kept.post("/v1/admin/reload", headers={"Authorization": f"Bearer {tenant_key}"})
        assert (t.status_code, t.json()["error"]["code"]) == (404, "NOT_FOUND"), t.text

        good = srv.config_path.read_text()
        # Invalid: refused naming the field; the running configuration stays.
        srv.config_path.write_text(good.replace("burst: 50", "burst: 0"))
        r = reload()
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "VALIDATION_ERROR" and "burst" in r.text, r.text
        assert limit_of(kept, admin) == 50

        # A field of an in-place section that is read once at start: refused, naming it.
        srv.config_path.write_text(good.replace("mcp:\n", "mcp:\n  max_stdio_processes: 7\n"))
        r = reload()
        assert r.status_code == 409 and "mcp.max_stdio_processes" in r.text, r.text
        # A section read once at start changed (with an in-place one): refused whole, naming it.
        srv.config_path.write_text(good.replace("grace_period_secs: 3", "grace_period_secs: 4")
                                   .replace("burst: 50", "burst: 70"))
        r = reload()
        assert r.status_code == 409, r.text
        assert "server" in r.json()["error"]["message"] and "--upgrade" in r.json()["error"]["message"], r.text
        assert limit_of(kept, admin) == 50

        # SIGHUP applies a valid change the same way.
        srv.config_path.write_text(good.replace("burst: 50", "burst: 60"))
        os.kill(srv.proc.pid, signal.SIGHUP)
        within(5.0, lambda: limit_of(kept, admin) == 60)
        assert "configuration reloaded" in srv.stderr_text(), srv.stderr_text()[-2000:]
        # A SIGHUP with an invalid file logs why and keeps the process and its configuration.
        srv.config_path.write_text(good.replace("burst: 50", "burst: 0"))
        os.kill(srv.proc.pid, signal.SIGHUP)
        within(5.0, lambda: "configuration not reloaded" in srv.stderr_text())
        assert srv.proc.poll() is None
        assert limit_of(kept, admin) == 60
        r = httpx2.post(url, json=dict(CALL, id=5), headers=_headers(key, sid), timeout=10)
        assert r.status_code == 200 and '"result"' in r.text, r.text
        kept.close()
    finally:
        srv.stop()
        srv.tmp.cleanup()
