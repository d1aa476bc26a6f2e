"""Redis over TLS (issue 15): `rediss://` to a real redis-server with TLS on, whose certificate a
private CA issued (`storage.tls_ca_file`), requiring a client certificate (`storage.tls_cert_file`,
`storage.tls_key_file`). Two instances share state through it; an instance without the client
certificate, or trusting another CA, fails the handshake and does not start, saying why.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from test_redis_scaleout import SECRET, call, instances, redis_config, within
from toolgate_harness import ToolgateServer, random_key


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ca(now, cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(now, ca_key, ca, cn: str, usage, san=None):
    key = ec.generate_private_key(ec.SECP256R1())
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA; a server certificate for 127.0.0.1 and a client certificate it issued; another CA."""
    d = tmp_path_factory.mktemp("redis-pki")
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, ca = _ca(now, "toolgate redis test CA")
    skey, scert = _leaf(now, ca_key, ca, "127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH,
                        [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    ckey, ccert = _leaf(now, ca_key, ca, "toolgate", ExtendedKeyUsageOID.CLIENT_AUTH)
    _, other = _ca(now, "some other CA")
    files = {}
    for name, data in [("ca", ca.public_bytes(serialization.Encoding.PEM)),
                       ("server", scert.public_bytes(serialization.Encoding.PEM)), ("server_key", _pem_key(skey)),
                       ("client", ccert.public_bytes(serialization.Encoding.PEM)), ("client_key", _pem_key(ckey)),
                       ("other_ca", other.public_bytes(serialization.Encoding.PEM))]:
        files[name] = d / f"{name}.pem"
        files[name].write_bytes(data)
    return files


@pytest.fixture(scope="module")
def tls_redis(pki):
    """A redis-server accepting TLS only (client certificates required) on a free port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise AssertionError("redis-server is not installed: tests/run.sh installs it (Debian package redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="toolgate-redis-tls-") as d:
        proc = subprocess.Popen(
            [binary, "--port", "0", "--bind", "127.0.0.1", "--tls-port", str(port), "--dir", d, "--save", "",
             "--tls-cert-file", str(pki["server"]), "--tls-key-file", str(pki["server_key"]),
             "--tls-ca-cert-file", str(pki["ca"]), "--tls-auth-clients", "yes"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                assert proc.poll() is None, f"redis-server with TLS did not start: {proc.stdout.read().decode()}"
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert time.monotonic() < deadline, "redis-server with TLS did not listen"
                time.sleep(0.05)
            yield f"rediss://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def tls_config(url: str, prefix: str, ca: Path, cert: Path | None, key: Path | None) -> str:
    cfg = redis_config(url, prefix)
    extra = f"  tls_ca_file: {str(ca)!r}\n"
    if cert:
        extra += f"  tls_cert_file: {str(cert)!r}\n  tls_key_file: {str(key)!r}\n"
    return cfg.replace(f"  key_prefix: {prefix}\n", f"  key_prefix: {prefix}\n{extra}")


def test_two_instances_share_state_over_tls(pki, tls_redis):
    prefix = f"tg{secrets.token_hex(3)}"
    cfg = tls_config(tls_redis, prefix, pki["ca"], pki["client"], pki["client_key"])
    with instances(cfg, 2) as (admin, (a, b)):
        assert httpx2.get(a.base_url + "/readyz").status_code == 200
        made = call(a, "POST", "/v1/gateways", admin, {"name": "over-tls", "servers": ["time"]})
        assert made.status_code == 201, made.text
        gw = made.json()["data"]["id"]
        # Written on A through TLS, read on B through TLS (its feed and its store).
        within(5, lambda: call(b, "GET", f"/v1/gateways/{gw}", admin).status_code == 200)


@pytest.mark.parametrize("trust,client,reason", [("other_ca", True, "invalid peer certificate: UnknownIssuer"),
                                                  ("ca", False, "CertificateRequired")],
                         ids=["server certificate from an untrusted CA", "no client certificate"])
def test_a_failed_handshake_stops_the_start_saying_why(pki, tls_redis, trust, client, reason):
    prefix = f"tg{secrets.token_hex(3)}"
    cfg = tls_config(tls_redis, prefix, pki[trust], pki["client"] if client else None,
                     pki["client_key"] if client else None)
    srv = ToolgateServer(full_config=cfg.replace("  key_prefix:", "  connect_timeout_ms: 500\n  key_prefix:"),
                         admin_key=random_key(), env={"TOOLGATE_SECRET_KEY": SECRET})
    # The start reads every record from Redis: a handshake that fails stops it, saying why.
    with pytest.raises(RuntimeError) as refused:
        srv.start()
    srv.stop()
    srv.tmp.cleanup()
    said = str(refused.value)
    assert "cannot open storage" in said and reason in said, said
