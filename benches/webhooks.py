#!/usr/bin/env python3
"""Webhook delivery throughput and latency (issue 16). Run by hand, not in CI:

    tests/py/.venv/bin/python benches/webhooks.py [EVENTS] [WEBHOOKS]   # defaults 300 and 1

Starts the release binary (target/release/toolgate, or $TOOLGATE_BIN) on its embedded store, a
receiver in this process (http.server, answering 200 at once), and WEBHOOKS webhooks taking every
event; then creates EVENTS gateways one after the other, each a `gateway.created` event. Reports:
events recorded per second (the creations' rate), deliveries per second (first commit to last
receipt), and the latency from the event's commit (its `timestamp`, written when the delivery is
recorded) to the receiver, p50/p95/p99/max.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "py"))

import httpx2  # noqa: E402

from mcp_helpers import TIME_APP, config  # noqa: E402
from toolgate_harness import ToolgateServer  # noqa: E402

# The tests' usual config (the built-in time app), with limits and quotas out of the way.
CONFIG = config(TIME_APP) + """\
rate_limits:
  tiers:
    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000000, burst: 1000000000, concurrent: 1000 }
  webhook: { requests_per_hour: unlimited, requests_per_minute: 1000000, burst: 100000 }
limits:
  bootstrap_tier: bench
  quotas:
    bench: { gateways: 1000000, webhooks: 100 }
webhooks:
  allowed_hosts: ["127.0.0.1"]
"""


def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    hooks = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    received: list[tuple[float, str]] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            now = time.time()
            with lock:
                received.append((now, json.loads(body)["timestamp"]))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    class Receiver(http.server.ThreadingHTTPServer):
        # The default backlog of 5 drops SYNs under 32 concurrent deliveries (a 1 s retransmit).
        request_queue_size = 256

    receiver = Receiver(("127.0.0.1", 0), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    srv = ToolgateServer(full_config=CONFIG).start()
    try:
        auth = {"Authorization": f"Bearer {srv.admin_key}"}
        with httpx2.Client(base_url=srv.base_url, headers=auth, timeout=30) as c:
            for i in range(hooks):
                url = f"http://127.0.0.1:{receiver.server_address[1]}/hook{i}"
                assert c.post("/v1/webhooks", json={"url": url, "events": ["*"]}).status_code == 201
            started = time.time()
            for i in range(events):
                r = c.post("/v1/gateways", json={"name": f"bench-{i}", "servers": ["time"]})
                assert r.status_code == 201, r.text
            recorded = time.time() - started
            deadline = time.time() + 120
            while len(received) < events * hooks and time.time() < deadline:
                time.sleep(0.05)
        with lock:
            got = list(received)
        assert len(got) == events * hooks, f"{len(got)} of {events * hooks} delivered"
        latencies = sorted((t - dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()) * 1000
                           for t, ts in got)
        span = max(t for t, _ in got) - started
        q = statistics.quantiles(latencies, n=100)
        print(f"events {events}, webhooks {hooks}, deliveries {len(got)}")
        print(f"events recorded: {events / recorded:.0f}/s (one creation after the other)")
        print(f"deliveries: {len(got) / span:.0f}/s (first commit to last receipt)")
        print(f"commit -> receiver ms: p50 {q[49]:.1f}, p95 {q[94]:.1f}, p99 {q[98]:.1f}, max {latencies[-1]:.1f}")
    finally:
        srv.stop()
        srv.tmp.cleanup()
        receiver.shutdown()


if __name__ == "__main__":
    main()
