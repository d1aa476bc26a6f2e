#!/usr/bin/env bash
# Build and start toolgate: the README's first command.
#
#   ./run.sh                     conf/toolgate.yaml: the embedded store (./data), the built-in `time` app
#   ./run.sh --config FILE       any other argument goes to toolgate as it is
#
# It installs the system packages the build needs when they are missing (scripts/install-deps.sh,
# which asks for root through sudo only then), then runs `cargo run --release`. Where the packages
# are present, `cargo run --release -- ARGS` is the same thing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v cargo >/dev/null 2>&1; then
    echo "run.sh: cargo is not on PATH: install Rust (https://rustup.rs), then run ./run.sh again" >&2
    exit 1
fi
scripts/install-deps.sh
exec cargo run --release --bin toolgate -- "$@"
