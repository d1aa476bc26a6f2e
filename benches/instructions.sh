#!/usr/bin/env bash
# Instructions per `tools/call` of toolgate builds, counted by valgrind's callgrind: a measure of
# the call path that the machine's load does not move, for changes too small for the load
# benchmark's drift (benches/load.sh). Run by hand, not in CI:
#
#   benches/instructions.sh A_BIN [B_BIN ...]    # each build in turn, then the ratios to A
#
# Each build runs under callgrind (2 threads, the load benchmark's production settings, the
# embedded store) in front of benches/load/fast_upstream.rs; wrk drives `tools/call` of `echo`
# on one MCP session (benches/tools_call.lua) for a warm-up with the counting off, then SECS
# seconds with it on. Printed: calls, instructions per call (every thread of the process, so
# the request log's flushes and compression count, amortised), and the ratio to the first build.
#
# Knobs: SECS (30), CONNS (wrk connections, 2), ACCEPT (the client's Accept header; the
# default `application/json, text/event-stream` lets a slow call turn into a stream; set
# `application/json` to see what that costs), KEEP=DIR keeps the callgrind files there
# (`callgrind_annotate DIR/NAME.out.1` shows where the instructions go).
#
# Under valgrind, SHA-256 runs without the CPU's SHA extensions and a `rep movsb` copy counts
# one instruction a byte (glibc copies 8 KB and more that way), so compare builds with each
# other, not with wall-clock profiles.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECS="${SECS:-30}"; CONNS="${CONNS:-2}"
ACCEPT="${ACCEPT:-application/json, text/event-stream}"
for tool in valgrind callgrind_control callgrind_annotate wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: needs $tool (apt install valgrind wrk curl)" >&2; exit 1; }
done
(( $# >= 1 )) || { echo "usage: benches/instructions.sh A_BIN [B_BIN ...]" >&2; exit 1; }
(cd "$ROOT" && cargo build --release --example fast_upstream -q)
WORK="$(mktemp -d /tmp/toolgate-instructions.XXXXXX)"
OUT="${KEEP:-$WORK}"; mkdir -p "$OUT"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
sed "s|application/json, text/event-stream|$ACCEPT|" "$ROOT/benches/tools_call.lua" >"$WORK/call.lua"

"$ROOT/target/release/examples/fast_upstream" 0 --threads 2 >"$WORK/fast.port" 2>/dev/null &
for _ in $(seq 100); do [[ -s "$WORK/fast.port" ]] && break; sleep 0.1; done
UP_PORT="$(head -1 "$WORK/fast.port")"

# count NAME BIN: prints "CALLS INSTRUCTIONS" of SECS seconds of calls.
count() {
  local name="$1" bin="$2" port key admin url sid vpid line calls total
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  admin="ag_$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')"
  cat >"$WORK/$name.yaml" <<EOF
environment: production
server: { listen: "127.0.0.1:$port", metrics_listen: "127.0.0.2:0", public_url: "http://127.0.0.1:8080", threads: 2 }
storage: { backend: embedded, path: "$WORK/data-$name" }
rate_limits:
  tiers:
    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000000, burst: 1000000000, concurrent: 1000 }
limits: { bootstrap_tier: bench }
apps:
  - { id: fast, name: Fast, description: fast, category: testing, url: "http://127.0.0.1:$UP_PORT/mcp" }
EOF
  TOOLGATE_ADMIN_KEY="$admin" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$name.out" \
    "$bin" --config "$WORK/$name.yaml" >"$WORK/$name.log" 2>&1 &
  vpid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
  read -r _ key < <(curl -sS -X POST "http://127.0.0.1:$port/v1/gateways" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d '{"name":"count","servers":["fast"],"configuration":{"rate_limit":1000000000}}' |
    python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; print(d["id"], d["api_key"])' | tee "$WORK/gw")
  url="http://127.0.0.1:$port/gateway/$(cut -d' ' -f1 "$WORK/gw")/mcp"
  sid="$(curl -sS -D - -o /dev/null -X POST "$url" -H "X-API-Key: $key" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"count","version":"1"}}}' |
    tr -d '\r' | awk -F': *' 'tolower($1) == "mcp-session-id" { print $2 }')"
  curl -sS -o /dev/null -X POST "$url" -H "X-API-Key: $key" -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-06-18' \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  local env=(MCP_STATELESS=0 MCP_INITIALIZE=0 "MCP_SESSION=$sid" "MCP_API_KEY=$key" MCP_VERSION=2025-06-18)
  env "${env[@]}" wrk -t1 -c"$CONNS" -d3s --timeout 5s -s "$WORK/call.lua" "$url" >/dev/null
  callgrind_control -i on "$vpid" >/dev/null 2>&1
  line="$(env "${env[@]}" wrk -t1 -c"$CONNS" -d"${SECS}s" --timeout 5s -s "$WORK/call.lua" "$url" | grep '^RESULT')"
  callgrind_control -i off "$vpid" >/dev/null 2>&1
  callgrind_control -d "$vpid" >/dev/null 2>&1
  kill "$vpid"; wait "$vpid" 2>/dev/null || true
  [[ "$line" == *"non2xx=0 "* ]] || { echo "instructions.sh: $name answered errors: $line" >&2; exit 1; }
  calls="${line#*requests=}"; calls="${calls%% *}"
  total="$(callgrind_annotate "$OUT/$name.out.1" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')"
  echo "$calls $total"
}

i=0; first=""
for bin in "$@"; do
  read -r calls total < <(count "build$i" "$bin")
  per=$(( total / calls ))
  [[ -z "$first" ]] && first="$per"
  printf '%-50s %8d calls  %9d instructions a call  %.3f of the first\n' "$bin" "$calls" "$per" \
    "$(python3 -c "print($per / $first)")"
  i=$((i + 1))
done
