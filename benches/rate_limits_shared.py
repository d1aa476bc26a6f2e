#!/usr/bin/env python3
"""What `rate_limits.distributed: exact` costs against `leased` (issue 15). Run by hand, not in CI:

    cargo build --release --bin toolgate
    tests/py/.venv/bin/python benches/rate_limits_shared.py [SECONDS] [ROUNDS]   # 5 3

One toolgate instance on a redis-server on a Unix socket (append-only with `appendfsync
everysec`, as benches/load.sh runs it; the tests' `always` puts an fsync in every admission's
path), a tier large enough that nothing is refused, and wrk on `GET /v1/rate-limit` (a management
read: the filters, one rate-limit charge, a small JSON answer) with 2 and then 32 connections.
Rounds alternate the two modes, each on a fresh Redis and instance. Reports per round and as
medians: requests per second, p50 and p99, the CPU time of toolgate and of redis-server per
request (utime + stime from /proc), non-2xx answers (must be 0), and exact's ratio to leased
measured in the same run. Redis, toolgate and wrk share the machine's cores.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))

from test_redis_scaleout import RedisProcess, instances, redis_config  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
LIMITS = ("rate_limits:\n  distributed: {mode}\n  tiers:\n"
          "    big: { requests_per_hour: unlimited, requests_per_minute: 100000000, burst: 100000000, "
          "concurrent: 1000 }\nlimits:\n  bootstrap_tier: big\n")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def millis(v: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", v)
    assert m, v
    return float(m[1]) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m[2]]


def wrk(url: str, key: str, conns: int, seconds: int) -> dict:
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", "-H",
                          f"Authorization: Bearer {key}", url], capture_output=True, text=True, check=True).stdout
    line = lambda word: next(l for l in out.splitlines() if word in l).split()  # noqa: E731
    non2xx = [l for l in out.splitlines() if "Non-2xx" in l or "Socket errors" in l]
    return {"rps": float(line("Requests/sec")[1]), "requests": int(line("requests in")[0]),
            "p50": millis(line(" 50%")[1]), "p99": millis(line(" 99%")[1]), "errors": non2xx}


def start_redis(d: str) -> RedisProcess:
    r = RedisProcess(d)
    r.proc = subprocess.Popen(
        [r.binary, "--port", "0", "--unixsocket", str(r.sock), "--unixsocketperm", "700", "--dir", d,
         "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not r.sock.exists():
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    return r


def round_of(mode: str, seconds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="toolgate-rl-bench-") as d:
        redis = start_redis(d)
        try:
            cfg = redis_config(redis.url, f"b{mode}") + LIMITS.replace("{mode}", mode)
            with instances(cfg, 1) as (admin, (srv,)):
                url = srv.base_url + "/v1/rate-limit"
                wrk(url, admin, 2, 1)  # warm-up: connections, the script loaded in Redis
                result = {}
                for conns in (2, 32):
                    t0, r0 = cpu_ticks(srv.proc.pid), cpu_ticks(redis.proc.pid)
                    w = wrk(url, admin, conns, seconds)
                    t1, r1 = cpu_ticks(srv.proc.pid), cpu_ticks(redis.proc.pid)
                    per = lambda ticks: ticks / CLK_TCK * 1e6 / max(w["requests"], 1)  # noqa: E731
                    w.update(toolgate_us=per(t1 - t0), redis_us=per(r1 - r0))
                    result[conns] = w
                return result
        finally:
            redis.stop()


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    runs: dict[tuple[str, int], list[dict]] = {}
    for i in range(rounds):
        for mode in ("leased", "exact"):
            for conns, w in round_of(mode, seconds).items():
                runs.setdefault((mode, conns), []).append(w)
                print(f"round {i + 1} {mode:6} c={conns:2}: {w['rps']:8.0f} req/s  p50 {w['p50']:.3f} ms  "
                      f"p99 {w['p99']:.3f} ms  toolgate {w['toolgate_us']:.1f} us/req  redis {w['redis_us']:.1f} "
                      f"us/req  {w['errors'] or 'no errors'}", flush=True)
    print("\n| mode | connections | req/s (median) | p50 ms | p99 ms | toolgate CPU us/req | redis CPU us/req | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    med = {k: {f: statistics.median(w[f] for w in v) for f in ("rps", "p50", "p99", "toolgate_us", "redis_us")}
           for k, v in runs.items()}
    for (mode, conns), m in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0] != "leased")):
        errors = sum(len(w["errors"]) for w in runs[(mode, conns)])
        print(f"| {mode} | {conns} | {m['rps']:,.0f} | {m['p50']:.3f} | {m['p99']:.3f} | {m['toolgate_us']:.1f} | "
              f"{m['redis_us']:.1f} | {errors} |")
    for conns in (2, 32):
        e, l = med[("exact", conns)], med[("leased", conns)]
        print(f"exact / leased at {conns} connections: {e['rps'] / l['rps']:.2f}x req/s, "
              f"p50 +{(e['p50'] - l['p50']) * 1000:.0f} us")


if __name__ == "__main__":
    main()
