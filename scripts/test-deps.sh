#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian 12 machine (run as root,
# once; .ci/run runs it too):
#   - Debian packages (each named below with the tests that use it);
#   - LazyFS, built from crates/vendor/lazyfs into target/lazyfs;
#   - a Python virtual environment with pinned packages
#     (scripts/requirements-test.txt) in target/venv: the tests run Python
#     clients nobody here wrote from there (KEEL_TEST_PYTHON overrides it).
# Idempotent: what is already there is not installed again.
set -euo pipefail
cd "$(dirname "$0")/.."

# iptables: the partition tests and the Jepsen nemesis cut links with DROP
#   rules in a chain of their own;
# faketime: a wall clock stepped under running processes;
# iproute2: tc, the Jepsen net-slow nemesis's netem on lo (our addresses only);
# stress-ng: a CPU hog on every core while large decisions commit;
# strace: slows every fdatasync of the controllers by an injected delay;
# fiu-utils: libfiu, file system calls of a running node fail with EIO or ENOSPC;
# kcat: librdkafka's kcat lists a cluster through the brokers' Kafka listeners;
# chromium, chromium-driver: a real browser for the web console test (tests/console.rs);
# systemd: systemd-analyze verify checks deploy/systemd's units (tests/deploy.rs);
# python3-venv: the virtual environment below.
need=()
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || need+=(faketime)
command -v stress-ng >/dev/null 2>&1 || need+=(stress-ng)
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v fiu-ctrl >/dev/null 2>&1 || need+=(fiu-utils)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# prometheus: promtool checks deploy/prometheus/alerts.yml and a live scrape
# (tests/deploy.rs); without its recommended node exporter, which would
# take port 9100 (keel dev's metrics ports). Its server is not used; where
# systemd runs, the package starts it (on :9090), so it is stopped.
if ! command -v promtool >/dev/null 2>&1; then
  echo "== installing prometheus (for promtool)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

# LazyFS (the power-cut tests put every node's data dir on one).
echo "== lazyfs"
scripts/build-lazyfs.sh

# The pinned Python packages, in target/venv (recreated when the pins change).
echo "== python venv (target/venv)"
venv=target/venv
reqs=scripts/requirements-test.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$reqs" "$venv/requirements-test.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs"
  cp "$reqs" "$venv/requirements-test.txt"
fi
"$venv/bin/python" --version
