"""Start the real toolgate binary for Python tests, on ports the OS picks.

The Python twin of `tests/integration/common/mod.rs`. The config binds port 0 for both listeners, on two
loopback addresses (`127.0.0.1:0`, `127.0.0.2:0`: Pingora keys listening sockets by address
string, so two `127.0.0.1:0` would share one socket); the addresses are read back from
`/proc/<pid>/fd` and `/proc/<pid>/net/tcp{,6}` (never "find a free port, then bind"), then told
apart by asking them: the main listener answers `GET /healthz` with 200 JSON, the metrics
listener answers `GET /metrics` with Prometheus text.

Used two ways:
  * as a module: `with ToolgateServer() as srv: srv.base_url ...` (see conftest.py);
  * as a command, by schemathesis.sh: `python toolgate_harness.py ports PID`
    prints `MAIN_HOST:PORT METRICS_HOST:PORT` once both answer.
"""

from __future__ import annotations

import ipaddress
import json
import http.client
import os
import secrets
import string
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0

BASE_CONFIG = """\
environment: development
server:
  listen: 127.0.0.1:0
  metrics_listen: 127.0.0.2:0
  public_url: http://localhost:8080
  trusted_proxies: []
storage:
  backend: embedded
  path: {data}
apps:
  - id: time
    name: Time
    description: Current time in any time zone
    category: utilities
    builtin: time
"""


def toolgate_bin() -> Path:
    """The binary under test: $TOOLGATE_BIN, else <target>/release/toolgate."""
    env = os.environ.get("TOOLGATE_BIN")
    if env:
        path = Path(env)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        path = target / "release" / "toolgate"
    if not path.is_file():
        raise RuntimeError(
            f"toolgate binary not found at {path}: run `cargo build --release` "
            "(tests/run.sh does) or set TOOLGATE_BIN"
        )
    return path


def random_key() -> str:
    """An `ag_` key of 40 characters."""
    alphabet = string.ascii_letters + string.digits
    return "ag_" + "".join(secrets.choice(alphabet) for _ in range(37))


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        entries = list(fd_dir.iterdir())
    except FileNotFoundError:
        raise RuntimeError(f"process {pid} is gone") from None
    for fd in entries:
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # closed while we looked
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return inodes


def _parse_proc_addr(s: str) -> tuple[str, int]:
    """`0100007F:1F90` -> ("127.0.0.1", 8080); IPv6 likewise (32-bit words, host byte order)."""
    ip_hex, port_hex = s.split(":")
    raw = b"".join(int(ip_hex[i : i + 8], 16).to_bytes(4, "little") for i in range(0, len(ip_hex), 8))
    ip = ipaddress.ip_address(raw)
    if ip.is_unspecified:
        ip = ipaddress.ip_address("127.0.0.1" if ip.version == 4 else "::1")
    host = str(ip) if ip.version == 4 else f"[{ip}]"
    return host, int(port_hex, 16)


def listening_addrs(pid: int) -> list[str]:
    """`host:port` on which process `pid` has a TCP socket in LISTEN state (wildcards as loopback)."""
    inodes = _socket_inodes(pid)
    addrs = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:
                host, port = _parse_proc_addr(cols[1])
                addrs.add(f"{host}:{port}")
    return sorted(addrs)


def listening_ports(pid: int) -> list[int]:
    """TCP ports on which process `pid` has a socket in LISTEN state."""
    inodes = _socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def _get(addr: str, path: str) -> tuple[int, str, str]:
    req = urllib.request.Request(f"http://{addr}{path}")
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status, resp.headers.get("content-type", ""), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("content-type", ""), err.read().decode("utf-8", "replace")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def classify(addrs: list[str]) -> tuple[str | None, str | None]:
    """(main, metrics) among `addrs`, each None while not yet answering."""
    main = metrics = None
    for addr in addrs:
        try:
            status, _, body = _get(addr, "/healthz")
            if status == 200 and _is_json(body):
                main = addr
                continue
            status, _, body = _get(addr, "/metrics")
            if status == 200 and not _is_json(body):
                metrics = addr
        except (OSError, urllib.error.URLError, http.client.HTTPException):
            continue  # bound but not serving yet, or not serving plain HTTP (a TLS listener)
    return main, metrics


def discover(pid: int, timeout: float = STARTUP_TIMEOUT, alive=None) -> tuple[str, str]:
    """Wait until process `pid` serves both listeners; return their `host:port` (main, metrics)."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"toolgate (pid {pid}) exited during startup")
        seen = listening_addrs(pid)
        main, metrics = classify(seen)
        if main is not None and metrics is not None:
            return main, metrics
        time.sleep(0.1)
    raise RuntimeError(
        f"toolgate (pid {pid}) did not serve both /healthz and /metrics within {timeout:.0f}s; "
        f"listening on: {seen}\n--- its threads (name, state, kernel wait; a stall's first clue) ---\n"
        f"{threads_of(pid)}"
    )


def threads_of(pid: int) -> str:
    """Each thread of `pid`: name, state, the kernel function it waits in and, where readable
    (root), its kernel stack. Printed when a start stalls, before the process is killed."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*"), key=lambda p: int(p.name)):
        def read(name: str) -> str:
            try:
                return (task / name).read_text(errors="replace").strip()
            except OSError as err:
                return f"({err.strerror})"
        stat = read("stat")
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        stack = read("stack").replace("\n", " | ")
        lines.append(f"{task.name} {read('comm')} state={state} wchan={read('wchan')} stack: {stack}")
    return "\n".join(lines) or "(no thread found: the process is gone)"


class ToolgateServer:
    """The real binary on OS-chosen ports, in its own temporary directory."""

    def __init__(self, extra_yaml: str = "", full_config: str | None = None, admin_key: str | None = None,
                 env: dict[str, str] | None = None):
        self.tmp = tempfile.TemporaryDirectory(prefix="toolgate-py-")
        self.dir = Path(self.tmp.name)
        self.data_dir = self.dir / "data"
        self.data_dir.mkdir()
        self.config_path = self.dir / "toolgate.yaml"
        config = full_config if full_config is not None else BASE_CONFIG.format(data=self.data_dir) + extra_yaml
        self.config_path.write_text(config)
        self.admin_key = admin_key or random_key()
        self.extra_env = env or {}
        self.proc: subprocess.Popen | None = None
        self.main_addr = self.metrics_addr = ""

    def start(self) -> "ToolgateServer":
        env = dict(os.environ, TOOLGATE_ADMIN_KEY=self.admin_key, RUST_LOG=os.environ.get("RUST_LOG", "info"))
        env.update(self.extra_env)
        self.stdout = open(self.dir / "stdout.log", "ab")
        self.stderr = open(self.dir / "stderr.log", "ab")
        self.proc = subprocess.Popen(
            [str(toolgate_bin()), "--config", str(self.config_path)],
            cwd=self.dir, env=env, stdout=self.stdout, stderr=self.stderr, stdin=subprocess.DEVNULL,
        )
        try:
            self.main_addr, self.metrics_addr = discover(self.proc.pid, alive=lambda: self.proc.poll() is None)
        except RuntimeError as err:
            self.stop()
            raise RuntimeError(f"{err}\n--- toolgate stderr ---\n{self.stderr_text()}") from None
        return self

    def stderr_text(self) -> str:
        return (self.dir / "stderr.log").read_text(errors="replace")

    @property
    def base_url(self) -> str:
        return f"http://{self.main_addr}"

    @property
    def main_port(self) -> int:
        return int(self.main_addr.rsplit(":", 1)[1])

    @property
    def metrics_port(self) -> int:
        return int(self.metrics_addr.rsplit(":", 1)[1])

    @property
    def metrics_url(self) -> str:
        return f"http://{self.metrics_addr}/metrics"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for f in (getattr(self, "stdout", None), getattr(self, "stderr", None)):
            if f is not None:
                f.close()

    def __enter__(self) -> "ToolgateServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.tmp.cleanup()


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie that its parent has not reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "ports":
        pid = int(argv[1])
        try:
            main_addr, metrics_addr = discover(pid, alive=lambda: _alive(pid))
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        print(main_addr, metrics_addr)
        return 0
    print("usage: toolgate_harness.py ports PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
