"""toolgate as an OAuth 2.0 authorization server: an organisation registers a client
(`/v1/oauth/clients`), a signed-in user allows it on the consent page
(`{auth_url}/oauth/authorize`), and the client, driven by `authlib`'s OAuth 2.0 client, gets
tokens at `{auth_url}/oauth/token` (authorization code with PKCE, rotating refresh tokens),
calls the management API with them within the granted scopes, and revokes them (RFC 7009).
Then the attacks: a foreign redirect URI, a code used twice, a missing or wrong PKCE verifier,
an expired code, a refresh token used twice, a wrong client secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.parse

import httpx2
import pytest

os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")  # the test's server is plain HTTP on the loopback

try:
    from authlib.common.security import generate_token
    from authlib.integrations.requests_client import OAuth2Session
except ImportError as e:  # pragma: no cover - the test command installs it
    raise RuntimeError("authlib is missing: run the test command (tests/run.sh), which installs tests/py/requirements.txt") from e

import test_web_signin as signin
from mcp_helpers import Api, ToolgateServer, config, on_port, start_on_a_chosen_port

REDIRECT = "https://client.example/callback"


@contextlib.contextmanager
def server(extra_yaml: str = ""):
    """toolgate whose public URL is its own address: the issuer and the endpoints in its metadata
    are where the client library goes."""
    srv = start_on_a_chosen_port(lambda port: on_port(config(), port) + extra_yaml)
    try:
        yield srv
    finally:
        srv.stop()


def metadata(srv: ToolgateServer) -> dict:
    r = httpx2.get(srv.base_url + "/.well-known/oauth-authorization-server", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def register(api: Api, public: bool = False, scopes=("gateways:read", "logs:read")) -> dict:
    r = api.call("POST", "/v1/oauth/clients",
                 {"name": "Reporting app", "redirect_uris": [REDIRECT], "scopes": list(scopes), "public": public})
    assert r.status_code == 201, r.text
    return r.json()["data"]


def signed_in(srv: ToolgateServer) -> signin.Browser:
    assert signin.set_password(srv, signin.PASSWORD).status_code == 200
    b = signin.Browser(srv)
    assert b.sign_in(signin.OWNER, signin.PASSWORD).status_code == 303
    return b


def consent(b: signin.Browser, authorize_url: str) -> httpx2.Response:
    """Opens the authorization URL as the signed-in browser; returns the consent page."""
    parts = urllib.parse.urlsplit(authorize_url)
    return b.request("GET", f"{parts.path}?{parts.query}")


def decide(b: signin.Browser, page: httpx2.Response, decision: str = "allow") -> str:
    """Submits the consent form; returns where the browser is sent (the client's redirect URI)."""
    assert page.status_code == 200, page.text
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.text))
    fields = {k: v.replace("&amp;", "&").replace("&quot;", '"').replace("&#39;", "'") for k, v in fields.items()}
    r = b.request("POST", "/auth/oauth/authorize", data=fields | {"decision": decision})
    assert r.status_code == 303, r.text
    return r.headers["location"]


def query_of(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def status_with(srv: ToolgateServer, token: str, path: str = "/v1/gateways") -> int:
    return httpx2.get(srv.base_url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code


def authorize(srv, b, client: OAuth2Session, meta, **kw) -> tuple[str, str]:
    """The code flow up to the redirect back: (redirect URL, PKCE verifier)."""
    verifier = generate_token(48)
    url, _state = client.create_authorization_url(meta["authorization_endpoint"], code_verifier=verifier, **kw)
    return decide(b, consent(b, url)), verifier


def test_a_client_gets_tokens_with_the_code_flow_uses_refreshes_and_revokes_them():
    with server() as srv:
        api = Api(srv)
        meta = metadata(srv)
        assert meta["issuer"] == srv.base_url
        assert meta["token_endpoint"] == srv.base_url + "/auth/oauth/token"
        assert meta["code_challenge_methods_supported"] == ["S256"]
        assert set(meta["grant_types_supported"]) == {"authorization_code", "refresh_token"}

        registered = register(api)
        secret = registered["client_secret"]
        assert secret.startswith("tgs_") and registered["token_endpoint_auth_method"] == "client_secret_basic"
        shown = api.ok("GET", f"/v1/oauth/clients/{registered['client_id']}")["data"]
        assert "client_secret" not in shown and secret not in str(api.ok("GET", "/v1/oauth/clients")), "shown once"

        # Not signed in: the sign-in page first, which comes back to the request.
        client = OAuth2Session(registered["client_id"], secret, scope="gateways:read logs:read",
                               redirect_uri=REDIRECT, code_challenge_method="S256")
        verifier = generate_token(48)
        url, state = client.create_authorization_url(meta["authorization_endpoint"], code_verifier=verifier)
        anonymous = signin.Browser(srv)
        r = consent(anonymous, url)
        assert r.status_code == 303 and r.headers["location"].startswith("/auth/signin?next=%2Fauth%2Foauth%2Fauthorize%3F")
        assert signin.set_password(srv, signin.PASSWORD).status_code == 200
        csrf = anonymous.form_csrf(r.headers["location"])
        next_ = urllib.parse.unquote(r.headers["location"].split("next=", 1)[1])
        back = anonymous.request("POST", "/auth/signin",
                                 data={"csrf": csrf, "email": signin.OWNER, "password": signin.PASSWORD, "next": next_})
        assert back.status_code == 303 and back.headers["location"] == next_

        page = anonymous.request("GET", next_)
        assert page.status_code == 200 and "Reporting app" in page.text
        assert re.findall(r'<li class="scope">([^<]+)</li>', page.text) == ["gateways:read", "logs:read"]
        redirected = decide(anonymous, page)
        assert redirected.startswith(REDIRECT + "?")
        params = query_of(redirected)
        assert params["state"] == state and params["iss"] == srv.base_url

        token = client.fetch_token(meta["token_endpoint"], authorization_response=redirected, code_verifier=verifier)
        assert token["token_type"].lower() == "bearer" and token["expires_in"] == 3600
        assert token["scope"] == "gateways:read logs:read"
        access, refresh = token["access_token"], token["refresh_token"]

        # The token acts for the user within the granted scopes.
        assert status_with(srv, access) == 200
        assert status_with(srv, access, "/v1/logs") == 200
        seen = httpx2.get(srv.base_url + "/v1/auth/debug", headers={"Authorization": f"Bearer {access}"}, timeout=10).json()["data"]
        assert seen["credential_type"] == "oauth_token" and seen["oauth_client_id"] == registered["client_id"]
        assert seen["scopes"] == ["gateways:read", "logs:read"] and seen["user_id"] == "usr_owner"
        created = httpx2.post(srv.base_url + "/v1/api-keys", json={"name": "x"},
                              headers={"Authorization": f"Bearer {access}"}, timeout=10)
        assert created.status_code == 403, "no admin scope was granted"
        assert status_with(srv, access + "x") == 401

        # Refresh rotates both tokens: the old access token stops at once.
        renewed = client.refresh_token(meta["token_endpoint"], refresh_token=refresh)
        assert renewed["access_token"] != access and renewed["refresh_token"] != refresh
        assert status_with(srv, access) == 401 and status_with(srv, renewed["access_token"]) == 200

        # A refresh token used twice: refused, and the whole grant is revoked.
        reused = httpx2.post(meta["token_endpoint"], data={"grant_type": "refresh_token", "refresh_token": refresh},
                             auth=(registered["client_id"], secret), timeout=10)
        assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant", reused.text
        assert reused.headers["cache-control"] == "no-store"
        assert status_with(srv, renewed["access_token"]) == 401, "reuse revokes the family"
        gone = httpx2.post(meta["token_endpoint"], data={"grant_type": "refresh_token", "refresh_token": renewed["refresh_token"]},
                           auth=(registered["client_id"], secret), timeout=10)
        assert gone.status_code == 400 and gone.json()["error"] == "invalid_grant"

        # Revocation (RFC 7009): the refresh token ends the grant, the access token with it.
        redirected, verifier = authorize(srv, anonymous, client, meta)
        token = client.fetch_token(meta["token_endpoint"], authorization_response=redirected, code_verifier=verifier)
        assert status_with(srv, token["access_token"]) == 200
        revoked = client.revoke_token(meta["revocation_endpoint"], token=token["refresh_token"], token_type_hint="refresh_token")
        assert revoked.status_code == 200
        assert status_with(srv, token["access_token"]) == 401
        again = client.revoke_token(meta["revocation_endpoint"], token=token["refresh_token"])
        assert again.status_code == 200, "an unknown token is not an error"

        # Deleting the client revokes what it holds.
        redirected, verifier = authorize(srv, anonymous, client, meta)
        token = client.fetch_token(meta["token_endpoint"], authorization_response=redirected, code_verifier=verifier)
        assert api.ok("GET", f"/v1/oauth/clients/{registered['client_id']}")["data"]["active_grants"] == 1
        assert api.call("DELETE", f"/v1/oauth/clients/{registered['client_id']}").status_code == 200
        assert status_with(srv, token["access_token"]) == 401
        assert api.call("GET", f"/v1/oauth/clients/{registered['client_id']}").status_code == 404


def test_the_attacks_on_the_code_flow_are_refused():
    with server("web:\n  authorization_code_secs: 2\n") as srv:
        api = Api(srv)
        meta = metadata(srv)
        registered = register(api)
        cid, secret = registered["client_id"], registered["client_secret"]
        b = signed_in(srv)
        client = OAuth2Session(cid, secret, scope="logs:read", redirect_uri=REDIRECT, code_challenge_method="S256")

        def exchange(code: str, verifier: str | None, redirect: str = REDIRECT, auth=(cid, secret)) -> httpx2.Response:
            form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect}
            if verifier is not None:
                form["code_verifier"] = verifier
            return httpx2.post(meta["token_endpoint"], data=form, auth=auth, timeout=10)

        # A redirect URI the client did not register: told to the user, never redirected.
        foreign = OAuth2Session(cid, secret, scope="logs:read", redirect_uri="https://evil.example/cb",
                                code_challenge_method="S256")
        url, _ = foreign.create_authorization_url(meta["authorization_endpoint"], code_verifier=generate_token(48))
        r = consent(b, url)
        assert r.status_code == 400 and "location" not in r.headers and "redirect_uri" in r.text
        # A scope beyond the client's: sent back to the client as invalid_scope.
        wide = OAuth2Session(cid, secret, scope="admin", redirect_uri=REDIRECT, code_challenge_method="S256")
        url, state = wide.create_authorization_url(meta["authorization_endpoint"], code_verifier=generate_token(48))
        r = consent(b, url)
        assert r.status_code == 303 and query_of(r.headers["location"]) | {"error_description": ""} == {
            "error": "invalid_scope", "error_description": "", "state": state, "iss": srv.base_url}
        # The user denies: access_denied.
        url, state = client.create_authorization_url(meta["authorization_endpoint"], code_verifier=generate_token(48))
        denied = query_of(decide(b, consent(b, url), "deny"))
        assert denied["error"] == "access_denied" and denied["state"] == state and "code" not in denied
        # The consent form without its CSRF token: refused.
        page = consent(b, url)
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.text))
        fields.pop("csrf")
        assert b.request("POST", "/auth/oauth/authorize", data=fields | {"decision": "allow"}).status_code == 403

        # A code used twice: refused, and the tokens of its first use revoked.
        redirected, verifier = authorize(srv, b, client, meta)
        code = query_of(redirected)["code"]
        first = exchange(code, verifier)
        assert first.status_code == 200, first.text
        assert status_with(srv, first.json()["access_token"], "/v1/logs") == 200
        second = exchange(code, verifier)
        assert second.status_code == 400 and second.json()["error"] == "invalid_grant", second.text
        assert status_with(srv, first.json()["access_token"], "/v1/logs") == 401

        # PKCE: a missing verifier, a wrong one.
        code = query_of(authorize(srv, b, client, meta)[0])["code"]
        r = exchange(code, None)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant" and "code_verifier" in r.json()["error_description"]
        code = query_of(authorize(srv, b, client, meta)[0])["code"]
        r = exchange(code, generate_token(48))
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
        # Another redirect URI at the token endpoint than at the authorization.
        redirected, verifier = authorize(srv, b, client, meta)
        r = exchange(query_of(redirected)["code"], verifier, redirect="https://client.example/other")
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
        # A wrong client secret: 401 invalid_client, with the Basic challenge.
        redirected, verifier = authorize(srv, b, client, meta)
        r = exchange(query_of(redirected)["code"], verifier, auth=(cid, "tgs_wrong"))
        assert r.status_code == 401 and r.json()["error"] == "invalid_client" and r.headers["www-authenticate"].startswith("Basic")
        # An expired code (codes live 2 s here).
        redirected, verifier = authorize(srv, b, client, meta)
        time.sleep(3)
        r = exchange(query_of(redirected)["code"], verifier)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant", r.text
        # Malformed requests.
        r = httpx2.post(meta["token_endpoint"], json={"grant_type": "authorization_code"}, auth=(cid, secret), timeout=10)
        assert r.status_code == 400 and r.json()["error"] == "invalid_request"
        r = httpx2.post(meta["token_endpoint"], data={"grant_type": "password"}, auth=(cid, secret), timeout=10)
        assert r.status_code == 400 and r.json()["error"] == "unsupported_grant_type"


def test_codes_and_tokens_serve_only_the_client_they_were_issued_to():
    """Two confidential clients of one organisation: neither can exchange, refresh or revoke
    what the other was given; client_secret_post authenticates like Basic; a refresh narrows the
    scope and never widens it; the token endpoint takes POST forms only, each field once."""
    with server() as srv:
        api = Api(srv)
        meta = metadata(srv)
        a, other = register(api), register(api)
        b = signed_in(srv)
        session = OAuth2Session(a["client_id"], a["client_secret"], scope="gateways:read logs:read",
                                redirect_uri=REDIRECT, code_challenge_method="S256")

        def post(form: dict, client: dict | None = None, url: str = meta["token_endpoint"]) -> httpx2.Response:
            auth = (client["client_id"], client["client_secret"]) if client else None
            return httpx2.post(url, data=form, auth=auth, timeout=10)

        # A's code at B: refused.
        redirected, verifier = authorize(srv, b, session, meta)
        form = {"grant_type": "authorization_code", "code": query_of(redirected)["code"], "redirect_uri": REDIRECT,
                "code_verifier": verifier}
        r = post(form, other)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant" and "another client" in r.text, r.text
        # client_secret_post: the client's credentials in the form.
        redirected, verifier = authorize(srv, b, session, meta)
        r = post({"grant_type": "authorization_code", "code": query_of(redirected)["code"], "redirect_uri": REDIRECT,
                  "code_verifier": verifier, "client_id": a["client_id"], "client_secret": a["client_secret"]})
        assert r.status_code == 200, r.text
        tokens = r.json()
        r = post({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
                  "client_id": a["client_id"], "client_secret": "tgs_wrong"})
        assert r.status_code == 401 and r.json()["error"] == "invalid_client"
        assert "www-authenticate" not in r.headers, "no Basic challenge for a client that did not use Basic"

        # B cannot refresh or revoke A's tokens, and its attempts change nothing.
        r = post({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}, other)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant", r.text
        r = post({"token": tokens["access_token"]}, other, url=meta["revocation_endpoint"])
        assert r.status_code == 200, "RFC 7009: not an error, but nothing is revoked"
        assert status_with(srv, tokens["access_token"]) == 200

        # A refresh narrows the scope; widening it again, or an unknown scope, is invalid_scope.
        r = post({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "scope": "gateways:read"}, a)
        assert r.status_code == 200 and r.json()["scope"] == "gateways:read", r.text
        narrowed = r.json()
        assert status_with(srv, narrowed["access_token"]) == 200
        assert status_with(srv, narrowed["access_token"], "/v1/logs") == 403
        for scope in ["gateways:read logs:read", "teleport"]:
            r = post({"grant_type": "refresh_token", "refresh_token": narrowed["refresh_token"], "scope": scope}, a)
            assert r.status_code == 400 and r.json()["error"] == "invalid_scope", (scope, r.text)
        assert status_with(srv, narrowed["access_token"]) == 200, "a refused refresh rotates nothing"

        # Only POST forms, each field once.
        r = httpx2.get(meta["token_endpoint"], timeout=10)
        assert r.status_code == 405 and r.headers["allow"] == "POST" and r.json()["error"] == "invalid_request"
        r = httpx2.post(meta["token_endpoint"], timeout=10, auth=(a["client_id"], a["client_secret"]),
                        content=f"grant_type=refresh_token&refresh_token={narrowed['refresh_token']}&refresh_token=x",
                        headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 400 and r.json()["error"] == "invalid_request" and "twice" in r.text, r.text


def test_a_public_client_must_use_pkce_and_has_no_secret():
    with server() as srv:
        api = Api(srv)
        meta = metadata(srv)
        registered = register(api, public=True)
        assert "client_secret" not in registered and registered["token_endpoint_auth_method"] == "none"
        b = signed_in(srv)
        no_pkce = OAuth2Session(registered["client_id"], scope="gateways:read", redirect_uri=REDIRECT)
        url, state = no_pkce.create_authorization_url(meta["authorization_endpoint"])
        r = consent(b, url)
        assert r.status_code == 303 and query_of(r.headers["location"])["error"] == "invalid_request"
        client = OAuth2Session(registered["client_id"], scope="gateways:read", redirect_uri=REDIRECT,
                               code_challenge_method="S256", token_endpoint_auth_method="none")
        redirected, verifier = authorize(srv, b, client, meta)
        token = client.fetch_token(meta["token_endpoint"], authorization_response=redirected, code_verifier=verifier)
        assert token["scope"] == "gateways:read" and status_with(srv, token["access_token"]) == 200
        assert status_with(srv, token["access_token"], "/v1/logs") == 403, "logs:read was not granted"


def test_a_delegated_token_never_makes_credentials_whatever_its_scopes():
    with server() as srv:
        api = Api(srv)
        meta = metadata(srv)
        registered = register(api, public=True, scopes=("admin",))
        b = signed_in(srv)
        client = OAuth2Session(registered["client_id"], scope="admin", redirect_uri=REDIRECT,
                               code_challenge_method="S256", token_endpoint_auth_method="none")
        redirected, verifier = authorize(srv, b, client, meta)
        token = client.fetch_token(meta["token_endpoint"], authorization_response=redirected, code_verifier=verifier)
        assert "admin" in token["scope"].split(" ")
        bearer = {"Authorization": f"Bearer {token['access_token']}"}
        assert httpx2.get(srv.base_url + "/v1/webhooks", headers=bearer, timeout=10).status_code == 200, "admin holds"
        for method, path, body in [("POST", "/v1/api-keys", {"name": "minted", "scopes": ["gateways:read"]}),
                                   ("POST", "/v1/service-accounts", {"name": "minted", "scopes": ["gateways:read"]}),
                                   ("POST", "/v1/auth/mfa/enroll", None),
                                   ("POST", "/v1/oauth/clients", {"name": "x", "redirect_uris": [REDIRECT], "scopes": ["admin"]}),
                                   ("PUT", "/v1/user/password", {"new_password": "a delegated new passphrase"})]:
            r = httpx2.request(method, srv.base_url + path, json=body, headers=bearer, timeout=10)
            assert r.status_code == 403, (path, r.text)


def sdk_sign_in(b: signin.Browser, url: str, storage, client_name: str, client_metadata_url: str | None = None):
    """The official Python SDK's OAuth client against the gateway at `url`, the signed-in browser
    `b` answering the consent page: lists the tools and calls the first. Returns (tool names,
    consent pages seen)."""
    import asyncio

    from mcp.client.auth import OAuthClientProvider
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    pages: list[str] = []
    back: dict[str, str] = {}

    async def redirect(authorization_url: str) -> None:
        def browse() -> dict[str, str]:
            page = consent(b, authorization_url)
            pages.append(page.text)
            return query_of(decide(b, page))
        back.clear()
        back.update(await asyncio.to_thread(browse))

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=back["code"], state=back.get("state"), iss=back.get("iss"))

    client_metadata = OAuthClientMetadata(client_name=client_name, redirect_uris=[REDIRECT],
                                          token_endpoint_auth_method="none")

    async def use() -> list[str]:
        auth = OAuthClientProvider(url, client_metadata, storage, redirect_handler=redirect, callback_handler=callback,
                                   client_metadata_url=client_metadata_url)
        async with create_mcp_http_client(auth=auth) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                tools = [t.name for t in (await client.list_tools()).tools]
                answer = await client.call_tool(tools[0], {"timezone": "UTC", "format": "YYYY"})
                assert not answer.is_error, answer
                return tools

    return asyncio.run(use()), pages

@pytest.mark.parametrize("registration", ["by an admin", "dynamic"])
def test_an_mcp_sdk_client_signs_in_to_a_gateway_with_toolgates_own_authorization_server(registration):
    """A gateway with `configuration.auth: oauth` and no external issuer configured: its metadata
    names toolgate, and the official Python SDK's OAuth client (a client registered beforehand by
    an admin, or registering itself, RFC 7591) gets a token for that gateway's endpoint (RFC 8707)
    through the consent page, then lists and calls tools. The token is for that gateway alone."""
    from mcp.shared.auth import OAuthClientInformationFull

    import test_gateway_oauth as gateway_oauth

    dynamic = registration == "dynamic"
    with server("web:\n  dynamic_registration: true\n" if dynamic else "") as srv:
        api = Api(srv)
        make = lambda name: api.ok("POST", "/v1/gateways", {"name": name, "servers": ["time"],
                                                             "configuration": {"auth": "oauth"}}, status=201)["data"]
        gw, other = make("Team tools"), make("Other tools")
        url = f"{srv.base_url}/gateway/{gw['id']}/mcp"
        prm = httpx2.get(f"{srv.base_url}/.well-known/oauth-protected-resource/gateway/{gw['id']}/mcp", timeout=10).json()
        assert prm["resource"] == url and prm["authorization_servers"] == [srv.base_url], prm
        challenge = gateway_oauth.post(url, {}).headers["www-authenticate"]
        assert challenge.startswith('Bearer resource_metadata="'), challenge

        as_meta = metadata(srv)
        assert ("registration_endpoint" in as_meta) == dynamic, as_meta
        b = signed_in(srv)
        storage = gateway_oauth.Memory()
        if not dynamic:
            registered = register(api, public=True, scopes=("gateways:read",))
            storage.client_info = OAuthClientInformationFull(
                client_id=registered["client_id"], redirect_uris=[REDIRECT], token_endpoint_auth_method="none",
                grant_types=["authorization_code", "refresh_token"], response_types=["code"])
        tools, pages = sdk_sign_in(b, url, storage, "toolgate tests")
        assert tools == ["get_current_time"], tools
        assert len(pages) == 1 and '<strong id="gateway">Team tools</strong>' in pages[0], pages
        token = storage.tokens.access_token
        assert token.startswith("tga_"), "toolgate issued it"
        client_id = storage.client_info.client_id
        assert client_id.startswith("tgc_")
        if dynamic:
            assert api.ok("GET", "/v1/oauth/clients")["data"]["clients"] == [], "a registered client is no organisation's"
        bearer = {"Authorization": f"Bearer {token}"}
        assert gateway_oauth.post(url, bearer).status_code == 200
        assert gateway_oauth.post(f"{srv.base_url}/gateway/{other['id']}/mcp", bearer).status_code == 401, "another gateway"
        assert status_with(srv, token) == 401, "not a management API token"
        # A resource that is not a gateway of the user's organisation taking OAuth: invalid_target.
        client = OAuth2Session(client_id, redirect_uri=REDIRECT, code_challenge_method="S256")
        url_, _ = client.create_authorization_url(srv.base_url + "/auth/oauth/authorize", code_verifier=generate_token(48),
                                                   resource=f"{srv.base_url}/gateway/gw_nope/mcp")
        r = consent(b, url_)
        assert r.status_code == 303 and query_of(r.headers["location"])["error"] == "invalid_target", r.headers
        if dynamic:
            # A self-registered client never gets a management API token.
            url_, _ = client.create_authorization_url(srv.base_url + "/auth/oauth/authorize", code_verifier=generate_token(48))
            r = consent(b, url_)
            assert r.status_code == 303 and query_of(r.headers["location"])["error"] == "invalid_target", r.headers
            # Registration: public clients only, good redirect URIs only, and bounded per address.
            reg = srv.base_url + "/auth/oauth/register"
            bad = httpx2.post(reg, json={"redirect_uris": ["http://evil.example/cb"]}, timeout=10)
            assert bad.status_code == 400 and bad.json()["error"] == "invalid_redirect_uri", bad.text
            secret = httpx2.post(reg, json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_basic"}, timeout=10)
            assert secret.status_code == 400 and secret.json()["error"] == "invalid_client_metadata", secret.text
            for name in ["x" * 500, "bad\u0000name"]:
                named = httpx2.post(reg, json={"redirect_uris": [REDIRECT], "client_name": name}, timeout=10)
                assert named.status_code == 400 and named.json()["error"] == "invalid_client_metadata", named.text
            # Refused registrations are not counted against the address.
            codes = [httpx2.post(reg, json={"redirect_uris": [REDIRECT]}, timeout=10).status_code for _ in range(20)]
            assert codes.count(201) == 19 and codes[-1] == 429, codes
        else:
            off = httpx2.post(srv.base_url + "/auth/oauth/register", json={"redirect_uris": [REDIRECT]}, timeout=10)
            assert off.status_code == 400 and off.json()["error"] == "access_denied", off.text


class ClientDocuments:
    """An https server of client metadata documents (the client's own site), trusted through a
    test CA; counts the fetches of each path."""

    def __init__(self, d):
        import http.server
        import ssl
        import threading

        from test_edge_tls import Ca, _name

        ca = Ca("client documents CA")
        self.ca_file = ca.write(d / "documents-ca.pem")
        cert, key, _ = ca.issue(d, "documents", _name("client site"), ["localhost"], ["127.0.0.1"])
        self.fetches: dict[str, int] = {}
        self.documents: dict[str, tuple[int, dict, bytes]] = {}
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                site.fetches[self.path] = site.fetches.get(self.path, 0) + 1
                status, headers, body = site.documents.get(self.path, (404, {}, b"{}"))
                self.send_response(status)
                for k, v in (headers | {"content-type": "application/json", "content-length": str(len(body))}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.base = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, path: str, document: dict | None = None, status: int = 200, headers: dict | None = None,
              raw: bytes | None = None) -> str:
        """Serves `document` (its client_id defaults to its own URL) at `path`; returns the URL."""
        url = self.base + path
        body = raw if raw is not None else json.dumps({"client_id": url} | (document or {})).encode()
        self.documents[path] = (status, headers or {}, body)
        return url


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    site = ClientDocuments(tmp_path_factory.mktemp("client-documents"))
    yield site
    site.server.shutdown()


def documents_yaml(site: ClientDocuments) -> str:
    return ("web:\n  client_id_metadata_documents:\n    enabled: true\n    allowed_hosts: [\"127.0.0.1\"]\n"
            f"    ca_file: {site.ca_file}\n")


def test_an_mcp_sdk_client_named_by_its_metadata_document_signs_in_to_a_gateway(documents):
    """The MCP authorization specification's client ID metadata documents: the server says it
    takes them, the official Python SDK names itself by the URL of its document (no
    registration), toolgate fetches the document once (kept for its max-age), shows its host on
    the consent page, and issues a token for the gateway."""
    import test_gateway_oauth as gateway_oauth

    client_url = documents.serve("/oauth/client.json", {
        "client_name": "Doc Client", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
    }, headers={"cache-control": "max-age=600"})
    with server(documents_yaml(documents)) as srv:
        api = Api(srv)
        as_meta = metadata(srv)
        assert as_meta["client_id_metadata_document_supported"] is True and "registration_endpoint" not in as_meta
        gw = api.ok("POST", "/v1/gateways", {"name": "Doc tools", "servers": ["time"],
                                             "configuration": {"auth": "oauth"}}, status=201)["data"]
        url = f"{srv.base_url}/gateway/{gw['id']}/mcp"
        b = signed_in(srv)
        storage = gateway_oauth.Memory()
        tools, pages = sdk_sign_in(b, url, storage, "Doc Client", client_metadata_url=client_url)
        assert tools == ["get_current_time"], tools
        assert storage.client_info.client_id == client_url, "named by its document, not registered"
        assert storage.tokens.access_token.startswith("tga_")
        assert len(pages) == 1 and "Doc Client (127.0.0.1)" in pages[0], pages
        assert documents.fetches["/oauth/client.json"] == 1, "fetched once for the consent page and the token endpoint"
        assert gateway_oauth.post(url, {"Authorization": f"Bearer {storage.tokens.access_token}"}).status_code == 200
        # Without the option, a URL is no client.
    with server() as plain:
        assert "client_id_metadata_document_supported" not in metadata(plain)
        b = signed_in(plain)
        client = OAuth2Session(client_url, redirect_uri=REDIRECT, code_challenge_method="S256")
        url_, _ = client.create_authorization_url(plain.base_url + "/auth/oauth/authorize", code_verifier=generate_token(48))
        r = consent(b, url_)
        assert r.status_code == 400 and "client_id" in r.text, r.text
        assert documents.fetches["/oauth/client.json"] == 1, "not fetched when the option is off"


def test_a_metadata_document_that_is_not_the_clients_own_is_refused(documents):
    """Each bad document is an error page (never a redirect to a URI it lists), and a refusal
    is remembered for a while rather than fetched again on every request."""
    good = {"client_name": "C", "redirect_uris": [REDIRECT]}
    cases = {
        "another client_id": documents.serve("/bad/other-id.json", good | {"client_id": documents.base + "/oauth/client.json"}),
        "a secret": documents.serve("/bad/secret.json", good | {"client_secret": "s3cret"}),
        "confidential": documents.serve("/bad/basic.json", good | {"token_endpoint_auth_method": "client_secret_basic"}),
        "no redirect URIs": documents.serve("/bad/no-redirects.json", {"client_name": "C"}),
        "a bad redirect URI": documents.serve("/bad/http-redirect.json", good | {"redirect_uris": ["http://evil.example/cb"]}),
        "too large": documents.serve("/bad/large.json", good | {"padding": "x" * 6000}),
        "not JSON": documents.serve("/bad/html.json", raw=b"<html>hello</html>"),
        "a redirect": documents.serve("/bad/moved.json", status=302, headers={"location": documents.base + "/oauth/client.json"}),
        "missing": documents.base + "/bad/absent.json",
        "not in normal form": documents.base + "/bad/../oauth/client.json",
        "with a query": documents.serve("/bad/q.json") + "?v=1",
        # Inside the network and not an allowed host: never fetched.
        "an internal address": documents.base.replace("127.0.0.1", "127.0.0.2") + "/oauth/client.json",
    }
    with server(documents_yaml(documents)) as srv:
        b = signed_in(srv)
        for why, client_url in cases.items():
            client = OAuth2Session(client_url, redirect_uri=REDIRECT, code_challenge_method="S256")
            url_, _ = client.create_authorization_url(srv.base_url + "/auth/oauth/authorize", code_verifier=generate_token(48),
                                                       resource=f"{srv.base_url}/gateway/gw_x/mcp")
            r = consent(b, url_)
            assert r.status_code == 400 and "metadata document cannot be used" in r.text, (why, r.status_code, r.text)
            assert "location" not in r.headers, why
        fetched = sum(n for path, n in documents.fetches.items() if path.startswith("/bad/"))
        assert fetched == 9, documents.fetches
        r = consent(b, OAuth2Session(cases["a secret"], redirect_uri=REDIRECT).create_authorization_url(
            srv.base_url + "/auth/oauth/authorize")[0])
        assert r.status_code == 400 and documents.fetches["/bad/secret.json"] == 1, "the refusal was remembered"
        # At the token endpoint, such a client is invalid_client.
        r = httpx2.post(srv.base_url + "/auth/oauth/token", timeout=10, data={
            "grant_type": "authorization_code", "code": "x", "redirect_uri": REDIRECT, "client_id": cases["a secret"]})
        assert r.status_code == 401 and r.json()["error"] == "invalid_client", r.text
