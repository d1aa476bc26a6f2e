#!/usr/bin/env bash
# Fuzzes toolgate's parsers for a fixed time per target (fuzz/README.md).
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [toolgate-fuzz run options...]
#   fuzz/run.sh 600                          # ten minutes each
#   fuzz/run.sh 60 --target config --seed 42 # one target, a chosen seed
#
# Builds the driver in the workspace's release build (a link when `cargo build --release
# --workspace` has run, as tests/run.sh does first), then runs every target in turn. Fails on
# a panic, an allocation beyond the per-input bound, a stack overflow or a hang; the input is
# saved under target/fuzz/artifacts/<target>/ and printed. Inputs that reached new outcomes are
# kept in target/fuzz/corpus/<target>/ and seed the next run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SECONDS_PER_TARGET="${1:-30}"
shift || true

cd "$ROOT"
cargo build --release -p toolgate-fuzz
exec "$TARGET_DIR/release/toolgate-fuzz" run --seconds "$SECONDS_PER_TARGET" --out "$TARGET_DIR/fuzz" "$@"
