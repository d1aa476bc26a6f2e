"""TLS termination on the main listener (`server.tls`), HTTP/2, client certificates and
certificate reloads, with real clients: curl (`--http2`, `--cacert`), Python's `ssl`, and the
official MCP Python SDK over https.

Certificates come from a CA generated per test run (`cryptography`): the main one for
127.0.0.1, `localhost` and `a.test`, a second for `b.test` (chosen by SNI), an expired one, and
a client CA with a client certificate for mTLS. toolgate serves TLS on 127.0.0.1 and plain HTTP
beside it on 127.0.0.3 (`server.plain_listen`), which is where the harness finds the management
API; the TLS port is the other listening port on 127.0.0.1.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mcp_helpers import Api, ToolgateServer, run
from toolgate_harness import listening_addrs

NOW = datetime.datetime.now(datetime.timezone.utc)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


class Ca:
    def __init__(self, cn: str):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(_name(cn))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(days=2))
            .not_valid_after(NOW + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, d: Path, stem: str, subject: x509.Name, dns: list[str], ips: list[str] = (), client=False,
              not_after: datetime.datetime | None = None) -> tuple[Path, Path, int]:
        """Writes `stem.pem` and `stem.key`; returns their paths and the serial number."""
        key = ec.generate_private_key(ec.SECP256R1())
        serial = x509.random_serial_number()
        names = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(NOW - datetime.timedelta(days=2))
            .not_valid_after(not_after or NOW + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = d / f"{stem}.pem", d / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_pem_key(key))
        return cert_path, key_path, serial

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("edge-pki")
    ca, client_ca, rogue_ca = Ca("toolgate edge test CA"), Ca("toolgate client CA"), Ca("rogue CA")
    files = {"dir": d, "ca": ca.write(d / "ca.pem"), "client_ca": client_ca.write(d / "client-ca.pem")}
    files["main"] = ca.issue(d, "main", _name("toolgate edge"), ["localhost", "a.test"], ["127.0.0.1"])
    files["b"] = ca.issue(d, "b", _name("b.test"), ["b.test"])
    files["expired"] = ca.issue(d, "expired", _name("expired"), ["localhost"], ["127.0.0.1"],
                                not_after=NOW - datetime.timedelta(days=1))
    files["renewed"] = ca.issue(d, "renewed", _name("toolgate edge renewed"), ["localhost", "a.test"], ["127.0.0.1"])
    files["client"] = client_ca.issue(d, "client", _name("agent-7", "Example Robots"), [], client=True)
    files["rogue_client"] = rogue_ca.issue(d, "rogue", _name("intruder"), [], client=True)
    files["ca_obj"] = ca
    return files


def _tls_yaml(cert: Path, key: Path, extra: str = "", server_extra: str = "") -> str:
    return (
        "environment: development\n"
        "server:\n"
        "  listen: 127.0.0.1:0\n"
        "  plain_listen: 127.0.0.3:0\n"
        "  metrics_listen: 127.0.0.2:0\n"
        "  trusted_proxies: []\n"
        f"{server_extra}"
        "  tls:\n"
        "    certificates:\n"
        f"      - cert_file: {cert}\n"
        f"        key_file: {key}\n"
        f"{extra}"
        "storage:\n"
        "  backend: embedded\n"
        "  path: ./data\n"
        "apps:\n"
        "  - id: time\n"
        "    name: Time\n"
        "    description: Current time\n"
        "    category: utilities\n"
        "    builtin: time\n"
    )


class Edge:
    """A running toolgate with TLS on 127.0.0.1 and plain HTTP on 127.0.0.3."""

    def __init__(self, yaml: str):
        self.srv = ToolgateServer(full_config=yaml).start()
        tls = [a for a in listening_addrs(self.srv.proc.pid) if a.startswith("127.0.0.1:")]
        assert len(tls) == 1, f"expected one TLS listener on 127.0.0.1, found {tls}"
        self.tls_port = int(tls[0].rsplit(":", 1)[1])
        self.api = Api(self.srv)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.tls_port}{path}"

    def stop(self):
        self.srv.stop()
        self.srv.tmp.cleanup()


def _curl(*args: str) -> subprocess.CompletedProcess:
    curl = shutil.which("curl")
    assert curl, "curl is missing (tests/run.sh installs it)"
    return subprocess.run([curl, "-sS", "--max-time", "10", *args], capture_output=True, text=True, timeout=20)


def _handshake(port: int, ca: Path | None, server_name: str | None = "localhost", client: tuple | None = None,
               max_version: ssl.TLSVersion | None = None) -> x509.Certificate:
    """Completes a TLS handshake (and one request, so that a refusal sent after the client's
    Finished message shows); returns the server's certificate."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    if server_name is None:
        ctx.check_hostname = False
    if client:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    if max_version:
        ctx.maximum_version = max_version
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            answer = tls.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


@pytest.fixture(scope="module")
def edge(pki):
    main_cert, main_key, _ = pki["main"]
    b_cert, b_key, _ = pki["b"]
    extra = f"      - cert_file: {b_cert}\n        key_file: {b_key}\n"
    e = Edge(_tls_yaml(main_cert, main_key, extra))
    yield e
    e.stop()


def test_curl_over_http2_and_http1(edge, pki):
    for flag, version in (("--http2", "2"), ("--http1.1", "1.1")):
        r = _curl(flag, "--cacert", str(pki["ca"]), "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                  edge.url("/healthz", "localhost"), "--resolve", f"localhost:{edge.tls_port}:127.0.0.1")
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"200 {version}", f"{flag}: {r.stdout}"
    # The management API over h2: the envelope and the rate-limit headers as over HTTP/1.1.
    r = _curl("--http2", "--cacert", str(pki["ca"]), "-i", "-H", f"Authorization: Bearer {edge.srv.admin_key}",
              edge.url("/v1/gateways"))
    assert r.returncode == 0, r.stderr
    head, _, body = r.stdout.replace("\r\n", "\n").partition("\n\n")
    assert head.startswith("HTTP/2 200"), head
    assert "x-ratelimit-limit:" in head.lower(), head
    assert json.loads(body)["success"] is True


def test_mcp_over_http2_post_and_sse(edge, pki):
    gw, key = edge.api.create_gateway(["time"])
    url = edge.url(f"/gateway/{gw}/mcp")
    common = ["--http2", "--cacert", str(pki["ca"]), "-H", f"X-API-Key: {key}", "-H", "Content-Type: application/json",
              "-H", "Accept: application/json, text/event-stream"]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}
    r = _curl(*common, "-i", "-d", json.dumps(init), url)
    assert r.returncode == 0, r.stderr
    head, _, body = r.stdout.replace("\r\n", "\n").partition("\n\n")
    assert head.startswith("HTTP/2 200"), head
    session = next(l.split(":", 1)[1].strip() for l in head.splitlines() if l.lower().startswith("mcp-session-id:"))
    assert json.loads(body)["result"]["serverInfo"]["name"] == "toolgate"
    hdr = common + ["-H", f"Mcp-Session-Id: {session}", "-H", "MCP-Protocol-Version: 2025-11-25"]
    r = _curl(*hdr, "-o", "/dev/null", "-w", "%{http_code}", "-d",
              json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), url)
    assert r.stdout == "202", r.stdout + r.stderr
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "get_current_time", "arguments": {"timezone": "UTC", "format": "YYYY"}}}
    r = _curl(*hdr, "-d", json.dumps(call), url)
    assert r.returncode == 0, r.stderr
    assert str(NOW.year) in r.stdout, r.stdout
    # The GET stream over h2: headers arrive at once and the stream stays open (curl's time
    # limit ends it, exit code 28), as an SSE answer must.
    r = _curl("--http2", "--cacert", str(pki["ca"]), "-H", f"X-API-Key: {key}", "-H", "Accept: text/event-stream",
              "-H", f"Mcp-Session-Id: {session}", "-H", "MCP-Protocol-Version: 2025-11-25", "-i",
              "--max-time", "2", url)
    assert r.returncode == 28, f"the stream ended early: rc={r.returncode} {r.stdout} {r.stderr}"
    assert r.stdout.startswith("HTTP/2 200"), r.stdout
    assert "content-type: text/event-stream" in r.stdout.lower(), r.stdout


def test_python_mcp_sdk_over_https(edge, pki):
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    gw, key = edge.api.create_gateway(["time"])
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))

    async def go():
        async with httpx2.AsyncClient(headers={"X-API-Key": key}, verify=ctx, timeout=30) as http:
            async with Client(streamable_http_client(edge.url(f"/gateway/{gw}/mcp", "localhost"), http_client=http),
                              mode="legacy") as c:
                tools = await c.list_tools()
                result = await c.call_tool("get_current_time", {"timezone": "UTC", "format": "YYYY"})
                return [t.name for t in tools.tools], result

    names, result = run(go())
    assert "get_current_time" in names, names
    assert result.is_error is False and str(NOW.year) in result.content[0].text, result


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_client_resumes_its_session(edge, pki, version):
    """Python's ssl (OpenSSL) keeps the session of a first connection and offers it on the next:
    the server resumes it (a ticket), on TLS 1.3 and 1.2; a client without one gets a full
    handshake."""
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    ctx.minimum_version = ctx.maximum_version = version

    def connect(session=None):
        with socket.create_connection(("127.0.0.1", edge.tls_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
                assert _health_on(tls).startswith(b"HTTP/1.1 200")
                return tls.session, tls.session_reused

    first, reused = connect()
    assert not reused and first is not None
    assert first.has_ticket, "the server sent no session ticket"
    second, reused = connect(first)
    assert reused, "the offered session was not resumed"
    _, reused = connect(None)
    assert not reused


def test_sni_chooses_the_certificate(edge, pki):
    for name, cn in (("a.test", "toolgate edge"), ("b.test", "b.test"), ("localhost", "toolgate edge")):
        cert = _handshake(edge.tls_port, pki["ca"], name)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn, name


def test_clients_refuse_a_wrong_host_and_an_untrusted_issuer(edge, pki):
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match|not valid for"):
        _handshake(edge.tls_port, pki["ca"], "wrong.test")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer|self.signed|unknown ca"):
        _handshake(edge.tls_port, None, "localhost")
    r = _curl("-o", "/dev/null", edge.url("/healthz", "localhost"), "--resolve", f"localhost:{edge.tls_port}:127.0.0.1")
    assert r.returncode == 60, f"curl without the CA must refuse the certificate: {r.returncode} {r.stderr}"


def test_plain_http_on_the_tls_port_gets_no_answer_and_the_plain_listener_serves(edge):
    with socket.create_connection(("127.0.0.1", edge.tls_port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(b"HTTP/1.1 200"), data
    r = httpx2.get(edge.srv.base_url + "/healthz", timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_expired_certificate_is_refused_by_the_client(pki):
    cert, key, _ = pki["expired"]
    e = Edge(_tls_yaml(cert, key))
    try:
        with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
            _handshake(e.tls_port, pki["ca"], "localhost")
    finally:
        e.stop()


def test_minimum_version_13_refuses_a_tls12_client(pki):
    cert, key, _ = pki["main"]
    e = Edge(_tls_yaml(cert, key, '    min_version: "1.3"\n'))
    try:
        with pytest.raises(ssl.SSLError):
            _handshake(e.tls_port, pki["ca"], "localhost", max_version=ssl.TLSVersion.TLSv1_2)
        _handshake(e.tls_port, pki["ca"], "localhost")  # 1.3 passes
    finally:
        e.stop()
    e = Edge(_tls_yaml(cert, key))
    try:
        _handshake(e.tls_port, pki["ca"], "localhost", max_version=ssl.TLSVersion.TLSv1_2)  # default minimum 1.2
    finally:
        e.stop()


def test_mtls_required_and_optional(pki):
    cert, key, _ = pki["main"]
    client = pki["client"][:2]
    rogue = pki["rogue_client"][:2]
    # The harness reaches the API on the plain listener, which client_auth: required does not
    # bind: declared trusted (without it the start is refused; see the bad settings below).
    e = Edge(_tls_yaml(cert, key, f"    client_ca_file: {pki['client_ca']}\n",
                       server_extra="  plain_listen_trusted: true\n"))
    try:
        for missing_or_wrong in (None, rogue):
            with pytest.raises((ssl.SSLError, ConnectionResetError, AssertionError)):
                _handshake(e.tls_port, pki["ca"], "localhost", client=missing_or_wrong)
        _handshake(e.tls_port, pki["ca"], "localhost", client=client)
        # The verified subject reaches the request: the access line names it.
        r = _curl("--cacert", str(pki["ca"]), "--cert", str(client[0]), "--key", str(client[1]),
                  "-H", f"Authorization: Bearer {e.srv.admin_key}", "-o", "/dev/null", "-w", "%{http_code}",
                  e.url("/v1/gateways"))
        assert r.stdout == "200", r.stdout + r.stderr
        deadline = time.monotonic() + 5
        lines: list[str] = []
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
            lines = [l for l in e.srv.stderr_text().splitlines() if "/v1/gateways" in l and "agent-7" in l]
        assert lines, e.srv.stderr_text()[-2000:]
        assert "O=Example Robots" in lines[-1], lines[-1]
    finally:
        e.stop()
    e = Edge(_tls_yaml(cert, key, f"    client_ca_file: {pki['client_ca']}\n    client_auth: optional\n"))
    try:
        _handshake(e.tls_port, pki["ca"], "localhost")  # no certificate: served
        _handshake(e.tls_port, pki["ca"], "localhost", client=client)
        with pytest.raises((ssl.SSLError, ConnectionResetError, AssertionError)):
            _handshake(e.tls_port, pki["ca"], "localhost", client=rogue)  # a bad one is still refused
    finally:
        e.stop()


def _health_on(conn: ssl.SSLSocket) -> bytes:
    """One keep-alive `GET /healthz` on an open connection: the whole answer."""
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    answer = b""
    while not answer.endswith(b'{"status":"ok"}'):
        chunk = conn.recv(4096)
        assert chunk, f"connection closed after {answer!r}"
        answer += chunk
    return answer


def _serial(port: int, ca: Path) -> int:
    return _handshake(port, ca, "localhost").serial_number


def _install(live: Path, cert: Path, key: Path) -> None:
    """Puts a certificate and its key in place in one step, as a renewal tool does: both are
    written into a new directory, then the `live` symlink is swapped to it by a rename. The
    server, which polls the files' times and sizes and then reads both, never sees the key of
    one pair beside the certificate of another, nor a half-written file."""
    generation = live.parent / f"{live.name}.{time.monotonic_ns()}"
    generation.mkdir()
    shutil.copy(cert, generation / "cert.pem")
    shutil.copy(key, generation / "key.pem")
    staged = live.parent / f"{live.name}.staged"
    os.symlink(generation.name, staged)
    os.replace(staged, live)


def test_certificates_reload_on_change_and_on_sighup_and_a_bad_file_is_refused(pki, tmp_path):
    live = tmp_path / "live"
    cert, key = live / "cert.pem", live / "key.pem"
    _install(live, *pki["main"][:2])
    e = Edge(_tls_yaml(cert, key, "    reload_check_ms: 200\n"))
    try:
        assert _serial(e.tls_port, pki["ca"]) == pki["main"][2]
        # An open keep-alive connection made before the change keeps working after it.
        ctx = ssl.create_default_context(cafile=str(pki["ca"]))
        held = ctx.wrap_socket(socket.create_connection(("127.0.0.1", e.tls_port), timeout=5), server_hostname="localhost")
        assert _health_on(held).startswith(b"HTTP/1.1 200")
        # Renewed files: new connections get the new certificate within the check period.
        _install(live, *pki["renewed"][:2])
        deadline = time.monotonic() + 5
        while _serial(e.tls_port, pki["ca"]) != pki["renewed"][2]:
            assert time.monotonic() < deadline, "the renewed certificate was not served within 5 s"
            time.sleep(0.1)
        assert _health_on(held).startswith(b"HTTP/1.1 200"), "the connection opened before the reload broke"
        held.close()
        # A broken file is refused: the running certificate stays, the refusal names the field.
        broken = tmp_path / "broken.pem"
        broken.write_text("not a certificate\n")
        _install(live, broken, pki["renewed"][1])
        deadline = time.monotonic() + 5
        while "server.tls.certificates[0].cert_file" not in e.srv.stderr_text():
            assert time.monotonic() < deadline, "the broken certificate was not reported within 5 s"
            time.sleep(0.1)
        assert _serial(e.tls_port, pki["ca"]) == pki["renewed"][2]
        m = httpx2.get(e.srv.metrics_url, timeout=5).text
        assert 'toolgate_tls_reloads_total{result="refused"} 1' in m, m
        assert 'toolgate_tls_reloads_total{result="applied"} 1' in m, m
        assert 'toolgate_tls_handshakes_total{result="ok"}' in m
        assert "toolgate_tls_certificate_not_after_seconds" in m
    finally:
        e.stop()
    # reload_check_ms: 0: only SIGHUP reloads.
    _install(live, *pki["main"][:2])
    e = Edge(_tls_yaml(cert, key, "    reload_check_ms: 0\n"))
    try:
        _install(live, *pki["renewed"][:2])
        time.sleep(0.5)
        assert _serial(e.tls_port, pki["ca"]) == pki["main"][2], "reloaded without SIGHUP"
        os.kill(e.srv.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while _serial(e.tls_port, pki["ca"]) != pki["renewed"][2]:
            assert time.monotonic() < deadline, "SIGHUP did not reload the certificate"
            time.sleep(0.1)
        assert e.srv.proc.poll() is None, "SIGHUP ended the process"
    finally:
        e.stop()


def test_bad_tls_settings_stop_the_start_with_the_field(pki, tmp_path):
    cert, key, _ = pki["main"]
    other_key = pki["b"][1]
    cases = [
        (_tls_yaml(tmp_path / "missing.pem", key), "server.tls.certificates[0].cert_file"),
        (_tls_yaml(cert, other_key), "server.tls.certificates[0].key_file"),
        (_tls_yaml(cert, key, '    min_version: "1.1"\n'), "server.tls.min_version"),
        (_tls_yaml(cert, key, "    client_auth: required\n"), "server.tls.client_auth"),
        (_tls_yaml(cert, key, f"    client_ca_file: {tmp_path / 'nope.pem'}\n",
                   server_extra="  plain_listen_trusted: true\n"), "server.tls.client_ca_file"),
        # Required client certificates do not bind the plain listener beside: refused, naming it.
        (_tls_yaml(cert, key, f"    client_ca_file: {pki['client_ca']}\n"), "server.plain_listen"),
    ]
    from toolgate_harness import toolgate_bin

    for yaml, field in cases:
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(yaml)
        p = subprocess.run([str(toolgate_bin()), "--config", str(cfg)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2, f"{field}: exit {p.returncode}: {p.stderr}"
        assert field in p.stderr, f"{field} not named: {p.stderr}"
        # check-config refuses what the start refuses, the files included.
        p = subprocess.run([str(toolgate_bin()), "check-config", str(cfg)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2 and field in p.stderr, f"check-config, {field}: exit {p.returncode}: {p.stderr}"
    cfg = tmp_path / "good.yaml"
    cfg.write_text(_tls_yaml(cert, key))
    p = subprocess.run([str(toolgate_bin()), "check-config", str(cfg)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr


def test_a_taken_plain_listener_ends_the_start_naming_it(pki, tmp_path):
    """A taken `server.plain_listen` ends the start at once with one line naming the setting and
    the address (issue 56), as a taken `server.listen` does; no retrying, no panic, no process left
    running without its listener (the old behaviour: still running when `timeout` ends it)."""
    from toolgate_harness import toolgate_bin

    cert, key, _ = pki["main"]
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.3", 0))
    taken.listen()
    addr = f"127.0.0.3:{taken.getsockname()[1]}"
    cfg = tmp_path / "taken.yaml"
    cfg.write_text(_tls_yaml(cert, key).replace("  plain_listen: 127.0.0.3:0\n", f"  plain_listen: {addr}\n"))
    try:
        p = subprocess.run([str(toolgate_bin()), "--config", str(cfg)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=20)
    finally:
        taken.close()
    assert p.returncode != 0, p.stderr
    assert f"toolgate: cannot start: server.plain_listen {addr} is in use" in p.stderr.splitlines(), p.stderr
    assert "panicked" not in p.stderr, p.stderr


def test_h2c_with_prior_knowledge_on_the_plain_listener(pki):
    cert, key, _ = pki["main"]
    e = Edge(_tls_yaml(cert, key, server_extra="  h2c: true\n"))
    try:
        r = _curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                  e.srv.base_url + "/healthz")
        assert r.stdout == "200 2", r.stdout + r.stderr
        r = _curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code} %{http_version}", e.srv.base_url + "/healthz")
        assert r.stdout == "200 1.1", r.stdout + r.stderr
    finally:
        e.stop()


def test_a_client_that_never_finishes_the_handshake_is_closed_at_the_header_deadline(pki):
    cert, key, _ = pki["main"]
    e = Edge(_tls_yaml(cert, key, server_extra="  header_timeout_ms: 500\n"))
    try:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", e.tls_port), timeout=5) as s:
            s.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, and then nothing
            assert s.recv(100) == b"", "the connection was not closed"
        assert time.monotonic() - started < 3, "closed, but not at the header deadline"
        m = httpx2.get(e.srv.metrics_url, timeout=5).text
        assert 'toolgate_tls_handshakes_total{result="timeout"} 1' in m, m
    finally:
        e.stop()


def test_web_session_and_csrf_cookies_are_host_prefixed_over_tls(edge, pki):
    """With `server.tls` the session and CSRF cookies are `__Host-` (Secure, Path=/, no Domain):
    a browser takes them only from this origin over HTTPS, so a sibling host cannot plant one.
    The unprefixed names are no longer read."""
    password = "edge passphrase over tls"
    set_pw = httpx2.put(edge.srv.base_url + "/v1/user/password", json={"new_password": password},
                        headers={"Authorization": f"Bearer {edge.srv.admin_key}"}, timeout=30)
    assert set_pw.status_code == 200, set_pw.text
    http = httpx2.Client(verify=ssl.create_default_context(cafile=str(pki["ca"])), follow_redirects=False, timeout=30)

    def cookies(r) -> dict[str, str]:
        return {line.split("=", 1)[0]: line for line in r.headers.get_list("set-cookie")}

    def value(line: str) -> str:
        return line.split(";", 1)[0].split("=", 1)[1]

    page = http.get(edge.url("/auth/signin"))
    assert page.status_code == 200, page.text
    csrf_line = cookies(page)["__Host-toolgate_csrf"]
    attributes = [a.strip() for a in csrf_line.split(";")[1:]]
    assert "Path=/" in attributes and "Secure" in attributes and "HttpOnly" in attributes, csrf_line
    assert not any(a.lower().startswith("domain") for a in attributes), csrf_line
    csrf = value(csrf_line)
    form = {"csrf": csrf, "email": "owner@localhost", "password": password, "next": "/auth/console"}
    # The same token under the unprefixed name is not the CSRF cookie any more.
    plain = http.post(edge.url("/auth/signin"), data=form, headers={"Cookie": f"toolgate_csrf={csrf}"})
    assert plain.status_code == 403, plain.text
    signed = http.post(edge.url("/auth/signin"), data=form, headers={"Cookie": f"__Host-toolgate_csrf={csrf}"})
    assert signed.status_code == 303, signed.text
    set_now = cookies(signed)
    assert "toolgate_session" not in set_now and "__Host-toolgate_session" in set_now, set_now
    session_line = set_now["__Host-toolgate_session"]
    attributes = [a.strip() for a in session_line.split(";")[1:]]
    assert "Path=/" in attributes and "Secure" in attributes, session_line
    assert not any(a.lower().startswith("domain") for a in attributes), session_line
    session = value(session_line)
    console = http.get(edge.url("/auth/console"), headers={"Cookie": f"__Host-toolgate_session={session}"})
    assert console.status_code == 200, console.text
    unprefixed = http.get(edge.url("/auth/console"), headers={"Cookie": f"toolgate_session={session}"})
    assert unprefixed.status_code == 303, "a session under the unprefixed name is no session"
