#!/usr/bin/env python3
"""Size on one instance (issue 44): what many sessions, open streams, records and wide gateways
cost. Run by hand, not in CI; python3's standard library and `wrk` only (`wide` and `records`
also run target/release/examples/fast_upstream, `records` redis-server and redis-cli):

    benches/scale.py sessions --sizes 10000,100000,1000000
    benches/scale.py streams --sizes 1000,5000,10000
    benches/scale.py poststreams --sizes 1000,5000,8000 --hold 150
    benches/scale.py records --sizes 0.1,0.5,1
    benches/scale.py wide --apps 10,25,50,100 --tools 50

The binary under test is $TOOLGATE_BIN (default target/release/toolgate); each size runs on a
fresh instance on its embedded store in a temporary directory (--keep keeps it), with the
tests' harness (tests/py/toolgate_harness.py) finding its ports. Every timing is printed with
the 1-minute load average beside it (the machine is shared). The method of each subcommand is in
its function's docstring and in BENCHMARKS.md ("Scale on one instance").
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))

from toolgate_harness import BASE_CONFIG, classify, listening_addrs, random_key, toolgate_bin  # noqa: E402

PROTOCOL = "2025-06-18"
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "scale", "version": "1"}}})

# Limits and quotas out of the way: the figures are about size, not about the limits.
LIMITS = """\
rate_limits:
  tiers:
    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000000, burst: 1000000000, concurrent: 100000 }
limits:
  bootstrap_tier: bench
  quotas:
    bench: { gateways: 1000000 }
"""

# wrk script (one thread): `initialize` until LIMIT answers were received, counting the 200s;
# `done` prints one RESULT line.
INIT_LUA = """\
limit = tonumber(os.getenv("LIMIT"))
seen, ok = 0, 0
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
   wrk.headers["Content-Type"] = "application/json"
   wrk.headers["Accept"] = "application/json, text/event-stream"
   wrk.headers["X-API-Key"] = os.getenv("API_KEY")
   wrk.method = "POST"
   wrk.body = os.getenv("BODY")
end
function response(status, headers, body)
   seen = seen + 1
   if status == 200 then ok = ok + 1 end
   if seen == limit then
      -- wrk's main thread sleeps out -d: the bench sends it SIGINT once this file exists (and
      -- this thread has ended, so that the signal reaches the main thread).
      wrk.thread:stop()
      io.open(os.getenv("DONE_FILE"), "w"):close()
   end
end
function done(summary, latency, requests)
   local ok = 0
   for _, t in ipairs(threads) do ok = ok + t:get("ok") end
   io.write(string.format("RESULT requests=%d ok=%d duration_us=%d p99_us=%.1f\\n",
      summary.requests, ok, summary.duration, latency:percentile(99)))
end
"""


def load1() -> float:
    return os.getloadavg()[0]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load1():.2f}] {msg}", flush=True)


def request(addr: str, method: str, path: str, body=None, headers=None, timeout=60.0):
    """(status, headers, parsed JSON or text) of one request on a new connection."""
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
        h = {"Content-Type": "application/json", **(headers or {})}
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode(errors="replace")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        return r.status, {k.lower(): v for k, v in r.getheaders()}, parsed
    finally:
        c.close()


class Instance:
    """The release binary on its embedded store in `dir` (kept across restarts)."""

    def __init__(self, config: str, keep: bool = False):
        self.tmp = tempfile.mkdtemp(prefix="toolgate-scale-")
        self.dir = Path(self.tmp)
        (self.dir / "data").mkdir()
        self.config_path = self.dir / "toolgate.yaml"
        self.config_path.write_text(config)
        self.admin = random_key()
        self.keep = keep
        self.proc: subprocess.Popen | None = None
        self.addr = ""
        self.env: dict[str, str] = {}  # more environment for the process

    def spawn(self) -> float:
        """Starts the process; returns the monotonic time of the start."""
        env = dict(os.environ, TOOLGATE_ADMIN_KEY=self.admin, RUST_LOG="warn", **self.env)
        err = open(self.dir / "stderr.log", "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen([str(toolgate_bin()), "--config", str(self.config_path)], cwd=self.dir,
                                     env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        err.close()
        return t0

    def wait_listening(self, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"toolgate exited: {(self.dir / 'stderr.log').read_text()[-2000:]}")
            main, _ = classify(listening_addrs(self.proc.pid))
            if main:
                self.addr = main
                return
            time.sleep(0.01)
        raise RuntimeError("toolgate did not listen in time")

    def start(self) -> "Instance":
        self.spawn()
        self.wait_listening()
        return self

    def stop(self) -> float:
        """SIGINT (Pingora's fast shutdown) and wait; the seconds it took."""
        t0 = time.monotonic()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return time.monotonic() - t0

    def close(self) -> None:
        self.stop()
        if not self.keep:
            subprocess.run(["rm", "-rf", self.tmp], check=False)
        else:
            print(f"work dir kept: {self.tmp}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def api(self, method: str, path: str, body=None):
        return request(self.addr, method, path, body, {"Authorization": f"Bearer {self.admin}"})

    def gateway(self, apps: list[str], **extra) -> dict:
        body = {"name": f"scale-{time.monotonic_ns()}", "servers": apps, "configuration": {"rate_limit": 1000000000}}
        body.update(extra)
        status, _, gw = self.api("POST", "/v1/gateways", body)
        assert status == 201, (status, gw)
        return gw["data"]

    def store_count(self, kind: str) -> int:
        """Records of `kind` in the embedded store, read beside the running process."""
        c = sqlite3.connect(f"file:{self.dir / 'data' / 'toolgate.sqlite3'}?mode=ro", uri=True, timeout=30)
        try:
            return c.execute("SELECT count(*) FROM records WHERE kind = ?", (kind,)).fetchone()[0]
        finally:
            c.close()


def wrk_lua(work: Path, name: str, text: str) -> Path:
    path = work / name
    path.write_text(text)
    return path


def wrk_initialize(inst: Instance, gw: dict, n: int, conns: int) -> dict:
    """`n` initialize requests through wrk; RESULT fields plus the wall time."""
    lua = wrk_lua(inst.dir, "init.lua", INIT_LUA)
    done = inst.dir / "wrk.done"
    done.unlink(missing_ok=True)
    env = dict(os.environ, LIMIT=str(n), DONE_FILE=str(done), API_KEY=gw["api_key"], BODY=INIT)
    url = f"http://{inst.addr}/gateway/{gw['id']}/mcp"
    t0 = time.monotonic()
    proc = subprocess.Popen(["wrk", "-t1", f"-c{conns}", "-d3600s", "--timeout", "60s", "-s", str(lua), url],
                            env=env, stdout=subprocess.PIPE, text=True)
    while not done.exists() and proc.poll() is None:
        time.sleep(0.02)
    wall = time.monotonic() - t0
    while proc.poll() is None:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    out = proc.stdout.read()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    assert line, f"wrk printed no RESULT line: {out}"
    res = {k: float(v) for k, v in (kv.split("=") for kv in line[7:].split())}
    res["wall"] = wall
    return res


def mcp_headers(gw: dict, sid: str | None = None) -> dict:
    h = {"X-API-Key": gw["api_key"], "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL}
    if sid:
        h["Mcp-Session-Id"] = sid
    return h


def open_session(inst: Instance, gw: dict) -> str:
    status, headers, body = request(inst.addr, "POST", f"/gateway/{gw['id']}/mcp", INIT, mcp_headers(gw))
    assert status == 200, (status, body)
    sid = headers["mcp-session-id"]
    status, _, body = request(inst.addr, "POST", f"/gateway/{gw['id']}/mcp",
                              {"jsonrpc": "2.0", "method": "notifications/initialized"}, mcp_headers(gw, sid))
    assert status in (200, 202), (status, body)
    return sid


def ping(addr: str, gw: dict, sid: str) -> int:
    try:
        status, _, _ = request(addr, "POST", f"/gateway/{gw['id']}/mcp",
                               {"jsonrpc": "2.0", "id": 7, "method": "ping"}, mcp_headers(gw, sid), timeout=30)
        return status
    except OSError:
        return 0


def probe_main(addr: str, seconds: float, session: str | None) -> None:
    """`probe`: for `seconds`, back to back on keep-alive connections, GET /healthz and (with
    `session`, "GATEWAY_ID KEY SESSION_ID") a `ping` on that session, which reads and updates
    its entry in the session map as every call does; prints per kind the count, the max latency,
    the 99.9th percentile, the offset of the max, and the answers over 10 ms, as JSON."""
    host, port = addr.rsplit(":", 1)
    kinds = {"healthz": ("GET", "/healthz", None, {})}
    if session:
        gw_id, key, sid = session.split()
        kinds["session"] = ("POST", f"/gateway/{gw_id}/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                            {"Content-Type": "application/json", **mcp_headers({"api_key": key}, sid)})
    conns = {k: http.client.HTTPConnection(host, int(port), timeout=30) for k in kinds}
    lat: dict[str, list[float]] = {k: [] for k in kinds}
    worst = {k: (0.0, 0.0) for k in kinds}
    slow: dict[str, list] = {k: [] for k in kinds}  # (monotonic start, ms) of answers over 10 ms
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for k, (method, path, body, headers) in kinds.items():
            t = time.perf_counter()
            conns[k].request(method, path, body, headers)
            r = conns[k].getresponse()
            r.read()
            d = time.perf_counter() - t
            assert r.status == 200, (k, r.status)
            if d > worst[k][0]:
                worst[k] = (d, time.monotonic() - start)
            if d > 0.010 and len(slow[k]) < 100:
                slow[k].append((round(time.monotonic() - d, 3), round(d * 1e3, 1)))
            lat[k].append(d)
    out = {}
    for k, xs in lat.items():
        xs.sort()
        out[k] = {"n": len(xs), "max_ms": worst[k][0] * 1e3, "p999_ms": xs[int(len(xs) * 0.999)] * 1e3,
                  "over10": sum(1 for x in xs if x > 0.010), "worst_at": worst[k][1], "slow": slow[k]}
    print(json.dumps(out), flush=True)


def start_probe(addr: str, seconds: float, session: str | None = None) -> subprocess.Popen:
    """The probe in a process of its own (no GIL shared with the poller)."""
    extra = ["--session", session] if session else []
    return subprocess.Popen([sys.executable, __file__, "probe", "--addr", addr, "--seconds", str(seconds), *extra],
                            stdout=subprocess.PIPE, text=True)


def probe_result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=3600)
    return json.loads(out.strip().splitlines()[-1])


def instance_config(mcp: str, apps: str = "") -> str:
    """The harness's configuration (embedded store in ./data, the built-in `time` app) with `apps`
    (more entries of the list), the `mcp:` members `mcp` and the limits out of the way."""
    return BASE_CONFIG.format(data="./data") + apps + "mcp:\n" + mcp + LIMITS


def sessions_config(idle: int, retention: int) -> str:
    return instance_config(f"""\
  session_idle_timeout_secs: {idle}
  session_retention_secs: {retention}
  max_sessions_per_key: 100000000
  max_sessions_per_organization: 100000000
""")


def metric(inst: Instance, name: str) -> float:
    _, metrics = classify(listening_addrs(inst.pid))
    status, _, text = request(metrics, "GET", "/metrics")
    total = 0.0
    for line in str(text).splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def time_pages(inst: Instance, pages: list[int], requests: int, query: str = "") -> dict:
    """`timed_gets` of `GET /v1/sessions?page=P&limit=100{query}` (the organisation's sessions,
    newest first) for each page P, each a full page of 100."""
    def full(body: dict) -> bool:
        return len(body["data"]["sessions"]) == 100
    return {page: timed_gets(inst.addr, inst.admin, f"/v1/sessions?page={page}&limit=100{query}", requests,
                             pid=inst.pid, check=full)
            for page in pages}


def bench_sessions(n: int, conns: int, keep: bool, sweep_wait: float, delete_wait: float, probe_s: float) -> dict:
    """One size: create `n` idle sessions through `initialize` (wrk), RSS before and after, the
    restart until a call on an old session answers 200, then the idle sweep under a healthz probe."""
    inst = Instance(sessions_config(86400, 300), keep).start()
    row: dict = {"n": n}
    try:
        gw = inst.gateway(["time"])
        sid0 = open_session(inst, gw)
        assert ping(inst.addr, gw, sid0) == 200
        row["rss_idle_kb"] = rss_kb(inst.pid)
        first = wrk_initialize(inst, gw, 999, conns)
        time.sleep(1)
        row["rss_1k_kb"] = rss_kb(inst.pid)
        say(f"{n}: 1000 sessions, RSS {row['rss_1k_kb'] / 1024:.1f} MiB (idle {row['rss_idle_kb'] / 1024:.1f})")
        res = wrk_initialize(inst, gw, n - 1000, conns)
        row["create_s"] = res["wall"]
        row["create_load"] = load1()
        row["created"] = inst.store_count("session")  # wrk's connections still in flight at its stop add a few
        row["create_errors"] = int(first["requests"] - first["ok"] + res["requests"] - res["ok"])
        time.sleep(2)  # the last flush of activity and the request log
        row["rss_n_kb"] = rss_kb(inst.pid)
        row["per_session_b"] = (row["rss_n_kb"] - row["rss_1k_kb"]) * 1024 / max(1, row["created"] - 1000)
        say(f"{n}: created {row['created']} in {res['wall']:.1f} s ({row['created'] / res['wall']:,.0f}/s, "
            f"{row['create_errors']} not 200, p99 {res['p99_us'] / 1000:.1f} ms); RSS {row['rss_n_kb'] / 1024:.1f} MiB, "
            f"{row['per_session_b']:.0f} B per session beyond the first 1000")
        row["stored"] = row["created"]
        # Restart on the same store: the time until the first session answers 200.
        row["stop_s"] = inst.stop()
        t0 = inst.spawn()
        inst.wait_listening()
        row["listen_s"] = time.monotonic() - t0
        while ping(inst.addr, gw, sid0) != 200:
            time.sleep(0.01)
        row["ready_s"] = time.monotonic() - t0
        row["restart_load"] = load1()
        time.sleep(2)
        row["rss_restarted_kb"] = rss_kb(inst.pid)
        say(f"{n}: {row['stored']} stored; stopped in {row['stop_s']:.1f} s; restart listening in {row['listen_s']:.2f} s, "
            f"first session 200 in {row['ready_s']:.2f} s; RSS {row['rss_restarted_kb'] / 1024:.1f} MiB")
        # A page of the sessions list: the first and one in the middle.
        row["list"] = time_pages(inst, [1, max(1, n // 200)], 100 if n <= 100000 else 20)
        row["list_load"] = load1()
        say(f"{n}: GET /v1/sessions ?limit=100: " + "; ".join(
            f"page {p}: p50 {v['p50_ms']:.1f} ms, p99 {v['p99_ms']:.1f} ms of {v['n']}, CPU {v['cpu_ms']:.1f} ms each" for p, v in row["list"].items()))
        # The sweep: idle time-out 1 s, no retention, by reload; a healthz probe in its own process.
        # A session the probe keeps in use (so live through the sweep): its ping takes the map.
        probe_sid = open_session(inst, gw)
        probe_session = f"{gw['id']} {gw['api_key']} {probe_sid}"
        base = start_probe(inst.addr, 3, probe_session)
        row["probe_base"] = probe_result(base)
        inst.config_path.write_text(sessions_config(1, 0))
        probe = start_probe(inst.addr, probe_s, probe_session)
        time.sleep(0.5)
        t_reload = time.monotonic()
        status, _, body = inst.api("POST", "/v1/admin/reload")
        assert status == 200, (status, body)
        t0 = time.monotonic()
        row["reload_s"] = t0 - t_reload
        removed = None
        while time.monotonic() - t0 < sweep_wait:
            status, _, _ = inst.api("GET", f"/v1/sessions/{sid0}")
            if status == 404 and removed is None:
                removed = time.monotonic() - t0
                row["sweep_load"] = load1()
                break
            time.sleep(0.02)
        row["removed_s"] = removed
        # The store records go after the sweep, while the probe still runs.
        deleted = None
        left = inst.store_count("session")
        while left and time.monotonic() - t0 < delete_wait:
            time.sleep(0.2)
            left = inst.store_count("session")
        if not left:
            deleted = time.monotonic() - t0
        row["probe"] = probe_result(probe)
        # The slow answers, as (seconds after the reload was sent, ms); the worst likewise.
        for kind in row["probe"].values():
            kind["slow"] = [(round(t - t_reload, 3), ms) for t, ms in kind["slow"]]
            kind["worst_after_reload"] = kind["worst_at"] - 0.5
        row["store_left"] = left
        row["deletes_per_s"] = (row["stored"] - left) / (time.monotonic() - t0)
        row["deleted_s"] = deleted
        time.sleep(2)
        row["rss_swept_kb"] = rss_kb(inst.pid)
        pr, base = row["probe"], row["probe_base"]
        say(f"{n}: sweep: gone from memory {removed} s after the reload (answered in {row['reload_s']:.3f} s); store "
            f"records deleted after {deleted} s ({left} left, {row['deletes_per_s']:.0f}/s); RSS {row['rss_swept_kb'] / 1024:.1f} MiB")
        for k in pr:
            say(f"{n}: probe {k}: max {pr[k]['max_ms']:.1f} ms {pr[k]['worst_after_reload']:.2f} s after the reload, "
                f"p99.9 {pr[k]['p999_ms']:.2f} ms, {pr[k]['over10']} over 10 ms of {pr[k]['n']} (before the reload: max "
                f"{base[k]['max_ms']:.1f} ms, {base[k]['over10']} over 10 ms of {base[k]['n']}); the first slow: {pr[k]['slow'][:10]}")
    finally:
        inst.close()
    return row


def pages_main(args) -> None:
    """`pages`: only `n` idle sessions and the timing of a page of `/v1/sessions`, unfiltered and
    filtered (`active=true`, which reads every session to count them) (the same steps as
    `sessions`, without the restart and the sweep): to compare builds quickly."""
    for n in args.sizes:
        inst = Instance(sessions_config(86400, 300), args.keep).start()
        try:
            gw = inst.gateway(["time"])
            open_session(inst, gw)
            wrk_initialize(inst, gw, n - 1, args.connections)
            time.sleep(2)
            for query in ("", "&active=true"):
                pages = time_pages(inst, [1, max(1, n // 200)], args.requests, query)
                say(f"{n} ({inst.store_count('session')} stored): GET /v1/sessions ?limit=100{query}: " + "; ".join(
                    f"page {p}: p50 {v['p50_ms']:.1f} ms, p99 {v['p99_ms']:.1f} ms of {v['n']}, "
                    f"CPU {v['cpu_ms']:.1f} ms each" for p, v in pages.items()))
        finally:
            inst.close()


def restart_main(args) -> None:
    """`restart`: the start with `n` stored sessions only, the store written directly (copies of
    one session made through the endpoint, each with an id of its own), so that builds can be
    compared on the same store in minutes: the time from the start until a `ping` on the first
    session answers 200, and RSS then."""
    for n in args.sizes:
        inst = Instance(sessions_config(86400, 300), args.keep).start()
        try:
            gw = inst.gateway(["time"])
            sid0 = open_session(inst, gw)
            time.sleep(1)
            inst.stop()
            db = sqlite3.connect(inst.dir / "data" / "toolgate.sqlite3")
            cur = db.execute("SELECT * FROM records WHERE kind = 'session' AND id = ?", (sid0,))
            cols = [d[0] for d in cur.description]
            row = cur.fetchone()
            i_id, i_body = cols.index("id"), cols.index("body")

            def copies():
                for i in range(1, n):
                    new_id = f"{sid0[:-8]}{i:08x}"
                    r = list(row)
                    r[i_id], r[i_body] = new_id, row[i_body].replace(sid0, new_id)
                    yield r

            db.executemany(f"INSERT INTO records ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", copies())
            db.commit()
            db.close()
            for attempt in range(args.rounds):
                t0 = inst.spawn()
                inst.wait_listening()
                listen = time.monotonic() - t0
                while ping(inst.addr, gw, sid0) != 200:
                    time.sleep(0.01)
                ready = time.monotonic() - t0
                load = load1()
                time.sleep(1)
                say(f"{n} ({inst.store_count('session')} stored) start {attempt + 1}: listening in {listen:.2f} s, "
                    f"first session 200 in {ready:.2f} s (load {load:.2f}); RSS {rss_kb(inst.pid) / 1024:.0f} MiB")
                inst.stop()
        finally:
            inst.close()


def sessions_main(args) -> None:
    rows = [bench_sessions(n, args.connections, args.keep, args.sweep_wait, args.delete_wait, args.probe) for n in args.sizes]
    print("\n| sessions | created/s | RSS idle / 1k / N MiB | bytes per session | restart: listening / ready s "
          "| RSS after restart MiB | sweep: gone from memory s | max ms healthz / session ping (before) | store deleted s "
          "| RSS after sweep MiB | list page 1 / middle p99 ms |")
    print("|---:|---:|---|---:|---|---:|---:|---|---:|---:|---|")
    for r in rows:
        print(f"| {r['created']:,} | {r['created'] / r['create_s']:,.0f} | {r['rss_idle_kb'] / 1024:.0f} / "
              f"{r['rss_1k_kb'] / 1024:.0f} / {r['rss_n_kb'] / 1024:.0f} | {r['per_session_b']:.0f} | "
              f"{r['listen_s']:.2f} / {r['ready_s']:.2f} | {r['rss_restarted_kb'] / 1024:.0f} | {r['removed_s']:.2f} | "
              f"{r['probe']['healthz']['max_ms']:.1f} / {r['probe']['session']['max_ms']:.1f} "
              f"({r['probe_base']['healthz']['max_ms']:.1f} / {r['probe_base']['session']['max_ms']:.1f}) | {'%.1f' % r['deleted_s'] if r['deleted_s'] else 'unfinished'} ({r['deletes_per_s']:.0f}/s) | {r['rss_swept_kb'] / 1024:.0f} | "
              + " / ".join(f"{v['p99_ms']:.1f}" for v in r["list"].values()) + " |")
    print(json.dumps(rows))


def upstream_main(tools: int, wait: bool) -> None:
    """`upstream`: a small MCP server (Streamable HTTP, JSON answers) on a free port, printed on
    the first line. Each path is an app of its own: `/mcp/<name>` lists `<name>_t0` ..
    `<name>_t{tools-1}` (and with `wait`, `<name>_wait`, which answers after `seconds`) and
    answers their calls; it takes `initialize` with a session id."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status: int, body: bytes = b"", session: bool = False):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if session:
                self.send_header("Mcp-Session-Id", "s1")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            self.reply(405)

        def do_DELETE(self):  # noqa: N802
            self.reply(200)

        def do_POST(self):  # noqa: N802
            msg = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
            name = self.path.rstrip("/").rsplit("/", 1)[-1]
            method, rid = msg.get("method"), msg.get("id")
            if rid is None:
                return self.reply(202)
            if method == "initialize":
                result = {"protocolVersion": msg["params"].get("protocolVersion", PROTOCOL),
                          "capabilities": {"tools": {}}, "serverInfo": {"name": name, "version": "1"}}
            elif method == "tools/list":
                result = {"tools": [{"name": f"{name}_t{i}", "description": f"Tool {i} of {name}",
                                     "inputSchema": {"type": "object", "properties": {
                                         "message": {"type": "string", "description": "a message"}}}}
                                    for i in range(tools)]}
                if wait:
                    result["tools"].append({"name": f"{name}_wait", "description": "answers after `seconds`",
                                            "inputSchema": {"type": "object", "properties": {
                                                "seconds": {"type": "number"}}}})
            elif method == "tools/call":
                if msg["params"]["name"].endswith("_wait"):
                    time.sleep(float(msg["params"].get("arguments", {}).get("seconds", 1)))
                result = {"content": [{"type": "text", "text": f"{msg['params']['name']} called"}]}
            elif method in ("resources/list", "resources/templates/list", "prompts/list"):
                key = {"resources/list": "resources", "prompts/list": "prompts"}.get(method, "resourceTemplates")
                result = {key: []}
            elif method == "ping":
                result = {}
            else:
                body = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}
                return self.reply(200, json.dumps(body).encode())
            self.reply(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode(), method == "initialize")

    class Server(http.server.ThreadingHTTPServer):
        # socketserver's default backlog is 5: a cold list of 100 apps opens some 400 connections
        # at once, and the refused ones left their apps out of the list.
        request_queue_size = 1024

    threading.stack_size(256 * 1024)  # a thread per call in flight: thousands for `poststreams`
    srv = Server(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


def http_app(app_id: str, url: str) -> str:
    return (f"  - id: {app_id}\n    name: {app_id}\n    description: bench app\n    category: testing\n"
            f"    url: {url}\n")


def wide_config(apps: str, deadline_ms: int, page_size: int) -> str:
    """The apps, the list deadline and page size, and gateways of up to 1000 apps."""
    cfg = instance_config(f"  list_deadline_ms: {deadline_ms}\n  page_size: {page_size}\n", apps)
    return cfg.replace("  bootstrap_tier: bench\n", "  bootstrap_tier: bench\n  gateway_max_servers: 1000\n", 1)


def mcp_post(addr: str, gw: dict, sid: str, method: str, params: dict | None = None, rid: int = 1):
    body = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return request(addr, "POST", f"/gateway/{gw['id']}/mcp", body, mcp_headers(gw, sid))


def list_all(conn: http.client.HTTPConnection, gw: dict, sid: str) -> tuple[int, float]:
    """Every page of `tools/list` on a kept-alive connection: (tools, seconds)."""
    t0 = time.perf_counter()
    cursor, n = None, 0
    while True:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": cursor} if cursor else {}}
        conn.request("POST", f"/gateway/{gw['id']}/mcp", json.dumps(body),
                     {"Content-Type": "application/json", **mcp_headers(gw, sid)})
        r = conn.getresponse()
        result = json.loads(r.read())["result"]
        n += len(result["tools"])
        cursor = result.get("nextCursor")
        if not cursor:
            return n, time.perf_counter() - t0


def wrk_calls(inst: Instance, gw: dict, sid: str, tool: str, seconds: int, conns: int) -> dict:
    """`tools/call` of `tool` (benches/tools_call.lua) for `seconds`; RESULT plus toolgate's CPU."""
    env = dict(os.environ, MCP_SESSION=sid, MCP_API_KEY=gw["api_key"], MCP_TOOL=tool)
    t0 = cpu_ticks(inst.pid)
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "-s", str(ROOT / "benches" / "tools_call.lua"),
                          f"http://{inst.addr}/gateway/{gw['id']}/mcp"], env=env, capture_output=True, text=True,
                         check=True).stdout
    ticks = cpu_ticks(inst.pid) - t0
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    res = {k: float(v) for k, v in (kv.split("=") for kv in line[7:].split())}
    res["cpu_us"] = ticks / os.sysconf("SC_CLK_TCK") / max(1.0, res["requests"]) * 1e6
    res["load"] = load1()
    return res


def bench_wide(apps: int, tools: int, args) -> dict:
    """One size: a gateway of `apps` apps (`apps - 1` on the Python upstream, `tools` tools each,
    plus the fast upstream's `echo`), a one-app gateway on the fast upstream, and a third gateway
    of as many apps, one of which accepts connections and never answers."""
    import socket

    fast_bin = ROOT / "target" / "release" / "examples" / "fast_upstream"
    assert fast_bin.exists(), f"{fast_bin} missing: cargo build --release --example fast_upstream"
    fast = subprocess.Popen([str(fast_bin), "0", "--threads", "1"], stdout=subprocess.PIPE, text=True)
    fast_port = int(fast.stdout.readline().strip())
    up = subprocess.Popen([sys.executable, __file__, "upstream", "--tools", str(tools)], stdout=subprocess.PIPE, text=True)
    up_port = int(up.stdout.readline().strip())
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead.listen(1024)  # accepts (the kernel does) and never answers
    names = [f"a{i}" for i in range(apps - 1)]
    cfg = "".join(http_app(n, f"http://127.0.0.1:{up_port}/mcp/{n}") for n in names)
    cfg += http_app("fast", f"http://127.0.0.1:{fast_port}/mcp")
    cfg += http_app("dead", f"http://127.0.0.1:{dead.getsockname()[1]}/mcp")
    # The first list waits for every app (one Python process answers them all, slowly on a busy
    # machine); the dead app's gateway is listed after a reload to `--deadline-ms`.
    inst = Instance(wide_config(cfg, 60000, args.page_size), args.keep).start()
    row: dict = {"apps": apps, "tools": tools}
    try:
        rss0 = rss_kb(inst.pid)
        wide = inst.gateway(names + ["fast"])
        one = inst.gateway(["fast"])
        with_dead = inst.gateway(names[1:] + ["fast", "dead"])  # as many apps, one of them dead
        sids = {name: open_session(inst, gw) for name, gw in (("wide", wide), ("one", one), ("dead", with_dead))}
        # The first list builds the catalogue (every app asked at once).
        host, port = inst.addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        n, cold = list_all(conn, wide, sids["wide"])
        row["listed"], row["cold_s"] = n, cold
        row["rss_catalogue_kb"] = rss_kb(inst.pid) - rss0
        want = (apps - 1) * tools + 1
        assert n == want, f"listed {n} of {want} tools"
        firsts, walks = [], []
        for _ in range(args.lists):
            t = time.perf_counter()
            conn.request("POST", f"/gateway/{wide['id']}/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                         {"Content-Type": "application/json", **mcp_headers(wide, sids["wide"])})
            conn.getresponse().read()
            firsts.append(time.perf_counter() - t)
            walks.append(list_all(conn, wide, sids["wide"])[1])
        row["list_load"] = load1()
        q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(len(xs) * p))] * 1e3  # noqa: E731
        row["page_p50_ms"], row["page_p99_ms"] = q(firsts, 0.5), q(firsts, 0.99)
        row["all_p50_ms"], row["all_p99_ms"] = q(walks, 0.5), q(walks, 0.99)
        pages = -(-n // args.page_size)
        say(f"wide {apps}x{tools}: {n} tools in {pages} pages of {args.page_size}; cold {cold * 1e3:.0f} ms; "
            f"first page p50 {row['page_p50_ms']:.2f} ms p99 {row['page_p99_ms']:.2f} ms; all pages p50 "
            f"{row['all_p50_ms']:.1f} ms p99 {row['all_p99_ms']:.1f} ms; RSS beyond idle +{row['rss_catalogue_kb'] / 1024:.1f} MiB")
        # A call of a tool of the wide gateway's app against the same call on a one-app gateway.
        tool = {"wide": "fast__echo", "one": "echo"}  # a gateway of several apps shows `<app>__<tool>`
        for gw, name in ((wide, "wide"), (one, "one")):
            status, _, body = mcp_post(inst.addr, gw, sids[name], "tools/call", {"name": tool[name], "arguments": {"message": "x"}})
            assert status == 200 and "Echo: x" in json.dumps(body), (status, body)
        calls: dict[str, list[dict]] = {"wide": [], "one": []}
        for r in range(args.rounds + 1):
            for name in ("wide", "one") if r % 2 == 0 else ("one", "wide"):
                gw = wide if name == "wide" else one
                res = wrk_calls(inst, gw, sids[name], tool[name], args.seconds if r else 2, args.connections)
                if r:
                    calls[name].append(res)
                    say(f"round {r} {name}: {res['rps']:,.0f} calls/s, {res['cpu_us']:.1f} us CPU per call, "
                        f"p99 {res['p99_us'] / 1000:.2f} ms, errors {res['non2xx'] + res['socket_errors']:.0f}")
        for name in ("wide", "one"):
            row[f"{name}_cpu_us"] = statistics.median(x["cpu_us"] for x in calls[name])
            row[f"{name}_rps"] = statistics.median(x["rps"] for x in calls[name])
        # The dead app: the first list of the third gateway waits `list_deadline_ms` at most.
        inst.config_path.write_text(wide_config(cfg, args.deadline_ms, args.page_size))
        status, _, body = inst.api("POST", "/v1/admin/reload")
        assert status == 200, (status, body)
        t = time.perf_counter()
        status, _, body = mcp_post(inst.addr, with_dead, sids["dead"], "tools/list")
        row["dead_first_page_s"] = time.perf_counter() - t
        n_dead, _ = list_all(conn, with_dead, sids["dead"])
        assert n_dead == (apps - 2) * tools + 1, f"the gateway with a dead app listed {n_dead} tools"
        row["dead_listed"] = n_dead
        say(f"with a dead app: first list in {row['dead_first_page_s'] * 1e3:.0f} ms (deadline {args.deadline_ms} ms), "
            f"{n_dead} tools listed")
        # What the list costs past the deadline without any wait: a fourth gateway of the same
        # apps but the dead one, listed for the first time (its apps answer at once, as they did
        # before the deadline above).
        same = inst.gateway(names[1:] + ["fast"])
        sid = open_session(inst, same)
        t = time.perf_counter()
        status, _, body = mcp_post(inst.addr, same, sid, "tools/list")
        row["same_first_page_s"] = time.perf_counter() - t
        assert status == 200, (status, body)
        say(f"the same apps without the dead one: first list in {row['same_first_page_s'] * 1e3:.0f} ms")
        conn.close()
    finally:
        inst.close()
        fast.kill()
        up.kill()
        dead.close()
    return row


def wide_main(args) -> None:
    rows = [bench_wide(a, args.tools, args) for a in args.apps]
    print("\n| apps x tools | first list (cold) ms | page of {0} p50 / p99 ms | all pages p50 / p99 ms | RSS beyond idle after the first list MiB "
          "| CPU us per call: wide / one-app | calls/s wide / one-app | first list with a dead app ms "
          "| first list of the same apps without it ms |".format(args.page_size))
    print("|---|---:|---|---|---:|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['apps']} x {r['tools']} | {r['cold_s'] * 1e3:.0f} | {r['page_p50_ms']:.2f} / {r['page_p99_ms']:.2f} "
              f"| {r['all_p50_ms']:.1f} / {r['all_p99_ms']:.1f} | {r['rss_catalogue_kb'] / 1024:.1f} "
              f"| {r['wide_cpu_us']:.1f} / {r['one_cpu_us']:.1f} | {r['wide_rps']:,.0f} / {r['one_rps']:,.0f} "
              f"| {r['dead_first_page_s'] * 1e3:.0f} | {r['same_first_page_s'] * 1e3:.0f} |")
    print(json.dumps(rows))


# --- streams -------------------------------------------------------------------------------------

def streams_config(apps: str = "") -> str:
    """Sessions' caps raised, and the listener's connection bounds above 10,000 streams."""
    base = instance_config("""\
  session_idle_timeout_secs: 86400
  max_sessions_per_key: 100000000
  max_sessions_per_organization: 100000000
""", apps)
    return base.replace("  trusted_proxies: []\n",
                        "  trusted_proxies: []\n  max_connections: 60000\n  max_connections_per_ip: 60000\n", 1)


async def _http_exchange(reader, writer, head: str, body: bytes = b"") -> tuple[int, dict, bytes]:
    """One request on a kept-alive connection; the answer must carry a Content-Length."""
    writer.write(head.encode() + body)
    await writer.drain()
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
    n = int(headers.get("content-length", "0"))
    return status, headers, (await reader.readexactly(n)) if n else b""


class StreamClient:
    """One MCP session (initialize + initialized) and its GET stream, on one connection."""

    def __init__(self, host: str, port: int, gw: dict):
        self.host, self.port, self.gw = host, port, gw
        self.writer = None
        self.got_at: float | None = None  # monotonic time the stream carried tools/list_changed
        self.error = ""

    def _head(self, method: str, body_len: int | None, sid: str | None, accept: str) -> str:
        h = (f"{method} /gateway/{self.gw['id']}/mcp HTTP/1.1\r\nHost: {self.host}\r\nX-API-Key: {self.gw['api_key']}\r\n"
             f"Accept: {accept}\r\nMCP-Protocol-Version: {PROTOCOL}\r\n")
        if sid:
            h += f"Mcp-Session-Id: {sid}\r\n"
        if body_len is not None:
            h += f"Content-Type: application/json\r\nContent-Length: {body_len}\r\n"
        return h + "\r\n"

    async def handshake(self):
        """A connection of its own and a session on it (`initialize` + `initialized`): the
        connection's reader and the session id."""
        import asyncio
        reader, self.writer = await asyncio.open_connection(self.host, self.port)
        init, accept = INIT.encode(), "application/json, text/event-stream"
        status, headers, body = await _http_exchange(reader, self.writer, self._head("POST", len(init), None, accept), init)
        assert status == 200, (status, body[:200])
        sid = headers["mcp-session-id"]
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        status, _, body = await _http_exchange(reader, self.writer, self._head("POST", len(note), sid, accept), note)
        assert status in (200, 202), (status, body[:200])
        return reader, sid

    async def send_until(self, reader, request: bytes, marker: bytes, what: str) -> bytes:
        """Sends `request` and reads until `marker` has arrived; what was read (a 200's head
        first). `what`: the failure's words when the connection ends before."""
        self.writer.write(request)
        await self.writer.drain()
        buf = b""
        while marker not in buf:
            chunk = await reader.read(4096)
            assert chunk, f"{what}: {buf[:300]!r}"
            buf += chunk
        assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
        return buf

    async def open(self) -> None:
        reader, self.sid = await self.handshake()
        await self.listen_on(reader)

    async def reopen(self) -> None:
        """The same session's GET stream again, on a new connection."""
        import asyncio
        reader, self.writer = await asyncio.open_connection(self.host, self.port)
        await self.listen_on(reader)

    async def listen_on(self, reader) -> None:
        head = self._head("GET", None, self.sid, "text/event-stream").encode()
        await self.send_until(reader, head, b": stream open", "the stream closed at once")
        self.reader = reader

    async def listen(self) -> None:
        """Reads until the connection ends, noting when `tools/list_changed` arrived."""
        buf = b""
        try:
            while True:
                chunk = await self.reader.read(65536)
                if not chunk:
                    return
                if self.got_at is None:
                    buf = buf[-64:] + chunk
                    if b"notifications/tools/list_changed" in buf:
                        self.got_at = time.monotonic()
        except OSError as e:
            self.error = str(e)

    def close(self) -> None:
        if self.writer:
            self.writer.close()


def bench_streams(n: int, args) -> dict:
    """One size: `n` sessions, each with its GET stream open on its own connection (asyncio, one
    thread); RSS beyond idle; one management change (PATCH of the gateway's description, which
    drops its catalogue and sends `notifications/*/list_changed` to its streams) and the time until
    each stream carried `notifications/tools/list_changed`; then every connection closed and RSS."""
    import asyncio

    inst = Instance(streams_config(), args.keep).start()
    row: dict = {"n": n}
    try:
        gw = inst.gateway(["time"])
        host, port = inst.addr.rsplit(":", 1)
        sid0 = open_session(inst, gw)
        assert ping(inst.addr, gw, sid0) == 200
        time.sleep(1)
        row["rss_idle_kb"] = rss_kb(inst.pid)

        async def run() -> None:
            clients = [StreamClient(host, int(port), gw) for _ in range(n)]
            sem = asyncio.Semaphore(args.connections)

            async def opened(c: StreamClient):
                async with sem:
                    await c.open()
                return asyncio.ensure_future(c.listen())

            t0 = time.monotonic()
            listeners = await asyncio.gather(*(opened(c) for c in clients))
            row["open_s"] = time.monotonic() - t0
            row["open_load"] = load1()
            await asyncio.sleep(2)
            row["open_metric"] = metric(inst, "toolgate_mcp_streams_open")
            row["rss_open_kb"] = rss_kb(inst.pid)
            row["per_stream_b"] = (row["rss_open_kb"] - row["rss_idle_kb"]) * 1024 / n
            say(f"{n}: {n} streams open in {row['open_s']:.1f} s (toolgate counts {row['open_metric']:.0f}); "
                f"RSS {row['rss_open_kb'] / 1024:.1f} MiB, +{(row['rss_open_kb'] - row['rss_idle_kb']) / 1024:.1f} beyond idle "
                f"({row['per_stream_b']:,.0f} bytes per stream)")
            lat = []
            for rep in range(args.changes):
                for c in clients:
                    c.got_at = None
                ticks, mine = cpu_ticks(inst.pid), time.process_time()
                t = time.monotonic()
                status, _, body = await asyncio.to_thread(
                    inst.api, "PATCH", f"/v1/gateways/{gw['id']}", {"description": f"change {rep}"})
                answered = time.monotonic() - t
                assert status == 200, (status, body)
                deadline = time.monotonic() + 30
                while any(c.got_at is None for c in clients) and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
                got = sorted(c.got_at - t for c in clients if c.got_at is not None)
                missed = n - len(got)
                # CPU seconds toolgate and this client spent from the PATCH until all had heard it.
                server_cpu = (cpu_ticks(inst.pid) - ticks) / os.sysconf("SC_CLK_TCK")
                client_cpu = time.process_time() - mine
                lat.append({"answered_s": answered, "first_s": got[0], "p50_s": got[len(got) // 2], "max_s": got[-1],
                            "missed": missed, "load": load1(), "server_cpu_s": server_cpu, "client_cpu_s": client_cpu})
                say(f"{n}: change {rep + 1}: PATCH answered in {answered * 1e3:.0f} ms; list_changed on "
                    f"{len(got)} of {n} streams, first {got[0] * 1e3:.0f} ms, p50 {got[len(got) // 2] * 1e3:.0f} ms, "
                    f"max {got[-1] * 1e3:.0f} ms (first to last {(got[-1] - got[0]) * 1e3:.0f} ms); CPU toolgate "
                    f"{server_cpu * 1e3:.0f} ms, this client {client_cpu * 1e3:.0f} ms")
                await asyncio.sleep(1)
            row["changes"] = lat
            row["fanout_p50_s"] = statistics.median(x["p50_s"] for x in lat)
            row["fanout_max_s"] = max(x["max_s"] for x in lat)
            row["spread_max_s"] = max(x["max_s"] - x["first_s"] for x in lat)
            row["server_cpu_s"] = statistics.median(x["server_cpu_s"] for x in lat)
            row["client_cpu_s"] = statistics.median(x["client_cpu_s"] for x in lat)
            row["missed"] = sum(x["missed"] for x in lat)
            row["change_load"] = statistics.median(x["load"] for x in lat)
            await close_all(clients, listeners)
            # Closed: what the streams held is free (RSS 2 s and 12 s after). Opened again on the
            # same sessions: what was freed is used again (RSS no higher than the first time).
            await asyncio.to_thread(closed_rss, "closed")
            t0 = time.monotonic()
            for group in range(0, n, args.connections):
                await asyncio.gather(*(c.reopen() for c in clients[group:group + args.connections]))
            listeners = [asyncio.ensure_future(c.listen()) for c in clients]
            await asyncio.sleep(2)
            row["reopen_s"] = time.monotonic() - t0
            row["rss_reopened_kb"] = rss_kb(inst.pid)
            say(f"{n}: the {n} streams opened again in {row['reopen_s']:.1f} s; RSS {row['rss_reopened_kb'] / 1024:.1f} MiB "
                f"(first time {row['rss_open_kb'] / 1024:.1f})")
            await close_all(clients, listeners)

        async def close_all(clients, listeners) -> None:
            for c in clients:
                c.close()
            await asyncio.wait_for(asyncio.gather(*listeners, return_exceptions=True), 60)

        def closed_rss(key: str) -> None:
            deadline = time.monotonic() + 30
            while metric(inst, "toolgate_mcp_streams_open") > 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            row[f"{key}_metric"] = metric(inst, "toolgate_mcp_streams_open")
            time.sleep(2)
            row[f"rss_{key}_kb"] = rss_kb(inst.pid)
            time.sleep(10)
            row[f"rss_{key}_later_kb"] = rss_kb(inst.pid)
            say(f"{n}: all {key} (toolgate counts {row[f'{key}_metric']:.0f} open); RSS {row[f'rss_{key}_kb'] / 1024:.1f} MiB "
                f"2 s after, {row[f'rss_{key}_later_kb'] / 1024:.1f} MiB 12 s after (the {n} sessions stay)")

        asyncio.run(run())
        closed_rss("closed_again")
    finally:
        inst.close()
    return row


def streams_main(args) -> None:
    rows = [bench_streams(n, args) for n in args.sizes]
    print("\n| streams | opened in s (load) | RSS idle / open / closed (2 s, 12 s after) / opened again / closed again (12 s) MiB "
          "| beyond idle MiB | bytes per stream "
          "| list_changed from the PATCH: p50 / max ms (load) | first to last stream, max ms "
          "| CPU ms per change: toolgate / client | missed |")
    print("|---:|---:|---|---:|---:|---|---:|---|---:|")
    for r in rows:
        print(f"| {r['n']:,} | {r['open_s']:.1f} ({r['open_load']:.1f}) | {r['rss_idle_kb'] / 1024:.0f} / "
              f"{r['rss_open_kb'] / 1024:.0f} / {r['rss_closed_kb'] / 1024:.0f}, {r['rss_closed_later_kb'] / 1024:.0f} / "
              f"{r['rss_reopened_kb'] / 1024:.0f} / {r['rss_closed_again_later_kb'] / 1024:.0f} | {(r['rss_open_kb'] - r['rss_idle_kb']) / 1024:.1f} "
              f"| {r['per_stream_b']:,.0f} | {r['fanout_p50_s'] * 1e3:.0f} / {r['fanout_max_s'] * 1e3:.0f} ({r['change_load']:.1f}) "
              f"| {r['spread_max_s'] * 1e3:.0f} | {r['server_cpu_s'] * 1e3:.0f} / {r['client_cpu_s'] * 1e3:.0f} | {r['missed']} |")
    print(json.dumps(rows))


def bench_poststreams(n: int, args) -> dict:
    """One size: `n` sessions, each on its own connection with a `tools/call` in flight of a tool
    that answers after `--hold` seconds (`scale.py upstream`'s `<app>_wait`, one thread per call).
    toolgate answers a session client that takes SSE with a resumable stream once the app has
    taken 250 ms (`mcp/dispatch.rs`, `EARLY_STREAM`): a priming event with an id, the call's
    events then kept for a `GET` with `Last-Event-ID` (`mcp/resumable.rs`). RSS beyond idle with
    all `n` open (toolgate's connection to the app for each call included); then the app answers,
    and each stream must carry its result and end; RSS 2 s after the last."""
    import asyncio

    up = subprocess.Popen([sys.executable, __file__, "upstream", "--tools", "1", "--wait"], stdout=subprocess.PIPE, text=True)
    up_port = int(up.stdout.readline().strip())
    # The app's time-outs above the hold (30 s to the first byte and 60 s in all by default).
    wait = int(args.hold * 1000) + 60_000
    app = http_app("slow", f"http://127.0.0.1:{up_port}/mcp/slow") + (
        f"    timeouts: {{ first_byte_ms: {wait}, total_ms: {wait} }}\n")
    inst = Instance(streams_config(app), args.keep).start()
    row: dict = {"n": n}
    try:
        gw = inst.gateway(["slow"])
        host, port = inst.addr.rsplit(":", 1)
        sid0 = open_session(inst, gw)
        status, _, body = mcp_post(inst.addr, gw, sid0, "tools/call", {"name": "slow_wait", "arguments": {"seconds": 0}})
        assert status == 200, (status, body)
        time.sleep(1)
        row["rss_idle_kb"] = rss_kb(inst.pid)
        call = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "slow_wait", "arguments": {"seconds": args.hold}}}).encode()

        async def run() -> None:
            clients = [StreamClient(host, int(port), gw) for _ in range(n)]
            sem = asyncio.Semaphore(args.connections)
            answered: list[float] = []
            primed: list[float] = []

            async def one(c: StreamClient) -> None:
                async with sem:
                    reader, sid = await c.handshake()
                    head = c._head("POST", len(call), sid, "application/json, text/event-stream").encode()
                    buf = await c.send_until(reader, head + call, b"retry:", "the call's stream ended before its priming event")
                    assert b"text/event-stream" in buf, buf[:300]
                    primed.append(time.monotonic())
                # Open: wait for the result on the stream, then its end.
                while b'"result"' not in buf:
                    chunk = await reader.read(65536)
                    if not chunk:
                        c.error = f"ended without the result: {buf[-300:]!r}"
                        return
                    buf += chunk
                answered.append(time.monotonic())
                c.close()

            t0 = time.monotonic()
            tasks = [asyncio.ensure_future(one(c)) for c in clients]
            while len(primed) < n:
                await asyncio.sleep(0.05)
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise t.exception()
                if time.monotonic() - t0 > args.hold - 5:
                    raise RuntimeError("the streams did not all open before the app answers: raise --hold")
            row["open_s"] = time.monotonic() - t0
            row["open_load"] = load1()
            await asyncio.sleep(2)
            row["rss_open_kb"] = rss_kb(inst.pid)
            row["per_stream_b"] = (row["rss_open_kb"] - row["rss_idle_kb"]) * 1024 / n
            say(f"{n}: {n} POST streams open in {row['open_s']:.1f} s; RSS {row['rss_open_kb'] / 1024:.1f} MiB, "
                f"+{(row['rss_open_kb'] - row['rss_idle_kb']) / 1024:.1f} beyond idle ({row['per_stream_b']:,.0f} bytes "
                f"per stream, toolgate's connection to the app included)")
            await asyncio.wait_for(asyncio.gather(*tasks), args.hold + 120)
            row["answered"] = len(answered)
            row["failed"] = [c.error for c in clients if c.error][:3]
            row["answers_spread_s"] = max(answered) - min(answered) if answered else 0

        asyncio.run(run())
        time.sleep(2)
        row["rss_closed_kb"] = rss_kb(inst.pid)
        say(f"{n}: {row['answered']} of {n} streams carried their result and ended (first to last "
            f"{row['answers_spread_s']:.1f} s); RSS {row['rss_closed_kb'] / 1024:.1f} MiB 2 s after; failures: {row['failed']}")
    finally:
        inst.close()
        up.kill()
    return row


def poststreams_main(args) -> None:
    rows = [bench_poststreams(n, args) for n in args.sizes]
    print("\n| POST streams | opened in s (load) | RSS idle / open / after MiB | beyond idle MiB | bytes per stream | carried their result |")
    print("|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['n']:,} | {r['open_s']:.1f} ({r['open_load']:.1f}) | {r['rss_idle_kb'] / 1024:.0f} / "
              f"{r['rss_open_kb'] / 1024:.0f} / {r['rss_closed_kb'] / 1024:.0f} | {(r['rss_open_kb'] - r['rss_idle_kb']) / 1024:.1f} "
              f"| {r['per_stream_b']:,.0f} | {r['answered']:,} of {r['n']:,} |")
    print(json.dumps(rows))


# --- records -------------------------------------------------------------------------------------

RECORD_APPS = 20  # apps an organisation connects (the 20,000 connections at 1,000 organisations)


def records_config(fast_port: int, storage: str = "") -> str:
    """`RECORD_APPS` apps taking an API key (each an organisation's connection) and `fast`, all
    on the fast upstream; quotas and session caps out of the way; `storage` replaces the
    embedded store."""
    apps = "".join(http_app(f"c{j}", f"http://127.0.0.1:{fast_port}/mcp") + "    auth_types: [api_key]\n"
                   for j in range(RECORD_APPS))
    apps += http_app("fast", f"http://127.0.0.1:{fast_port}/mcp")
    cfg = instance_config("  max_sessions_per_key: 100000000\n  max_sessions_per_organization: 100000000\n", apps)
    cfg = cfg.replace("bench: { gateways: 1000000 }", "bench: { gateways: 1000000, api_keys: 1000000 }")
    if storage:
        cfg = cfg.replace("storage:\n  backend: embedded\n  path: ./data\n", storage)
    return cfg


def templates(inst: Instance) -> dict:
    """One record of each kind, written by the binary through the API: a gateway (and its
    access key), an account key, a connection; the bootstrap organisation and its owner."""
    gw = inst.gateway(["c0", "c1"])
    status, _, key = inst.api("POST", "/v1/api-keys", {"name": "template", "scopes": ["*"]})
    assert status == 201, (status, key)
    status, _, conn = inst.api("POST", "/v1/apps/c0/connect", {"auth_type": "api_key", "credentials": {"api_key": "k"}})
    assert status == 200, (status, conn)
    time.sleep(1)  # written through
    c = sqlite3.connect(f"file:{inst.dir / 'data' / 'toolgate.sqlite3'}?mode=ro", uri=True, timeout=30)
    try:
        get = lambda kind, rid: json.loads(c.execute(  # noqa: E731
            "SELECT body FROM records WHERE kind = ? AND id = ?", (kind, rid)).fetchone()[0])
        org_id = c.execute("SELECT id FROM records WHERE kind = 'organization'").fetchone()[0]
        user_id = c.execute("SELECT id FROM records WHERE kind = 'user'").fetchone()[0]
        conn_id = c.execute("SELECT id FROM records WHERE kind = 'connection'").fetchone()[0]
        gateway = get("gateway", gw["id"])
        return {"organization": get("organization", org_id), "user": get("user", user_id),
                "api_key": get("api_key", key["data"]["id"]), "gateway": gateway,
                "access_key": get("api_key", gateway["access_key_id"]), "connection": get("connection", conn_id)}
    finally:
        c.close()


def seeded_records(t: dict, orgs: int, keys: int, gateways: int, conns: int, known: dict):
    """(kind, partition, id, body) of `orgs` organisations, each with its owner, `keys` API keys
    in all (one access key per gateway among them), `gateways` gateways (two apps each) and
    `conns` connections, spread evenly; the templates' bodies with new ids, names and key hashes.
    `known`: the first organisation's key in clear (`key`), filled in."""
    import hashlib
    import secrets

    def body(tpl: dict, **over) -> str:
        return json.dumps({**tpl, **over}, separators=(",", ":"))

    gw_per, conn_per = gateways // orgs, conns // orgs
    key_per = keys // orgs - gw_per  # account keys; the rest are the gateways' access keys
    for o in range(orgs):
        org = f"org_s{o:05d}"
        user = f"usr_s{o:05d}"
        yield "organization", org, org, body(t["organization"], id=org, name=f"Org {o}", declared=False)
        yield "user", org, user, body(t["user"], id=user, org_id=org, email=f"owner{o}@scale.test", declared=False)
        for k in range(key_per):
            kid = f"key_s{o:05d}_{k}"
            if o == 0 and k == 0:
                clear = random_key()
                known["key"], known["org"] = clear, org
                digest = hashlib.sha256(clear.encode()).hexdigest()
            else:
                digest = secrets.token_hex(32)
            yield "api_key", org, kid, body(t["api_key"], id=kid, org_id=org, user_id=user, name=f"key {k}", hash=digest,
                                            declared=False)
        for g in range(gw_per):
            gid, akid = f"gw_s{o:05d}_{g}", f"key_s{o:05d}_g{g}"
            servers = [f"c{(2 * g) % RECORD_APPS}", f"c{(2 * g + 1) % RECORD_APPS}"]
            yield "gateway", org, gid, body(t["gateway"], id=gid, org_id=org, name=f"gateway {g}", servers=servers,
                                            allowed_tools={s: "*" for s in servers} if t["gateway"].get("allowed_tools") else {},
                                            access_key_id=akid)
            yield "api_key", org, akid, body(t["access_key"], id=akid, org_id=org, user_id=user, hash=secrets.token_hex(32),
                                             gateway_id=gid)
        for j in range(conn_per):
            cid = f"conn_s{o:05d}_{j}"
            yield "connection", org, cid, body(t["connection"], id=cid, org_id=org, app_id=f"c{j % RECORD_APPS}")


def seed_embedded(inst: Instance, rows: list) -> float:
    """The rows into the stopped instance's embedded store in one transaction; seconds."""
    t0 = time.monotonic()
    c = sqlite3.connect(inst.dir / "data" / "toolgate.sqlite3")
    try:
        with c:
            c.executemany("INSERT INTO records (kind, partition, id, body) VALUES (?, ?, ?, ?)", rows)
    finally:
        c.close()
    return time.monotonic() - t0


def resp(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def seed_redis(sock: Path, rows: list, prefix: str = "toolgate") -> float:
    """The rows into Redis as the store writes a record (`storage/redis` `add_put`: the body, the
    organisation's index, the locator, the kind's index), through `redis-cli --pipe`; seconds."""
    t0 = time.monotonic()
    cmds = []
    for kind, part, rid, b in rows:
        cmds.append(resp("SET", f"{prefix}:{{{part}}}:r:{kind}:{rid}", b))
        cmds.append(resp("SADD", f"{prefix}:{{{part}}}:i:{kind}", rid))
        cmds.append(resp("SET", f"{prefix}:loc:{kind}:{rid}", part))
        cmds.append(resp("SADD", f"{prefix}:k:{kind}", f"{part}\n{rid}"))
    out = subprocess.run(["redis-cli", "-s", str(sock), "--pipe"], input=b"".join(cmds), capture_output=True, check=True)
    assert b"errors: 0" in out.stdout, out.stdout[-500:]
    return time.monotonic() - t0


def start_until_ready(inst: Instance, key: str) -> tuple[float, float]:
    """(listening, ready): seconds from the process's start until its listener is open and until
    a management call of the seeded organisation (`GET /v1/gateways`) answers 200."""
    t0 = inst.spawn()
    inst.wait_listening()
    listening = time.monotonic() - t0
    while True:
        try:
            status, _, _ = request(inst.addr, "GET", "/v1/gateways?limit=1", None, {"Authorization": f"Bearer {key}"}, 5)
            if status == 200:
                return listening, time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.005)


def timed_gets(addr: str, key: str, path: str, n: int, warm: int = 0, pid: int | None = None,
               check=None) -> dict:
    """`n` GETs of `path` on one kept-alive connection, after `warm` not timed: p50 / p99 / max
    ms, and with `pid` that process's CPU ms per GET. Each answer must be 200 (and pass `check`
    on its JSON body)."""
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    for _ in range(warm):
        c.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        c.getresponse().read()
    xs = []
    ticks = cpu_ticks(pid) if pid else 0
    for _ in range(n):
        t = time.perf_counter()
        c.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        r = c.getresponse()
        body = r.read()
        xs.append(time.perf_counter() - t)
        assert r.status == 200, (path, r.status, body[:300])
        assert check is None or check(json.loads(body)), (path, body[:300])
    out = {"n": n}
    if pid:
        out["cpu_ms"] = (cpu_ticks(pid) - ticks) * 1e3 / os.sysconf("SC_CLK_TCK") / n
    c.close()
    xs.sort()
    out.update(p50_ms=xs[len(xs) // 2] * 1e3, p99_ms=xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3,
               max_ms=xs[-1] * 1e3)
    return out


def call_traffic(inst: Instance, key: str, sessions: int) -> tuple[dict, str, dict]:
    """A gateway of `fast` in the key's organisation, `sessions` sessions on it and a few calls
    (so that the sessions and logs pages have something to list); (gateway, a session, gateway's
    creation answer)."""
    status, _, body = request(inst.addr, "POST", "/v1/gateways", {"name": f"calls-{time.monotonic_ns()}", "servers": ["fast"],
                              "configuration": {"rate_limit": 1000000000}}, {"Authorization": f"Bearer {key}"})
    assert status == 201, (status, body)
    gw = body["data"]
    sids = [open_session(inst, gw) for _ in range(sessions)]
    for sid in sids:
        status, _, body = mcp_post(inst.addr, gw, sid, "tools/call", {"name": "echo", "arguments": {"message": "x"}})
        assert status == 200, (status, body)
    return gw, sids[0], body


def bench_records(scale_: float, args) -> dict:
    """One size: the issue's figures times `scale_`, on the embedded store and on Redis."""
    orgs, keys = max(1, int(1000 * scale_)), int(100000 * scale_)
    gateways, conns = int(10000 * scale_), int(20000 * scale_)
    row: dict = {"orgs": orgs, "keys": keys, "gateways": gateways, "connections": conns}
    fast_bin = ROOT / "target" / "release" / "examples" / "fast_upstream"
    assert fast_bin.exists(), f"{fast_bin} missing: cargo build --release --example fast_upstream"
    fast = subprocess.Popen([str(fast_bin), "0", "--threads", "1"], stdout=subprocess.PIPE, text=True)
    fast_port = int(fast.stdout.readline().strip())
    insts: list[Instance] = []
    redis = None
    try:
        # The small store: a fresh instance, its bootstrap organisation only.
        small = Instance(records_config(fast_port), args.keep).start()
        insts.append(small)
        row["rss_small_kb"] = rss_kb(small.pid)
        # The big store: the templates written by the binary, then the records beside them.
        big = Instance(records_config(fast_port), args.keep).start()
        insts.append(big)
        t = templates(big)
        big.stop()
        known: dict = {}
        rows = list(seeded_records(t, orgs, keys, gateways, conns, known))
        row["seed_s"] = seed_embedded(big, rows)
        say(f"records x{scale_}: {len(rows):,} records written in {row['seed_s']:.1f} s")
        listening, ready = start_until_ready(big, known["key"])
        row["start_listening_s"], row["start_ready_s"], row["start_load"] = listening, ready, load1()
        time.sleep(2)
        row["rss_big_kb"] = rss_kb(big.pid)
        say(f"records x{scale_}: embedded start: listening {listening:.2f} s, ready {ready:.2f} s; RSS {row['rss_big_kb'] / 1024:.1f} MiB "
            f"(small store {row['rss_small_kb'] / 1024:.1f})")
        # Pages, in the seeded organisation (10 gateways, 100 keys of 100,000) and its sessions and logs.
        gw_big, sid_big, _ = call_traffic(big, known["key"], args.sessions)
        time.sleep(1.5)  # the request log's flush
        pages = {"gateways": "/v1/gateways?limit=20", "keys": "/v1/api-keys?limit=20", "sessions": "/v1/sessions?limit=20",
                 "logs": "/v1/logs?limit=50"}
        row["pages"] = {}
        for name, path in pages.items():
            row["pages"][name] = timed_gets(big.addr, known["key"], path, args.requests, warm=10)
        row["pages_load"] = load1()
        say(f"records x{scale_}: pages p50/p99/max ms: " + "; ".join(
            f"{k} {v['p50_ms']:.2f}/{v['p99_ms']:.2f}/{v['max_ms']:.1f}" for k, v in row["pages"].items()))
        # CPU per call: the same call on the big and the small store, alternating.
        gw_small, sid_small, _ = call_traffic(small, small.admin, 1)
        calls: dict[str, list[dict]] = {"big": [], "small": []}
        for r in range(args.rounds + 1):
            for name in ("big", "small") if r % 2 == 0 else ("small", "big"):
                inst, gw, sid = (big, gw_big, sid_big) if name == "big" else (small, gw_small, sid_small)
                res = wrk_calls(inst, gw, sid, "echo", args.seconds if r else 2, args.connections)
                if r:
                    calls[name].append(res)
                    say(f"round {r} {name}: {res['rps']:,.0f} calls/s, {res['cpu_us']:.1f} us CPU per call")
        for name in ("big", "small"):
            row[f"{name}_cpu_us"] = statistics.median(x["cpu_us"] for x in calls[name])
            row[f"{name}_rps"] = statistics.median(x["rps"] for x in calls[name])
        row["calls_load"] = load1()
        small.close()
        big.close()
        insts.clear()
        if args.redis:
            # Redis: a first start on an empty database makes the bootstrap organisation; then
            # the same records, and the start timed.
            work = Path(tempfile.mkdtemp(prefix="toolgate-scale-redis-"))
            sock = work / "redis.sock"
            redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                                      "--dir", str(work), "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while not sock.exists():
                time.sleep(0.05)
            rinst = Instance(records_config(fast_port, f"storage:\n  backend: redis\n  url: unix://{sock}\n"), args.keep)
            rinst.env["TOOLGATE_SECRET_KEY"] = "%064d" % 7
            insts.append(rinst.start())
            rinst.stop()
            row["seed_redis_s"] = seed_redis(sock, rows)
            listening, ready = start_until_ready(rinst, known["key"])
            row["redis_listening_s"], row["redis_ready_s"], row["redis_load"] = listening, ready, load1()
            time.sleep(2)
            row["rss_redis_kb"] = rss_kb(rinst.pid)
            say(f"records x{scale_}: Redis start: listening {listening:.2f} s, ready {ready:.2f} s; RSS {row['rss_redis_kb'] / 1024:.1f} MiB "
                f"(seeded in {row['seed_redis_s']:.1f} s)")
    finally:
        for i in insts:
            i.close()
        if redis:
            redis.kill()
            redis.wait()
        fast.kill()
    return row


def records_main(args) -> None:
    rows = [bench_records(s, args) for s in args.sizes]
    print("\n| organisations / keys / gateways / connections | start, embedded: listening / ready s (load) "
          "| start, Redis: listening / ready s (load) | RSS MiB (small store) | p99 ms gateways / keys / sessions / logs (load) "
          "| CPU us per call, big / small store (load) |")
    print("|---|---|---|---:|---|---|")
    for r in rows:
        p = r["pages"]
        redis = (f"{r['redis_listening_s']:.2f} / {r['redis_ready_s']:.2f} ({r['redis_load']:.1f})" if "redis_ready_s" in r else "-")
        print(f"| {r['orgs']:,} / {r['keys']:,} / {r['gateways']:,} / {r['connections']:,} "
              f"| {r['start_listening_s']:.2f} / {r['start_ready_s']:.2f} ({r['start_load']:.1f}) | {redis} "
              f"| {r['rss_big_kb'] / 1024:.0f} ({r['rss_small_kb'] / 1024:.0f}) "
              f"| {p['gateways']['p99_ms']:.2f} / {p['keys']['p99_ms']:.2f} / {p['sessions']['p99_ms']:.2f} / {p['logs']['p99_ms']:.2f} ({r['pages_load']:.1f}) "
              f"| {r['big_cpu_us']:.1f} / {r['small_cpu_us']:.1f} ({r['calls_load']:.1f}) |")
    print(json.dumps(rows))


def call_rounds(p: argparse.ArgumentParser) -> None:
    """The knobs of alternating rounds of `tools/call` (`wrk_calls`), and --keep."""
    p.add_argument("--seconds", type=int, default=5, help="seconds per wrk round (5)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of calls (3)")
    p.add_argument("--connections", type=int, default=2, help="wrk connections (2)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")


def main() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # toolgate inherits it too
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sessions", help="idle MCP sessions: memory, creation, restart, sweep")
    s.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[10000, 100000, 1000000])
    s.add_argument("--connections", type=int, default=8, help="wrk connections creating sessions (8)")
    s.add_argument("--sweep-wait", type=float, default=60.0, help="seconds to wait for the sweep (60)")
    s.add_argument("--delete-wait", type=float, default=120.0,
                   help="seconds to wait for the store records' deletion after the sweep (120)")
    s.add_argument("--probe", type=float, default=10.0,
                   help="seconds the healthz probe runs from 0.5 s before the reload that starts the sweep (10)")
    s.add_argument("--keep", action="store_true", help="keep the work directory")
    pg = sub.add_parser("pages", help="idle MCP sessions and a page of /v1/sessions only")
    pg.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[100000])
    pg.add_argument("--connections", type=int, default=8, help="wrk connections creating sessions (8)")
    pg.add_argument("--requests", type=int, default=100, help="requests timed per page (100)")
    pg.add_argument("--keep", action="store_true", help="keep the work directory")
    rs = sub.add_parser("restart", help="a start with idle MCP sessions written straight into the store")
    rs.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[1000000])
    rs.add_argument("--rounds", type=int, default=2, help="starts timed per size (2)")
    rs.add_argument("--keep", action="store_true", help="keep the work directory")
    w = sub.add_parser("wide", help="a gateway of many apps: tools/list, CPU per call, a dead app")
    w.add_argument("--apps", type=lambda v: [int(x) for x in v.split(",")], default=[10, 25, 50],
                   help="apps per gateway, one size or a comma list (10,25,50; above 50 needs limits.gateway_max_servers, set here to 1000)")
    w.add_argument("--tools", type=int, default=50, help="tools per app (50)")
    w.add_argument("--lists", type=int, default=200, help="tools/list requests timed (200)")
    w.add_argument("--page-size", type=int, default=100, help="mcp.page_size (100, the default)")
    w.add_argument("--deadline-ms", type=int, default=5000, help="mcp.list_deadline_ms (5000, the default)")
    call_rounds(w)
    st = sub.add_parser("streams", help="open GET streams: memory, a list_changed to all of them, closing")
    st.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[1000, 5000, 10000])
    st.add_argument("--connections", type=int, default=32, help="sessions and streams being opened at once (32)")
    st.add_argument("--changes", type=int, default=5, help="management changes timed per size (5)")
    st.add_argument("--keep", action="store_true", help="keep the work directory")
    ps = sub.add_parser("poststreams", help="resumable POST streams (a slow tools/call each): memory, every result delivered")
    ps.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[1000, 5000])
    ps.add_argument("--connections", type=int, default=32, help="sessions and calls being opened at once (32)")
    ps.add_argument("--hold", type=float, default=60.0, help="seconds the app takes to answer each call (60)")
    ps.add_argument("--keep", action="store_true", help="keep the work directory")
    rc = sub.add_parser("records", help="many organisations, keys, gateways, connections: start, memory, pages, CPU per call")
    rc.add_argument("--sizes", type=lambda v: [float(x) for x in v.split(",")], default=[0.1, 0.5, 1.0],
                    help="fractions of 1,000 organisations, 100,000 keys, 10,000 gateways, 20,000 connections (0.1,0.5,1)")
    rc.add_argument("--sessions", type=int, default=20, help="sessions opened in the measured organisation (20)")
    rc.add_argument("--requests", type=int, default=500, help="GETs per list page timed (500)")
    rc.add_argument("--no-redis", dest="redis", action="store_false", help="leave the Redis start out")
    call_rounds(rc)
    up = sub.add_parser("upstream", help=argparse.SUPPRESS)
    up.add_argument("--tools", type=int, required=True)
    up.add_argument("--wait", action="store_true")
    pr = sub.add_parser("probe", help=argparse.SUPPRESS)
    pr.add_argument("--addr", required=True)
    pr.add_argument("--seconds", type=float, required=True)
    pr.add_argument("--session")
    args = p.parse_args()
    if args.cmd == "sessions":
        sessions_main(args)
    elif args.cmd == "pages":
        pages_main(args)
    elif args.cmd == "restart":
        restart_main(args)
    elif args.cmd == "wide":
        wide_main(args)
    elif args.cmd == "streams":
        streams_main(args)
    elif args.cmd == "poststreams":
        poststreams_main(args)
    elif args.cmd == "records":
        records_main(args)
    elif args.cmd == "upstream":
        upstream_main(args.tools, args.wait)
    elif args.cmd == "probe":
        probe_main(args.addr, args.seconds, args.session)


if __name__ == "__main__":
    main()
