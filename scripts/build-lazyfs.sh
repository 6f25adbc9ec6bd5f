#!/usr/bin/env bash
# Builds the vendored LazyFS (crates/vendor/lazyfs) into target/lazyfs:
# `lazyfs` and the `libpcache.so` it loads from its own folder. The power-cut
# tests (tests/power.rs) mount one LazyFS per node from there (or from
# $KEEL_LAZYFS). Installs the Debian packages it needs when they are
# missing (needs root). Takes about a minute on two cores; does nothing when
# the binary is already built from the current sources.
#
# Usage: scripts/build-lazyfs.sh [OUT_DIR]   (default: target/lazyfs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/crates/vendor/lazyfs"
out=${1:-$root/target/lazyfs}
stamp="$out/.sources"
sum=$(cd "$src" && find lazyfs libs -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ -x "$out/lazyfs" ] && [ -f "$out/libpcache.so" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
  echo "$out/lazyfs (up to date)"
  exit 0
fi
need=()
for p in cmake g++ make libfuse3-dev fuse3 libtoml11-dev libspdlog-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
work="$out/build"
rm -rf "$work"
mkdir -p "$work"
cp -r "$src/lazyfs" "$src/libs" "$work/"
(cd "$work/libs/libpcache" && cmake -S . -B build >/dev/null && cmake --build build -j"$(nproc)" >/dev/null)
(cd "$work/lazyfs" && cmake -S . -B build -DLAZYFS_BUILD_TESTS=OFF >/dev/null && cmake --build build -j"$(nproc)" >/dev/null)
# Copied beside, then renamed over: a LazyFS still running from the old
# binary (another test's mount) keeps it, and `cp` onto a running binary
# would fail ("Text file busy").
for f in lazyfs/build/lazyfs libs/libpcache/build/libpcache.so; do
  cp "$work/$f" "$out/.$(basename "$f").new"
  mv -f "$out/.$(basename "$f").new" "$out/$(basename "$f")"
done
echo "$sum" > "$stamp"
echo "$out/lazyfs"
