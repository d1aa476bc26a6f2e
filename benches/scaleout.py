#!/usr/bin/env python3
"""Three toolgate instances on one Redis under one load, against one instance (issue 15). Run
by hand, not in CI:

    cargo build --release --example fast_upstream --bin toolgate
    tests/py/.venv/bin/python benches/scaleout.py [SECONDS] [ROUNDS] [CONNECTIONS]   # 5 2 32
    REDIS=cluster tests/py/.venv/bin/python benches/scaleout.py ...   # on a 3-master Redis Cluster

Starts benches/load/fast_upstream.rs (the load benchmark's JSON upstream), a redis-server on a
Unix socket (the tests' RedisProcess: append-only, fsync always), and three instances of the
release binary on it (`storage.backend: redis`, leased rate limits, the tests' Redis config). One
gateway and one MCP session, opened on the first instance, serve every instance: a session
opened on A is used on B and C as a load balancer would spread it. Each round runs, in turn:

- `one`: wrk with CONNECTIONS connections against the first instance only;
- `three`: three wrk processes at once, CONNECTIONS / 3 connections each, one per instance.

Reports per round and as medians: calls per second in all, non-2xx answers and socket errors
(which must be 0), p50 and p99 (the three wrk's worst), and the CPU time of all toolgate
processes and of redis-server per call (utime + stime from /proc). On this 2-core machine the
three instances, wrk and Redis share two cores: the figure is what three instances cost against
one, not a scaling factor. With `REDIS=cluster` the instances share a Redis Cluster of three
masters on 127.0.0.1 instead (the tests' RedisCluster), and redis-server's CPU is the three nodes'.
"""

from __future__ import annotations

import os
import re
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))

import httpx2  # noqa: E402

from mcp_helpers import config  # noqa: E402
from test_redis_scaleout import instances, redis_of  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
LUA = ROOT / "benches" / "tools_call.lua"
RESULT = re.compile(r"RESULT (.*)")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def fast_app(port: int) -> str:
    return (f"  - id: fast\n    name: Fast\n    description: benches/load/fast_upstream.rs\n    category: testing\n"
            f"    url: http://127.0.0.1:{port}/mcp\n")


def bench_config(redis_url: str, prefix: str, up_port: int, nodes: list[str] | None) -> str:
    redis = (f"storage:\n  backend: redis\n  url: {redis_url}\n  key_prefix: {prefix}\n")
    if nodes is not None:
        redis += "  cluster: true\n  cluster_nodes: [" + ", ".join(nodes) + "]\n"
    cfg = config(fast_app(up_port)).replace("storage:\n  backend: embedded\n  path: ./data\n", redis)
    # Limits and quotas out of the way, the access log off (as load.sh's production settings keep
    # it on, the difference is the same for both shapes).
    return cfg + """\
rate_limits:
  tiers:
    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000000, burst: 1000000000, concurrent: 100000 }
limits:
  bootstrap_tier: bench
"""


def wrk(url: str, conns: int, seconds: int, sid: str, key: str) -> subprocess.Popen:
    env = dict(os.environ, MCP_SESSION=sid, MCP_API_KEY=key)
    return subprocess.Popen(["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "-s", str(LUA), url],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


def result(proc: subprocess.Popen) -> dict[str, float]:
    out, _ = proc.communicate(timeout=600)
    m = RESULT.search(out)
    assert m, f"wrk printed no RESULT line: {out}"
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    conns = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    up_bin = ROOT / "target" / "release" / "examples" / "fast_upstream"
    assert up_bin.exists(), "build it first: cargo build --release --example fast_upstream --bin toolgate"
    os.environ.setdefault("TOOLGATE_BIN", str(ROOT / "target" / "release" / "toolgate"))
    up = subprocess.Popen([str(up_bin), "0", "--threads", "1"], stdout=subprocess.PIPE, text=True)
    up_port = int(up.stdout.readline().strip())
    try:
        with redis_of(os.environ.get("REDIS", "single")) as redis:
            cfg = bench_config(redis.url, f"tg{secrets.token_hex(3)}", up_port, redis.nodes)
            with instances(cfg, 3) as (admin, servers):
                redis_pids = [p.pid for p in getattr(redis, "procs", [])] or [redis.proc.pid]
                run(servers, admin, redis_pids, seconds, rounds, conns)
    finally:
        up.kill()


def run(servers, admin: str, redis_pids: list[int], seconds: int, rounds: int, conns: int) -> None:
    auth = {"Authorization": f"Bearer {admin}"}
    # The gateway's own per-minute quota out of the way too.
    body = {"name": "scaleout", "servers": ["fast"], "configuration": {"rate_limit": 1000000000}}
    gw = httpx2.post(servers[0].base_url + "/v1/gateways", json=body, headers=auth, timeout=30).json()["data"]
    mcp = f"/gateway/{gw['id']}/mcp"
    head = {"X-API-Key": gw["api_key"], "Accept": "application/json, text/event-stream"}
    init = httpx2.post(servers[0].base_url + mcp, headers=head, timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    sid = init.headers["mcp-session-id"]
    head.update({"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"})
    httpx2.post(servers[0].base_url + mcp, headers=head,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=30)
    # The call the load makes, checked on every instance first.
    for s in servers:
        r = httpx2.post(s.base_url + mcp, headers=head, timeout=30, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "hi"}}})
        assert r.status_code == 200 and "hi" in r.text, (s.base_url, r.status_code, r.text)
    pids = [s.proc.pid for s in servers]
    rows: dict[str, list[dict]] = {"one": [], "three": []}
    for r in range(rounds + 1):  # round 0 warms every instance up (session adoption, pools)
        for shape in ("one", "three") if r % 2 == 0 else ("three", "one"):
            targets = [servers[0].base_url] if shape == "one" else [s.base_url for s in servers]
            each = conns if shape == "one" else max(1, conns // 3)
            t0 = [cpu_ticks(p) for p in pids] + [sum(cpu_ticks(p) for p in redis_pids)]
            procs = [wrk(u + mcp, each, seconds if r else 2, sid, gw["api_key"]) for u in targets]
            results = [result(p) for p in procs]
            t1 = [cpu_ticks(p) for p in pids] + [sum(cpu_ticks(p) for p in redis_pids)]
            if r == 0:
                continue
            calls = sum(x["requests"] for x in results)
            row = {
                "rps": sum(x["rps"] for x in results),
                "errors": sum(x["non2xx"] + x["socket_errors"] for x in results),
                "p50": max(x["p50_us"] for x in results) / 1000,
                "p99": max(x["p99_us"] for x in results) / 1000,
                "toolgate_us": sum(b - a for a, b in zip(t0[:-1], t1[:-1])) / CLK_TCK / calls * 1e6,
                "redis_us": (t1[-1] - t0[-1]) / CLK_TCK / calls * 1e6,
            }
            rows[shape].append(row)
            print(f"round {r} {shape:5}: {row['rps']:9,.0f} calls/s  errors {row['errors']:.0f}  "
                  f"p50 {row['p50']:.3f} ms  p99 {row['p99']:.3f} ms  CPU/call toolgate {row['toolgate_us']:.1f} us"
                  f"  redis {row['redis_us']:.1f} us", flush=True)
    print("\n| instances | calls/s (median) | p50 ms | p99 ms | toolgate CPU us/call | redis-server CPU us/call | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    med = {}
    for shape in ("one", "three"):
        rs = rows[shape]
        m = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        med[shape] = m
        print(f"| {shape} | {m['rps']:,.0f} | {m['p50']:.3f} | {m['p99']:.3f} | {m['toolgate_us']:.1f} "
              f"| {m['redis_us']:.1f} | {sum(x['errors'] for x in rs):.0f} |")
    print(f"\nthree / one: {med['three']['rps'] / med['one']['rps']:.3f}x the calls per second")


if __name__ == "__main__":
    main()
