#!/usr/bin/env bash
# The power-cut suite (tests/power.rs), ignored by `cargo test` while an
# image divergence it found is open. Needs root, /dev/fuse; builds LazyFS
# on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --test power -- --include-ignored "$@"
