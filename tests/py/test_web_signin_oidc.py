"""Web sign-in through external OpenID Connect providers (`web.oidc_providers`, the
specification's "social" sign-in), with two real providers (the npm `oidc-provider`, one process
each) whose sign-in and consent pages the test drives as a browser would.

What is measured: the sign-in page offers both; the browser is sent to the provider with
`state`, `nonce` and PKCE (S256); coming back, toolgate exchanges the code, verifies the ID
token and starts a web session for the user with that (verified) e-mail, then MFA when the user
has it; a state is used once; a provider's user that no toolgate user matches, or whose e-mail the
provider does not call verified, is refused; an `error` from the provider is shown; an address
may start a bounded number of sign-ins.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from mcp_helpers import ToolgateServer, config
from test_app_oauth import provider, sign_in
from test_web_signin import Browser

PUBLIC = "http://localhost:8080"  # the harness's public_url: what redirect URIs are built on


def callback(provider_id: str) -> str:
    return f"{PUBLIC}/auth/callback/{provider_id}"


@contextlib.contextmanager
def world(tmp: Path):
    """Two providers and toolgate trusting both: yields (toolgate, {provider id: issuer})."""
    with provider(tmp, signin_redirect=callback("acme")) as (acme, acme_secret), \
            provider(tmp, signin_redirect=callback("globex")) as (globex, globex_secret):
        yaml = config() + (
            "organizations:\n  - {id: org_web, name: Web, tier: free}\n"
            "users:\n"
            "  - {id: usr_alice, email: alice@example.com, name: Alice, role: developer, organization: org_web}\n"
            "  - {id: usr_unverified, email: unverified@example.com, name: U, role: viewer, organization: org_web}\n"
            "web:\n  oidc_providers:\n"
            f"    - {{id: acme, name: Acme ID, issuer: '{acme}', client_id: toolgate-signin, client_secret_env: ACME_SECRET}}\n"
            f"    - {{id: globex, name: Globex, issuer: '{globex}', client_id: toolgate-signin, client_secret_env: GLOBEX_SECRET}}\n"
        )
        srv = ToolgateServer(full_config=yaml, env={"ACME_SECRET": acme_secret, "GLOBEX_SECRET": globex_secret}).start()
        try:
            yield srv, {"acme": acme, "globex": globex}
        finally:
            srv.stop()
            srv.tmp.cleanup()


def through(b: Browser, provider_id: str, issuer: str, login: str, next_: str = "") -> tuple[str, object]:
    """Starts a sign-in with `provider_id`, signs `login` in at the provider; returns the
    callback's query and toolgate's answer to it."""
    start = b.request("GET", f"/auth/signin/{provider_id}" + (f"?next={next_}" if next_ else ""))
    assert start.status_code == 303, start.text
    to = urlparse(start.headers["location"])
    asked = {k: v[0] for k, v in parse_qs(to.query).items()}
    assert f"{to.scheme}://{to.netloc}" == issuer, to
    assert asked["client_id"] == "toolgate-signin" and asked["redirect_uri"] == callback(provider_id), asked
    assert asked["code_challenge_method"] == "S256" and len(asked["code_challenge"]) == 43, asked
    assert len(asked["state"]) >= 32 and len(asked["nonce"]) >= 32 and "openid" in asked["scope"].split(), asked
    back = sign_in(start.headers["location"], issuer, redirect=callback(provider_id), login=login)
    query = urlencode(back)
    return query, b.request("GET", f"/auth/callback/{provider_id}?{query}")


def test_users_sign_in_with_either_provider_by_their_verified_email(tmp_path):
    with world(tmp_path) as (srv, issuers):
        b = Browser(srv)
        page = b.request("GET", "/auth/signin?next=/auth/%3Fwelcome")
        assert 'href="/auth/signin/acme?next=%2Fauth%2F%3Fwelcome">Sign in with Acme ID</a>' in page.text, page.text
        assert 'href="/auth/signin/globex?next=%2Fauth%2F%3Fwelcome">Sign in with Globex</a>' in page.text

        query, r = through(b, "acme", issuers["acme"], "alice", next_="/auth/%3Fwelcome")
        assert r.status_code == 303 and r.headers["location"] == "/auth/?welcome", (r.status_code, r.text)
        assert "toolgate_session" in b.jar
        account = b.request("GET", "/auth/")
        assert '<strong id="email">alice@example.com</strong>' in account.text, account.text
        # The same answer again: its state was used.
        again = Browser(srv).request("GET", f"/auth/callback/acme?{query}")
        assert again.status_code == 400 and "sign in again" in again.text, again.text

        other = Browser(srv)
        _, r = through(other, "globex", issuers["globex"], "alice")
        assert r.status_code == 303 and "toolgate_session" in other.jar, "the second provider signs in too"

        # Who toolgate does not know, or whose address the provider does not vouch for: refused.
        stranger = Browser(srv)
        _, r = through(stranger, "acme", issuers["acme"], "mallory")
        assert r.status_code == 403 and "mallory@example.com" in r.text and "toolgate_session" not in stranger.jar
        unverified = Browser(srv)
        _, r = through(unverified, "globex", issuers["globex"], "unverified")
        assert r.status_code == 403 and "verified" in r.text and "toolgate_session" not in unverified.jar

        # A tampered state, a provider's refusal, an unknown provider.
        assert Browser(srv).request("GET", "/auth/callback/acme?state=forged&code=x").status_code == 400
        refused = Browser(srv).request("GET", "/auth/callback/acme?error=access_denied&state=x")
        assert refused.status_code == 401 and "access_denied" in refused.text
        assert Browser(srv).request("GET", "/auth/signin/nope").status_code == 404

        # A mix-up: the answer of a sign-in started with acme, brought to globex's callback.
        mixed = Browser(srv)
        start = mixed.request("GET", "/auth/signin/acme")
        back = sign_in(start.headers["location"], issuers["acme"], redirect=callback("acme"), login="alice")
        r = mixed.request("GET", f"/auth/callback/globex?{urlencode(back)}")
        assert r.status_code == 400 and "another provider" in r.text and "toolgate_session" not in mixed.jar, r.text

        # Each start is a stored record: an address may start 30 per ten minutes (5 so far).
        answers = [Browser(srv).request("GET", "/auth/signin/globex") for _ in range(26)]
        assert [r.status_code for r in answers] == [303] * 25 + [429], [r.status_code for r in answers]
        assert int(answers[-1].headers["retry-after"]) > 0



@contextlib.contextmanager
def two_organisations(tmp: Path, acme_organization: str | None):
    """bob@example.com is a user of org_a and of org_b, carol@example.com of org_a; acme names
    `acme_organization` (if any), globex none: yields (toolgate, {provider id: issuer})."""
    with provider(tmp, signin_redirect=callback("acme")) as (acme, acme_secret), \
            provider(tmp, signin_redirect=callback("globex")) as (globex, globex_secret):
        organization = f", organization: {acme_organization}" if acme_organization else ""
        yaml = config() + (
            "organizations:\n  - {id: org_a, name: A, tier: free}\n  - {id: org_b, name: B, tier: free}\n"
            "users:\n"
            # usr_bob_a sorts first: what a first-match pick would sign in.
            "  - {id: usr_bob_a, email: bob@example.com, name: Bob of A, role: viewer, organization: org_a}\n"
            "  - {id: usr_bob_b, email: bob@example.com, name: Bob of B, role: viewer, organization: org_b}\n"
            "  - {id: usr_carol, email: carol@example.com, name: Carol, role: viewer, organization: org_a}\n"
            "web:\n  oidc_providers:\n"
            f"    - {{id: acme, name: Acme ID, issuer: '{acme}', client_id: toolgate-signin, client_secret_env: ACME_SECRET"
            f"{organization}}}\n"
            f"    - {{id: globex, name: Globex, issuer: '{globex}', client_id: toolgate-signin, client_secret_env: GLOBEX_SECRET}}\n"
        )
        srv = ToolgateServer(full_config=yaml, env={"ACME_SECRET": acme_secret, "GLOBEX_SECRET": globex_secret}).start()
        try:
            yield srv, {"acme": acme, "globex": globex}
        finally:
            srv.stop()
            srv.tmp.cleanup()


def test_a_provider_naming_no_organisation_never_picks_one_of_several_users(tmp_path):
    """The same verified e-mail in two organisations: a provider configured for no organisation
    refuses it rather than pick one (it vouches for an address, not for an organisation); an
    e-mail one user holds still signs in."""
    with two_organisations(tmp_path, None) as (srv, issuers):
        ambiguous = Browser(srv)
        _, r = through(ambiguous, "globex", issuers["globex"], "bob")
        assert r.status_code == 403 and "several organisations" in r.text, (r.status_code, r.text)
        assert "toolgate_session" not in ambiguous.jar
        carol = Browser(srv)
        _, r = through(carol, "globex", issuers["globex"], "carol")
        assert r.status_code == 303 and "toolgate_session" in carol.jar, r.text


def test_a_provider_signs_in_only_the_user_of_its_organisation(tmp_path):
    """A provider configured for an organisation (`organization`) signs in that organisation's
    user with the e-mail, and nobody of another organisation."""
    with two_organisations(tmp_path, "org_b") as (srv, issuers):
        b = Browser(srv)
        _, r = through(b, "acme", issuers["acme"], "bob")
        assert r.status_code == 303 and "toolgate_session" in b.jar, (r.status_code, r.text)
        account = b.request("GET", "/auth/").text
        assert "(Bob of B)" in account and '<span id="organization">org_b</span>' in account, account
        carol = Browser(srv)
        _, r = through(carol, "acme", issuers["acme"], "carol")
        assert r.status_code == 403 and "toolgate_session" not in carol.jar, r.text
