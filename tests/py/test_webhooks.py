"""Webhooks (issue 16): signed, durable deliveries to a real receiver.

The receiver is an HTTP server in the test process that verifies every delivery twice: with the
official Standard Webhooks library (`standardwebhooks`, pinned in requirements.txt) over the
`webhook-id` / `webhook-timestamp` / `webhook-signature` headers, and with docs/events.md's snippet
for the specification's `signature` (run as written there). Each of its paths answers as told:
200, 500 then 200, 410, or hangs.
"""

from __future__ import annotations

import base64
import binascii
import http.server
import json
import re
import threading
import time

import httpx2
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from mcp_helpers import STATELESS, TIME_APP, config, everything_server, http_app, stateless_post
from toolgate_harness import ROOT, ToolgateServer


def documented_verify():
    """docs/events.md's verification snippet (the block after "verify a delivery"), as a function."""
    text = (ROOT / "docs" / "events.md").read_text()
    block = re.search(r"<!-- verify a delivery -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/events.md has no webhook verification snippet"
    scope: dict = {}
    exec(block.group(1), scope)  # noqa: S102 (our own documented snippet is what is tested)
    return scope["verify"]


def standard_key(secret: str):
    """What a Standard Webhooks receiver is given: a `whsec_` secret as it is (the library decodes
    it), a client's own secret as its bytes (the library takes bytes as the key itself)."""
    return secret if secret.startswith("whsec_") else secret.encode()


class Receiver:
    """Records verified deliveries per path; `plan[path]` lists the statuses to answer in turn
    (the last repeats); `hang` paths never answer in time."""

    def __init__(self):
        self.deliveries: list[dict] = []
        self.secrets: dict[str, str] = {}
        self.plan: dict[str, list[int]] = {}
        self.hang: set[str] = set()
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.verify = documented_verify()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                path = self.path
                if path in receiver.hang:
                    time.sleep(3)
                secret = receiver.secrets.get(path)
                try:
                    Webhook(standard_key(secret)).verify(body, {k.lower(): v for k, v in self.headers.items()})
                    assert receiver.verify(body, secret), "docs/events.md's check failed"
                    assert self.headers["x-webhook-signature"] == json.loads(body)["signature"]
                except Exception as e:  # noqa: BLE001 (recorded, the test fails on it)
                    receiver.failures.append(f"{path}: {e!r}")
                with receiver.lock:
                    plan = receiver.plan.get(path, [200])
                    status = plan.pop(0) if len(plan) > 1 else plan[0]
                    receiver.deliveries.append({"path": path, "id": self.headers["webhook-id"], "status": status,
                                                "body": json.loads(body), "raw": body,
                                                "headers": {k.lower(): v for k, v in self.headers.items()}})
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[dict]:
        with self.lock:
            return [d for d in self.deliveries if d["path"] == path]


def wait_for(probe, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.05)


WEBHOOKS = ("webhooks:\n  allowed_hosts: [\"127.0.0.1\"]\n  retry_schedule_secs: [1, 1]\n  attempt_timeout_ms: 500\n"
            # The tests make more webhooks than the `webhook` bucket's burst of 10 allows.
            "rate_limits:\n  webhook: { requests_per_hour: unlimited, requests_per_minute: 600, burst: 100 }\n")


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture(scope="module")
def srv():
    # `keyed` needs an API key: connecting and disconnecting it are events. It is never called.
    keyed = http_app("keyed", "http://127.0.0.1:9/mcp", name="Keyed") + "    auth_types: [api_key]\n"
    s = ToolgateServer(full_config=config(TIME_APP + keyed) + WEBHOOKS).start()
    yield s
    s.stop()
    s.tmp.cleanup()


def api(srv, method, path, body=None):
    return httpx2.request(method, srv.base_url + path, json=body, timeout=30,
                          headers={"Authorization": f"Bearer {srv.admin_key}"})


def hook(srv, receiver, path, events=("*",)) -> dict:
    r = api(srv, "POST", "/v1/webhooks", {"url": receiver.url(path), "events": list(events)})
    assert r.status_code == 201, r.text
    data = r.json()["data"]
    assert data["secret"].startswith("whsec_"), data
    receiver.secrets[path] = data["secret"]
    return data


def test_gateway_events_are_delivered_signed_both_ways(srv, receiver):
    w = hook(srv, receiver, "/all")
    # The secret is shown once.
    listed = api(srv, "GET", "/v1/webhooks").json()["data"]["webhooks"]
    assert any(x["id"] == w["id"] for x in listed) and not any("secret" in x for x in listed), listed
    gw = api(srv, "POST", "/v1/gateways", {"name": "events-gw", "servers": ["time"]}).json()["data"]
    assert api(srv, "PATCH", f"/v1/gateways/{gw['id']}", {"description": "changed"}).status_code == 200
    assert api(srv, "DELETE", f"/v1/gateways/{gw['id']}").status_code == 200
    got = wait_for(lambda: (d := receiver.at("/all")) and len(d) >= 3 and d)
    events = [d["body"]["event"] for d in got]
    assert events[:3] == ["gateway.created", "gateway.updated", "gateway.deleted"], events
    assert got[0]["body"]["data"] == {"gateway_id": gw["id"], "name": "events-gw", "servers": ["time"]}, got[0]
    assert not receiver.failures, receiver.failures
    deliveries = api(srv, "GET", f"/v1/webhooks/{w['id']}/deliveries").json()["data"]["deliveries"]
    assert {d["status"] for d in deliveries} == {"delivered"}, deliveries
    assert all(d["attempts"] == 1 and d["status_code"] == 200 for d in deliveries), deliveries


def test_app_connection_events_are_delivered(srv, receiver):
    hook(srv, receiver, "/apps", ["app.connected", "app.disconnected"])
    r = api(srv, "POST", "/v1/apps/keyed/connect", {"auth_type": "api_key", "credentials": {"api_key": "sk-test-1"}})
    assert r.status_code == 200, r.text
    connected = wait_for(lambda: receiver.at("/apps"))[0]["body"]
    assert connected["event"] == "app.connected", connected
    assert connected["data"]["app_id"] == "keyed" and connected["data"]["auth_type"] == "api_key", connected
    assert connected["data"]["connection_id"], connected
    assert "sk-test-1" not in json.dumps(connected), "the credential never leaves in an event"
    assert api(srv, "DELETE", "/v1/apps/keyed/connection").status_code == 200
    got = wait_for(lambda: (d := receiver.at("/apps")) and len(d) >= 2 and d)
    assert got[1]["body"]["event"] == "app.disconnected" and got[1]["body"]["data"] == {"app_id": "keyed"}, got[1]
    assert len(got) == 2, [d["body"]["event"] for d in got]
    assert not receiver.failures, receiver.failures


def test_a_failing_receiver_is_retried_under_the_same_id_and_410_disables(srv, receiver):
    receiver.plan["/flaky"] = [500, 200]
    receiver.plan["/gone"] = [410]
    flaky = hook(srv, receiver, "/flaky", ["gateway.created"])
    gone = hook(srv, receiver, "/gone", ["gateway.created"])
    api(srv, "POST", "/v1/gateways", {"name": "retried-gw", "servers": ["time"]})
    tries = wait_for(lambda: (d := receiver.at("/flaky")) and len(d) >= 2 and d)
    assert [t["status"] for t in tries] == [500, 200] and tries[0]["id"] == tries[1]["id"], tries
    # The receiver has the second attempt before toolgate has written down its answer: wait for
    # the delivery to leave `pending`, then check what it became.
    def settled():
        d = api(srv, "GET", f"/v1/webhooks/{flaky['id']}/deliveries").json()["data"]["deliveries"][0]
        return d if d["status"] != "pending" else None
    d = wait_for(settled)
    assert (d["status"], d["attempts"], d["status_code"]) == ("delivered", 2, 200), d
    state = wait_for(lambda: next((x for x in api(srv, "GET", "/v1/webhooks").json()["data"]["webhooks"]
                                   if x["id"] == gone["id"] and not x["enabled"]), None))
    assert "410" in state["disabled_reason"], state
    assert len(receiver.at("/gone")) == 1, "not retried after 410"
    assert not receiver.failures, receiver.failures


def test_a_hanging_receiver_delays_neither_the_api_nor_the_others(srv, receiver):
    receiver.hang.add("/slow")
    hook(srv, receiver, "/slow", ["gateway.created"])
    hook(srv, receiver, "/fast", ["gateway.created"])
    started = time.monotonic()
    r = api(srv, "POST", "/v1/gateways", {"name": "slow-gw", "servers": ["time"]})
    assert r.status_code == 201 and time.monotonic() - started < 1.0, "the API answer does not wait"
    wait_for(lambda: receiver.at("/fast"), 2.0)
    assert time.monotonic() - started < 2.0, "the fast receiver was not held up by the slow one"


def test_webhook_urls_inside_the_network_are_refused():
    production = config(TIME_APP).replace("environment: development", "environment: production")
    s = ToolgateServer(full_config=production + WEBHOOKS[WEBHOOKS.index("rate_limits:"):]).start()
    try:
        for url in ["https://169.254.169.254/latest/meta-data", "https://127.0.0.1:9/h", "https://[::1]/h",
                    "https://10.0.0.8/h", "http://example.com/h", "ftp://example.com/h", "https://u:p@example.com/h"]:
            r = api(s, "POST", "/v1/webhooks", {"url": url, "events": ["gateway.created"]})
            assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "url", (url, r.text)
        r = api(s, "POST", "/v1/webhooks", {"url": "https://example.com/h", "events": ["gateway.made"]})
        assert r.status_code == 400 and "events" in r.text, r.text
        r = api(s, "POST", "/v1/webhooks", {"url": "https://example.com/h", "events": ["*"], "secret": "short"})
        assert r.status_code == 400 and "secret" in r.text, r.text
    finally:
        s.stop()
        s.tmp.cleanup()


def test_a_webhook_url_is_checked_again_at_each_delivery(receiver):
    """SECURITY.md: addresses inside the network are refused at save and at each delivery. A
    receiver on the loopback is allowed while `webhooks.allowed_hosts` names it; once a reload
    drops it, the next delivery is refused before it connects, though the webhook was saved."""
    s = ToolgateServer(full_config=config(TIME_APP) + WEBHOOKS).start()
    try:
        w = hook(s, receiver, "/recheck", ["gateway.created"])
        assert api(s, "POST", "/v1/gateways", {"name": "before", "servers": ["time"]}).status_code == 201
        assert len(wait_for(lambda: receiver.at("/recheck"))) == 1, "delivered while the host is allowed"

        s.config_path.write_text(config(TIME_APP) + WEBHOOKS.replace('["127.0.0.1"]', "[]"))
        r = api(s, "POST", "/v1/admin/reload")
        assert r.status_code == 200 and any(c.startswith("webhooks") for c in r.json()["data"]["changed"]), r.text
        assert api(s, "POST", "/v1/gateways", {"name": "after", "servers": ["time"]}).status_code == 201

        def settled():
            listed = api(s, "GET", f"/v1/webhooks/{w['id']}/deliveries").json()["data"]["deliveries"]
            return len(listed) == 2 and all(d["status"] != "pending" for d in listed) and listed
        deliveries = wait_for(settled, 20.0)
        refused = [d for d in deliveries if d["status"] != "delivered"]
        assert len(refused) == 1 and refused[0]["status"] == "failed", deliveries
        assert "inside the network" in (refused[0].get("last_error") or ""), refused[0]
        assert refused[0].get("status_code") is None, "never connected: no status code"
        assert len(receiver.at("/recheck")) == 1, "the receiver got nothing after the reload"
    finally:
        s.stop()
        s.tmp.cleanup()


def test_deliveries_pending_at_a_kill_9_are_delivered_after_the_restart(receiver):
    receiver.plan["/later"] = [503]
    s = ToolgateServer(full_config=config(TIME_APP) + WEBHOOKS.replace("[1, 1]", "[2]")).start()
    try:
        hook(s, receiver, "/later", ["gateway.created"])
        for i in range(3):
            assert api(s, "POST", "/v1/gateways", {"name": f"kill-{i}", "servers": ["time"]}).status_code == 201
        first = wait_for(lambda: (d := receiver.at("/later")) and len(d) >= 3 and d)
        ids = {d["id"] for d in first}
        s.stop()  # SIGKILL, with three deliveries waiting 2 s for their retry
        receiver.plan["/later"] = [200]
        s.start()
        # The outbox was read back at start: each delivery is tried again at its time, under its id.
        got = wait_for(lambda: (d := receiver.at("/later")) and {x["id"] for x in d if x["status"] == 200} == ids and d,
                       15.0)
        assert {x["id"] for x in got if x["status"] == 200} == ids
    finally:
        s.stop()
        s.tmp.cleanup()


def test_an_endpoint_failing_too_long_is_disabled_and_error_critical_raised(receiver):
    receiver.plan["/dead"] = [500]
    cfg = config(TIME_APP) + WEBHOOKS.replace("[1, 1]", "[1, 1, 1, 1, 1]").replace(
        "  attempt_timeout_ms: 500\n", "  attempt_timeout_ms: 500\n  disable_after_secs: 2\n")
    s = ToolgateServer(full_config=cfg).start()
    try:
        dead = hook(s, receiver, "/dead", ["gateway.created"])
        hook(s, receiver, "/watch", ["error.critical"])
        api(s, "POST", "/v1/gateways", {"name": "to-a-dead-end", "servers": ["time"]})
        alarm = wait_for(lambda: receiver.at("/watch"), 15.0)[0]["body"]
        assert alarm["event"] == "error.critical", alarm
        assert alarm["data"]["kind"] == "webhook_disabled" and alarm["data"]["webhook_id"] == dead["id"], alarm
        listed = {w["id"]: w for w in api(s, "GET", "/v1/webhooks").json()["data"]["webhooks"]}
        assert listed[dead["id"]]["enabled"] is False and "failed for more than 2 s" in listed[dead["id"]]["disabled_reason"]
        tries = len(receiver.at("/dead"))
        assert 3 <= tries <= 5, tries
        time.sleep(1.5)
        assert len(receiver.at("/dead")) == tries, "no attempt after it was disabled"
        # Turned on again by its owner: healthy again, nothing failing.
        r = api(s, "PATCH", f"/v1/webhooks/{dead['id']}", {"enabled": True})
        assert r.json()["data"]["enabled"] is True and r.json()["data"]["failing_since"] is None, r.text
        assert not receiver.failures, receiver.failures
    finally:
        s.stop()
        s.tmp.cleanup()


def test_an_app_failing_calls_in_a_row_raises_error_critical_once(receiver):
    """An app that goes away: `alerts.app_failures` (3) failed calls in a row of an organisation
    raise one `error.critical` (`kind: app_failing`); more failures in the same run raise nothing
    more. The app is the real server-everything, killed once its tools are listed."""
    app = everything_server().start()
    cfg = config(TIME_APP + http_app("everything", app.url)) + WEBHOOKS + (
        "alerts:\n  app_failures: 3\n  app_failure_window_secs: 60\n")
    s = ToolgateServer(full_config=cfg).start()
    try:
        hook(s, receiver, "/critical", ["error.critical"])
        gw = api(s, "POST", "/v1/gateways", {"name": "with-a-dying-app", "servers": ["everything"],
                                       # every call reaches the app (no cached "unavailable")
                                       "configuration": {"cache_enabled": False}}).json()["data"]
        url = f"{s.base_url}/gateway/{gw['id']}/mcp"
        meta = {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}}

        def call() -> dict:
            params = {"name": "echo", "arguments": {"message": "hi"}, "_meta": meta}
            r = stateless_post(url, gw["api_key"], "tools/call", params)
            assert r.status_code == 200, r.text
            return r.json()

        answered = call()
        assert "hi" in json.dumps(answered.get("result")), answered
        time.sleep(1.2)
        assert not receiver.at("/critical"), "an app that answers is not failing"
        app.stop()
        # Each failed call is one or two failed exchanges (the call, the gateway's tool listing).
        for _ in range(3):
            assert call()["error"]["code"] == -32004
        alarm = wait_for(lambda: receiver.at("/critical"))[0]["body"]
        assert alarm["event"] == "error.critical", alarm
        data = alarm["data"]
        assert data["kind"] == "app_failing" and data["app_id"] == "everything", data
        assert data["failures"] == 3 and data["window_secs"] == 60 and data["since"], data
        assert "connect" in data["last_error"], data
        for _ in range(3):
            call()
        time.sleep(1.2)
        assert len(receiver.at("/critical")) == 1, "one event per run of failures"
        assert not receiver.failures, receiver.failures
    finally:
        app.stop()
        s.stop()
        s.tmp.cleanup()


def test_a_rotated_secret_signs_beside_the_old_one_for_its_grace_period_and_a_test_send_arrives(srv, receiver):
    w = hook(srv, receiver, "/rotating", ["gateway.deleted"])
    old = receiver.secrets["/rotating"]
    r = api(srv, "POST", f"/v1/webhooks/{w['id']}/rotate-secret", {"grace_period_hours": 1})
    assert r.status_code == 200 and r.json()["data"]["secret"] != old, r.text
    new = r.json()["data"]["secret"]
    assert r.json()["data"]["previous_secret_until"], r.text
    receiver.secrets["/rotating"] = new
    r = api(srv, "POST", f"/v1/webhooks/{w['id']}/test")
    assert r.status_code == 202 and r.json()["data"]["status"] == "pending", r.text
    got = wait_for(lambda: receiver.at("/rotating"))[0]
    assert got["body"]["event"] == "webhook.test" and got["body"]["data"] == {"webhook_id": w["id"]}, got
    # A receiver still on the old secret verifies too (two signatures in webhook-signature).
    assert len(got["headers"]["webhook-signature"].split(" ")) == 2, got["headers"]
    Webhook(old).verify(got["raw"], got["headers"])
    Webhook(new).verify(got["raw"], got["headers"])
    # Rotated without a grace period: the old secret no longer signs.
    r = api(srv, "POST", f"/v1/webhooks/{w['id']}/rotate-secret", {"grace_period_hours": 0})
    newest = r.json()["data"]["secret"]
    receiver.secrets["/rotating"] = newest
    api(srv, "POST", f"/v1/webhooks/{w['id']}/test")
    got = wait_for(lambda: (d := receiver.at("/rotating")) and len(d) >= 2 and d)[1]
    assert len(got["headers"]["webhook-signature"].split(" ")) == 1, got["headers"]
    with pytest.raises(WebhookVerificationError, match="^No matching signature found$"):
        Webhook(new).verify(got["raw"], got["headers"])
    assert not receiver.failures, receiver.failures


def test_a_secret_the_client_chose_keys_the_hmac_with_its_own_bytes(srv, receiver):
    """The specification's create body has `secret`, a string used for signing: a client's own
    string is accepted as it is, and the `sha256=` signature is the HMAC-SHA256 under the
    string's bytes of the body without its `signature` member (the bytes docs/events.md names)."""
    import hashlib
    import hmac

    secret = "spec-literal-secret-0123456789abcdef"
    r = api(srv, "POST", "/v1/webhooks", {"url": receiver.url("/plain"), "events": ["gateway.created"],
                                          "secret": secret})
    assert r.status_code == 201, r.text
    assert r.json()["data"]["secret"] == secret, r.text
    receiver.secrets["/plain"] = secret
    w = r.json()["data"]
    assert api(srv, "POST", f"/v1/webhooks/{w['id']}/test").status_code == 202
    got = wait_for(lambda: receiver.at("/plain"))[0]
    raw: bytes = got["raw"]
    text = raw.decode()
    payload = (text[: text.rindex(',"signature":')] + "}").encode()
    assert json.loads(payload) == {k: v for k, v in got["body"].items() if k != "signature"}, payload
    expected = "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
    assert got["body"]["signature"] == expected, (got["body"], expected)
    assert got["headers"]["x-webhook-signature"] == expected, got["headers"]
    # Standard Webhooks: the same key, given to the library as bytes.
    Webhook(secret.encode()).verify(raw, got["headers"])
    # What a client chose is the key itself, not a base64 text of one: it is no base64 text (the
    # library refuses it as a `whsec_` secret), and what its base64 letters decode to does not
    # verify.
    with pytest.raises(binascii.Error, match="Invalid base64-encoded string"):
        Webhook("whsec_" + secret)
    with pytest.raises(WebhookVerificationError, match="^No matching signature found$"):
        Webhook(base64.b64decode(secret.replace("-", "")[:32])).verify(raw, got["headers"])
    # Too short for an HMAC-SHA256 key (RFC 2104: at least the hash's 32 bytes), or not
    # printable: refused, naming the field.
    for bad in ["short-secret-0123456789", "x" * 31, "spec literal secret with spaces 0123456789", "whsec_!!"]:
        r = api(srv, "POST", "/v1/webhooks", {"url": receiver.url("/bad"), "events": ["*"], "secret": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["details"]["field"] == "secret", r.text
    assert not [f for f in receiver.failures if f.startswith("/plain")], receiver.failures


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_on_redis_a_delivery_of_a_killed_instance_is_taken_up_by_another(receiver, kind):
    """Two instances on one Redis (a single server, or a Redis Cluster): the instance that
    recorded a delivery is killed while the delivery waits for its retry; the other takes it up
    (once overdue) and delivers it, under the same webhook-id."""
    from test_redis_scaleout import instances, redis_config, redis_of

    receiver.plan["/orphan"] = [503]
    with redis_of(kind) as redis:
        cfg = redis_config(redis.url, "wh", redis.nodes) + WEBHOOKS.replace("[1, 1]", "[3]")
        with instances(cfg, 2) as (_, (a, b)):
            w = hook(a, receiver, "/orphan", ["gateway.created"])
            assert api(a, "POST", "/v1/gateways", {"name": "orphaned", "servers": ["time"]}).status_code == 201
            first = wait_for(lambda: receiver.at("/orphan"))[0]
            # Killed once it has recorded the failed attempt (and let go of the attempt's lock,
            # which a kill in mid-attempt would hold for its 300 s): the delivery then waits
            # for its retry, pending, with one attempt made.
            wait_for(lambda: [d for d in api(a, "GET", f"/v1/webhooks/{w['id']}/deliveries").json()["data"]["deliveries"]
                              if d["status"] == "pending" and d["attempts"] == 1])
            a.stop()  # SIGKILL, its delivery waiting 3 s for its retry
            receiver.plan["/orphan"] = [200]
            done = wait_for(lambda: [d for d in receiver.at("/orphan") if d["status"] == 200], 40.0)
            assert [d["id"] for d in done] == [first["id"]], done
