#!/usr/bin/env bash
# The power-cut suite alone (tests/power.rs; `cargo test --workspace` runs
# it too). Needs root and /dev/fuse; builds LazyFS on first use. Extra
# arguments go to the test binary (a test name filter, --nocapture).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --test power -- "$@"
