"""`https://` apps: toolgate reaches a real MCP server over TLS, and trusts a private CA only
when the app's `tls_ca_file` names it.

The upstream is the official Python SDK's server under uvicorn with TLS (`tls_upstream.py`); its
certificate, for 127.0.0.1, is issued by a CA generated per test run (`cryptography`), so it
chains to none of the public roots toolgate trusts by default.
"""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mcp_helpers import TIME_APP, Api, McpHttp, ToolgateServer, config, mcp_url, start_toolgate, wait_for_port

HERE = Path(__file__).parent


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA and a server certificate for IP 127.0.0.1 that it issued (PEM files)."""
    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("toolgate test CA"))
        .issuer_name(_name("toolgate test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files = {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return files


@pytest.fixture(scope="module")
def tls_upstream(pki):
    """`https://127.0.0.1:PORT/mcp` of the running TLS MCP server."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "tls_upstream.py"), str(pki["cert"]), str(pki["key"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    try:
        addr = wait_for_port(proc, "tls_upstream.py (MCP server over HTTPS)")
        yield f"https://{addr}/mcp"
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        if err:
            print(err.decode(errors="replace"))


def tls_app(url: str, ca_file: Path | None) -> str:
    ca = f"    tls_ca_file: {str(ca_file)!r}\n" if ca_file else ""
    return f"""\
  - id: secure
    name: Secure
    description: MCP server over HTTPS behind a private CA
    category: testing
    url: {url}
    timeouts: {{connect_ms: 2000, first_byte_ms: 5000, total_ms: 10000}}
{ca}"""


def test_https_app_behind_a_private_ca_is_listed_and_called(pki, tls_upstream):
    with ToolgateServer(full_config=config(TIME_APP + tls_app(tls_upstream, pki["ca"]))) as srv:
        api = Api(srv)
        gw_id, key = api.create_gateway(["time", "secure"])
        c = McpHttp(mcp_url(srv, gw_id), key)
        c.initialize()
        tools = {t["name"]: t for t in c.rpc("tools/list")["result"]["tools"]}
        assert "secure__echo" in tools, tools
        assert tools["secure__echo"]["inputSchema"]["properties"]["message"]["type"] == "string", tools
        result = c.rpc("tools/call", {"name": "secure__echo", "arguments": {"message": "over TLS"}})["result"]
        assert result.get("isError", False) is False, result
        assert result["content"][0]["text"] == "tls: over TLS", result
        servers = {s["id"]: s["status"] for s in api.gateway(gw_id)["servers"]}
        assert servers == {"time": "connected", "secure": "connected"}, servers


def test_https_app_whose_ca_is_not_trusted_fails_closed(tls_upstream):
    """Without `tls_ca_file` the same server's certificate chains to no trusted root: the app is
    an error, its tools are not offered, a call is a JSON-RPC error, never a relayed answer, and
    the gateway's other app keeps working."""
    with ToolgateServer(full_config=config(TIME_APP + tls_app(tls_upstream, None))) as srv:
        api = Api(srv)
        gw_id, key = api.create_gateway(["time", "secure"])
        c = McpHttp(mcp_url(srv, gw_id), key)
        c.initialize()
        names = [t["name"] for t in c.rpc("tools/list")["result"]["tools"]]
        assert "secure__echo" not in names and "time__get_current_time" in names, names
        msg = c.rpc("tools/call", {"name": "secure__echo", "arguments": {"message": "x"}})
        assert "error" in msg, f"an untrusted upstream must not answer: {msg}"
        ok = c.rpc("tools/call", {"name": "time__get_current_time", "arguments": {"format": "YYYY"}})
        assert ok["result"].get("isError", False) is False, ok
        servers = {s["id"]: s["status"] for s in api.gateway(gw_id)["servers"]}
        assert servers == {"time": "connected", "secure": "error"}, servers
        # The log is written by a thread of its own (a warning at once, other lines within 25 ms).
        deadline = time.monotonic() + 2
        while "certificate" not in srv.stderr_text().lower() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "certificate" in srv.stderr_text().lower(), "the log should say why the app failed"


def test_tls_ca_file_that_is_not_pem_stops_the_start(tmp_path, tls_upstream):
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(RuntimeError, match=r"apps\[0\]\.tls_ca_file.*no PEM certificate"):
        start_toolgate(config(tls_app(tls_upstream, bad)))
