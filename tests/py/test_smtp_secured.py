"""E-mail over a secured, authenticated SMTP session: `smtp.tls: starttls` (plain, then upgraded)
and `smtp.tls: tls` (TLS from the first byte), each with AUTH (`username`, `password_env`), the
relay's certificate issued by a private CA that `smtp.ca_file` names. A wrong password is refused
by the relay, and toolgate says so to the caller whose e-mail was not sent.

Real peer: an SMTP server (`aiosmtpd`) with a certificate from a CA made per run, which requires
STARTTLS before anything else (or speaks TLS only), offers AUTH only over TLS and requires it
before a message, and checks the user name and the password. What it records is read back: the
TLS version of the session each message came over, and the login that sent it. The path taken is
MFA enrolment by e-mail (`POST /v1/auth/mfa/enroll`), which sends a code at once and reports a
failed sending in its answer; alerts' notifications use the same mailer (src/outbound/courier).
"""

from __future__ import annotations

import contextlib
import email
import ssl

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from mcp_helpers import Api
from test_alerts import free_port
from test_edge_tls import Ca, _name
from test_mfa_delivery import code_in, wait_for
from test_web_signin import OWNER
from toolgate_harness import ToolgateServer

# aiosmtpd's own warnings, not toolgate's: AUTH without its STARTTLS check (the implicit-TLS relay,
# whose session is TLS from the first byte) and its deprecated `login_data` it sets itself.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning"),
    pytest.mark.filterwarnings("ignore:Session.login_data is deprecated:DeprecationWarning"),
]

USER = "toolgate-relay"
PASSWORD = "relay-password-0123456789"


class SecuredMailbox:
    """An aiosmtpd handler and authenticator: keeps each accepted message with the TLS version
    of its session and the login that sent it, and each AUTH attempt with its outcome."""

    def __init__(self):
        self.messages: list[tuple[str | None, str | None, list[str], email.message.Message]] = []
        self.logins: list[tuple[str, str, bool, bool]] = []

    def authenticate(self, server, session, envelope, mechanism, auth_data):
        assert isinstance(auth_data, LoginPassword), auth_data
        ok = auth_data.login == USER.encode() and auth_data.password == PASSWORD.encode()
        encrypted = server.transport.get_extra_info("ssl_object") is not None
        self.logins.append((mechanism, auth_data.login.decode(), ok, encrypted))
        # handled=False: aiosmtpd answers the refusal itself (535 5.7.8).
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        tls = server.transport.get_extra_info("ssl_object")
        login = session.auth_data.login.decode() if session.authenticated else None
        self.messages.append((tls.version() if tls else None, login, list(envelope.rcpt_tos),
                              email.message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """(the private CA's certificate, the relay's certificate for 127.0.0.1, its key)."""
    d = tmp_path_factory.mktemp("smtp-pki")
    ca = Ca("toolgate test SMTP CA")
    cert, key, _ = ca.issue(d, "relay", _name("relay.test"), ["localhost"], ["127.0.0.1"])
    return ca.write(d / "ca.pem"), cert, key


@contextlib.contextmanager
def relay(mode: str, cert, key):
    """A running relay for `smtp.tls: <mode>` that requires TLS and AUTH: (mailbox, port)."""
    box = SecuredMailbox()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    common = dict(hostname="127.0.0.1", port=free_port(), authenticator=box.authenticate, auth_required=True)
    if mode == "starttls":
        controller = Controller(box, tls_context=context, require_starttls=True, auth_require_tls=True, **common)
    else:
        # TLS from the first byte: aiosmtpd's `auth_require_tls` knows STARTTLS only (it would hide
        # AUTH here), so the authenticator records that the session was encrypted instead.
        controller = Controller(box, ssl_context=context, auth_require_tls=False, **common)
    controller.start()
    try:
        yield box, controller.port
    finally:
        controller.stop()


def sender(mode: str, port: int, ca, password: str) -> ToolgateServer:
    """A server (use it in `with`) whose e-mail goes to the relay as USER with `password`."""
    extra = (f"smtp:\n  host: 127.0.0.1\n  port: {port}\n  tls: {mode}\n  ca_file: {ca}\n"
             f"  username: {USER}\n  password_env: TOOLGATE_TEST_SMTP_PASSWORD\n"
             "  from: \"toolgate <mfa@toolgate.test>\"\n")
    return ToolgateServer(extra_yaml=extra, env={"TOOLGATE_TEST_SMTP_PASSWORD": password})


@pytest.mark.parametrize("mode", ["starttls", "tls"])
def test_mail_goes_over_tls_with_the_configured_login(pki, mode):
    ca, cert, key = pki
    with relay(mode, cert, key) as (box, port), sender(mode, port, ca, PASSWORD) as srv:
        api = Api(srv)
        enrolled = api.ok("POST", "/v1/auth/mfa/enroll", {"method": "email"})["data"]
        assert enrolled["method"] == "email", enrolled
        wait_for(lambda: box.messages, what="the enrolment e-mail")
        version, login, rcpt, msg = box.messages[0]
        assert version in ("TLSv1.2", "TLSv1.3"), f"the message came over {version}, not TLS"
        assert login == USER and rcpt == [OWNER], (login, rcpt)
        assert msg["Subject"] == "toolgate verification code", msg["Subject"]
        # AUTH once, over TLS, with the right password; the code it carried works.
        assert [(u, ok, tls) for _, u, ok, tls in box.logins] == [(USER, True, True)], box.logins
        api.ok("POST", "/v1/auth/mfa/activate", {"code": code_in(msg.get_payload())})
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is True


@pytest.mark.parametrize("mode", ["starttls", "tls"])
def test_a_wrong_password_is_refused_and_the_caller_told(pki, mode):
    ca, cert, key = pki
    with relay(mode, cert, key) as (box, port), sender(mode, port, ca, "not-" + PASSWORD) as srv:
        api = Api(srv)
        r = api.call("POST", "/v1/auth/mfa/enroll", {"method": "email"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["details"]["field"] == "method", error
        # The relay's own answer (535, RFC 4954's "authentication credentials invalid") is named.
        assert "the first code could not be sent" in error["message"] and "535" in error["message"], error
        assert [(u, ok, tls) for _, u, ok, tls in box.logins] == [(USER, False, True)], box.logins
        assert box.messages == [], "nothing was delivered"
        assert api.ok("GET", "/v1/auth/debug")["data"]["mfa_enabled"] is False


def test_the_relay_s_certificate_must_chain_to_a_trusted_ca(pki, tmp_path):
    """Without `ca_file` the private CA is not trusted (only the public roots are): the session
    is not secured, so nothing is sent and the caller is told."""
    _, cert, key = pki
    with relay("tls", cert, key) as (box, port):
        extra = (f"smtp:\n  host: 127.0.0.1\n  port: {port}\n  tls: tls\n  username: {USER}\n"
                 "  password_env: TOOLGATE_TEST_SMTP_PASSWORD\n  from: mfa@toolgate.test\n")
        with ToolgateServer(extra_yaml=extra, env={"TOOLGATE_TEST_SMTP_PASSWORD": PASSWORD}) as srv:
            r = Api(srv).call("POST", "/v1/auth/mfa/enroll", {"method": "email"})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["details"]["field"] == "method" and "could not be sent" in error["message"], error
            assert box.logins == [] and box.messages == [], "no password and no message crossed an untrusted session"


@pytest.mark.parametrize("case", ["no certificate in it", "with tls: none"])
def test_a_ca_file_that_cannot_serve_stops_the_start(pki, tmp_path, case):
    if case == "no certificate in it":
        ca = tmp_path / "empty.pem"
        ca.write_text("no certificate here\n")
        tls, says = "tls", "no PEM certificate"
    else:
        ca, tls, says = pki[0], "none", "only with tls: starttls or tls"
    srv = ToolgateServer(extra_yaml=f"smtp:\n  host: 127.0.0.1\n  tls: {tls}\n  ca_file: {ca}\n  from: mfa@toolgate.test\n")
    try:
        with pytest.raises(RuntimeError, match="exited during startup"):
            srv.start()
        assert "smtp.ca_file" in srv.stderr_text() and says in srv.stderr_text(), srv.stderr_text()[-2000:]
    finally:
        srv.tmp.cleanup()
