"""Web sign-in (`{auth_url}`, default `/auth`): e-mail and password (argon2id), the web session's
cookie, CSRF on every form, guessing bounds, MFA at sign-in, the session cap and idle expiry,
and a user listing and ending its sessions through the API. Against the real binary over HTTP,
as a browser would drive the pages (cookies handled by the test: they are `Secure`, and these
requests are plain HTTP on the loopback).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import struct
import time

import httpx2
import pytest

from mcp_helpers import Api, ToolgateServer

OWNER = "owner@localhost"  # the user of TOOLGATE_ADMIN_KEY
PASSWORD = "correct horse battery staple"


def cookies_of(r: httpx2.Response) -> dict[str, str]:
    """name -> the whole Set-Cookie line, for each cookie the response sets."""
    return {line.split("=", 1)[0]: line for line in r.headers.get_list("set-cookie")}


def value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


class Browser:
    """One browser: its own cookie jar, no redirects followed."""

    def __init__(self, srv: ToolgateServer, user_agent: str = "pytest-browser"):
        self.base = srv.base_url
        self.jar: dict[str, str] = {}
        self.http = httpx2.Client(timeout=30, follow_redirects=False, headers={"User-Agent": user_agent})

    def request(self, method: str, path: str, **kw) -> httpx2.Response:
        cookie = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        headers = kw.pop("headers", {}) | ({"Cookie": cookie} if cookie else {})
        r = self.http.request(method, self.base + path, headers=headers, **kw)
        for name, line in cookies_of(r).items():
            if "Max-Age=0" in line:
                self.jar.pop(name, None)
            else:
                self.jar[name] = value(line)
        return r

    def form_csrf(self, path: str = "/auth/signin") -> str:
        r = self.request("GET", path)
        assert r.status_code == 200, r.text
        field = re.search(r'name="csrf" value="([^"]+)"', r.text)
        assert field and field.group(1) == self.jar["toolgate_csrf"], "the form's token is the cookie's"
        return field.group(1)

    def sign_in(self, email: str, password: str, next_: str = "") -> httpx2.Response:
        csrf = self.form_csrf()
        return self.request("POST", "/auth/signin", data={"csrf": csrf, "email": email, "password": password, "next": next_})


def set_password(srv: ToolgateServer, new: str, current: str | None = None, mfa: str | None = None) -> httpx2.Response:
    body = {"new_password": new} | ({"current_password": current} if current is not None else {})
    headers = {"Authorization": f"Bearer {srv.admin_key}"} | ({"X-MFA-Token": mfa} if mfa else {})
    return httpx2.put(srv.base_url + "/v1/user/password", json=body, headers=headers, timeout=30)


def totp(secret_b32: str, at: float | None = None) -> str:
    """RFC 6238 (SHA-1, 6 digits, 30 s), as an authenticator app computes it."""
    key = base64.b32decode(secret_b32 + "=" * (-len(secret_b32) % 8))
    digest = hmac.new(key, struct.pack(">Q", int((at or time.time()) // 30)), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    return f"{(struct.unpack('>I', digest[offset:offset + 4])[0] & 0x7FFFFFFF) % 1_000_000:06d}"


def test_a_user_signs_in_with_a_password_holds_a_session_and_signs_out():
    with ToolgateServer() as srv:
        api = Api(srv)
        weak = set_password(srv, "owner12345678")
        assert weak.status_code == 400 and weak.json()["error"]["details"]["field"] == "new_password", weak.text
        assert set_password(srv, PASSWORD).status_code == 200
        again = set_password(srv, "another long passphrase")
        assert again.status_code == 400 and again.json()["error"]["details"]["field"] == "current_password", again.text

        b = Browser(srv)
        page = b.request("GET", "/auth/signin")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert page.headers["content-security-policy"].startswith("default-src 'none'"), page.headers
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        csrf_cookie = cookies_of(page)["toolgate_csrf"]
        for attribute in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/auth"):
            assert attribute in csrf_cookie, csrf_cookie

        # CSRF: a form without the token, or with another than the cookie's, is refused.
        csrf = b.form_csrf()
        form = {"email": OWNER, "password": PASSWORD}
        assert b.request("POST", "/auth/signin", data=form).status_code == 403
        assert b.request("POST", "/auth/signin", data=form | {"csrf": "x" * 64}).status_code == 403
        other = Browser(srv)
        assert other.request("POST", "/auth/signin", data=form | {"csrf": csrf}).status_code == 403, "no cookie"

        # Wrong password and unknown e-mail: the same refusal.
        wrong = b.sign_in(OWNER, "not the password at all")
        unknown = b.sign_in("nobody@example.com", PASSWORD)
        assert wrong.status_code == unknown.status_code == 401
        assert "The e-mail or the password is wrong." in wrong.text and "The e-mail or the password is wrong." in unknown.text
        assert "toolgate_session" not in b.jar

        # Signed in: a session cookie, then where `next` said (a path here only).
        r = b.sign_in(OWNER.upper(), PASSWORD, next_="//evil.example/x")
        assert r.status_code == 303 and r.headers["location"] == "/auth/", r.headers
        session_cookie = cookies_of(r)["toolgate_session"]
        for attribute in ("HttpOnly", "Secure", "SameSite=Lax", "Path=/", "Max-Age=86400"):
            assert attribute in session_cookie, session_cookie
        account = b.request("GET", "/auth/")
        assert account.status_code == 200 and f'<strong id="email">{OWNER}</strong>' in account.text, account.text
        assert Browser(srv).request("GET", "/auth/").headers["location"] == "/auth/signin", "no cookie: sign in"
        r = b.sign_in(OWNER, PASSWORD, next_="/auth/?from=test")
        assert r.headers["location"] == "/auth/?from=test"

        # The API lists the user's sessions (never their tokens) and ends one.
        listed = api.ok("GET", "/v1/user/web-sessions")["data"]["sessions"]
        assert len(listed) == 2 and all(s["user_agent"] == "pytest-browser" and s["ip"] == "127.0.0.1" for s in listed), listed
        assert b.jar["toolgate_session"] not in str(listed)
        first = listed[0]["id"]
        assert api.call("DELETE", f"/v1/user/web-sessions/{first}").status_code == 200
        assert api.call("DELETE", f"/v1/user/web-sessions/{first}").status_code == 404
        assert [s["id"] for s in api.ok("GET", "/v1/user/web-sessions")["data"]["sessions"]] == [listed[1]["id"]]
        # A gateway's key speaks for no person.
        _, gw_key = api.create_gateway(["time"])
        r = api.call("GET", "/v1/user/web-sessions", key=gw_key)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED", r.text

        # Sign-out ends the session (a form: with its CSRF token).
        account = b.request("GET", "/auth/")
        csrf = re.search(r'name="csrf" value="([^"]+)"', account.text).group(1)
        kept = b.jar["toolgate_session"]
        out = b.request("POST", "/auth/signout", data={"csrf": csrf})
        assert out.status_code == 303 and "toolgate_session" not in b.jar, out.headers
        b.jar["toolgate_session"] = kept
        assert b.request("GET", "/auth/").status_code == 303, "the old cookie no longer signs in"
        assert api.ok("GET", "/v1/user/web-sessions")["data"]["sessions"] == []

        # A new password ends every session.
        b.sign_in(OWNER, PASSWORD)
        assert set_password(srv, "a brand new passphrase", current=PASSWORD).status_code == 200
        assert b.request("GET", "/auth/").status_code == 303


def test_wrong_passwords_lock_the_e_mail_out_with_retry_after():
    with ToolgateServer() as srv:
        assert set_password(srv, PASSWORD).status_code == 200
        b = Browser(srv)
        for _ in range(5):
            assert b.sign_in(OWNER, "a wrong password here").status_code == 401
        locked = b.sign_in(OWNER, PASSWORD)
        assert locked.status_code == 429, locked.text
        assert 1 <= int(locked.headers["retry-after"]) <= 30, locked.headers
        assert "toolgate_session" not in b.jar


def test_mfa_is_asked_at_sign_in_when_the_user_has_it():
    with ToolgateServer() as srv:
        api = Api(srv)
        assert set_password(srv, PASSWORD).status_code == 200
        enrolled = api.ok("POST", "/v1/auth/mfa/enroll")["data"]
        api.ok("POST", "/v1/auth/mfa/activate", {"code": totp(enrolled["secret"])})
        b = Browser(srv)
        r = b.sign_in(OWNER, PASSWORD)
        assert r.status_code == 200 and "toolgate_session" not in b.jar, r.text
        challenge = re.search(r'name="challenge_id" value="([^"]+)"', r.text).group(1)
        csrf = b.jar["toolgate_csrf"]
        bad = b.request("POST", "/auth/signin/mfa", data={"csrf": csrf, "challenge_id": challenge, "code": "000000", "next": ""})
        assert bad.status_code == 401 and "That code is not valid." in bad.text and "toolgate_session" not in b.jar
        good = b.request("POST", "/auth/signin/mfa",
                         data={"csrf": csrf, "challenge_id": challenge, "code": enrolled["backup_codes"][0], "next": ""})
        assert good.status_code == 303 and "toolgate_session" in b.jar, good.text
        # Signed in, the browser's token is bound to its session: the MFA step takes a sign-in form's.
        again = b.request("POST", "/auth/signin/mfa",
                          data={"csrf": b.form_csrf(), "challenge_id": challenge, "code": enrolled["backup_codes"][1], "next": ""})
        assert again.status_code == 400, "a challenge signs in once"


def test_a_user_holds_at_most_five_sessions_and_an_idle_one_ends():
    with ToolgateServer(extra_yaml="web:\n  session_idle_secs: 4\n") as srv:
        assert set_password(srv, PASSWORD).status_code == 200
        browsers = [Browser(srv, user_agent=f"browser-{i}") for i in range(6)]
        for b in browsers:
            assert b.sign_in(OWNER, PASSWORD).status_code == 303
        agents = [s["user_agent"] for s in Api(srv).ok("GET", "/v1/user/web-sessions")["data"]["sessions"]]
        assert agents == [f"browser-{i}" for i in range(1, 6)], "the oldest ended"
        assert browsers[0].request("GET", "/auth/").status_code == 303
        # Used within the idle time, a session lives on; left idle, it ends.
        started = time.monotonic()
        while time.monotonic() - started < 6:
            assert browsers[5].request("GET", "/auth/").status_code == 200
            time.sleep(0.5)
        time.sleep(4.5)
        assert browsers[5].request("GET", "/auth/").status_code == 303
        assert browsers[4].request("GET", "/auth/").status_code == 303
