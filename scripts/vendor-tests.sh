#!/usr/bin/env bash
# Runs the upstream tests of the vendored openraft and sled against Keel's
# patched copies (crates/vendor/*/PATCHES.md says what runs and why).
#
# Each vendored crate is a workspace of its own with its own Cargo.lock
# (--locked: the lock file must be up to date); both build into
# target/vendor-tests. Every step is bounded in time; the script stops at
# the first failure and exits non-zero. From cold, on 2 cores that other
# builds were also using (load 6-9): 621 s, 520 of them building.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="$PWD/target/vendor-tests"
# Bound per step, cold build included (a step that needs longer has hung).
STEP_LIMIT="${KEEL_VENDOR_TEST_STEP_LIMIT:-1200}"

step() {
  local what="$1"
  shift
  echo "== vendor tests: $what"
  echo "   $*"
  local start=$SECONDS
  if ! timeout --kill-after=30 "$STEP_LIMIT" "$@"; then
    echo "== vendor tests: FAILED (or over ${STEP_LIMIT} s): $what" >&2
    exit 1
  fi
  echo "== vendor tests: $what: $((SECONDS - start)) s"
}

started=$SECONDS

# openraft: every unit test of the crate, with the features Keel builds it
# with (serde, storage-v2; the commit-linger tests need storage-v2), then
# with generic-snapshot-data added, which compiles upstream's tests of the
# chunked snapshot transport (as upstream's CI runs them). The doc tests
# are all marked `ignore` upstream and are not run.
step "openraft unit tests (serde, storage-v2)" \
  cargo test --locked --manifest-path crates/vendor/openraft/Cargo.toml \
  --features serde,storage-v2 --lib
step "openraft unit tests (serde, storage-v2, generic-snapshot-data)" \
  cargo test --locked --manifest-path crates/vendor/openraft/Cargo.toml \
  --features serde,storage-v2,generic-snapshot-data --lib

# sled: its unit tests and every test file (the log, trees with restarts and
# recovery, crash recovery of killed child processes, injected I/O failures,
# space leaks, idle CPU), in release with the `testing` feature, as
# upstream's CI runs them; Keel's default features stay on. Doc tests are
# API examples (each its own binary to build) and are not run.
step "sled unit and integration tests (release, testing)" \
  cargo test --locked --manifest-path crates/vendor/sled/Cargo.toml \
  --release --features testing --lib --tests

echo "== vendor tests: all passed in $((SECONDS - started)) s"
