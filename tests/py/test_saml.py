"""SAML 2.0 single sign-on against a real identity provider: `pysaml2` (pinned in
requirements.txt; it signs with the `xmlsec1` command, which tests/run.sh installs) loads
toolgate's service-provider metadata, reads toolgate's authentication requests and answers them
with signed responses. A good sign-in creates the user in the organisation with the role its
group maps to and starts a web session; an unsigned answer, a signature-wrapping attempt, a
wrong audience, an expired assertion, a replay and an answer posted from another browser are
refused: only the first passes. A first sign-in does not make a user with an address that
another organisation's user holds.
"""

from __future__ import annotations

import base64
import datetime
import re
import shutil
import urllib.parse

import httpx2
import pytest

try:
    from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
    from saml2.config import IdPConfig
    from saml2.saml import NAMEID_FORMAT_EMAILADDRESS, NameID
    from saml2.server import Server as IdPServer
    from saml2.xmldsig import DIGEST_SHA256, SIG_RSA_SHA256
except ImportError as e:  # pragma: no cover - the test command installs it
    raise RuntimeError("pysaml2 is missing: run the test command (tests/run.sh), which installs tests/py/requirements.txt") from e

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

import test_web_signin as signin
from mcp_helpers import config, on_port, start_on_a_chosen_port

IDP_ENTITY = "https://idp.example.test/metadata"
SSO_URL = "https://idp.example.test/sso"
OTHER_SP = "https://other-sp.example.test/metadata"
AUTHN = {"class_ref": "urn:oasis:names:tc:SAML:2.0:ac:classes:Password", "authn_auth": IDP_ENTITY}


def write_key_and_cert(d, stem: str) -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2)).sign(key, hashes.SHA256()))
    key_path, cert_path = d / f"{stem}.key", d / f"{stem}.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(key_path), str(cert_path)


def other_sp_metadata(acs: str) -> str:
    """Another service provider whose answers would go to toolgate's callback (a wrong audience)."""
    return (f'<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="{OTHER_SP}">'
            '<md:SPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">'
            f'<md:AssertionConsumerService Binding="{BINDING_HTTP_POST}" Location="{acs}" index="0"/>'
            '</md:SPSSODescriptor></md:EntityDescriptor>')


def identity_provider(d, key: str, cert: str, sp_metadata: str, acs: str, lifetime_minutes: int = 15) -> IdPServer:
    xmlsec = shutil.which("xmlsec1")
    assert xmlsec, "xmlsec1 is missing: run the test command (tests/run.sh), which installs it"
    conf = {
        "entityid": IDP_ENTITY,
        "xmlsec_binary": xmlsec,
        "key_file": key,
        "cert_file": cert,
        "metadata": {"inline": [sp_metadata, other_sp_metadata(acs)]},
        "service": {"idp": {
            "endpoints": {"single_sign_on_service": [(SSO_URL, BINDING_HTTP_REDIRECT)]},
            "name_id_format": [NAMEID_FORMAT_EMAILADDRESS],
            "policy": {"default": {"lifetime": {"minutes": lifetime_minutes}, "attribute_restrictions": None,
                                   "sign": ["response", "assertion"]}},
            "signing_algorithm": SIG_RSA_SHA256,
            "digest_algorithm": DIGEST_SHA256,
        }},
    }
    idp_config = IdPConfig()
    idp_config.load(conf)
    return IdPServer(config=idp_config)


@pytest.fixture(scope="module")
def saml(tmp_path_factory):
    d = tmp_path_factory.mktemp("saml")
    key, cert = write_key_and_cert(d, "idp")
    # globex's Owner holds an address that acme's IdP will assert (one e-mail, one organisation).
    extra = ("organizations:\n  - {id: acme, name: Acme}\n  - {id: globex, name: Globex}\n"
             "users:\n  - {id: usr_globex_boss, email: boss@globex.test, name: Boss, role: owner, organization: globex}\n"
             "web:\n  saml:\n    - organization: acme\n      name: Acme SSO\n"
             f"      idp_entity_id: {IDP_ENTITY}\n      sso_url: {SSO_URL}\n      certificate_file: {cert}\n"
             "      group_roles: {platform: admin, devs: developer}\n")
    srv = start_on_a_chosen_port(lambda port: on_port(config(), port) + extra)
    try:
        r = httpx2.get(srv.base_url + "/auth/saml/metadata", timeout=10)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/samlmetadata+xml"), r.text
        sp_metadata = r.text
        acs = srv.base_url + "/auth/saml/callback"
        assert acs in sp_metadata and srv.base_url + "/auth/saml/metadata" in sp_metadata, sp_metadata
        idp = identity_provider(d, key, cert, sp_metadata, acs)
        expired_idp = identity_provider(d, key, cert, sp_metadata, acs, lifetime_minutes=-10)
        # An IdP with another key: its signatures are not the configured IdP's.
        rogue_key, rogue_cert = write_key_and_cert(d, "rogue")
        rogue_idp = identity_provider(d, rogue_key, rogue_cert, sp_metadata, acs)
        yield srv, idp, expired_idp, rogue_idp
    finally:
        srv.stop()


def start(b: signin.Browser, idp: IdPServer) -> tuple[str, str]:
    """Starts a sign-in as the browser; the IdP reads the request. Returns (request id, RelayState)."""
    r = b.request("GET", "/auth/saml/login/acme")
    assert r.status_code == 303 and r.headers["location"].startswith(SSO_URL + "?"), (r.status_code, r.headers)
    assert "toolgate_saml" in b.jar, "the browser is bound to its request"
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(r.headers["location"]).query))
    request = idp.parse_authn_request(q["SAMLRequest"], BINDING_HTTP_REDIRECT)
    return request.message.id, q["RelayState"]


def answer(srv, idp: IdPServer, request_id: str, email: str, groups=("devs",), audience: str | None = None,
           sign: bool = True) -> str:
    """The IdP's signed (or not) answer, base64 as the HTTP-POST binding carries it."""
    response = idp.create_authn_response(
        identity={"email": [email], "name": ["Alice Example"], "groups": list(groups)},
        in_response_to=request_id,
        destination=srv.base_url + "/auth/saml/callback",
        sp_entity_id=audience or srv.base_url + "/auth/saml/metadata",
        name_id=NameID(format=NAMEID_FORMAT_EMAILADDRESS, text=email),
        userid=email,
        authn=AUTHN,
        sign_response=sign,
        sign_assertion=sign,
    )
    return base64.b64encode(str(response).encode()).decode()


def post(b: signin.Browser, saml_response: str, relay_state: str) -> httpx2.Response:
    return b.request("POST", "/auth/saml/callback", data={"SAMLResponse": saml_response, "RelayState": relay_state})


def test_the_sign_in_page_offers_the_organisations_idp(saml):
    srv, *_ = saml
    page = signin.Browser(srv).request("GET", "/auth/signin")
    assert page.status_code == 200 and 'href="/auth/saml/login/acme"' in page.text and "Acme SSO" in page.text
    assert signin.Browser(srv).request("GET", "/auth/saml/login/nope").status_code == 404


def test_a_signed_answer_signs_in_and_creates_the_user_once(saml):
    srv, idp, *_ = saml
    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    response = answer(srv, idp, request_id, "alice@acme.test", groups=("devs",))
    r = post(b, response, relay)
    assert r.status_code == 303 and "toolgate_session" in b.jar, (r.status_code, r.text)
    account = b.request("GET", "/auth/")
    assert account.status_code == 200 and "alice@acme.test" in account.text, account.text
    assert '<span id="role">developer</span> of <span id="organization">acme</span>' in account.text, \
        "created in the IdP's organisation; the group devs maps to developer"
    # The same answer again: refused (the request it answered is used up).
    replay = post(b, response, relay)
    assert replay.status_code == 403 and "no sign-in under way" in replay.text, replay.text
    # A second sign-in finds the same user (no second account).
    b2 = signin.Browser(srv)
    request_id, relay = start(b2, idp)
    assert post(b2, answer(srv, idp, request_id, "ALICE@acme.test", groups=("platform",)), relay).status_code == 303
    again = b2.request("GET", "/auth/")
    assert "alice@acme.test" in again.text and '<span id="role">developer</span>' in again.text, \
        "the existing user, its role unchanged"


def test_a_first_sign_in_cannot_take_another_organisations_address(saml):
    """acme's IdP asserts the address of globex's Owner: no acme user is made with it (a provider
    naming no organisation would then refuse it for both), and the sign-in is refused."""
    srv, idp, *_ = saml
    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    r = post(b, answer(srv, idp, request_id, " Boss@Globex.test"), relay)
    refused(b, r, "another organisation's address", "an address belongs to one organisation")
    assert "globex" not in r.text.lower().replace("boss@globex.test", ""), "the page names the holder"


def refused(b: signin.Browser, r: httpx2.Response, why: str, reason: str) -> None:
    """A 403 page saying `reason`, and no session."""
    assert r.status_code == 403, (why, r.status_code, r.text)
    assert reason in r.text.replace("&#39;", "'"), (why, r.text)
    assert "toolgate_session" not in b.jar, why


def test_unsigned_wrapped_foreign_expired_and_misdirected_answers_are_refused(saml):
    srv, idp, expired_idp, rogue_idp = saml

    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    refused(b, post(b, answer(srv, idp, request_id, "mallory@acme.test", sign=False), relay), "unsigned", "must be signed")

    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    refused(b, post(b, answer(srv, rogue_idp, request_id, "mallory@acme.test"), relay), "signed by another key", "must be signed")

    # Signature wrapping: the attacker's own signed answer, with an unsigned assertion naming
    # someone else placed before the signed one.
    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    xml = base64.b64decode(answer(srv, idp, request_id, "mallory@acme.test")).decode()
    signed = re.search(r"<(\w+):Assertion\b.*?</\1:Assertion>", xml, re.S)
    assert signed, xml
    evil = re.sub(r"<ds:Signature\b.*?</ds:Signature>", "", signed.group(0), flags=re.S)
    evil = evil.replace("mallory@acme.test", "owner@localhost").replace(' ID="', ' ID="evil')
    wrapped = xml[:signed.start()] + evil + xml[signed.start():]
    refused(b, post(b, base64.b64encode(wrapped.encode()).decode(), relay), "signature wrapping", "exactly one assertion")

    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    refused(b, post(b, answer(srv, idp, request_id, "mallory@acme.test", audience=OTHER_SP), relay), "wrong audience", "AudienceRequirement")

    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    refused(b, post(b, answer(srv, expired_idp, request_id, "mallory@acme.test"), relay), "expired", "Condition expired")

    # A good answer posted by another browser than the one that started the sign-in.
    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    good = answer(srv, idp, request_id, "mallory@acme.test")
    other = signin.Browser(srv)
    refused(other, post(other, good, relay), "another browser", "started in another browser")
    # An answer to another request (InResponseTo) than the one RelayState names.
    b = signin.Browser(srv)
    first_id, _ = start(b, idp)
    _, second_relay = start(b, idp)
    refused(b, post(b, answer(srv, idp, first_id, "mallory@acme.test"), second_relay), "another request", "'InResponseTo' does not match")
    # Nothing reached the store: mallory never became a user.
    b = signin.Browser(srv)
    request_id, relay = start(b, idp)
    assert post(b, answer(srv, idp, request_id, "bob@acme.test", groups=()), relay).status_code == 303
    assert '<span id="role">viewer</span>' in b.request("GET", "/auth/").text, "no group: the default role"
