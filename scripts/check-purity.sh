#!/usr/bin/env bash
# Checks that keel-metadata, the pure core, stays pure (DESIGN.md §2):
#
# 1. its normal dependencies include no async runtime, storage, RPC or
#    protobuf crate (`cargo tree -p keel-metadata -e normal`);
# 2. its lib denies clippy's disallowed_methods / disallowed_types lints,
#    so the list in crates/keel-metadata/clippy.toml is an error, not a hint;
# 3. that list bites: a canary file using a clock, a thread, a file, the
#    network, the environment and an OS-seeded map fails clippy under it;
# 4. every path in that list names something that exists (clippy only
#    warns about a path that resolves to nothing, e.g. after a rand upgrade
#    renames a function, and then silently stops enforcing it).
#
# Exit 0 when all hold; non-zero with a message naming the failure.
set -euo pipefail
cd "$(dirname "$0")/.."

crate=crates/keel-metadata
fail() {
  echo "check-purity: $*" >&2
  exit 1
}

echo "== keel-metadata: normal dependencies"
forbidden='tokio|sled|tonic|prost|openraft|hyper|mio|socket2|h2|axum|tower'
tree=$(cargo tree -p keel-metadata -e normal --target all --prefix none --no-dedupe)
if bad=$(grep -E "^(${forbidden})(-[A-Za-z0-9_-]+)? v" <<<"$tree" | sort -u) && [ -n "$bad" ]; then
  fail "the pure core depends on: $(tr '\n' ' ' <<<"$bad")"
fi
echo "ok: none of ${forbidden//|/, }"

echo "== keel-metadata: lints denied in src/lib.rs"
grep -qF '#![deny(clippy::disallowed_methods, clippy::disallowed_types)]' "$crate/src/lib.rs" ||
  fail "$crate/src/lib.rs no longer denies clippy::disallowed_methods and clippy::disallowed_types"
[ -f "$crate/clippy.toml" ] || fail "$crate/clippy.toml is missing"
echo "ok"

echo "== keel-metadata: clippy.toml rejects a canary"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One forbidden use per line; each must be reported.
cat >"$tmp/canary.rs" <<'EOF'
pub fn canary() {
    let _ = std::time::Instant::now();
    let _ = std::time::SystemTime::now();
    let _ = std::thread::spawn(|| ());
    let _ = std::fs::read_to_string("x");
    let _ = std::env::var("X");
    let _: Option<std::collections::HashMap<u8, u8>> = None;
    let _: Option<std::net::TcpStream> = None;
    let _: Option<std::fs::File> = None;
}
EOF
expected=(
  'method `std::time::Instant::now`'
  'method `std::time::SystemTime::now`'
  'method `std::thread::spawn`'
  'method `std::fs::read_to_string`'
  'method `std::env::var`'
  'type `std::collections::HashMap`'
  'type `std::net::TcpStream`'
  'type `std::fs::File`'
)
set +e
out=$(CLIPPY_CONF_DIR="$crate" clippy-driver --edition 2021 --crate-type lib --emit=metadata \
  -o "$tmp/canary.rmeta" -D clippy::disallowed_methods -D clippy::disallowed_types \
  "$tmp/canary.rs" 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "clippy accepted the canary; $crate/clippy.toml forbids nothing"
for e in "${expected[@]}"; do
  grep -qF "use of a disallowed $e" <<<"$out" || fail "clippy.toml no longer forbids $e"
done
echo "ok: ${#expected[@]} forbidden uses reported"

echo "== keel-metadata: every clippy.toml path resolves"
out=$(cargo clippy -p keel-metadata --all-targets -- -D warnings 2>&1) || {
  echo "$out" >&2
  fail "cargo clippy -p keel-metadata failed"
}
if grep -F 'does not refer to' <<<"$out"; then
  fail "$crate/clippy.toml names paths that do not exist (see above)"
fi
echo "ok"
