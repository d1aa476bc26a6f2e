"""Alerts (issue 16): a key crossing an alert's share of its rate limit notifies Slack and
e-mail once per crossing, through the outbox, and raises `usage.limit_warning` for the webhooks.

Real peers: an SMTP server (`aiosmtpd`, pinned in requirements.txt) that toolgate hands the
e-mail to, read back as delivered; a Slack-like HTTP receiver that answers 500 to the first post
(so the notification is retried) and 200 after; the webhook receiver of test_webhooks.py, which
verifies every delivery with the `standardwebhooks` library.
"""

from __future__ import annotations

import email
import http.server
import json
import socket
import threading
import time

import httpx2
import pytest
from aiosmtpd.controller import Controller

from mcp_helpers import TIME_APP, config
from test_webhooks import Receiver, wait_for
from toolgate_harness import ToolgateServer


class Mailbox:
    """An aiosmtpd handler keeping every message it accepts."""

    def __init__(self):
        self.messages: list[tuple[str, list[str], email.message.Message]] = []
        # Recipients refused this many more times (then taken): a mailbox that is full for a while.
        self.refuse: dict[str, int] = {}

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        if self.refuse.get(address, 0) > 0:
            self.refuse[address] -= 1
            return "452 4.2.2 mailbox full, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), email.message_from_bytes(envelope.content)))
        return "250 OK"


class Slack:
    """A Slack incoming webhook stand-in: records each JSON post; answers 500 first, then 200."""

    def __init__(self):
        self.posts: list[dict] = []
        slack = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                slack.posts.append(body)
                self.send_response(500 if len(slack.posts) == 1 else 200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/secretpart"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def peers():
    mailbox = Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    slack, hooks = Slack(), Receiver()
    yield mailbox, smtp.port, slack, hooks
    smtp.stop()
    slack.server.shutdown()
    hooks.server.shutdown()


def srv_config(smtp_port: int) -> str:
    return config(TIME_APP) + (
        "webhooks:\n  allowed_hosts: [\"127.0.0.1\"]\n  retry_schedule_secs: [1, 1, 1]\n  attempt_timeout_ms: 2000\n"
        "alerts:\n  limit_warning_percent: 80\n"
        f"smtp:\n  host: 127.0.0.1\n  port: {smtp_port}\n  tls: none\n  from: \"toolgate <alerts@toolgate.test>\"\n"
        # The first-start organisation's tier: room for the test's own calls, and a global bucket of 40
        # that a burst of calls fills.
        "rate_limits:\n  tiers:\n    enterprise: { requests_per_hour: unlimited, requests_per_minute: 600, burst: 40, concurrent: 10 }\n"
        "  webhook: { requests_per_hour: unlimited, requests_per_minute: 600, burst: 100 }\n")


@pytest.fixture(scope="module")
def srv(peers):
    s = ToolgateServer(full_config=srv_config(peers[1])).start()
    yield s
    s.stop()
    s.tmp.cleanup()


def api(srv, method, path, body=None, key=None):
    return httpx2.request(method, srv.base_url + path, json=body, timeout=30,
                          headers={"Authorization": f"Bearer {key or srv.admin_key}"})


def test_bad_alerts_are_refused_naming_the_field(srv):
    cases = [
        ({"type": "cpu", "threshold": 80, "notification": {"email": "ops@example.com"}}, "type"),
        ({"type": "rate_limit", "threshold": 0, "notification": {"email": "ops@example.com"}}, "threshold"),
        ({"type": "rate_limit", "threshold": 101, "notification": {"email": "ops@example.com"}}, "threshold"),
        ({"type": "rate_limit", "threshold": 80, "notification": {}}, "notification"),
        ({"type": "rate_limit", "threshold": 80, "notification": {"email": "not an address"}}, "notification.email"),
        # Inside the network and not an allowed host: refused like a webhook URL.
        ({"type": "rate_limit", "threshold": 80, "notification": {"slack": "https://10.0.0.1/hook"}},
         "notification.slack"),
        ({"type": "rate_limit", "threshold": 80, "notification": {"slack": "https://169.254.169.254/x"}},
         "notification.slack"),
    ]
    for body, field in cases:
        r = api(srv, "POST", "/v1/alerts", body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR", r.text
        assert field in json.dumps(r.json()["error"]), (field, r.text)
    assert api(srv, "GET", "/v1/alerts/alert_nope").status_code == 404


def test_email_needs_smtp():
    s = ToolgateServer(full_config=config(TIME_APP)).start()
    try:
        r = api(s, "POST", "/v1/alerts", {"type": "rate_limit", "threshold": 50,
                                          "notification": {"email": "ops@example.com"}})
        assert r.status_code == 400 and "smtp" in r.text, r.text
    finally:
        s.stop()
        s.tmp.cleanup()


def test_a_crossing_notifies_once_on_every_channel(srv, peers):
    mailbox, _, slack, hooks = peers
    hook = api(srv, "POST", "/v1/webhooks", {"url": hooks.url("/usage"), "events": ["usage.limit_warning"]})
    assert hook.status_code == 201, hook.text
    hooks.secrets["/usage"] = hook.json()["data"]["secret"]
    created = api(srv, "POST", "/v1/alerts", {"type": "rate_limit", "threshold": 50,
                                              "notification": {"email": "ops@example.com", "slack": slack.url}})
    assert created.status_code == 201, created.text
    alert = created.json()["data"]
    assert alert["threshold"] == 50 and alert["type"] == "rate_limit"
    # The Slack URL is a secret: shown by its host only, on creation and after.
    assert "secretpart" not in created.text and alert["notification"]["slack"].startswith("http://127.0.0.1")
    assert "secretpart" not in api(srv, "GET", "/v1/alerts").text
    assert alert["last_triggered_at"] is None

    key = api(srv, "POST", "/v1/api-keys", {"name": "busy", "scopes": ["gateways:read"]}).json()["data"]
    first = httpx2.get(srv.base_url + "/v1/gateways", headers={"Authorization": f"Bearer {key['key']}"})
    limit = int(first.headers["x-ratelimit-limit"])
    assert limit == 40, first.headers
    # Well past the threshold, up to refusals, in one burst: one crossing. The bucket refills 10
    # a second: a busy machine that sends slower than that gets its refusal a little later.
    with httpx2.Client(base_url=srv.base_url, headers={"Authorization": f"Bearer {key['key']}"}) as c:
        statuses: list[int] = []
        while 429 not in statuses and len(statuses) < 10 * limit:
            statuses.append(c.get("/v1/gateways").status_code)
    assert 429 in statuses and set(statuses) == {200, 429}, statuses

    # E-mail, handed to the SMTP server.
    wait_for(lambda: mailbox.messages, 15)
    sender, rcpts, msg = mailbox.messages[0]
    assert sender == "alerts@toolgate.test" and rcpts == ["ops@example.com"]
    assert key["id"] in msg["Subject"] and alert["id"] in msg["Subject"], msg["Subject"]
    assert '"usage_percent"' in msg.get_payload(decode=True).decode()
    # Slack: the first post answered 500, so a second one (retried) came and was taken.
    wait_for(lambda: len(slack.posts) >= 2, 15)
    assert slack.posts[0] == slack.posts[1], "a retry sends the same message"
    assert key["id"] in slack.posts[0]["text"] and "50 %" in slack.posts[0]["text"], slack.posts[0]
    # The webhook: `usage.limit_warning` for the alert (50 %) and for the default share (80 %).
    warnings = wait_for(lambda: len(hooks.at("/usage")) >= 2 and hooks.at("/usage"), 15)
    by_alert = {d["body"]["data"]["alert_id"]: d["body"]["data"] for d in warnings}
    assert set(by_alert) == {alert["id"], None}, by_alert
    assert by_alert[alert["id"]]["threshold"] == 50 and by_alert[None]["threshold"] == 80
    for data in by_alert.values():
        assert data["key_id"] == key["id"] and data["bucket"] == "global" and data["type"] == "rate_limit"
        assert data["usage_percent"] >= data["threshold"]
    assert not hooks.failures, hooks.failures

    # The alert shows when it fired and its notifications, both delivered.
    def delivered():
        got = api(srv, "GET", f"/v1/alerts/{alert['id']}").json()["data"]
        return got if len(got["notifications"]) == 2 and all(
            n["status"] == "delivered" for n in got["notifications"]) else None
    got = wait_for(delivered, 15)
    assert got["last_triggered_at"] is not None
    assert {n["channel"] for n in got["notifications"]} == {"slack", "email"}
    slack_note = next(n for n in got["notifications"] if n["channel"] == "slack")
    assert slack_note["attempts"] == 2, slack_note

    # Held at the limit: no second notification (one per crossing, not one per request).
    with httpx2.Client(base_url=srv.base_url, headers={"Authorization": f"Bearer {key['key']}"}) as c:
        for _ in range(20):
            c.get("/v1/gateways")
            time.sleep(0.05)
    time.sleep(2)
    assert len(mailbox.messages) == 1 and len(slack.posts) == 2, (mailbox.messages, slack.posts)
    assert len(hooks.at("/usage")) == 2

    # Deleted: gone from the list and its detail.
    assert api(srv, "DELETE", f"/v1/alerts/{alert['id']}").status_code == 200
    assert api(srv, "GET", f"/v1/alerts/{alert['id']}").status_code == 404
    assert api(srv, "GET", "/v1/alerts").json()["data"]["alerts"] == []


def test_a_gateway_near_its_quota_raises_one_warning(srv, peers):
    hooks = peers[3]
    hook = api(srv, "POST", "/v1/webhooks", {"url": hooks.url("/gateway-usage"), "events": ["usage.limit_warning"]})
    assert hook.status_code == 201, hook.text
    hooks.secrets["/gateway-usage"] = hook.json()["data"]["secret"]
    gw = api(srv, "POST", "/v1/gateways", {"name": "near-quota", "servers": ["time"],
                                            "configuration": {"rate_limit": 10}})
    assert gw.status_code == 201, gw.text
    gw = gw.json()["data"]
    url = f"{srv.base_url}/gateway/{gw['id']}/mcp"
    headers = {"X-API-Key": gw["api_key"], "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    # The quota's windows are calendar minutes: start early in one, so that all calls share it.
    while time.time() % 60 > 45:
        time.sleep(0.5)
    # 7 of 10: below the 80 % share; nothing.
    with httpx2.Client() as c:
        for _ in range(7):
            c.post(url, headers=headers, json=ping)
        time.sleep(1.5)
        assert hooks.at("/gateway-usage") == []
        # The 8th reaches it; the rest of the window (and its refusals) add nothing.
        statuses = [c.post(url, headers=headers, json=ping).status_code for _ in range(6)]
    assert statuses.count(429) == 3, statuses
    got = wait_for(lambda: hooks.at("/gateway-usage"), 10)
    time.sleep(1.5)
    assert len(hooks.at("/gateway-usage")) == 1, hooks.at("/gateway-usage")
    data = got[0]["body"]["data"]
    assert data["type"] == "gateway_quota" and data["gateway_id"] == gw["id"] and data["alert_id"] is None
    assert (data["threshold"], data["limit"], data["usage_percent"]) == (80, 10, 80), data
    assert not hooks.failures, hooks.failures


def test_an_email_the_server_refuses_is_retried(srv, peers):
    mailbox = peers[0]
    mailbox.refuse["full@example.com"] = 1
    created = api(srv, "POST", "/v1/alerts", {"type": "rate_limit", "threshold": 30,
                                              "notification": {"email": "full@example.com"}})
    assert created.status_code == 201, created.text
    alert = created.json()["data"]
    key = api(srv, "POST", "/v1/api-keys", {"name": "busy-2", "scopes": ["gateways:read"]}).json()["data"]
    with httpx2.Client(base_url=srv.base_url, headers={"Authorization": f"Bearer {key['key']}"}) as c:
        for _ in range(20):
            c.get("/v1/gateways")

    def delivered():
        got = api(srv, "GET", f"/v1/alerts/{alert['id']}").json()["data"]["notifications"]
        return got if got and got[0]["status"] == "delivered" else None
    notes = wait_for(delivered, 20)
    assert len(notes) == 1 and notes[0]["channel"] == "email"
    assert notes[0]["attempts"] == 2, notes[0]
    mine = [m for m in mailbox.messages if m[1] == ["full@example.com"]]
    assert len(mine) == 1 and key["id"] in mine[0][2]["Subject"], mailbox.messages
    assert api(srv, "DELETE", f"/v1/alerts/{alert['id']}").status_code == 200
