#!/usr/bin/env bash
# Property-based check of the management API against its own OpenAPI document.
#
# Starts the release binary on OS-chosen ports with a throwaway config and data dir, reads
# the ports back (toolgate_harness.py), runs schemathesis on /v1/openapi.json with the admin
# key, and stops the server. Called by tests/run.sh; runs alone too once run.sh has set up
# tests/py/.venv and built target/release/toolgate.
#
# Knobs (environment):
#   SCHEMATHESIS_MAX_EXAMPLES   test cases per operation (default 20)
#   SCHEMATHESIS_CHECKS         default: not_a_server_error,response_schema_conformance
#   SCHEMATHESIS_SEED           default 1 (reproducible); set "random" for a new seed each run
#   SCHEMATHESIS_TIMEOUT        hard limit for the whole run in seconds (default 240)
#   SCHEMATHESIS_EXTRA_YAML     appended to the server config (e.g. generous tiers)
#   TOOLGATE_BIN                binary (default <target>/release/toolgate)
# tests/run.sh ignores the SCHEMATHESIS_* knobs when CI is set. A run that tests no API operation
# fails.
# Reports (JUnit, and the failures reproduced as pytest) land in
# <target>/schemathesis/, the server's logs beside them.
set -euo pipefail

PY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$PY_DIR/../.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="${TOOLGATE_BIN:-$TARGET_DIR/release/toolgate}"
PY="${TOOLGATE_TEST_PYTHON:-$PY_DIR/.venv/bin/python}"
ST="$(dirname "$PY")/schemathesis"
REPORT_DIR="$TARGET_DIR/schemathesis"

for f in "$BIN" "$PY" "$ST"; do
    if [ ! -x "$f" ]; then
        echo "schemathesis.sh: missing $f (run tests/run.sh first)" >&2
        exit 1
    fi
done

WORK="$(mktemp -d -t toolgate-schemathesis.XXXXXX)"
mkdir -p "$WORK/data" "$REPORT_DIR"
rm -f "$REPORT_DIR"/junit-*.xml "$REPORT_DIR"/test_schemathesis_*.py "$REPORT_DIR"/*.log
KEY="$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import toolgate_harness as h; print(h.random_key())' "$PY_DIR")"

cat >"$WORK/toolgate.yaml" <<EOF
environment: development
server:
  listen: 127.0.0.1:0
  metrics_listen: 127.0.0.2:0
  public_url: http://localhost:8080
  trusted_proxies: []
storage:
  backend: embedded
  path: $WORK/data
apps:
  - id: time
    name: Time
    description: Current time in any time zone
    category: utilities
    builtin: time
${SCHEMATHESIS_EXTRA_YAML:-}
EOF

SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    cp "$WORK"/*.log "$REPORT_DIR/" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

TOOLGATE_ADMIN_KEY="$KEY" RUST_LOG="${RUST_LOG:-info}" \
    "$BIN" --config "$WORK/toolgate.yaml" >"$WORK/server-stdout.log" 2>"$WORK/server-stderr.log" </dev/null &
SERVER_PID=$!

if ! ports="$("$PY" "$PY_DIR/toolgate_harness.py" ports "$SERVER_PID")"; then
    echo "schemathesis.sh: toolgate did not come up; its stderr:" >&2
    tail -n 50 "$WORK/server-stderr.log" >&2 || true
    exit 1
fi
read -r MAIN_ADDR METRICS_ADDR <<<"$ports"
echo "toolgate pid $SERVER_PID: main listener $MAIN_ADDR, metrics listener $METRICS_ADDR"

seed_args=(--seed "${SCHEMATHESIS_SEED:-1}")
[ "${SCHEMATHESIS_SEED:-}" = random ] && seed_args=()

# schemathesis keeps a cache (.schemathesis/) in its working directory: keep it out of the repo.
cd "$REPORT_DIR"
rc=0
timeout --signal=INT --kill-after=15 "${SCHEMATHESIS_TIMEOUT:-240}" \
    "$ST" run "http://$MAIN_ADDR/v1/openapi.json" \
    --origin "http://$MAIN_ADDR" \
    --header "Authorization: Bearer $KEY" \
    --checks "${SCHEMATHESIS_CHECKS:-not_a_server_error,response_schema_conformance}" \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-20}" \
    "${seed_args[@]}" \
    --workers 2 \
    --request-timeout 10 \
    --wait-for-schema 10 \
    --generation-database none \
    --no-color \
    --report junit,pytest \
    --report-dir "$REPORT_DIR" \
    || rc=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "schemathesis.sh: toolgate died during the run; its stderr:" >&2
    tail -n 50 "$WORK/server-stderr.log" >&2 || true
    rc=1
fi
[ $rc -eq 124 ] && echo "schemathesis.sh: timed out after ${SCHEMATHESIS_TIMEOUT:-240}s" >&2

# A run that tested no operation passes without having checked anything: count the operations
# the JUnit report shows as tested (one test case per operation, not skipped).
count_tested='import glob, sys, xml.etree.ElementTree as ET
cases = [c for f in glob.glob(sys.argv[1] + "/junit-*.xml") for c in ET.parse(f).iter("testcase")]
print(sum(1 for c in cases if c.find("skipped") is None and c.get("name", "").split(" ")[0].isupper()))'
tested="$("$PY" -c "$count_tested" "$REPORT_DIR")" || tested=0
echo "schemathesis.sh: $tested API operations tested"
if [ "$tested" -eq 0 ]; then
    echo "schemathesis.sh: no API operation was tested (no JUnit test case in $REPORT_DIR)" >&2
    [ $rc -ne 0 ] || rc=1
fi
exit $rc
