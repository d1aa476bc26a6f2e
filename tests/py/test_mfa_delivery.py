"""MFA by e-mail and by text message: enrolment sends a first code that activation gives back; a
protected action's challenge sends a code that `POST /auth/mfa/verify` takes once; web sign-in
asks for the code it sent; a code that could not be sent leaves backup codes as the way in;
sending is bounded per user.

Real peers: an SMTP server (`aiosmtpd`, the mailbox of test_alerts.py) that toolgate hands the
codes to, read back as delivered; an SMS provider stand-in, an HTTP server recording each JSON
post and its bearer token (the shape `sms:` documents), which can be told to fail.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time

import httpx2
import pytest
from aiosmtpd.controller import Controller

from mcp_helpers import Api
from test_alerts import Mailbox, free_port
from test_web_signin import OWNER, PASSWORD, Browser, set_password
from toolgate_harness import ToolgateServer

SMS_TOKEN = "sms-provider-token-0123456789"


class SmsProvider:
    """Records every message posted; answers `status` (200 unless told otherwise)."""

    def __init__(self):
        self.posts: list[tuple[str, dict]] = []
        self.status = 200
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                provider.posts.append((self.headers.get("authorization", ""), body))
                self.send_response(provider.status)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/messages"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def wait_for(probe, what: str, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"{what}: not seen in {seconds} s"
        time.sleep(0.05)


def code_in(text: str) -> str:
    found = re.search(r"\b(\d{6})\b", text)
    assert found, f"no six-digit code in {text!r}"
    return found.group(1)


@pytest.fixture(scope="module")
def mailbox():
    box = Mailbox()
    smtp = Controller(box, hostname="127.0.0.1", port=free_port())
    smtp.start()
    yield box, smtp.port
    smtp.stop()


@pytest.fixture(scope="module")
def sms():
    provider = SmsProvider()
    yield provider
    provider.server.shutdown()


def with_transports(mailbox_port: int, sms_url: str) -> ToolgateServer:
    """A server (not started: use it in `with`) that sends through the mailbox and the provider."""
    extra = (f"smtp:\n  host: 127.0.0.1\n  port: {mailbox_port}\n  tls: none\n  from: \"toolgate <mfa@toolgate.test>\"\n"
             f"sms:\n  url: {sms_url}\n  token_env: TOOLGATE_TEST_SMS_TOKEN\n  from: toolgate\n")
    return ToolgateServer(extra_yaml=extra, env={"TOOLGATE_TEST_SMS_TOKEN": SMS_TOKEN})


def last_mail_code(box: Mailbox, count: int) -> str:
    wait_for(lambda: len(box.messages) >= count, what=f"e-mail number {count}")
    _, rcpt, msg = box.messages[count - 1]
    assert rcpt == [OWNER], rcpt
    # The code is in the body only: subjects show on lock screens and in notification previews.
    assert msg["Subject"] == "toolgate verification code", msg["Subject"]
    code = code_in(msg.get_payload())
    assert code not in msg["Subject"]
    return code


def delete_gateway(srv: ToolgateServer, gw: str, mfa: str | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {srv.admin_key}"} | ({"X-MFA-Token": mfa} if mfa else {})
    return httpx2.delete(f"{srv.base_url}/v1/gateways/{gw}", headers=headers, timeout=30)


def test_email_codes_protect_actions_and_sign_in(mailbox, sms):
    box, port = mailbox
    box.messages.clear()
    with with_transports(port, sms.url) as srv:
        api = Api(srv)
        bad = api.call("POST", "/v1/auth/mfa/enroll", {"method": "email", "phone_number": "+15551234567"})
        assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "phone_number", bad.text
        enrolled = api.ok("POST", "/v1/auth/mfa/enroll", {"method": "email"})["data"]
        assert enrolled["method"] == "email" and enrolled["sent_to"] == "o***@localhost", enrolled
        assert "secret" not in enrolled and len(enrolled["backup_codes"]) == 10, enrolled
        first = last_mail_code(box, 1)
        wrong = "000000" if first != "000000" else "111111"
        r = api.call("POST", "/v1/auth/mfa/activate", {"code": wrong})
        assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "code", r.text
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is False, "not active before the code"
        api.ok("POST", "/v1/auth/mfa/activate", {"code": first})
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is True

        gw, _ = api.create_gateway(["time"])
        refused = delete_gateway(srv, gw)
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "MFA_REQUIRED" and "sent by e-mail to o***@localhost" in error["message"], error
        challenge = error["challenge_id"]
        code = last_mail_code(box, 2)
        # A sent code answers its challenge; in the header it is refused (with a new challenge).
        in_header = delete_gateway(srv, gw, mfa=code)
        assert in_header.status_code == 403 and "POST it to /auth/mfa/verify" in in_header.text, in_header.text
        last_mail_code(box, 3)
        wrong = api.call("POST", "/v1/auth/mfa/verify", {"challenge_id": challenge, "code": "999999" if code != "999999" else "888888"})
        assert wrong.status_code == 400, wrong.text
        token = api.ok("POST", "/v1/auth/mfa/verify", {"challenge_id": challenge, "code": code})["data"]["mfa_token"]
        again = api.call("POST", "/v1/auth/mfa/verify", {"challenge_id": challenge, "code": code})
        assert again.status_code == 400 and again.json()["error"]["details"]["field"] == "challenge_id", "a code works once"
        assert delete_gateway(srv, gw, mfa=token).status_code == 200
        assert api.call("GET", f"/v1/gateways/{gw}").status_code == 404, "the protected action happened"

        # Web sign-in asks for the code it sent, and takes it.
        assert set_password(srv, PASSWORD, mfa=enrolled["backup_codes"][0]).status_code == 200
        b = Browser(srv)
        page = b.sign_in(OWNER, PASSWORD)
        assert page.status_code == 200 and "sent by e-mail to o***@localhost" in page.text, page.text
        assert "toolgate_session" not in b.jar
        challenge = re.search(r'name="challenge_id" value="([^"]+)"', page.text).group(1)
        code = last_mail_code(box, 4)
        form = {"csrf": b.jar["toolgate_csrf"], "challenge_id": challenge, "next": ""}
        assert b.request("POST", "/auth/signin/mfa", data=form | {"code": "123456" if code != "123456" else "654321"}).status_code == 401
        good = b.request("POST", "/auth/signin/mfa", data=form | {"code": code})
        assert good.status_code == 303 and "toolgate_session" in b.jar, good.text
        assert len(box.messages) == 4, "no code sent that was not asked for"


def test_sms_codes_through_the_provider_and_backup_codes_when_it_fails(mailbox, sms):
    _, port = mailbox
    sms.posts.clear()
    with with_transports(port, sms.url) as srv:
        api = Api(srv)
        for body, field in [({"method": "sms"}, "phone_number"),
                            ({"method": "sms", "phone_number": "5551234567"}, "phone_number"),
                            ({"method": "sms", "phone_number": "+0551234567"}, "phone_number"),
                            ({"method": "totp", "phone_number": "+15551234567"}, "phone_number"),
                            ({"method": "pigeon"}, "method")]:
            r = api.call("POST", "/v1/auth/mfa/enroll", body)
            assert r.status_code == 400 and field in r.json()["error"]["details"]["field"], (body, r.text)
        assert sms.posts == [], "nothing sent for a refused enrolment"

        enrolled = api.ok("POST", "/v1/auth/mfa/enroll", {"method": "sms", "phone_number": "+15551234567"})["data"]
        assert enrolled["method"] == "sms" and enrolled["sent_to"] == "+*******4567", enrolled
        wait_for(lambda: len(sms.posts) == 1, what="the enrolment's text message")
        auth, message = sms.posts[0]
        assert auth == f"Bearer {SMS_TOKEN}", auth
        assert message["to"] == "+15551234567" and message["from"] == "toolgate", message
        api.ok("POST", "/v1/auth/mfa/activate", {"code": code_in(message["body"])})

        gw, _ = api.create_gateway(["time"])
        refused = delete_gateway(srv, gw).json()["error"]
        assert refused["code"] == "MFA_REQUIRED" and "sent by text message to +*******4567" in refused["message"], refused
        wait_for(lambda: len(sms.posts) == 2, what="the challenge's text message")
        code = code_in(sms.posts[1][1]["body"])
        token = api.ok("POST", "/v1/auth/mfa/verify",
                       {"challenge_id": refused["challenge_id"], "code": code})["data"]["mfa_token"]

        # The provider fails: the challenge says so, no six-digit code answers it, a backup code does.
        sms.status = 503
        try:
            failed = delete_gateway(srv, gw).json()["error"]
            assert failed["code"] == "MFA_REQUIRED" and "could not be sent" in failed["message"], failed
            guess = api.call("POST", "/v1/auth/mfa/verify", {"challenge_id": failed["challenge_id"], "code": code})
            assert guess.status_code == 400, "no code was sent, so none answers"
            backup = api.ok("POST", "/v1/auth/mfa/verify", {"challenge_id": failed["challenge_id"],
                                                            "code": enrolled["backup_codes"][0]})["data"]["mfa_token"]
        finally:
            sms.status = 200
        assert delete_gateway(srv, gw, mfa=backup).status_code == 200
        assert delete_gateway(srv, gw, mfa=token).status_code == 404, "the gateway is gone"

        # Five codes per user per ten minutes: the enrolment, a challenge and the failed one make
        # three; two more are sent, the next is not, and its challenge says to use a backup code.
        assert len(sms.posts) == 3, sms.posts
        gw2, _ = api.create_gateway(["time"])
        for _ in range(2):
            sent = delete_gateway(srv, gw2).json()["error"]
            assert "sent by text message" in sent["message"], sent
        sixth = delete_gateway(srv, gw2).json()["error"]
        assert sixth["code"] == "MFA_REQUIRED" and "Too many codes were sent" in sixth["message"], sixth
        time.sleep(0.3)
        assert len(sms.posts) == 5, "the sixth code was not sent"


def test_an_enrolment_whose_first_code_cannot_be_sent_is_refused_and_leaves_nothing(mailbox, sms):
    _, port = mailbox
    sms.posts.clear()
    with with_transports(port, sms.url) as srv:
        api = Api(srv)
        sms.status = 503
        try:
            r = api.call("POST", "/v1/auth/mfa/enroll", {"method": "sms", "phone_number": "+15551234567"})
        finally:
            sms.status = 200
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["details"]["field"] == "phone_number" and "could not be sent" in error["message"], error
        assert len(sms.posts) == 1, "the provider was asked once"
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is False
        r = api.call("POST", "/v1/auth/mfa/activate", {"code": code_in(sms.posts[0][1]["body"])})
        assert r.status_code == 400 and "enroll" in r.text, f"no enrolment was kept: {r.text}"
        # The provider back: the same enrolment goes through.
        enrolled = api.ok("POST", "/v1/auth/mfa/enroll", {"method": "sms", "phone_number": "+15551234567"})["data"]
        assert enrolled["method"] == "sms", enrolled

    # E-mail through an SMTP server that is not there: the field is `method`.
    with ToolgateServer(extra_yaml=f"smtp:\n  host: 127.0.0.1\n  port: {free_port()}\n  tls: none\n"
                                   "  from: mfa@toolgate.test\n") as srv:
        api = Api(srv)
        r = api.call("POST", "/v1/auth/mfa/enroll", {"method": "email"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["details"]["field"] == "method" and "could not be sent" in error["message"], error
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is False


def test_each_method_needs_its_transport():
    with ToolgateServer() as srv:
        api = Api(srv)
        for body, word in [({"method": "email"}, "smtp"), ({"method": "sms", "phone_number": "+15551234567"}, "sms")]:
            r = api.call("POST", "/v1/auth/mfa/enroll", body)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["details"]["field"] == "method" and word in r.text, r.text
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is False
        # The authenticator app needs neither; no body is the authenticator app.
        assert "secret" in api.ok("POST", "/v1/auth/mfa/enroll")["data"]
