"""Several toolgate instances on one Redis behave as one gateway (`storage.backend: redis`).

A real `redis-server` (installed by tests/run.sh) is started by the test on a Unix socket in a
temporary directory (no port to race for), and three real toolgate instances share it. What is
measured: a gateway created on one instance is served by the others, a revoked key is refused by
every instance within 1 s (the one test of that deadline; the others wait for the state), an MCP session opened on one instance is used, streamed and ended on
the others, the request log reads the same everywhere, and an instance refuses to start on Redis
without the shared sealing key. The scale-out tests run twice: on one Redis, and on a Redis Cluster
of three masters the test creates (`redis-cli --cluster create`, TCP ports on 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest

from mcp_helpers import ACCEPT_BOTH, LATEST, TIME_APP, McpHttp, config, mcp_url, response_message
from test_web_signin import totp
from toolgate_harness import ToolgateServer, random_key

SECRET = secrets.token_hex(32)


class RedisProcess:
    """A redis-server on a Unix socket in a directory of its own (append-only file, fsync on every
    write, so that a restart keeps what it acknowledged); stoppable and restartable."""

    def __init__(self, d: str):
        binary = shutil.which("redis-server")
        if binary is None:
            raise AssertionError("redis-server is not installed: tests/run.sh installs it (Debian package redis-server)")
        self.binary, self.dir, self.sock = binary, d, Path(d) / "redis.sock"
        self.url = f"unix://{self.sock}"
        self.nodes = None  # not a cluster
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RedisProcess":
        self.proc = subprocess.Popen(
            [self.binary, "--port", "0", "--unixsocket", str(self.sock), "--unixsocketperm", "700",
             "--dir", self.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
        deadline = time.monotonic() + 5
        while self.sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@contextlib.contextmanager
def redis_server():
    """A running `RedisProcess`, stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="toolgate-redis-") as d:
        r = RedisProcess(d).start()
        try:
            yield r
        finally:
            r.stop()


def free_cluster_port() -> int:
    """A free TCP port whose cluster bus port (+10000) is free too."""
    import socket

    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise AssertionError("no free port pair for a Redis Cluster node")


class RedisCluster:
    """A Redis Cluster of three masters (no replicas), each a real redis-server on 127.0.0.1,
    joined by `redis-cli --cluster create`; `url` is one seed and `nodes` the other two."""

    def __init__(self, d: str):
        self.binary, self.cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if self.binary is None or self.cli is None:
            raise AssertionError("redis-server and redis-cli are not installed: tests/run.sh installs them "
                                 "(Debian packages redis-server, redis-tools)")
        self.dir = d
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen] = []

    def start(self) -> "RedisCluster":
        """Starts the three nodes; the first time, on new ports, joined into a cluster; again
        after `stop`, on the same ports, from their saved cluster configuration and data."""
        first = not self.ports
        if first:
            self.ports = [free_cluster_port() for _ in range(3)]
        for port in self.ports:
            node_dir = Path(self.dir) / str(port)
            node_dir.mkdir(exist_ok=True)
            self.procs.append(subprocess.Popen(
                [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
                 "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            self.wait(port, lambda out: out.strip() == "PONG", "PING")
        if first:
            self.create()
        for port in self.ports:
            self.wait(port, lambda out: "cluster_state:ok" in out, "CLUSTER", "INFO")
        return self

    def create(self) -> None:
        created = subprocess.run(
            [self.cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
             "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, f"redis-cli --cluster create failed: {created.stdout}{created.stderr}"

    def wait(self, port: int, ok, *command: str) -> None:
        deadline = time.monotonic() + 20
        while True:
            out = self.run(port, *command)
            if ok(out):
                return
            assert time.monotonic() < deadline, f"redis node {port}: {' '.join(command)} -> {out!r}"
            time.sleep(0.1)

    def run(self, port: int, *command: str) -> str:
        return subprocess.run([self.cli, "-p", str(port), *command], capture_output=True, text=True, timeout=10).stdout

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    @property
    def nodes(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}" for p in self.ports[1:]]

    def keys_per_node(self, prefix: str) -> list[int]:
        """How many keys under `prefix` each master holds."""
        return [len([k for k in self.run(p, "--scan", "--pattern", f"{prefix}:*").split() if k]) for p in self.ports]

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)
        self.procs = []


@contextlib.contextmanager
def redis_cluster():
    """A running `RedisCluster`, stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="toolgate-redis-cluster-") as d:
        r = RedisCluster(d)
        try:
            yield r.start()
        finally:
            r.stop()


@contextlib.contextmanager
def redis_of(kind: str):
    """A single Redis (`single`) or a Redis Cluster (`cluster`), with `url` and `nodes` (None for
    a single server)."""
    if kind == "cluster":
        with redis_cluster() as r:
            yield r
    else:
        with redis_server() as r:
            yield r


@contextlib.contextmanager
def instances(cfg: str, n: int, env: dict[str, str] | None = None):
    """`n` instances with the config `cfg`, sharing the admin key and the sealing key (and `env`):
    yields (admin key, [servers]); all stopped at the end, whichever failed to start."""
    admin = random_key()
    servers: list[ToolgateServer] = []
    env = {**(env or {}), "TOOLGATE_SECRET_KEY": SECRET}
    try:
        for _ in range(n):
            servers.append(ToolgateServer(full_config=cfg, admin_key=admin, env=env).start())
        yield admin, servers
    finally:
        for srv in servers:
            srv.stop()
            srv.tmp.cleanup()


def redis_config(url: str, prefix: str, cluster_nodes: list[str] | None = None, apps: str = TIME_APP) -> str:
    """The tests' usual config (the built-in time app, or `apps`), its store on Redis (a Redis
    Cluster when `cluster_nodes` is given, maybe empty)."""
    redis = f"storage:\n  backend: redis\n  url: {url}\n  key_prefix: {prefix}\n"
    if cluster_nodes is not None:
        redis += "  cluster: true\n  cluster_nodes: [" + ", ".join(cluster_nodes) + "]\n"
    return config(apps).replace("storage:\n  backend: embedded\n  path: ./data\n", redis)


@pytest.fixture(scope="module", params=["single", "cluster"])
def trio(request):
    """Three instances on one Redis (a single server, then a Redis Cluster of three masters),
    sharing the admin key and the sealing key: [A, B, C]."""
    with redis_of(request.param) as redis:
        with instances(redis_config(redis.url, f"tg{secrets.token_hex(3)}", redis.nodes), 3) as (_, servers):
            yield servers


def call(srv: ToolgateServer, method: str, path: str, key: str, body=None) -> httpx2.Response:
    return httpx2.request(method, srv.base_url + path, json=body, headers={"Authorization": f"Bearer {key}"},
                          timeout=30)


def within(seconds: float, probe) -> float:
    """Polls `probe` until it returns true; returns how long that took (fails after `seconds`)."""
    started = time.monotonic()
    while not probe():
        assert time.monotonic() - started < seconds, f"not seen within {seconds} s"
        time.sleep(0.02)
    return time.monotonic() - started


# docs/scale-out.md and SECURITY.md promise that a change made on one instance is followed by
# every other within a second (typically a few milliseconds): one round trip of the change
# feed's blocking read (src/data/peers.rs), which no setting lengthens. That deadline is proven
# once, by `test_a_revoked_key_is_refused_by_every_instance_within_a_second`, which measures it;
# every other test here waits for the state it needs (`followed`), bounded only by the feed's
# worst case on a loaded machine (`FEED_CATCH_UP`, below), so a slow run is a slow test and
# not a false failure.
FEED_PROMISE = 1.0


def followed(probe) -> float:
    """Waits until another instance shows a change (`probe` holds)."""
    return within(FEED_CATCH_UP, probe)


def delay_until(since: float, probe) -> float:
    """How long after `since` the first probe that saw the change began: polls `probe` (each
    attempt timed from its start, so the probe's own time on a busy machine is not counted) up
    to `FEED_CATCH_UP`, and returns the delay, for the caller to hold against the promise."""
    while True:
        began = time.monotonic()
        if probe():
            return began - since
        assert began - since < FEED_CATCH_UP, f"not seen within {FEED_CATCH_UP} s"
        time.sleep(0.02)


def test_a_gateway_made_on_one_instance_is_served_by_the_others(trio):
    a, b, c = trio
    r = call(a, "POST", "/v1/gateways", a.admin_key, {"name": f"shared-{secrets.token_hex(3)}", "servers": ["time"]})
    assert r.status_code == 201, r.text
    gw = r.json()["data"]
    for other in (b, c):
        followed(lambda: call(other, "GET", f"/v1/gateways/{gw['id']}", a.admin_key).status_code == 200)
    # Its access key works on every instance at once (it is a record like any other).
    h = {"X-API-Key": gw["api_key"], "Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = httpx2.post(mcp_url(c, gw["id"]), json=body, headers=h, timeout=30)
    assert r.status_code == 200 and r.headers.get("mcp-session-id"), r.text
    # Deleted on B: gone on A and C.
    assert call(b, "DELETE", f"/v1/gateways/{gw['id']}", a.admin_key).status_code == 200
    for other in (a, c):
        followed(lambda: call(other, "GET", f"/v1/gateways/{gw['id']}", a.admin_key).status_code == 404)


def test_a_revoked_key_is_refused_by_every_instance_within_a_second(trio):
    a, b, c = trio
    r = call(a, "POST", "/v1/api-keys", a.admin_key, {"name": "short-lived", "scopes": ["gateways:read"]})
    assert r.status_code == 201, r.text
    created = r.json().get("data", r.json())
    key, key_id = created["key"], created["id"]
    for srv in (a, b, c):
        followed(lambda: call(srv, "GET", "/v1/gateways", key).status_code == 200)
    assert call(b, "DELETE", f"/v1/api-keys/{key_id}", a.admin_key).status_code == 200
    revoked_at = time.monotonic()
    # The promise's proof (FEED_PROMISE): from the revocation's answer to the first request each
    # instance refused, each within a second.
    delays = {srv.base_url: delay_until(revoked_at, lambda: call(srv, "GET", "/v1/gateways", key).status_code == 401)
              for srv in (a, b, c)}
    assert max(delays.values()) < FEED_PROMISE, f"refused after {delays} s, not within {FEED_PROMISE} s"


def test_an_mcp_session_opened_on_one_instance_is_used_streamed_and_ended_on_the_others(trio):
    a, b, c = trio
    r = call(a, "POST", "/v1/gateways", a.admin_key, {"name": f"sess-{secrets.token_hex(3)}", "servers": ["time"]})
    gw = r.json()["data"]
    for srv in (b, c):
        followed(lambda: call(srv, "GET", f"/v1/gateways/{gw['id']}", a.admin_key).status_code == 200)
    on_a = McpHttp(mcp_url(a, gw["id"]), gw["api_key"])
    on_a.initialize()
    # The same session on B: a call.
    on_b = McpHttp(mcp_url(b, gw["id"]), gw["api_key"])
    on_b.session_id = on_a.session_id
    listed = on_b.rpc("tools/list")
    assert any(t["name"].endswith("get_current_time") for t in listed["result"]["tools"]), listed
    called = on_b.rpc("tools/call", {"name": listed["result"]["tools"][0]["name"],
                                     "arguments": {"format": "YYYY", "timezone": "UTC"}})
    assert "result" in called and not called["result"].get("isError"), called
    # Its GET stream on C opens.
    h = on_a.headers(Accept="text/event-stream")
    with httpx2.stream("GET", mcp_url(c, gw["id"]), headers=h, timeout=10) as stream:
        assert stream.status_code == 200, stream.read()
        assert stream.headers["content-type"].startswith("text/event-stream")
    # Ended on C; A and B refuse it (404).
    on_c = McpHttp(mcp_url(c, gw["id"]), gw["api_key"])
    on_c.session_id = on_a.session_id
    assert on_c.delete().status_code == 200
    for client in (on_a, on_b):
        followed(lambda: client.request("tools/list").status_code == 404)
    # An id no instance made is unknown everywhere.
    on_b.session_id = "f" * 64
    assert on_b.request("tools/list").status_code == 404


def test_the_request_log_reads_the_same_on_every_instance(trio):
    a, b, c = trio
    r = call(a, "POST", "/v1/gateways", a.admin_key, {"name": f"logs-{secrets.token_hex(3)}", "servers": ["time"]})
    gw = r.json()["data"]
    followed(lambda: call(b, "GET", f"/v1/gateways/{gw['id']}", a.admin_key).status_code == 200)
    client = McpHttp(mcp_url(b, gw["id"]), gw["api_key"])
    client.initialize()
    tool = client.rpc("tools/list")["result"]["tools"][0]["name"]
    for zone in ("UTC", "Europe/Paris", "Not/AZone"):
        response_message(client.request("tools/call", {"name": tool, "arguments": {"format": "HH", "timezone": zone}}))

    def logged(srv) -> list:
        r = call(srv, "GET", f"/v1/logs?gateway_id={gw['id']}", a.admin_key)
        assert r.status_code == 200, r.text
        return r.json()["data"]["logs"]

    # Written by B's log pipeline (a flush every 500 ms); read on A and C.
    within(5.0, lambda: len(logged(a)) == 3)
    on_a, on_c = logged(a), logged(c)
    assert [e["id"] for e in on_a] == [e["id"] for e in on_c], (on_a, on_c)
    errors = call(c, "GET", f"/v1/logs?gateway_id={gw['id']}&status=error", a.admin_key).json()["data"]["logs"]
    assert len(errors) == 1 and "Not/AZone" in str(errors[0]), errors


def test_on_a_redis_cluster_records_spread_over_the_masters_and_a_deleted_one_leaves_no_key():
    """The keys of one organisation share a slot, the locators of its records have slots of their
    own: six gateways made on A put keys on every master, are all served by B, and once deleted
    leave no key naming them on any node (the record, its indexes and its locator are removed
    slot by slot)."""
    with redis_cluster() as redis:
        with instances(redis_config(redis.url, "spread", redis.nodes), 2) as (admin, (a, b)):
            ids = []
            for i in range(6):
                r = call(a, "POST", "/v1/gateways", admin, {"name": f"spread-{i}", "servers": ["time"]})
                assert r.status_code == 201, r.text
                ids.append(r.json()["data"]["id"])
            for gw in ids:
                followed(lambda: call(b, "GET", f"/v1/gateways/{gw}", admin).status_code == 200)
            per_node = redis.keys_per_node("spread")
            assert all(n > 0 for n in per_node), f"keys per master: {per_node}"
            listed = call(b, "GET", "/v1/gateways?limit=100", admin).json()["data"]
            listed_ids = {g["id"] for g in (listed if isinstance(listed, list) else listed.get("gateways", []))}
            assert set(ids) <= listed_ids, listed
            for gw in ids:
                assert call(b, "DELETE", f"/v1/gateways/{gw}", admin).status_code == 200
            for gw in ids:
                followed(lambda: call(a, "GET", f"/v1/gateways/{gw}", admin).status_code == 404)
            left = [k for p in redis.ports for k in redis.run(p, "--scan", "--pattern", "spread:*").split()
                    if any(gw in k for gw in ids)]
            assert left == [], f"keys left by deleted gateways: {left}"


def test_on_a_redis_cluster_with_a_master_down_a_write_answers_503_within_the_command_timeout():
    """`storage.command_timeout_ms` bounds each command whole, the cluster client's own retries
    included: they wait at least 1.28 s each, 16 times, while the master of the slot does not
    answer (a moved slot whose node is gone, then `CLUSTERDOWN`), so a write waited more than
    30 s, and a read of the change feed in flight while a restarted cluster settled could wait
    out those pauses after it was back."""
    with redis_cluster() as redis:
        cfg = redis_config(redis.url, "down", redis.nodes).replace(
            "  key_prefix: down\n", "  key_prefix: down\n  command_timeout_ms: 1000\n")
        with instances(cfg, 1) as (admin, (a,)):
            r = call(a, "POST", "/v1/gateways", admin, {"name": "before", "servers": ["time"]})
            assert r.status_code == 201, r.text
            # The master of the slot of the admin's organisation (the bootstrap one, `org_default`),
            # which every write of its records touches; the other masters answer MOVED.
            owner = [i for i, port in enumerate(redis.ports)
                     if redis.run(port, "EXISTS", "down:{org_default}:r:gateway:x").strip() == "0"]
            assert len(owner) == 1, owner
            proc = redis.procs.pop(owner[0])
            proc.terminate()
            proc.wait(timeout=10)
            for name in ("during-1", "during-2"):
                started = time.monotonic()
                r = call(a, "POST", "/v1/gateways", admin, {"name": name, "servers": ["time"]})
                took = time.monotonic() - started
                assert r.status_code == 503 and r.json()["error"]["code"] == "UNAVAILABLE", r.text
                # A few commands (the lock, the organisation's records), each at most 1 s.
                assert took < 5.0, f"answered after {took:.1f} s"


def test_an_instance_on_redis_needs_the_shared_sealing_key():
    with redis_server() as redis:
        srv = ToolgateServer(full_config=redis_config(redis.url, "nokey"), env={"TOOLGATE_SECRET_KEY": ""})
        env = dict(os.environ, TOOLGATE_ADMIN_KEY=srv.admin_key)
        env.pop("TOOLGATE_SECRET_KEY", None)
        from toolgate_harness import toolgate_bin

        p = subprocess.run([str(toolgate_bin()), "--config", str(srv.config_path)], env=env, capture_output=True,
                           text=True, timeout=30)
        srv.tmp.cleanup()
        assert p.returncode != 0, p.stderr
        assert "TOOLGATE_SECRET_KEY" in p.stderr and "redis" in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_a_redis_outage_refuses_writes_keeps_calls_working_and_heals_without_a_restart(kind):
    with redis_of(kind) as redis:
        with instances(redis_config(redis.url, "outage", redis.nodes), 2) as (admin, (a, b)):
            r = call(a, "POST", "/v1/gateways", admin, {"name": "before", "servers": ["time"]})
            assert r.status_code == 201, r.text
            gw = r.json()["data"]
            client = McpHttp(mcp_url(a, gw["id"]), gw["api_key"])
            client.initialize()
            tool = client.rpc("tools/list")["result"]["tools"][0]["name"]
            redis.stop()
            # Writes: 503 UNAVAILABLE, within the command timeout (2 s) and the reconnection's.
            started = time.monotonic()
            r = call(a, "POST", "/v1/gateways", admin, {"name": "during", "servers": ["time"]})
            assert r.status_code == 503 and r.json()["error"]["code"] == "UNAVAILABLE", r.text
            assert time.monotonic() - started < 10, "a write waits no longer than its timeouts"
            # Not ready (a load balancer takes it out), but calls go on from memory.
            assert httpx2.get(a.base_url + "/readyz", timeout=15).status_code == 503
            done = client.rpc("tools/call", {"name": tool, "arguments": {"format": "YYYY", "timezone": "UTC"}})
            assert "result" in done, done
            redis.start()
            # Healed without a restart: ready again, writes land, and the other instance hears of them.
            within(10.0, lambda: httpx2.get(a.base_url + "/readyz", timeout=15).status_code == 200)
            r = call(a, "POST", "/v1/gateways", admin, {"name": "after", "servers": ["time"]})
            assert r.status_code == 201, r.text
            after = r.json()["data"]["id"]
            within(5.0, lambda: call(b, "GET", f"/v1/gateways/{after}", admin).status_code == 200)
            # What was acknowledged before the outage is still there.
            assert call(b, "GET", f"/v1/gateways/{gw['id']}", admin).status_code == 200


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_rate_limits_are_shared_leased_within_the_stated_bound(kind):
    """One caller, three instances, requests spread round-robin 100 ms apart for 3.6 s: the
    instances together admit the burst plus what refilled (10 + 3.6), within docs/scale-out.md's bound
    (each other instance may admit what it does in one sync interval, 50 ms here, before it hears:
    nothing at this spacing), where three instances counting alone would admit about 33."""
    limits = ("rate_limits:\n  sync_ms: 50\n  tiers:\n"
              "    tiny: { requests_per_hour: unlimited, requests_per_minute: 60, burst: 10, concurrent: 5 }\n"
              "limits:\n  bootstrap_tier: tiny\n")
    with redis_of(kind) as redis:
        cfg = redis_config(redis.url, "limits", redis.nodes) + limits
        with instances(cfg, 3) as (admin, servers):
            answers = []
            started = time.monotonic()
            for i in range(36):
                time.sleep(max(0.0, started + i * 0.1 - time.monotonic()))
                answers.append(call(servers[i % 3], "GET", "/v1/gateways", admin))
            took = time.monotonic() - started
            statuses = [r.status_code for r in answers]
            admitted = statuses.count(200)
            assert set(statuses) <= {200, 429}, statuses
            # The burst and what refilled while the requests went out (3.6 s unless the machine
            # is slow to send them), and the bound's slack (2.4).
            assert 11 <= admitted <= 10 + int(max(3.6, took) + 2.4), f"admitted {admitted} of 36 in {took:.1f} s: {statuses}"
            # The refusals (at least 20, by the bound above) carry the shared state: nothing remaining.
            remaining = [r.headers.get("x-ratelimit-remaining") for r in answers if r.status_code == 429]
            assert len(remaining) == 36 - admitted and set(remaining) == {"0"}, remaining


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_rate_limits_are_exact_across_instances_with_distributed_exact(kind):
    """`rate_limits.distributed: exact`: one caller fires 45 requests at once, spread over three
    instances, at a bucket of 10 that refills one token a minute. Exactly 10 are admitted, each
    reporting a different `X-RateLimit-Remaining` (9 down to 0: one shared count, decided in
    Redis), and the refusals say 0 remaining. The leased merge interval is set to 10 s, so that
    leased sharing would admit up to 30 here: only the per-request script keeps it at 10."""
    limits = ("rate_limits:\n  distributed: exact\n  sync_ms: 10000\n  tiers:\n"
              "    tiny: { requests_per_hour: unlimited, requests_per_minute: 1, burst: 10, concurrent: 100 }\n"
              "limits:\n  bootstrap_tier: tiny\n")
    with redis_of(kind) as redis:
        cfg = redis_config(redis.url, "exact", redis.nodes) + limits
        with instances(cfg, 3) as (admin, servers):
            clients = [httpx2.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {admin}"}, timeout=30)
                       for s in servers]
            try:
                with ThreadPoolExecutor(max_workers=15) as pool:
                    answers = list(pool.map(lambda i: clients[i % 3].get("/v1/gateways"), range(45)))
            finally:
                for c in clients:
                    c.close()
            statuses = [r.status_code for r in answers]
            assert set(statuses) <= {200, 429}, statuses
            admitted = [r for r in answers if r.status_code == 200]
            assert len(admitted) == 10, f"admitted {len(admitted)} of 45: {statuses}"
            remaining = sorted(int(r.headers["x-ratelimit-remaining"]) for r in admitted)
            assert remaining == list(range(10)), f"each admission saw the shared count: {remaining}"
            assert {r.headers["x-ratelimit-remaining"] for r in answers if r.status_code == 429} == {"0"}
            refused = next(r for r in answers if r.status_code == 429)
            assert 1 <= int(refused.headers["retry-after"]) <= 60, dict(refused.headers)
            # Every instance was asked, and each refuses now: the bucket is shared.
            for srv in servers:
                assert call(srv, "GET", "/v1/gateways", admin).status_code == 429


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_rate_limit_status_shows_what_the_caller_spent_on_other_instances_with_distributed_exact(kind):
    """`GET /v1/rate-limit` reads the shared buckets in `exact` mode: MCP calls made on A take
    from the caller's `gateway` bucket, and B and C (which served none of them) report the same
    remaining as A at once, not their own full bucket. The leased merge is set to 10 s, so
    nothing but the read in Redis can tell them."""
    limits = ("rate_limits:\n  distributed: exact\n  sync_ms: 10000\n  tiers:\n"
              "    tiny: { requests_per_hour: unlimited, requests_per_minute: 1, burst: 30, concurrent: 100 }\n"
              "limits:\n  bootstrap_tier: tiny\n")
    with redis_of(kind) as redis:
        cfg = redis_config(redis.url, "status", redis.nodes) + limits
        with instances(cfg, 3) as (admin, (a, b, c)):
            gw = call(a, "POST", "/v1/gateways", admin, {"name": "counted", "servers": ["time"]}).json()["data"]
            client = McpHttp(mcp_url(a, gw["id"]), admin)
            client.initialize()
            for _ in range(6):
                assert client.request("tools/list").status_code == 200

            def remaining(srv) -> int:
                r = call(srv, "GET", "/v1/rate-limit", admin)
                assert r.status_code == 200, r.text
                return r.json()["data"]["buckets"]["gateway"]["remaining"]

            on_a = remaining(a)
            assert on_a <= 30 - 7, f"A spent at least 7 of 30: {on_a}"
            for srv in (b, c):
                assert abs(remaining(srv) - on_a) <= 1, f"{srv.base_url}: {remaining(srv)} against A's {on_a}"


def test_a_name_is_taken_once_even_by_instances_creating_it_in_the_same_instant(trio):
    """The check and the write run under the organisation's lock in Redis, which re-reads the
    organisation's records once held: of three instances creating the same gateway name at the
    same moment, one succeeds and two get 409."""
    import concurrent.futures

    a, b, c = trio
    for round_ in range(5):
        name = f"race-{round_}-{secrets.token_hex(3)}"
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(call, srv, "POST", "/v1/gateways", a.admin_key, {"name": name, "servers": ["time"]})
                       for srv in (a, b, c)]
            statuses = sorted(f.result().status_code for f in futures)
        assert statuses == [201, 409, 409], (name, statuses)


def test_mfa_activated_on_one_instance_is_enforced_by_the_others_at_once(trio):
    a, b, c = trio
    user_id = call(a, "GET", "/v1/auth/debug", a.admin_key).json()["data"]["user_id"]
    r = call(b, "POST", "/v1/gateways", a.admin_key, {"name": f"mfa-{secrets.token_hex(3)}", "servers": ["time"]})
    assert r.status_code == 201, r.text
    gw = r.json()["data"]["id"]
    enrolled = call(a, "POST", "/v1/auth/mfa/enroll", a.admin_key).json()["data"]
    try:
        r = call(a, "POST", "/v1/auth/mfa/activate", a.admin_key, {"code": totp(enrolled["secret"])})
        assert r.status_code == 200, r.text
        # No wait: B reads the MFA record where A wrote it.
        refused = call(b, "DELETE", f"/v1/gateways/{gw}", a.admin_key)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "MFA_REQUIRED", refused.text
        challenge = refused.json()["error"]["challenge_id"]
        r = call(c, "POST", "/v1/auth/mfa/verify", a.admin_key, {"challenge_id": challenge, "code": enrolled["backup_codes"][0]})
        assert r.status_code == 200, r.text
        token = r.json()["data"]["mfa_token"]
        r = httpx2.delete(b.base_url + f"/v1/gateways/{gw}", timeout=30,
                          headers={"Authorization": f"Bearer {a.admin_key}", "X-MFA-Token": token})
        assert r.status_code == 200, r.text
        # The backup code was used up on C: A refuses it.
        again = httpx2.delete(a.base_url + "/v1/auth/mfa", timeout=30,
                              headers={"Authorization": f"Bearer {a.admin_key}", "X-MFA-Token": enrolled["backup_codes"][0]})
        assert again.status_code == 403, again.text
    finally:
        # The operator's key turns it off again for the module's other tests.
        r = call(c, "POST", "/v1/auth/mfa/reset", a.admin_key, {"user_id": user_id})
        assert r.status_code == 200, r.text
    assert call(a, "GET", "/v1/auth/debug", a.admin_key).json()["data"]["mfa_enabled"] is False


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_an_instance_killed_mid_session_loses_nothing_but_its_upstream_connections(kind):
    """kill -9 of the instance a client was talking to: the client goes on to another instance
    with the same session id, and what the dead instance acknowledged (a gateway it created, the
    calls it logged) is there."""
    with redis_of(kind) as redis:
        cfg = redis_config(redis.url, "kill", redis.nodes)
        with instances(cfg, 2) as (admin, (a, b)):
            r = call(a, "POST", "/v1/gateways", admin, {"name": "survivor", "servers": ["time"]})
            assert r.status_code == 201, r.text
            gw = r.json()["data"]
            on_a = McpHttp(mcp_url(a, gw["id"]), gw["api_key"])
            on_a.initialize()
            tool = on_a.rpc("tools/list")["result"]["tools"][0]["name"]
            on_a.rpc("tools/call", {"name": tool, "arguments": {"format": "YYYY", "timezone": "UTC"}})

            def logged() -> list:
                return call(b, "GET", f"/v1/logs?gateway_id={gw['id']}", admin).json()["data"]["logs"]

            # A's log pipeline writes its entries to Redis in the background (every 500 ms): the
            # kill comes once the entry is there (read through B), not after a guessed sleep.
            followed(lambda: len(logged()) == 1)
            a.stop()  # SIGKILL
            on_b = McpHttp(mcp_url(b, gw["id"]), gw["api_key"])
            on_b.session_id = on_a.session_id
            done = on_b.rpc("tools/call", {"name": tool, "arguments": {"format": "YYYY", "timezone": "UTC"}})
            assert "result" in done and not done["result"].get("isError"), done
            assert logged(), "the call logged by the dead instance is there"
            followed(lambda: len(logged()) == 2)


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_redis_restarted_under_load_loses_no_acknowledged_write_and_calls_never_fail(kind):
    """Calls and management writes run on two instances while Redis is stopped and started
    again: no MCP call fails (they are answered from memory), every write is 201 or a clear 503
    UNAVAILABLE (never a 500 or a hang), and every write answered 201 is there afterwards, on
    both instances."""
    import concurrent.futures

    with redis_of(kind) as redis:
        # Limits out of the way: what is measured is the outage, not the rate limiter.
        cfg = redis_config(redis.url, "restart", redis.nodes) + (
            "rate_limits:\n  tiers:\n    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000,"
            " burst: 100000, concurrent: 100 }\nlimits:\n  bootstrap_tier: bench\n  quotas:\n    bench: { gateways: 100000 }\n")
        with instances(cfg, 2) as (admin, (a, b)):
            body = {"name": "steady", "servers": ["time"], "configuration": {"rate_limit": 1000000000}}
            gw = call(a, "POST", "/v1/gateways", admin, body).json()["data"]
            followed(lambda: call(b, "GET", f"/v1/gateways/{gw['id']}", admin).status_code == 200)
            clients = []
            for srv in (a, b):
                c = McpHttp(mcp_url(srv, gw["id"]), gw["api_key"])
                c.initialize()
                clients.append(c)
            tool = clients[0].rpc("tools/list")["result"]["tools"][0]["name"]
            stop = time.monotonic() + 6
            call_statuses: list[int] = []
            rejected: list[str] = []
            writes: list[tuple[int, str]] = []

            def calls(c):
                while time.monotonic() < stop:
                    r = c.request("tools/call", {"name": tool, "arguments": {"format": "ss", "timezone": "UTC"}})
                    call_statuses.append(r.status_code)
                    if r.status_code == 429 and not rejected:
                        rejected.append(r.text)

            def creations(srv, tag):
                n = 0
                while time.monotonic() < stop:
                    n += 1
                    name = f"{tag}-{n}"
                    r = call(srv, "POST", "/v1/gateways", admin, {"name": name, "servers": ["time"]})
                    writes.append((r.status_code, r.json()["data"]["id"] if r.status_code == 201 else
                                   r.json()["error"]["code"]))
                    time.sleep(0.05)

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                jobs = [pool.submit(calls, c) for c in clients]
                jobs += [pool.submit(creations, a, "a"), pool.submit(creations, b, "b")]
                time.sleep(1.5)
                redis.stop()
                time.sleep(2)
                redis.start()
                for j in jobs:
                    j.result()
            assert call_statuses and set(call_statuses) == {200}, (sorted(set(call_statuses)), rejected)
            codes = {s for s, _ in writes}
            assert codes <= {201, 503}, writes
            assert all(code == "UNAVAILABLE" for s, code in writes if s == 503), writes
            assert 503 in codes and 201 in codes, f"the outage was not seen by the writes: {writes}"
            made = [gid for s, gid in writes if s == 201]
            # How soon an instance catches up after the outage is one question, whether it lost
            # a write another: first wait until each instance has followed a write the other
            # made after the outage, then expect every 201 on both at once. An instance that has
            # followed the other's marker holds every write the other acknowledged before it:
            # the other published its changes onto the stream in order, each after its write
            # (peers.rs `publish`), and what a follower skips by reloading it reads from Redis.
            for writer, reader in ((a, b), (b, a)):
                marker = write_after_outage(writer, admin)
                within(FEED_CATCH_UP, lambda: call(reader, "GET", f"/v1/gateways/{marker}", admin).status_code == 200)
            for srv in (a, b):
                missing = [gid for gid in made if call(srv, "GET", f"/v1/gateways/{gid}", admin).status_code != 200]
                assert not missing, f"acknowledged, then lost on {srv.base_url}: {missing}"


# A write cut by the outage may leave its organisation's write lock in Redis until the lock's
# TTL (`WRITE_LOCK_TTL`, 10 s, src/data/state/mod.rs) runs out, and a write waits for the lock
# `WRITE_LOCK_WAIT` (5 s) before it answers 503: a write succeeds again within 10 + 5 s.
WRITE_AGAIN = 15.0
# Once Redis answers again (`redis.start()` waited for it), each side of the change feed
# (src/data/peers.rs) is at worst one reconnection away: the follower sleeps `RETRY` (0.5 s),
# connects (connect time-out 2 s), reads where the stream stands (response time-out `BLOCK` + 2 s
# = 3 s) and reloads (reads of milliseconds); the writer's publisher sleeps `RETRY` (0.5 s),
# connects (2 s) and adds the change (response time-out 2 s). One after the other, each at its
# time-out (a loaded machine): 0.5 + 2 + 3 + 0.5 + 2 + 2 = 10 s. Unloaded: a few milliseconds.
# (The 5 s this test allowed before was less than that sum.)
FEED_CATCH_UP = 10.0


def write_after_outage(srv: ToolgateServer, admin: str) -> str:
    """Creates a gateway on `srv` once Redis takes writes again; returns its id."""
    made: list[str] = []

    def created() -> bool:
        r = call(srv, "POST", "/v1/gateways", admin, {"name": f"marker-{secrets.token_hex(3)}", "servers": ["time"]})
        assert r.status_code in (201, 503), r.text
        if r.status_code == 201:
            made.append(r.json()["data"]["id"])
        return bool(made)

    within(WRITE_AGAIN, created)
    return made[0]


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_calls_go_on_from_memory_for_the_outage_grace_then_are_refused_until_redis_is_back(kind):
    with redis_of(kind) as redis:
        cfg = redis_config(redis.url, "grace", redis.nodes).replace("  key_prefix: grace\n", "  key_prefix: grace\n  outage_grace_secs: 2\n")
        with instances(cfg, 1) as (admin, (a,)):
            gw = call(a, "POST", "/v1/gateways", admin, {"name": "graced", "servers": ["time"]}).json()["data"]
            c = McpHttp(mcp_url(a, gw["id"]), gw["api_key"])
            c.initialize()
            redis.stop()
            assert c.request("tools/list").status_code == 200, "within the grace: served from memory"
            refused = within(6.0, lambda: c.request("tools/list").status_code == 503)
            assert refused >= 1.0, f"refused after {refused:.1f} s, before the grace of 2 s ran out"
            r = c.request("tools/list")
            assert "shared store" in r.text, r.text
            assert call(a, "GET", "/v1/gateways", admin).status_code == 503
            assert httpx2.get(a.base_url + "/healthz", timeout=10).status_code == 200, "alive, only not serving"
            redis.start()
            within(8.0, lambda: c.request("tools/list").status_code == 200)


@pytest.mark.parametrize("distributed", ["leased", "exact"])
@pytest.mark.parametrize("outage", ["open", "closed"])
@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_rate_limits_fail_open_or_closed_as_configured_while_redis_is_away(kind, outage, distributed):
    with redis_of(kind) as redis:
        prefix = f"rl{outage}{distributed}"
        cfg = redis_config(redis.url, prefix, redis.nodes).replace(
            f"  key_prefix: {prefix}\n", f"  key_prefix: {prefix}\n  command_timeout_ms: 200\n  connect_timeout_ms: 200\n")
        cfg += f"rate_limits:\n  outage: {outage}\n  sync_ms: 50\n  distributed: {distributed}\n"
        with instances(cfg, 1) as (admin, (a,)):
            gw = call(a, "POST", "/v1/gateways", admin, {"name": "limited", "servers": ["time"]}).json()["data"]
            c = McpHttp(mcp_url(a, gw["id"]), gw["api_key"])
            c.initialize()
            assert c.request("tools/list").status_code == 200
            redis.stop()
            if outage == "closed":
                # Refused once a merge has failed (within a sync interval and a command time-out),
                # long before the store's outage grace (300 s).
                within(3.0, lambda: c.request("tools/list").status_code == 503)
                r = c.request("tools/list")
                assert "rate_limits.outage is closed" in r.text, r.text
            else:
                time.sleep(1.5)
                started = time.monotonic()
                statuses = [c.request("tools/list").status_code for _ in range(10)]
                took = time.monotonic() - started
                assert statuses == [200] * 10, f"open: each instance counts alone meanwhile: {statuses}"
                # `exact` does not wait for Redis on every call while it is away (at most one
                # call a second tries it, bounded by the 200 ms command time-out).
                assert took < 1.5, f"10 calls took {took:.2f} s while Redis was away"
            redis.start()
            within(8.0, lambda: c.request("tools/list").status_code == 200)
