#!/usr/bin/env bash
# Load benchmark of toolgate's MCP endpoint (issue 3, "Load benchmark"). Run by hand, not in CI:
#
#   benches/load.sh                      # build, then 3 alternating rounds of 10 s per target
#   DURATION=5 ROUNDS=1 benches/load.sh  # quicker look
#
# Targets, all on 127.0.0.1, all driven with the same `wrk` script (benches/tools_call.lua, MCP
# `tools/call` of `echo` on an open session):
#   direct     wrk -> fast_upstream (benches/load/fast_upstream.rs: a tiny MCP server, plain JSON)
#   plain      wrk -> plain_proxy (benches/load/plain_proxy.rs: Pingora ProxyHttp, no MCP, no
#              filters, 2 threads) -> fast_upstream
#   toolgate   wrk -> toolgate (release binary, 2 threads, production settings: filter chain, MCP
#              session checks, request log) -> fast_upstream
#   toolgate-stateless  the same toolgate and gateway, called as MCP 2026-07-28 (no session; the
#              envelope in `_meta`, the routing headers), translated for the 2025-era upstream
#   toolgate-tls  another toolgate terminating TLS (self-signed certificate) on 127.0.0.3, its
#              plain listener beside it; then a "handshake" phase: GET /healthz with
#              `Connection: close` on its plain and TLS listeners (TLS=0 leaves both out)
#   toolgate-redis  a second toolgate, the same settings but `storage.backend: redis` (a
#              redis-server on a Unix socket in the work directory; rate limits shared the
#              leased way), when redis-server is installed (REDIS=0 leaves it out); with
#              TOOLGATE_BIN_B also `toolgate-redis-b`, the candidate on the same redis-server
#              under a key prefix of its own, in the same alternating rounds
# then, with @modelcontextprotocol/server-everything (Streamable HTTP, Node 22) as the app:
#   direct       wrk -> server-everything, at protocol 2025-11-25 (what toolgate negotiates upstream)
#   direct-0618  wrk -> server-everything, at 2025-06-18 (what the benchmark's client speaks)
#   toolgate     wrk (2025-06-18) -> toolgate -> server-everything (2025-11-25)
# and between the two, `initialize` rows (SKIP_INITIALIZE=1 leaves them out): the same wrk script
# sending `initialize` without a session (MCP_INITIALIZE=1), so each answer is a new session,
# written durably before it is answered, to toolgate, toolgate-b and toolgate-redis; summed up
# in a table of their own with mean and p99 latency, CPU per request, and the ratio to the same
# instance's `tools/call` rate. They run after the call rounds: each round leaves some 100,000
# sessions in memory and in the store (the bench's configuration lifts the session caps).
#
# Prints, per round and as medians over rounds: requests/s, p50, p99, the ratio to direct, and the
# CPU time per call of the proxy under test and of the upstream (utime+stime deltas from
# /proc/PID/stat divided by the requests of the run).
#
# Knobs (environment): DURATION (s, 10), ROUNDS (3), CONNS (wrk connections, 2), WRK_THREADS (1),
# WARMUP (s, 2), EV_PROTOCOL (protocol_version offered to server-everything; default the newest),
# SKIP_BUILD=1, SKIP_EVERYTHING=1, SKIP_FAST=1 (server-everything only), SKIP_INITIALIZE=1, KEEP_WORKDIR=1, TOOLGATE_BIN=PATH (bench another build of
# toolgate, e.g. a candidate fix built in another tree), TOOLGATE_BIN_B=PATH (A/B in one run: a
# second toolgate, the candidate, started beside the first and driven in the same alternating
# rounds against the fast upstream, reported as `toolgate-b`; the machine's drift between runs is
# larger than most changes, so compare builds this way), UPSTREAM_CPUS=LIST (taskset CPU list,
# e.g. 1: the upstreams run on those CPUs and wrk and the proxies on the others, as if the app
# had a machine of its own; every target of the run is pinned the same way),
# GATEWAY_B_EXTRA=JSON (more members of toolgate-b's gateway creation body, e.g.
# '"rules": [{"name": "r", "effect": "deny", "when": "tool == \"x\""}]': the cost of a feature
# measured against the same build or the commit before), GATEWAY_A_EXTRA=JSON (the same for
# toolgate's own gateway: with the same value as GATEWAY_B_EXTRA, two builds compared on the
# same feature, e.g. an external guard on both), GATEWAY_B_CONFIG=JSON (more members of
# its `configuration`, e.g. '"content_policy": "off"'), EXTRA_YAML=TEXT (top-level sections added to both
# toolgates' configuration, e.g. 'webhooks: {allowed_hosts: ["127.0.0.1"]}' for an external guard
# on the loopback: benches/load/allow_guard.py), TOOL_LIMIT=1 (toolgate-b is the same build
# with one tool limit on its gateway, `*` per caller, never reached: the per-tool limit check's
# cost, A/B in one run), USER_SCOPED=1 (the fast app takes an API key, connected with one;
# toolgate-b is the same build with the app `connection_scope: user`, the organisation's
# connection for its lists and the caller's own for the calls; both driven with the admin's own
# key, a user's, instead of the gateway's: what calling with one's own connection costs, A/B in
# one run, against the same app `organization`-scoped; leaves out the Redis and TLS targets).
# Profiling (each perturbs the round it watches, which is still reported):
#   PERF=FILE        `perf record` with call graphs of one round into FILE: the first round of
#                    (PERF_FREQ samples/s, 499; PERF_CALLGRAPH=none samples without call graphs,
#                    which perturbs the round far less than the default dwarf unwinding)
#                    PERF_PHASE (fast | everything; default fast) and PERF_TARGET (toolgate |
#                    plain | direct; default toolgate). PERF_EVENT=EVENT records that event
#                    instead of CPU samples, every PERF_PERIOD-th occurrence (1), e.g. a uprobe
#                    on the allocator (`perf probe -x BIN -a 'grp:malloc=mi_malloc_aligned'`)
#                    to see who allocates per call.
#   STRACE=PREFIX    `strace -f` of the proxies (plain and toolgate) during the first round of
#                    STRACE_PHASE (fast | everything; default fast) into PREFIX.plain and
#                    PREFIX.toolgate; STRACE_ARGS (default `-c`, counts: divide by the round's
#                    requests for calls per request; e.g. "-s 80 -tt" for a full trace, or
#                    "-e trace=sched_yield -k" for stacks).
#   PERF_STAT=EVENTS `perf stat -e EVENTS` (a comma list, e.g.
#                    syscalls:sys_enter_sendto,syscalls:sys_enter_futex,context-switches, or
#                    probe_libc:malloc after `perf probe -x <libc> malloc`) on the proxy of every
#                    target's first round (the upstream for `direct`, or for every target with
#                    PERF_STAT_UPSTREAM=1), printed per call.
#   PERF_SCHED=FILE  `perf sched record -a` of the first round of PERF_PHASE/PERF_TARGET into FILE;
#                    `perf sched latency -i FILE` and `perf sched timehist -i FILE` show who
#                    waited for a CPU, how long, and what ran instead.
# Needs: cargo, wrk, ss (iproute2), curl, python3 (summary), tests/node (npm ci there) for
# server-everything.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${DURATION:-10}"
ROUNDS="${ROUNDS:-3}"
CONNS="${CONNS:-2}"
WRK_THREADS="${WRK_THREADS:-1}"
WARMUP="${WARMUP:-2}"
# Pingora's runtime flavour, the same for the plain hop and toolgate (server.work_stealing).
WORK_STEALING="${WORK_STEALING:-true}"
LUA="$ROOT/benches/tools_call.lua"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET_DIR/release"
NODE="$ROOT/tests/node/node_modules/.bin/node"
EVERYTHING="$ROOT/tests/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
CLK_TCK="$(getconf CLK_TCK)"

for tool in wrk ss curl python3; do
  command -v "$tool" >/dev/null || { echo "load.sh: \`$tool\` is required" >&2; exit 1; }
done

WORK="$(mktemp -d -t toolgate-load.XXXXXX)"
PIDS=()
# UPSTREAM_CPUS: the upstreams on those CPUs, wrk and the proxies on the others (`taskset`
# prefixes; empty without the knob).
PIN_UP=()
PIN_REST=()
if [[ -n "${UPSTREAM_CPUS:-}" ]]; then
  REST_CPUS="$(python3 -c '
import os, sys
def cpus(spec):
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
rest = sorted(os.sched_getaffinity(0) - cpus(sys.argv[1]))
print(",".join(map(str, rest)))' "$UPSTREAM_CPUS")"
  [[ -n "$REST_CPUS" ]] || { echo "load.sh: UPSTREAM_CPUS=$UPSTREAM_CPUS leaves no CPU for wrk and the proxies" >&2; exit 1; }
  PIN_UP=(taskset -c "$UPSTREAM_CPUS")
  PIN_REST=(taskset -c "$REST_CPUS")
fi
cleanup() {
  local pid
  # SIGINT: Pingora's fast shutdown (SIGTERM would wait out its grace period).
  for pid in "${PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [[ -n "${KEEP_WORKDIR:-}" ]]; then echo "work dir kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "== $*" >&2; }

# The first TCP port process $1 listens on at address $2 (default 127.0.0.1), waiting for it.
port_of() {
  local pid="$1" addr="${2-127.0.0.1}" port=""
  for _ in $(seq 300); do
    port="$(ss -ltnpH 2>/dev/null | awk -v p="pid=$pid," -v a="$addr:" \
      'index($0, p) && (a == ":" || index($4, a) == 1) { sub(/.*:/, "", $4); print $4; exit }')"
    [[ -n "$port" ]] && { echo "$port"; return 0; }
    kill -0 "$pid" 2>/dev/null || { echo "load.sh: process $pid exited before listening" >&2; return 1; }
    sleep 0.1
  done
  echo "load.sh: process $pid did not listen on $addr within 30 s" >&2
  return 1
}

# utime+stime of process $1 (all threads), in clock ticks.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

# Context switches (voluntary + involuntary) of every thread of process $1 so far. Each is a
# sleep or a preemption; on this VM a wake-up costs more than most of a call's user-space work.
ctx_switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'; }

# mcp_init URL [API_KEY [VERSION]]: initialize + notifications/initialized; prints the session id.
mcp_init() {
  local url="$1" key="${2:-}" version="${3:-2025-06-18}" hdrs="$WORK/init.headers" sid
  local -a auth=()
  [[ -n "$key" ]] && auth=(-H "X-API-Key: $key")
  curl -sSk -o "$WORK/init.body" -D "$hdrs" "${auth[@]}" -X POST "$url" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"'"$version"'","capabilities":{},"clientInfo":{"name":"toolgate-load","version":"1"}}}'
  sid="$(tr -d '\r' <"$hdrs" | awk -F': *' 'tolower($1) == "mcp-session-id" { print $2; exit }')"
  [[ -n "$sid" ]] || { echo "load.sh: initialize at $url gave no Mcp-Session-Id:" >&2; cat "$hdrs" "$WORK/init.body" >&2; return 1; }
  curl -sSk -o /dev/null "${auth[@]}" -X POST "$url" -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $version" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  echo "$sid"
}

# check_call URL SID [API_KEY]: one tools/call that must come back with the echoed text.
check_call() {
  local url="$1" sid="$2" key="${3:-}" out
  local -a auth=()
  [[ -n "$key" ]] && auth=(-H "X-API-Key: $key")
  out="$(curl -sSk "${auth[@]}" -X POST "$url" -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-06-18' \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":"check","method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}')"
  [[ "$out" == *'Echo: hello'* ]] || { echo "load.sh: tools/call at $url did not echo: $out" >&2; return 1; }
}

RESULTS="$WORK/results.tsv"
: >"$RESULTS"

# run PHASE TARGET ROUND URL SID KEY PROXY_PID UPSTREAM_PID SECONDS [PROTOCOL_VERSION]
run() {
  local phase="$1" target="$2" round="$3" url="$4" sid="$5" key="$6" ppid="$7" upid="$8" secs="$9"
  local version="${10:-2025-06-18}"
  local p0 u0 p1 u1 c0 c1 line
  local watchers=()  # profilers of this run, waited for before its results are read
  if [[ -n "${PERF:-}" && "$phase/$target/$round" == "${PERF_PHASE:-fast}/${PERF_TARGET:-toolgate}/1" ]]; then
    local graph=(--call-graph "${PERF_CALLGRAPH:-dwarf,16384}")
    [[ "${PERF_CALLGRAPH:-}" == none ]] && graph=()
    local sampling=(-F "${PERF_FREQ:-499}")
    [[ -n "${PERF_EVENT:-}" ]] && sampling=(-e "$PERF_EVENT" -c "${PERF_PERIOD:-1}")
    perf record -q "${sampling[@]}" "${graph[@]}" -p "$ppid" -o "$PERF" -- sleep "$secs" 2>/dev/null &
    watchers+=($!)
  fi
  if [[ -n "${PERF_SCHED:-}" && "$phase/$target/$round" == "${PERF_PHASE:-fast}/${PERF_TARGET:-toolgate}/1" ]]; then
    perf sched record -a -o "$PERF_SCHED" -- sleep "$secs" >/dev/null 2>&1 &
    watchers+=($!)
  fi
  local stat_file=""
  if [[ -n "${PERF_STAT:-}" && "$round" == 1 ]]; then
    local watched="$ppid"
    [[ "$target" == direct* || -n "${PERF_STAT_UPSTREAM:-}" ]] && watched="$upid"
    stat_file="$WORK/perfstat.$phase.$target"
    perf stat -x, -e "$PERF_STAT" -p "$watched" -o "$stat_file" -- sleep "$secs" 2>/dev/null &
    watchers+=($!)
  fi
  if [[ -n "${STRACE:-}" && "$phase/$round" == "${STRACE_PHASE:-fast}/1" && "$target" != direct* ]]; then
    timeout -s INT "$secs" strace ${STRACE_ARGS:--c} -f -p "$ppid" -o "$STRACE.$target" 2>/dev/null &
    watchers+=($!)
  fi
  p0="$(cpu_ticks "$ppid")"; u0="$(cpu_ticks "$upid")"; c0="$(ctx_switches "$ppid")"
  local stateless=0 initialize=0
  [[ "$target" == *-stateless ]] && stateless=1
  [[ "$phase" == initialize ]] && initialize=1
  line="$(MCP_STATELESS="$stateless" MCP_INITIALIZE="$initialize" MCP_SESSION="$sid" MCP_API_KEY="$key" MCP_VERSION="$version" ${PIN_REST[@]+"${PIN_REST[@]}"} wrk -t"$WRK_THREADS" -c"$CONNS" -d"${secs}s" --timeout 5s \
    -s "$LUA" "$url" | grep '^RESULT')"
  p1="$(cpu_ticks "$ppid")"; u1="$(cpu_ticks "$upid")"; c1="$(ctx_switches "$ppid")"
  for w in ${watchers[@]+"${watchers[@]}"}; do wait "$w" || true; done
  [[ "$round" == warmup ]] && return 0
  printf '%s\t%s\t%s\t%s\tproxy_ticks=%s\tup_ticks=%s\tproxy_cs=%s\n' "$phase" "$target" "$round" "$line" \
    "$((p1 - p0))" "$((u1 - u0))" "$((c1 - c0))" >>"$RESULTS"
  echo "   $phase $target round $round: $line" >&2
  if [[ -n "$stat_file" && -s "$stat_file" ]]; then
    local requests="${line#*requests=}"
    requests="${requests%% *}"
    echo "   $phase $target round 1, perf stat per call: $(awk -F, -v n="$requests" \
      '$1 ~ /^[0-9.]+$/ && n > 0 { printf "%s %.2f  ", $3, $1 / n }' "$stat_file")" >&2
  fi
}

# ------------------------------------------------------------------------------------------------
if [[ -z "${SKIP_BUILD:-}" ]]; then
  # Examples first, the binary alone last: building an example (or a test) together with the
  # binary unifies the dev-dependencies' features (reqwest `cookies`, `blocking`) into it, and a
  # separate `cargo build --bin` re-links target/release/toolgate from the production build.
  log "building (release): fast_upstream, plain_proxy, then toolgate"
  (cd "$ROOT" && cargo build --release --example fast_upstream --example plain_proxy && cargo build --release --bin toolgate)
fi
# Private copies: the target dir is shared, and a concurrent `cargo test` re-links
# target/release/toolgate with the dev-dependencies' features while we run. A binary given as
# TOOLGATE_BIN or TOOLGATE_BIN_B is the caller's own copy: linked rather than copied, so that
# uprobes placed on it (`perf probe -x PATH`, for PERF_STAT) count in the bench.
# TOOL_LIMIT=1: toolgate-b is the same build as toolgate (unless TOOLGATE_BIN_B says otherwise)
# and its gateway has one tool limit on, matching every tool, per caller, too high ever to refuse:
# what the per-tool limit check costs a call, measured in the same alternating rounds.
if [[ -n "${TOOL_LIMIT:-}" ]]; then
  TOOLGATE_BIN_B="${TOOLGATE_BIN_B:-${TOOLGATE_BIN:-$BIN/toolgate}}"
  GATEWAY_B_EXTRA="${GATEWAY_B_EXTRA:+$GATEWAY_B_EXTRA,}\"tool_limits\":[{\"tool\":\"*\",\"per\":\"caller\",\"requests_per_minute\":1000000000}]"
fi
if [[ -n "${USER_SCOPED:-}" ]]; then
  TOOLGATE_BIN_B="${TOOLGATE_BIN_B:-${TOOLGATE_BIN:-$BIN/toolgate}}"
  REDIS=0
  TLS=0
fi
mkdir -p "$WORK/bin"
private() { ln -f "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
if [[ -n "${TOOLGATE_BIN:-}" ]]; then private "$TOOLGATE_BIN" "$WORK/bin/toolgate"; else cp "$BIN/toolgate" "$WORK/bin/toolgate"; fi
[[ -n "${TOOLGATE_BIN_B:-}" ]] && private "$TOOLGATE_BIN_B" "$WORK/bin/toolgate-b"
cp "$BIN/examples/fast_upstream" "$BIN/examples/plain_proxy" "$WORK/bin/"
if grep -q CookieService "$WORK/bin/toolgate"; then
  echo "load.sh: WARNING: the toolgate binary was built with dev-dependency features (reqwest cookies);" \
    "run without SKIP_BUILD for the production build" >&2
fi

log "starting fast_upstream"
(exec ${PIN_UP[@]+"${PIN_UP[@]}"} "$WORK/bin/fast_upstream" 0 --threads 2 >"$WORK/fast.port" 2>"$WORK/fast.log") &
UP_PID=$!; PIDS+=("$UP_PID")
for _ in $(seq 100); do [[ -s "$WORK/fast.port" ]] && break; sleep 0.1; done
UP_PORT="$(head -1 "$WORK/fast.port")"
[[ -n "$UP_PORT" ]] || { echo "load.sh: fast_upstream printed no port" >&2; exit 1; }

# start_plain UPSTREAM_PORT NAME: a plain Pingora hop to 127.0.0.1:UPSTREAM_PORT; writes "PID PORT"
# to $WORK/NAME.started (a file, not a command substitution: PIDS must be kept by this shell).
start_plain() {
  log "starting plain_proxy ($2) -> 127.0.0.1:$1"
  (exec ${PIN_REST[@]+"${PIN_REST[@]}"} "$WORK/bin/plain_proxy" --listen 127.0.0.1:0 --upstream "127.0.0.1:$1" --threads 2 \
    --work-stealing "$WORK_STEALING" >"$WORK/$2.log" 2>&1) &
  local pid=$!
  PIDS+=("$pid")
  echo "$pid $(port_of "$pid")" >"$WORK/$2.started"
}
start_plain "$UP_PORT" plain
read -r PLAIN_PID PLAIN_PORT <"$WORK/plain.started"

# (Re)starts server-everything on $EV_PORT. Every run gets a fresh process: the server keeps
# every event it sends in memory, so its heap, its garbage collector and its CPU per call grow
# with every call it has answered, whichever target sent them (measured: 320 to 585 us per call
# over one run of a single process).
EV_PORT=""
EV_PID=""
ev_restart() {
  if [[ -n "$EV_PID" ]]; then
    kill "$EV_PID" 2>/dev/null || true
    wait "$EV_PID" 2>/dev/null || true
  fi
  # It logs a line per request on stdout: discard, so logging does not cost it a pipe.
  (PORT="$EV_PORT" exec ${PIN_UP[@]+"${PIN_UP[@]}"} "$NODE" "$EVERYTHING" streamableHttp >/dev/null 2>>"$WORK/everything.log") &
  EV_PID=$!; PIDS+=("$EV_PID")
  port_of "$EV_PID" "" >/dev/null
}
if [[ -z "${SKIP_EVERYTHING:-}" ]]; then
  [[ -x "$NODE" && -f "$EVERYTHING" ]] || { echo "load.sh: run \`npm ci\` in tests/node (or SKIP_EVERYTHING=1)" >&2; exit 1; }
  log "starting server-everything (streamableHttp)"
  EV_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  ev_restart
  start_plain "$EV_PORT" plain-everything
  read -r EV_PLAIN_PID EV_PLAIN_PORT <"$WORK/plain-everything.started"
  EV_PLAIN_URL="http://127.0.0.1:$EV_PLAIN_PORT/mcp"
fi

ADMIN_KEY="ag_$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')"  # ag_ + 40 hex characters
EV_APP=""
if [[ -n "$EV_PORT" ]]; then
  EV_APP="  - id: everything
    name: Everything
    description: server-everything
    category: testing
    url: http://127.0.0.1:$EV_PORT/mcp${EV_PROTOCOL:+
    protocol_version: $EV_PROTOCOL}"
fi
cat >"$WORK/toolgate.yaml" <<EOF
# Production settings (filters, session checks, request log all on); only the tier figures are
# raised so that the rate limiter, which still runs on every call, never answers 429 under load.
environment: production
server:
  listen: 127.0.0.1:0
  metrics_listen: 127.0.0.2:0
  public_url: http://127.0.0.1:8080
  threads: 2
  work_stealing: $WORK_STEALING
storage:
  backend: embedded
  path: $WORK/data
rate_limits:
  tiers:
    bench: { requests_per_hour: unlimited, requests_per_minute: 1000000000, burst: 1000000000, concurrent: 1000 }
limits:
  bootstrap_tier: bench
# No session cap: the initialize rounds open hundreds of thousands of sessions.
mcp:
  max_sessions_per_key: 100000000
  max_sessions_per_organization: 100000000
apps:
  - id: fast
    name: Fast
    description: benches/load/fast_upstream.rs
    category: testing
    url: http://127.0.0.1:$UP_PORT/mcp${USER_SCOPED:+
    auth_types: [api_key]}
$EV_APP
EOF
# More settings of the caller's (EXTRA_YAML), e.g. `webhooks.allowed_hosts` for a guard on the
# loopback that GATEWAY_B_EXTRA names.
printf '%s\n' "${EXTRA_YAML:-}" >>"$WORK/toolgate.yaml"

# start_toolgate NAME: starts $WORK/bin/NAME with its own data directory; prints "PID PORT"
# (callers redirect it to a file, so that PIDS is kept by this shell).
start_toolgate() {
  local name="$1" pid port scope=""
  # USER_SCOPED: toolgate-b's fast app is connected by each user.
  [[ -n "${USER_SCOPED:-}" && "$name" == toolgate-b ]] && scope="s|^    auth_types: \[api_key\]\$|&\n    connection_scope: user|"
  sed -e "s|path: $WORK/data|path: $WORK/data-$name|" ${scope:+-e "$scope"} "$WORK/toolgate.yaml" >"$WORK/$name.run.yaml"
  (TOOLGATE_ADMIN_KEY="$ADMIN_KEY" exec ${PIN_REST[@]+"${PIN_REST[@]}"} "$WORK/bin/$name" --config "$WORK/$name.run.yaml" >"$WORK/$name.log" 2>&1) &
  pid=$!; PIDS+=("$pid")
  port="$(port_of "$pid" 127.0.0.1)"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  echo "$pid $port"
}
log "starting toolgate"
start_toolgate toolgate >"$WORK/tg.started"
read -r TG_PID TG_PORT <"$WORK/tg.started"

# create_gateway APP [PORT [EXTRA [CONFIG]]]: prints "ID KEY". EXTRA: more members of the creation
# body (`"rules": [...]`), CONFIG more members of its configuration (`"content_policy": "off"`),
# for toolgate-b's gateway (GATEWAY_B_EXTRA, GATEWAY_B_CONFIG).
create_gateway() {
  curl -sS -X POST "http://127.0.0.1:${2:-$TG_PORT}/v1/gateways" -H "Authorization: Bearer $ADMIN_KEY" \
    -H 'Content-Type: application/json' \
    -d "{\"name\":\"load-$1\",\"servers\":[\"$1\"],\"configuration\":{\"rate_limit\":1000000000${4:+,$4}}${3:+,$3}}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; print(d["id"], d["api_key"])'
}

# connect_fast PORT [QUERY]: USER_SCOPED's connection of the fast app with an API key: the
# organisation's (no QUERY on an organisation-scoped app, `?organization=true` on a user-scoped
# one) or, on a user-scoped app without QUERY, the admin's own.
connect_fast() {
  curl -sSf -o /dev/null -X POST "http://127.0.0.1:$1/v1/apps/fast/connect${2:-}" -H "Authorization: Bearer $ADMIN_KEY" \
    -H 'Content-Type: application/json' -d '{"auth_type":"api_key","credentials":{"api_key":"bench-upstream-key"}}' ||
    { echo "load.sh: cannot connect the fast app at port $1${2:-}" >&2; exit 1; }
}
[[ -n "${USER_SCOPED:-}" ]] && connect_fast "$TG_PORT"
read -r GW_ID GW_KEY < <(create_gateway fast "$TG_PORT" "${GATEWAY_A_EXTRA:-}")
[[ -n "${GW_KEY:-}" ]] || { echo "load.sh: cannot create the gateway; toolgate log:" >&2; tail -20 "$WORK/toolgate.log" >&2; exit 1; }
# A user-scoped app refuses a gateway key (it names no user): both sides call with a user's own.
[[ -n "${USER_SCOPED:-}" ]] && GW_KEY="$ADMIN_KEY"
TG_URL="http://127.0.0.1:$TG_PORT/gateway/$GW_ID/mcp"
DIRECT_URL="http://127.0.0.1:$UP_PORT/mcp"
PLAIN_URL="http://127.0.0.1:$PLAIN_PORT/mcp"

log "opening MCP sessions"
SID_DIRECT="$(mcp_init "$DIRECT_URL")"
SID_PLAIN="$(mcp_init "$PLAIN_URL")"
SID_TG="$(mcp_init "$TG_URL" "$GW_KEY")"
check_call "$DIRECT_URL" "$SID_DIRECT"
check_call "$PLAIN_URL" "$SID_PLAIN"
check_call "$TG_URL" "$SID_TG" "$GW_KEY"
stateless_out="$(curl -sS -X POST "$TG_URL" -H "X-API-Key: $GW_KEY" -H 'MCP-Protocol-Version: 2026-07-28' \
  -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo' -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":"check","method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}')"
[[ "$stateless_out" == *'Echo: hello'* ]] || { echo "load.sh: stateless tools/call did not echo: $stateless_out" >&2; exit 1; }
TARGETS="direct plain toolgate toolgate-stateless"
if [[ "${REDIS:-1}" != 0 ]] && command -v redis-server >/dev/null; then
  log "starting redis-server and toolgate-redis"
  redis-server --port 0 --unixsocket "$WORK/redis.sock" --unixsocketperm 700 --dir "$WORK" --save '' \
    --appendonly yes --appendfsync everysec >"$WORK/redis.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 100); do [[ -S "$WORK/redis.sock" ]] && break; sleep 0.05; done
  # start_redis_toolgate NAME PREFIX: $WORK/bin/NAME on the Redis store, its keys under PREFIX;
  # writes "PID PORT" to $WORK/NAME.started.
  start_redis_toolgate() {
    local pid port
    python3 - "$WORK/toolgate.yaml" "$WORK/$1.yaml" "$WORK/redis.sock" "$2" <<'PY'
import sys
src, dst, sock, prefix = sys.argv[1:]
text = open(src).read()
start = text.index("storage:\n")
end = text.index("rate_limits:\n")
open(dst, "w").write(text[:start] + f"storage:\n  backend: redis\n  url: unix://{sock}\n  key_prefix: {prefix}\n"
                     + text[end:])
PY
    (TOOLGATE_ADMIN_KEY="$ADMIN_KEY" TOOLGATE_SECRET_KEY="$(printf '%064d' 7)" exec ${PIN_REST[@]+"${PIN_REST[@]}"} \
      "$WORK/bin/$1" --config "$WORK/$1.yaml" >"$WORK/$1.log" 2>&1) &
    pid=$!; PIDS+=("$pid")
    port="$(port_of "$pid" 127.0.0.1)"
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
    echo "$pid $port" >"$WORK/$1.started"
  }
  cp "$WORK/bin/toolgate" "$WORK/bin/toolgate-redis"
  start_redis_toolgate toolgate-redis toolgate
  read -r TGR_PID TGR_PORT <"$WORK/toolgate-redis.started"
  read -r GWR_ID GWR_KEY < <(create_gateway fast "$TGR_PORT")
  TGR_URL="http://127.0.0.1:$TGR_PORT/gateway/$GWR_ID/mcp"
  SID_TGR="$(mcp_init "$TGR_URL" "$GWR_KEY")"
  check_call "$TGR_URL" "$SID_TGR" "$GWR_KEY"
  TARGETS="$TARGETS toolgate-redis"
  if [[ -n "${TOOLGATE_BIN_B:-}" ]]; then
    log "starting toolgate-redis-b ($TOOLGATE_BIN_B)"
    cp "$TOOLGATE_BIN_B" "$WORK/bin/toolgate-redis-b"
    start_redis_toolgate toolgate-redis-b toolgate-b
    read -r TGRB_PID TGRB_PORT <"$WORK/toolgate-redis-b.started"
    read -r GWRB_ID GWRB_KEY < <(create_gateway fast "$TGRB_PORT")
    TGRB_URL="http://127.0.0.1:$TGRB_PORT/gateway/$GWRB_ID/mcp"
    SID_TGRB="$(mcp_init "$TGRB_URL" "$GWRB_KEY")"
    check_call "$TGRB_URL" "$SID_TGRB" "$GWRB_KEY"
    TARGETS="$TARGETS toolgate-redis-b"
  fi
fi
if [[ -n "${TOOLGATE_BIN_B:-}" ]]; then
  log "starting toolgate-b ($TOOLGATE_BIN_B)"
  start_toolgate toolgate-b >"$WORK/tgb.started"
  read -r TGB_PID TGB_PORT <"$WORK/tgb.started"
  if [[ -n "${USER_SCOPED:-}" ]]; then connect_fast "$TGB_PORT" "?organization=true"; connect_fast "$TGB_PORT"; fi
  read -r GWB_ID GWB_KEY < <(create_gateway fast "$TGB_PORT" "${GATEWAY_B_EXTRA:-}" "${GATEWAY_B_CONFIG:-}")
  [[ -n "${USER_SCOPED:-}" ]] && GWB_KEY="$ADMIN_KEY"
  TGB_URL="http://127.0.0.1:$TGB_PORT/gateway/$GWB_ID/mcp"
  SID_TGB="$(mcp_init "$TGB_URL" "$GWB_KEY")"
  check_call "$TGB_URL" "$SID_TGB" "$GWB_KEY"
  TARGETS="$TARGETS toolgate-b"
fi

if [[ "${TLS:-1}" != 0 ]] && command -v openssl >/dev/null; then
  # The same toolgate terminating TLS (a self-signed ECDSA P-256 certificate; wrk does not
  # verify), on 127.0.0.3, with its plain listener on 127.0.0.1 for the management calls.
  log "starting toolgate-tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=IP:127.0.0.3,DNS:localhost -keyout "$WORK/tls.key" -out "$WORK/tls.pem" 2>/dev/null
  cp "$WORK/bin/toolgate" "$WORK/bin/toolgate-tls"
  python3 - "$WORK/toolgate.yaml" "$WORK/toolgate-tls.yaml" "$WORK" <<'PY'
import sys
src, dst, work = sys.argv[1:]
text = open(src).read().replace(f"path: {work}/data\n", f"path: {work}/data-tls\n")
text = text.replace("  listen: 127.0.0.1:0\n", "  listen: 127.0.0.3:0\n  plain_listen: 127.0.0.1:0\n  tls:\n"
                    f"    certificates:\n      - cert_file: {work}/tls.pem\n        key_file: {work}/tls.key\n")
open(dst, "w").write(text)
PY
  (TOOLGATE_ADMIN_KEY="$ADMIN_KEY" exec ${PIN_REST[@]+"${PIN_REST[@]}"} "$WORK/bin/toolgate-tls" \
    --config "$WORK/toolgate-tls.yaml" >"$WORK/toolgate-tls.log" 2>&1) &
  TGT_PID=$!; PIDS+=("$TGT_PID")
  TGT_PLAIN_PORT="$(port_of "$TGT_PID" 127.0.0.1)"
  TGT_PORT="$(port_of "$TGT_PID" 127.0.0.3)"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$TGT_PLAIN_PORT/healthz" >/dev/null && break; sleep 0.1; done
  read -r GWT_ID GWT_KEY < <(create_gateway fast "$TGT_PLAIN_PORT")
  TGT_URL="https://127.0.0.3:$TGT_PORT/gateway/$GWT_ID/mcp"
  SID_TGT="$(mcp_init "$TGT_URL" "$GWT_KEY")"
  check_call "$TGT_URL" "$SID_TGT" "$GWT_KEY"
  TARGETS="$TARGETS toolgate-tls"
fi

note_load() { echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2; }

log "fast upstream: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds (warm-up ${WARMUP}s each)"
note_load
# run_fast TARGET ROUND SECONDS
run_fast() {
  case $1 in
    direct) run fast direct "$2" "$DIRECT_URL" "$SID_DIRECT" "" "$UP_PID" "$UP_PID" "$3" ;;
    plain) run fast plain "$2" "$PLAIN_URL" "$SID_PLAIN" "" "$PLAIN_PID" "$UP_PID" "$3" ;;
    toolgate) run fast toolgate "$2" "$TG_URL" "$SID_TG" "$GW_KEY" "$TG_PID" "$UP_PID" "$3" ;;
    toolgate-stateless) run fast toolgate-stateless "$2" "$TG_URL" "" "$GW_KEY" "$TG_PID" "$UP_PID" "$3" ;;
    toolgate-b) run fast toolgate-b "$2" "$TGB_URL" "$SID_TGB" "$GWB_KEY" "$TGB_PID" "$UP_PID" "$3" ;;
    toolgate-redis) run fast toolgate-redis "$2" "$TGR_URL" "$SID_TGR" "$GWR_KEY" "$TGR_PID" "$UP_PID" "$3" ;;
    toolgate-redis-b) run fast toolgate-redis-b "$2" "$TGRB_URL" "$SID_TGRB" "$GWRB_KEY" "$TGRB_PID" "$UP_PID" "$3" ;;
    toolgate-tls) run fast toolgate-tls "$2" "$TGT_URL" "$SID_TGT" "$GWT_KEY" "$TGT_PID" "$UP_PID" "$3" ;;
  esac
}
[[ -n "${SKIP_FAST:-}" ]] && TARGETS=""
for t in $TARGETS; do run_fast "$t" warmup "$WARMUP"; done
# Odd rounds in one order, even rounds in the reverse one, so that no target always runs after
# the others (server-everything's heap, for one, grows with every call it answers).
reversed() { local out="" t; for t in $1; do out="$t $out"; done; echo "$out"; }
for r in $(seq "$ROUNDS"); do
  order="$TARGETS"; (( r % 2 == 0 )) && order="$(reversed "$TARGETS")"
  for t in $order; do run_fast "$t" "$r" "$DURATION"; done
done
note_load
check_call "$TG_URL" "$SID_TG" "$GW_KEY"

# New connections: `GET /healthz` with `Connection: close` (one connection per request), on the
# plain and the TLS listener of toolgate-tls, so the difference in CPU per request is the cost
# of a TLS handshake (TLS 1.3, ECDSA P-256, X25519).
# run_close TARGET ROUND URL PID SECONDS
run_close() {
  local target="$1" round="$2" url="$3" pid="$4" secs="$5" p0 p1 out rps reqs errs
  p0="$(cpu_ticks "$pid")"
  out="$(wrk -t"$WRK_THREADS" -c"$CONNS" -d"${secs}s" --timeout 5s -H 'Connection: close' "$url")"
  p1="$(cpu_ticks "$pid")"
  [[ "$round" == warmup ]] && return 0
  rps="$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")"
  reqs="$(awk '/requests in/ { print $1 }' <<<"$out")"
  errs="$(awk '/Socket errors/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' <<<"$out")"
  printf '%s\t%s\t%s\tRESULT rps=%s requests=%s p50_us=0 p99_us=0 non2xx=0 socket_errors=%s\tproxy_ticks=%s\tup_ticks=0\tproxy_cs=0\n' \
    handshake "$target" "$round" "$rps" "$reqs" "${errs:-0}" "$((p1 - p0))" >>"$RESULTS"
  echo "   handshake $target round $round: $rps req/s, $reqs requests" >&2
}
if [[ -n "${TGT_PID:-}" && -z "${SKIP_FAST:-}" ]]; then
  log "new connections: wrk -c$CONNS -H 'Connection: close' GET /healthz, plain and TLS listener of toolgate-tls"
  run_close plain warmup "http://127.0.0.1:$TGT_PLAIN_PORT/healthz" "$TGT_PID" "$WARMUP"
  run_close tls warmup "https://127.0.0.3:$TGT_PORT/healthz" "$TGT_PID" "$WARMUP"
  for r in $(seq "$ROUNDS"); do
    run_close plain "$r" "http://127.0.0.1:$TGT_PLAIN_PORT/healthz" "$TGT_PID" "$DURATION"
    run_close tls "$r" "https://127.0.0.3:$TGT_PORT/healthz" "$TGT_PID" "$DURATION"
  done
fi

# New sessions: `initialize` without a session on every toolgate of the run (not the TLS one),
# in alternating rounds like the calls.
if [[ -z "${SKIP_INITIALIZE:-}" ]]; then
  INIT_TARGETS="toolgate${TGR_PID:+ toolgate-redis}${TGB_PID:+ toolgate-b}${TGRB_PID:+ toolgate-redis-b}"
  log "initialize: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds ($INIT_TARGETS)"
  note_load
  # run_initialize TARGET ROUND SECONDS
  run_initialize() {
    case $1 in
      toolgate) run initialize toolgate "$2" "$TG_URL" "" "$GW_KEY" "$TG_PID" "$UP_PID" "$3" ;;
      toolgate-b) run initialize toolgate-b "$2" "$TGB_URL" "" "$GWB_KEY" "$TGB_PID" "$UP_PID" "$3" ;;
      toolgate-redis) run initialize toolgate-redis "$2" "$TGR_URL" "" "$GWR_KEY" "$TGR_PID" "$UP_PID" "$3" ;;
      toolgate-redis-b) run initialize toolgate-redis-b "$2" "$TGRB_URL" "" "$GWRB_KEY" "$TGRB_PID" "$UP_PID" "$3" ;;
    esac
  }
  for t in $INIT_TARGETS; do run_initialize "$t" warmup "$WARMUP"; done
  for r in $(seq "$ROUNDS"); do
    order="$INIT_TARGETS"; (( r % 2 == 0 )) && order="$(reversed "$INIT_TARGETS")"
    for t in $order; do run_initialize "$t" "$r" "$DURATION"; done
  done
  note_load
fi

if [[ -n "$EV_PORT" ]]; then
  read -r EV_GW_ID EV_GW_KEY < <(create_gateway everything)
  [[ -n "${EV_GW_KEY:-}" ]] || { echo "load.sh: cannot create the server-everything gateway" >&2; exit 1; }
  EV_TG_URL="http://127.0.0.1:$TG_PORT/gateway/$EV_GW_ID/mcp"
  EV_DIRECT_URL="http://127.0.0.1:$EV_PORT/mcp"
  # toolgate opens its upstream session at the newest version it speaks (2025-11-25, unless
  # EV_PROTOCOL says otherwise), and server-everything does more per call at that version (a
  # priming SSE event and one more event-store entry per POST). So `direct` speaks 2025-11-25 too
  # (same upstream work: what toolgate itself costs), and `direct-0618` shows what a 2025-06-18
  # client gets without toolgate.
  SID_EV_TG="$(mcp_init "$EV_TG_URL" "$EV_GW_KEY")"
  EV_TARGETS="direct direct-0618 plain toolgate"
  if [[ -n "${TOOLGATE_BIN_B:-}" ]]; then
    read -r EVB_GW_ID EVB_GW_KEY < <(create_gateway everything "$TGB_PORT")
    EVB_TG_URL="http://127.0.0.1:$TGB_PORT/gateway/$EVB_GW_ID/mcp"
    SID_EVB_TG="$(mcp_init "$EVB_TG_URL" "$EVB_GW_KEY")"
    EV_TARGETS="$EV_TARGETS toolgate-b"
  fi
  log "server-everything: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds, a fresh server per run"
  note_load
  # run_everything TARGET ROUND: a fresh server, a new session (toolgate opens its own upstream
  # session again on the server's 404, as it would after any upstream restart), a checked call,
  # the warm-up (the server's JIT), then the run.
  run_everything() {
    local target="$1" round="$2" url sid="" key="" pid version=""
    ev_restart
    case $target in
      direct) url="$EV_DIRECT_URL"; pid="$EV_PID"; version=2025-11-25 ;;
      direct-0618) url="$EV_DIRECT_URL"; pid="$EV_PID"; version=2025-06-18 ;;
      # The plain Pingora hop, at the version toolgate offers upstream: what any proxy costs here.
      plain) url="$EV_PLAIN_URL"; pid="$EV_PLAIN_PID"; version="${EV_PROTOCOL:-2025-11-25}" ;;
      toolgate) url="$EV_TG_URL"; sid="$SID_EV_TG"; key="$EV_GW_KEY"; pid="$TG_PID" ;;
      toolgate-b) url="$EVB_TG_URL"; sid="$SID_EVB_TG"; key="$EVB_GW_KEY"; pid="$TGB_PID" ;;
    esac
    # The fresh server knows no session: direct and plain open one; toolgate keeps its own.
    [[ -n "$sid" ]] || sid="$(mcp_init "$url" "" "$version")"
    check_call "$url" "$sid" "$key"
    run everything "$target" warmup "$url" "$sid" "$key" "$pid" "$EV_PID" "$WARMUP" "$version"
    run everything "$target" "$round" "$url" "$sid" "$key" "$pid" "$EV_PID" "$DURATION" "$version"
  }
  for r in $(seq "$ROUNDS"); do
    order="$EV_TARGETS"; (( r % 2 == 0 )) && order="$(reversed "$EV_TARGETS")"
    for t in $order; do run_everything "$t" "$r"; done
  done
  note_load
fi

# The request log must have kept up: every call recorded, none dropped.
grep -q 'request log buffer full' "$WORK/toolgate.log" && echo "load.sh: WARNING: toolgate dropped request log entries" >&2

# ------------------------------------------------------------------------------------------------
CLK_TCK="$CLK_TCK" EV_PROTOCOL="${EV_PROTOCOL:-}" python3 - "$RESULTS" <<'PY'
import os, statistics, sys
from collections import defaultdict

tck = int(os.environ["CLK_TCK"])
runs = defaultdict(list)
for line in open(sys.argv[1]):
    phase, target, rnd, result, proxy, up, cs = line.rstrip("\n").split("\t")
    kv = dict(p.split("=") for p in result.split()[1:])
    kv.update(dict([proxy.split("="), up.split("="), cs.split("=")]))
    runs[(phase, target)].append({k: float(v) for k, v in kv.items()})

def med(rs, k):
    return statistics.median(r[k] for r in rs)

def cpu_us(rs, k):
    # Summed over rounds: one run's tick count (10 ms each) is too coarse on its own.
    ticks = sum(r[k] for r in rs)
    reqs = sum(r["requests"] for r in rs)
    return ticks * 1e6 / tck / reqs if reqs else float("nan")

print()
print("| phase | target | req/s (median) | x direct | p50 ms | p99 ms | p50 added over direct ms | CPU us/call (proxy) | CPU us/call (upstream) | context switches/call (proxy) | non-2xx / socket errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for phase in ("fast", "everything"):
    direct = runs.get((phase, "direct"))
    if not direct:
        continue
    d_rps, d_p50 = med(direct, "rps"), med(direct, "p50_us")
    for target in ("direct", "direct-0618", "plain", "toolgate", "toolgate-stateless", "toolgate-redis", "toolgate-tls",
                   "toolgate-b", "toolgate-redis-b"):
        rs = runs.get((phase, target))
        if not rs:
            continue
        rps, p50, p99 = med(rs, "rps"), med(rs, "p50_us"), med(rs, "p99_us")
        proxy = "-" if target.startswith("direct") else f"{cpu_us(rs, 'proxy_ticks'):.1f}"
        errs = f"{int(sum(r['non2xx'] for r in rs))} / {int(sum(r['socket_errors'] for r in rs))}"
        cs = "-" if target.startswith("direct") else f"{sum(r['proxy_cs'] for r in rs) / sum(r['requests'] for r in rs):.2f}"
        print(f"| {phase} | {target} | {rps:,.0f} | {rps / d_rps:.3f} | {p50 / 1000:.3f} | {p99 / 1000:.3f} | "
              f"{(p50 - d_p50) / 1000:+.3f} | {proxy} | {cpu_us(rs, 'up_ticks'):.1f} | {cs} | {errs} |")
plain, tg = runs.get(("fast", "plain")), runs.get(("fast", "toolgate"))
if plain and tg:
    print()
    print(f"toolgate / plain hop throughput: {med(tg, 'rps') / med(plain, 'rps'):.3f}")
    print(f"p50 added by toolgate over the plain hop: {(med(tg, 'p50_us') - med(plain, 'p50_us')) / 1000:+.3f} ms")
    print(f"p99 added by toolgate over the plain hop: {(med(tg, 'p99_us') - med(plain, 'p99_us')) / 1000:+.3f} ms")
tgs = runs.get(("fast", "toolgate-stateless"))
if tg and tgs:
    print(f"stateless (2026-07-28) / session (2025) calls through toolgate: throughput "
          f"{med(tgs, 'rps') / med(tg, 'rps'):.3f}, CPU per call {cpu_us(tgs, 'proxy_ticks'):.1f} / "
          f"{cpu_us(tg, 'proxy_ticks'):.1f} us")
tgr = runs.get(("fast", "toolgate-redis"))
if tg and tgr:
    print(f"Redis store (leased rate limits) / embedded store, one instance: throughput "
          f"{med(tgr, 'rps') / med(tg, 'rps'):.3f}, CPU per call {cpu_us(tgr, 'proxy_ticks'):.1f} / "
          f"{cpu_us(tg, 'proxy_ticks'):.1f} us")
tgt = runs.get(("fast", "toolgate-tls"))
if tg and tgt:
    print(f"TLS on the client side (keep-alive), toolgate-tls / toolgate: throughput {med(tgt, 'rps') / med(tg, 'rps'):.3f}, "
          f"CPU per call {cpu_us(tgt, 'proxy_ticks'):.1f} / {cpu_us(tg, 'proxy_ticks'):.1f} us "
          f"(TLS: {cpu_us(tgt, 'proxy_ticks') - cpu_us(tg, 'proxy_ticks'):+.1f} us per call)")
hp, ht = runs.get(("handshake", "plain")), runs.get(("handshake", "tls"))
if hp and ht:
    print(f"new connection per request (GET /healthz, Connection: close): plain {med(hp, 'rps'):,.0f} req/s, "
          f"{cpu_us(hp, 'proxy_ticks'):.1f} us; TLS {med(ht, 'rps'):,.0f} req/s, {cpu_us(ht, 'proxy_ticks'):.1f} us "
          f"(a TLS handshake: {cpu_us(ht, 'proxy_ticks') - cpu_us(hp, 'proxy_ticks'):+.1f} us of toolgate's CPU)")
tgb = runs.get(("fast", "toolgate-b"))
ev_tg, ev_tgb = runs.get(("everything", "toolgate")), runs.get(("everything", "toolgate-b"))
if ev_tg and ev_tgb:
    print(f"A/B server-everything: toolgate-b / toolgate throughput: {med(ev_tgb, 'rps') / med(ev_tg, 'rps'):.3f}, "
          f"CPU per call {cpu_us(ev_tgb, 'proxy_ticks'):.1f} / {cpu_us(ev_tg, 'proxy_ticks'):.1f} us")
if tg and tgb:
    print(f"A/B: toolgate-b / toolgate throughput: {med(tgb, 'rps') / med(tg, 'rps'):.3f}, "
          f"CPU per call {cpu_us(tgb, 'proxy_ticks'):.1f} / {cpu_us(tg, 'proxy_ticks'):.1f} us")
    if plain:
        print(f"toolgate-b / plain hop throughput: {med(tgb, 'rps') / med(plain, 'rps'):.3f}")
inits = [(t, runs[("initialize", t)]) for t in ("toolgate", "toolgate-redis", "toolgate-b", "toolgate-redis-b")
         if ("initialize", t) in runs]
if inits:
    print()
    print("| target | initialize req/s (median) | mean ms | p99 ms | CPU us/request | context switches/request | non-2xx / socket errors | x tools/call of the same instance |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for target, rs in inits:
        rps = med(rs, "rps")
        calls = runs.get(("fast", target))
        ratio = f"{rps / med(calls, 'rps'):.3f}" if calls else "-"
        cs = sum(r["proxy_cs"] for r in rs) / sum(r["requests"] for r in rs)
        errs = f"{int(sum(r['non2xx'] for r in rs))} / {int(sum(r['socket_errors'] for r in rs))}"
        print(f"| {target} | {rps:,.0f} | {med(rs, 'mean_us') / 1000:.3f} | {med(rs, 'p99_us') / 1000:.3f} | "
              f"{cpu_us(rs, 'proxy_ticks'):.1f} | {cs:.2f} | {errs} | {ratio} |")
    for a, b in (("toolgate", "toolgate-b"), ("toolgate-redis", "toolgate-redis-b")):
        ia, ib = runs.get(("initialize", a)), runs.get(("initialize", b))
        if ia and ib:
            print(f"A/B initialize: {b} / {a} throughput: {med(ib, 'rps') / med(ia, 'rps'):.3f}, "
                  f"CPU per request {cpu_us(ib, 'proxy_ticks'):.1f} / {cpu_us(ia, 'proxy_ticks'):.1f} us")
ev_t, ev_p = runs.get(("everything", "toolgate")), runs.get(("everything", "plain"))
version = os.environ.get("EV_PROTOCOL") or "2025-11-25"
ev_same = runs.get(("everything", "direct-0618" if version == "2025-06-18" else "direct"))
if ev_t and ev_same:
    print(f"server-everything, upstream at {version}: toolgate / direct {med(ev_t, 'rps') / med(ev_same, 'rps'):.3f}"
          + (f", plain hop / direct {med(ev_p, 'rps') / med(ev_same, 'rps'):.3f}, "
             f"toolgate / plain hop {med(ev_t, 'rps') / med(ev_p, 'rps'):.3f}" if ev_p else ""))
ev_o = runs.get(("everything", "direct-0618"))
if ev_t and ev_o and version != "2025-06-18":
    print(f"server-everything: toolgate / direct-0618 (what a 2025-06-18 client gets without toolgate): "
          f"{med(ev_t, 'rps') / med(ev_o, 'rps'):.3f}")
print()
print("per round:")
for (phase, target), rs in runs.items():
    print(f"  {phase:10} {target:8} " + "  ".join(
        f"{r['rps']:8.0f} rps p50 {r['p50_us'] / 1000:.3f} p99 {r['p99_us'] / 1000:.3f} "
        f"up {r['up_ticks'] * 1e6 / tck / r['requests']:.0f}us" for r in rs))
PY
