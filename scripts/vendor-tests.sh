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

# Whether the sled step's log (cargo test --no-fail-fast) failed only in
# test_tree_failpoints, only in quickcheck_tree_with_failpoints, and with the
# known upstream message.
only_known_sled_failure() {
  local log="$1"
  grep -q "Tree::fmt failed to read node .* that has been freed" "$log" || return 1
  # Every failed target cargo names (`--lib`, `--test NAME`, `--bin NAME`).
  local targets
  targets=$(grep -oE '`--(lib|test [A-Za-z0-9_]+|bin [A-Za-z0-9_]+)`' "$log" | sort -u)
  [[ "$targets" == '`--test test_tree_failpoints`' ]] || return 1
  [[ $(grep -c "^test result: FAILED" "$log") == 1 ]] || return 1
  # The failed tests the harness lists after its second "failures:".
  local failed
  failed=$(awk '/^failures:$/ {n++; next} n == 2 && /^    [A-Za-z0-9_:]+$/ {print $1} /^test result:/ {n = 0}' "$log" | sort -u)
  [[ "$failed" == "quickcheck_tree_with_failpoints" ]]
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
#
# One known upstream failure is retried once: sled 0.34.7's randomized
# `quickcheck_tree_with_failpoints` rarely finds, at a reopen, a tree that
# points at a freed node ("Tree::fmt failed to read node N that has been
# freed"); pristine 0.34.7 fails the recorded input as often as this copy
# (PATCHES.md, "Known upstream behaviour"). When that test is the only
# failure of the step and fails with that message, it runs once more and
# must pass; any other failure fails the step at once.
sled_tests=(cargo test --locked --manifest-path crates/vendor/sled/Cargo.toml
  --release --features testing)
sled_log="$CARGO_TARGET_DIR/sled-tests.log"
mkdir -p "$CARGO_TARGET_DIR"
if ! step "sled unit and integration tests (release, testing)" \
  "${sled_tests[@]}" --no-fail-fast --lib --tests 2>&1 | tee "$sled_log"; then
  if only_known_sled_failure "$sled_log"; then
    echo "== vendor tests: the known upstream failure of quickcheck_tree_with_failpoints; running it once more"
    step "sled quickcheck_tree_with_failpoints, again" \
      "${sled_tests[@]}" --test test_tree_failpoints quickcheck_tree_with_failpoints
  else
    exit 1
  fi
fi

echo "== vendor tests: all passed in $((SECONDS - started)) s"
