#!/usr/bin/env bash
# Analytics over a big request log (run by hand, not in CI): seeds ENTRIES log entries (default 10
# million) over DAYS days (30) into a fresh data directory through the store, as the log pipeline
# writes them (entries and rollups), then times the read endpoints against a baseline measured in
# the same run: GET /v1/gateways/{id}, a management read that touches no log.
#
#   benches/analytics.sh                       # 10 million entries, 30 days (seeding ~5-10 min)
#   ENTRIES=1000000 benches/analytics.sh       # a quicker look
#   REQUESTS=50 KEEP_WORKDIR=1 benches/analytics.sh
#
# Prints one line per endpoint: median and p95 in ms over REQUESTS calls (default 30, one
# keep-alive connection, endpoints interleaved), and the median's ratio to the baseline's.
set -euo pipefail
cd "$(dirname "$0")/.."
ENTRIES="${ENTRIES:-10000000}"
DAYS="${DAYS:-30}"
REQUESTS="${REQUESTS:-30}"
WORK="$(mktemp -d /tmp/toolgate-analytics-XXXXXX)"
ADMIN_KEY="ag_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
  [[ -n "${KEEP_WORKDIR:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "analytics.sh: $*" >&2; }

if [[ -z "${SKIP_BUILD:-}" ]]; then
  log "building"
  cargo build --release --locked --example seed_logs >&2
  cargo build --release --locked --bin toolgate >&2
fi
cp target/release/toolgate target/release/examples/seed_logs "$WORK/"

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$WORK/toolgate.yaml" <<YAML
environment: production
server:
  listen: 127.0.0.1:$PORT
  metrics_listen: 127.0.0.2:0
  public_url: http://127.0.0.1:$PORT
storage:
  backend: embedded
  path: $WORK/data
rate_limits:
  tiers:
    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000000, burst: 1000000000, concurrent: 1000 }
limits:
  bootstrap_tier: bench
observability:
  # Every seeded entry is kept (the defaults would prune entries past 7 days within a minute).
  log_retention_days: $((DAYS + 1))
  max_log_rows: $((ENTRIES * 2))
apps:
  - id: time
    name: Time
    description: the built-in time app (the seeded entries name it and a second app, search)
    category: utilities
    builtin: time
YAML

start() {
  (TOOLGATE_ADMIN_KEY="$ADMIN_KEY" RUST_LOG=warn exec "$WORK/toolgate" --config "$WORK/toolgate.yaml" >"$WORK/toolgate.log" 2>&1) &
  PID=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return; sleep 0.1; done
  log "toolgate did not start:"; tail -20 "$WORK/toolgate.log" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }

log "creating 5 gateways"
start
GWS=()
for i in 1 2 3 4 5; do
  GWS+=("$(curl -sS -X POST "http://127.0.0.1:$PORT/v1/gateways" -H "Authorization: Bearer $ADMIN_KEY" \
    -H 'Content-Type: application/json' -d "{\"name\":\"analytics-$i\",\"servers\":[\"time\"]}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["id"])')")
done
ORG="$(curl -sS "http://127.0.0.1:$PORT/v1/user" -H "Authorization: Bearer $ADMIN_KEY" |
  python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; print(d.get("organization_id") or d["organization"]["id"])')"
stop

log "seeding $ENTRIES entries over $DAYS days (org $ORG, gateways ${GWS[*]})"
t0=$SECONDS
"$WORK/seed_logs" "$WORK/data" "$ORG" "$(IFS=,; echo "${GWS[*]}")" "$ENTRIES" "$DAYS"
SEED_SECS=$((SECONDS - t0))
DB_MB=$(du -sm "$WORK/data" | cut -f1)
log "seeded in ${SEED_SECS}s; data directory ${DB_MB} MB"

start
GW="${GWS[0]}"
python3 - "$PORT" "$ADMIN_KEY" "$GW" "$REQUESTS" "$ENTRIES" "$DAYS" "$SEED_SECS" "$DB_MB" <<'PY'
import http.client, json, statistics, sys, time
port, key, gw, n, entries, days, seed_secs, db_mb = sys.argv[1:]
n = int(n)
targets = [
    ("baseline GET /v1/gateways/{id}", f"/v1/gateways/{gw}"),
    ("/logs/analytics?period=30d", "/v1/logs/analytics?period=30d"),
    ("/logs/analytics?period=30d&gateway_id", f"/v1/logs/analytics?period=30d&gateway_id={gw}"),
    ("/metrics/gateway/{id}?period=7d&resolution=1h", f"/v1/metrics/gateway/{gw}?period=7d&resolution=1h"),
    ("/metrics/gateway/{id}?period=1h&resolution=1m", f"/v1/metrics/gateway/{gw}?period=1h&resolution=1m"),
    ("/metrics/gateway/{id}?period=24h&resolution=5m", f"/v1/metrics/gateway/{gw}?period=24h&resolution=5m"),
    ("/logs (first page)", "/v1/logs?limit=50"),
    ("/logs?gateway_id (first page)", f"/v1/logs?limit=50&gateway_id={gw}"),
    ("/logs?app_id=search (first page)", "/v1/logs?limit=50&app_id=search"),
    ("/logs?status=error (first page)", "/v1/logs?limit=50&status=error"),
    ("/logs?gateway_id&status=error (first page)", f"/v1/logs?limit=50&gateway_id={gw}&status=error"),
]
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
def get(path):
    t = time.perf_counter()
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    r = conn.getresponse()
    body = r.read()
    dt = (time.perf_counter() - t) * 1000
    assert r.status == 200, (path, r.status, body[:300])
    return dt, json.loads(body)["data"]
# Sanity: the seeded entries are there and the analytics count them.
_, a = get("/v1/logs/analytics?period=30d")
_, l = get("/v1/logs?limit=1")
print(f"entries seeded: {entries} over {days} days in {seed_secs} s, data directory {db_mb} MB")
print(f"analytics 30d total_requests: {a['summary']['total_requests']}; /logs total (capped count): {l['pagination']['total']}")
for _, p in targets:  # warm-up
    get(p)
times = {name: [] for name, _ in targets}
for _ in range(n):
    for name, p in targets:
        times[name].append(get(p)[0])
base = statistics.median(times[targets[0][0]])
print(f"{'endpoint':50} {'median ms':>10} {'p95 ms':>8} {'x baseline':>11}")
for name, _ in targets:
    t = sorted(times[name])
    med = statistics.median(t)
    p95 = t[min(len(t) - 1, int(len(t) * 0.95))]
    print(f"{name:50} {med:10.2f} {p95:8.2f} {med / base:11.1f}")
PY
