#!/usr/bin/env python3
"""What a client pays before its first call (issue 59, item 2): toolgate's own CPU for the
first `tools/list` of a wide gateway, and a cold list through toolgate against the apps' own.
Run by hand, not in CI; python3's standard library only:

    benches/first_contact.py --apps 100 --tools 50 --repeat 5

The binary is $TOOLGATE_BIN (default target/release/toolgate), on its embedded store in a
temporary directory. The apps are `benches/scale.py upstream` (one Python process, each path an
app of its own, JSON answers). Three figures, each the median of `--repeat` fresh gateways of the
same apps, in milliseconds of toolgate's CPU (utime + stime of its process, read from
/proc/<pid>/stat around the list; the clock tick is 10 ms, so each gateway is listed `--lists`
times through fresh gateways and the sum divided):

- `connect`: the first list of the first gateway: app sessions opened and every list asked;
- `build off`: a fresh gateway (`tool_policy: off`) of the same apps, their lists kept by
  toolgate's app clients: the catalogue's assembly alone (names, hidden-text checks, targets)
  and the pages served (each gateway is deleted after its list, its pins with it, so that each
  is listed beside the same records);
- `build pin`: the same under `tool_policy: pin`: each tool's canonical hash and pin verdict,
  and the pins written to the store.

Then the cold `tools/list` through a gateway of three remote apps (a fresh instance, so that the
app sessions are opened on the way) against the three apps' own cold list (initialize,
initialized, tools/list, one app after the other), wall time, median of `--repeat`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import (  # noqa: E402
    PROTOCOL,
    Instance,
    cpu_ticks,
    http_app,
    list_all,
    open_session,
    say,
    wide_config,
)

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def start_upstream(tools: int) -> tuple[subprocess.Popen, int]:
    scale = Path(__file__).resolve().parent / "scale.py"
    up = subprocess.Popen([sys.executable, str(scale), "upstream", "--tools", str(tools)], stdout=subprocess.PIPE, text=True)
    return up, int(up.stdout.readline().strip())


def listed_cpu_ms(inst: Instance, gw: dict, want: int) -> float:
    """toolgate's CPU (ms) for a session and every page of `tools/list` of `gw`."""
    host, port = inst.addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        t0 = cpu_ticks(inst.pid)
        sid = open_session(inst, gw)
        n, _ = list_all(conn, gw, sid)
        ticks = cpu_ticks(inst.pid) - t0
    finally:
        conn.close()
    assert n == want, f"listed {n} of {want} tools"
    return ticks * TICK_MS


def build_cpu(inst: Instance, names: list[str], policy: str, want: int, lists: int) -> float:
    """The mean CPU (ms) of the first list of `lists` fresh gateways of `names` under `policy`."""
    total = 0.0
    for _ in range(lists):
        gw = inst.gateway(names, configuration={"rate_limit": 1000000000, "tool_policy": policy})
        total += listed_cpu_ms(inst, gw, want)
        # Deleted (its pins with it), so that each gateway is listed beside the same records.
        status, _, body = inst.api("DELETE", f"/v1/gateways/{gw['id']}")
        assert status in (200, 204), (status, body)
    return total / lists


def wide_row(apps: int, tools: int, args) -> dict:
    up, port = start_upstream(tools)
    names = [f"a{i}" for i in range(apps)]
    cfg = "".join(http_app(n, f"http://127.0.0.1:{port}/mcp/{n}") for n in names)
    inst = Instance(wide_config(cfg, 60000, 100)).start()
    want = apps * tools
    try:
        first = inst.gateway(names)
        row = {"apps": apps, "tools": tools, "connect": listed_cpu_ms(inst, first, want)}
        offs, pins = [], []
        for _ in range(args.repeat):
            offs.append(build_cpu(inst, names, "off", want, args.lists))
            pins.append(build_cpu(inst, names, "pin", want, args.lists))
        row["build_off"], row["build_pin"] = statistics.median(offs), statistics.median(pins)
        say(f"{apps} x {tools}: connect {row['connect']:.0f} ms CPU; build off {row['build_off']:.1f} ms; "
            f"build pin {row['build_pin']:.1f} ms (medians of {args.repeat}, each the mean of {args.lists} gateways)")
        return row
    finally:
        inst.close()
        up.kill()


def direct_cold_list(port: int, name: str) -> int:
    """An app's own cold list: initialize, initialized, tools/list on one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path = f"/mcp/{name}"
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
        conn.request("POST", path, json.dumps(init), h)
        r = conn.getresponse()
        r.read()
        sid = r.getheader("Mcp-Session-Id")
        h2 = dict(h, **({"Mcp-Session-Id": sid} if sid else {}))
        conn.request("POST", path, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), h2)
        conn.getresponse().read()
        conn.request("POST", path, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), h2)
        return len(json.loads(conn.getresponse().read())["result"]["tools"])
    finally:
        conn.close()


def three_apps(tools: int, repeat: int) -> dict:
    up, port = start_upstream(tools)
    names = ["r0", "r1", "r2"]
    cfg = "".join(http_app(n, f"http://127.0.0.1:{port}/mcp/{n}") for n in names)
    through, own = [], []
    try:
        for _ in range(repeat):
            t = time.perf_counter()
            n = sum(direct_cold_list(port, n) for n in names)
            own.append(time.perf_counter() - t)
            assert n == 3 * tools, n
            inst = Instance(wide_config(cfg, 60000, 100)).start()
            try:
                gw = inst.gateway(names)
                sid = open_session(inst, gw)
                host, p = inst.addr.rsplit(":", 1)
                conn = http.client.HTTPConnection(host, int(p), timeout=60)
                t = time.perf_counter()
                n, _ = list_all(conn, gw, sid)
                through.append(time.perf_counter() - t)
                conn.close()
                assert n == 3 * tools, n
            finally:
                inst.close()
    finally:
        up.kill()
    row = {"through_ms": statistics.median(through) * 1e3, "own_sum_ms": statistics.median(own) * 1e3}
    say(f"three remote apps of {tools} tools: cold tools/list through toolgate {row['through_ms']:.1f} ms; "
        f"the apps' own cold lists one after the other {row['own_sum_ms']:.1f} ms")
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apps", type=int, default=100, help="apps of the wide gateway (100)")
    p.add_argument("--tools", type=int, default=50, help="tools per app (50)")
    p.add_argument("--repeat", type=int, default=5, help="medians of this many runs (5)")
    p.add_argument("--lists", type=int, default=4, help="fresh gateways listed per run (4)")
    args = p.parse_args()
    wide = wide_row(args.apps, args.tools, args)
    three = three_apps(args.tools, args.repeat)
    print("\n| apps x tools | connect ms CPU | build, tool_policy off, ms CPU | build, tool_policy pin, ms CPU "
          "| 3 remote apps: cold list through toolgate / the apps' own, ms |")
    print("|---|---:|---:|---:|---|")
    print(f"| {wide['apps']} x {wide['tools']} | {wide['connect']:.0f} | {wide['build_off']:.1f} | {wide['build_pin']:.1f} "
          f"| {three['through_ms']:.1f} / {three['own_sum_ms']:.1f} |")
    print(json.dumps({"wide": wide, "three": three}))


if __name__ == "__main__":
    main()
