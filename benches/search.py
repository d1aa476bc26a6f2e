#!/usr/bin/env python3
"""`discovery: search` on a wide gateway (issue 61 part D): what a model reads of `tools/list`
with and without search, and what a search costs. Run by hand, not in CI; python3's standard
library only, with the upstream and the instance of `benches/scale.py` (its `wide` sizes):

    benches/search.py --apps 100 --tools 50 --searches 500

Method: one instance on its embedded store, `--apps` apps on one Python upstream (`scale.py
upstream`, `--tools` tools each, named `<app>_t<i>`, described `Tool <i> of <app>`), and two
gateways of all of them: one listing all (the default), one in search mode. On a session of each:
the bytes of every page of `tools/list` (the response bodies a client reads); in search mode the
bytes of the list before a search, of a search of 10, and of the list after it. Then, on a warm
catalogue (its first search, which builds the index, timed apart), `--searches` searches of
different queries one after the other on a kept-alive connection, against as many `ping`s in the
same run as the baseline: p50 and p99 of each, with the 1-minute load average beside them (the
machine is shared). The queries name an app and a tool (`tool 17 of a42`), so every one of them
also holds the words every tool has (`tool`, `of`): the postings of those words are the whole
catalogue, the worst case of a walk.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale  # noqa: E402


def post(conn: http.client.HTTPConnection, gw: dict, sid: str, body: dict) -> tuple[bytes, float]:
    """One request on the kept-alive `conn`: (the response body, seconds)."""
    t = time.perf_counter()
    conn.request("POST", f"/gateway/{gw['id']}/mcp", json.dumps(body),
                 {"Content-Type": "application/json", **scale.mcp_headers(gw, sid)})
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200, (r.status, data[:300])
    return data, time.perf_counter() - t


def message(data: bytes) -> dict:
    """The response in a body: JSON, or the last event of an event stream (a search that changed
    the session's list is answered with `notifications/tools/list_changed` before its result)."""
    if data.lstrip().startswith(b"{"):
        return json.loads(data)
    return json.loads([line for line in data.splitlines() if line.startswith(b"data:")][-1][5:])


def list_bytes(conn, gw: dict, sid: str) -> tuple[int, int]:
    """Every page of `tools/list`: (tools, bytes of the response bodies)."""
    cursor, n, size = None, 0, 0
    while True:
        params = {"cursor": cursor} if cursor else {}
        data, _ = post(conn, gw, sid, {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})
        size += len(data)
        result = json.loads(data)["result"]
        n += len(result["tools"])
        cursor = result.get("nextCursor")
        if not cursor:
            return n, size


def search(conn, gw: dict, sid: str, query: str, limit: int = 10) -> tuple[bytes, float]:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "search_tools", "arguments": {"query": query, "limit": limit}}}
    return post(conn, gw, sid, body)


def q(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", type=int, default=100)
    ap.add_argument("--tools", type=int, default=50)
    ap.add_argument("--searches", type=int, default=500)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    up = subprocess.Popen([sys.executable, scale.__file__, "upstream", "--tools", str(args.tools)],
                          stdout=subprocess.PIPE, text=True)
    port = int(up.stdout.readline().strip())
    names = [f"a{i}" for i in range(args.apps)]
    cfg = "".join(scale.http_app(n, f"http://127.0.0.1:{port}/mcp/{n}") for n in names)
    inst = scale.Instance(scale.wide_config(cfg, 60000, 100), args.keep).start()
    try:
        every = inst.gateway(names)
        found = inst.gateway(names, configuration={"rate_limit": 1000000000, "discovery": "search"})
        sids = {"every": scale.open_session(inst, every), "found": scale.open_session(inst, found)}
        host, p = inst.addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(p), timeout=120)
        n_all, bytes_all = list_bytes(conn, every, sids["every"])
        assert n_all == args.apps * args.tools, n_all
        n_before, bytes_before = list_bytes(conn, found, sids["found"])
        t = time.perf_counter()
        result, _ = search(conn, found, sids["found"], "tool 17 of a42")
        cold = time.perf_counter() - t
        hits = message(result)["result"]["structuredContent"]["tools"]
        assert hits and hits[0]["name"] == "a42__a42_t17", hits[:2]
        n_after, bytes_after = list_bytes(conn, found, sids["found"])
        scale.say(f"{args.apps}x{args.tools}: tools/list {n_all} tools {bytes_all:,} bytes; search mode: "
                  f"{n_before} tool {bytes_before:,} bytes, a search of 10 {len(result):,} bytes, then "
                  f"{n_after} tools {bytes_after:,} bytes; first search (builds the index) {cold * 1e3:.1f} ms")
        rng = random.Random(7)
        queries = [f"tool {rng.randrange(args.tools)} of a{rng.randrange(args.apps)}" for _ in range(args.searches)]
        ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
        searches, pings = [], []
        for query in queries:
            searches.append(search(conn, found, sids["found"], query)[1])
            pings.append(post(conn, found, sids["found"], ping)[1])
        load = scale.load1()
        scale.say(f"{args.searches} searches: p50 {q(searches, 0.5):.2f} ms p99 {q(searches, 0.99):.2f} ms; "
                  f"pings p50 {q(pings, 0.5):.2f} ms p99 {q(pings, 0.99):.2f} ms; load {load:.2f}")
        print("\n| apps x tools | tools/list bytes: all / search mode / after a search of 10 | a search of 10 bytes "
              "| first search ms | search p50 / p99 ms | ping p50 / p99 ms | load |")
        print("|---|---|---:|---:|---|---|---:|")
        print(f"| {args.apps} x {args.tools} | {bytes_all:,} / {bytes_before:,} / {bytes_after:,} | {len(result):,} "
              f"| {cold * 1e3:.1f} | {q(searches, 0.5):.2f} / {q(searches, 0.99):.2f} "
              f"| {q(pings, 0.5):.2f} / {q(pings, 0.99):.2f} | {load:.2f} |")
        conn.close()
    finally:
        inst.close()
        up.kill()


if __name__ == "__main__":
    main()
