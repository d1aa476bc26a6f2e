#!/usr/bin/env python3
"""What a TLS handshake costs toolgate, full against resumed (issue 17). Run by hand, not in CI:

    cargo build --release --bin toolgate
    tests/py/.venv/bin/python benches/tls_resumption.py [SECONDS] [ROUNDS]   # 5 3

Starts the release binary terminating TLS (a self-signed ECDSA P-256 certificate made here with
`openssl req`; TLS 1.3 and 1.2 allowed) and runs `openssl s_time` against `GET /healthz`, one
connection at a time, each an HTTP/1.0 request on a new TCP connection: `-new` (a full
handshake every time) and `-reuse` (the session of the first connection resumed by every later
one), alternating, for TLS 1.3 and for TLS 1.2. Reports connections per second and toolgate's CPU
time per connection (utime + stime from /proc), medians over the rounds, and the difference
full - resumed: what resumption saves per handshake.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))

from mcp_helpers import config  # noqa: E402
from toolgate_harness import ToolgateServer, listening_addrs  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def s_time(port: int, mode: str, version: str, seconds: int) -> int:
    out = subprocess.run(["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-www", "/healthz", f"-{mode}",
                          f"-{version}", "-time", str(seconds)], capture_output=True, text=True, timeout=seconds + 30)
    found = re.findall(r"(\d+) connections in [\d.]+s", out.stdout)
    assert found, out.stdout + out.stderr
    return int(found[-1])


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    assert shutil.which("openssl"), "openssl is missing"
    with tempfile.TemporaryDirectory(prefix="toolgate-tls-bench-") as d:
        cert, key = Path(d) / "cert.pem", Path(d) / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
        tls = (f"  tls:\n    certificates:\n      - cert_file: {cert}\n        key_file: {key}\n"
               "  plain_listen: 127.0.0.3:0\n")
        srv = ToolgateServer(full_config=config(server=tls)).start()
        try:
            port = int(next(a for a in listening_addrs(srv.proc.pid) if a.startswith("127.0.0.1:")).rsplit(":", 1)[1])
            pid = srv.proc.pid
            s_time(port, "new", "tls1_3", 1)  # warm-up
            runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for r in range(rounds):
                for version in ("tls1_3", "tls1_2"):
                    for mode in (("new", "reuse") if r % 2 == 0 else ("reuse", "new")):
                        t0 = cpu_ticks(pid)
                        n = s_time(port, mode, version, seconds)
                        t1 = cpu_ticks(pid)
                        cps, us = n / seconds, (t1 - t0) / CLK_TCK * 1e6 / max(n, 1)
                        runs.setdefault((version, mode), []).append((cps, us))
                        print(f"round {r + 1} {version} {mode:5}: {cps:7.0f} conn/s, toolgate {us:6.1f} us/conn",
                              flush=True)
            print("\n| TLS | handshake | connections/s | toolgate CPU us per connection |")
            print("|---|---|---:|---:|")
            med = {k: (statistics.median(c for c, _ in v), statistics.median(u for _, u in v)) for k, v in runs.items()}
            for (version, mode), (cps, us) in sorted(med.items()):
                print(f"| {version.replace('tls1_', '1.')} | {'full' if mode == 'new' else 'resumed'} | {cps:,.0f} | {us:.1f} |")
            for version in ("tls1_3", "tls1_2"):
                full, resumed = med[(version, "new")][1], med[(version, "reuse")][1]
                print(f"TLS {version[-3:].replace('_', '.')}: resumption saves {full - resumed:.1f} us of toolgate's CPU "
                      f"per connection ({resumed / full:.2f}x of a full handshake's connection)")
        finally:
            srv.stop()
            srv.tmp.cleanup()


if __name__ == "__main__":
    main()
