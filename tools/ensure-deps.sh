#!/usr/bin/env bash
# Make sure the Debian packages dlock builds and tests with are installed, and the
# npm packages of the client tests (tests/service/clients/node: ioredis, at the exact
# version its package-lock.json pins).
# As root, missing Debian packages are installed with apt-get; otherwise the exact
# command is printed and the script fails, so `make` stops with a message instead of a
# confusing compiler error. The npm packages are installed by `npm ci` into that
# directory's node_modules (ignored by git), again only when they are missing or the
# lock file changed: CI's dependency step does it, and a build after it downloads
# nothing.
set -euo pipefail

pkgs=(cmake make gcc pkg-config libhiredis-dev libssl-dev libcmocka-dev redis-server redis-tools)
# rediss:// (TLS) is built on libssl-dev (above); the openssl command makes certificates
# by hand for the TLS setups docs/guide.md shows.
pkgs+=(openssl)
# dlockd's event loop, and the Redis clients its tests use as any user would (redis-cli
# comes with redis-tools).
pkgs+=(libuv1-dev python3-redis php-cli php-redis)
# The fault suite's network-namespace tier (fault_partition, in `make test-faults`)
# builds its network with ip(8) and iptables-restore(8); a fresh Debian 12 has neither
# for certain, and the test fails (never skips) without them.
pkgs+=(iproute2 iptables)
# redis-servers on a clock of their own (the test support's dh_server_opts.clock):
# libfaketime, preloaded into them.
pkgs+=(libfaketime)
# A real seccomp filter (test_no_randomness: the kernel refusing getrandom), made with
# libseccomp.
pkgs+=(libseccomp-dev)
# `make model`: Spin searches the Promela model of fences (model/fencing.pml).
pkgs+=(spin)
# Node for the ioredis client test. A machine with node and npm (Debian's, or another
# build on PATH) keeps them: Debian's npm would not install beside another nodejs.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  pkgs+=(nodejs npm)
fi
# Extra packages for one purpose: `ensure-deps.sh valgrind`, `ensure-deps.sh format`.
for extra in "$@"; do
  case "$extra" in
    valgrind) pkgs+=(valgrind) ;;
    format) pkgs+=(clang-format) ;;
    clang) pkgs+=(clang libclang-rt-14-dev) ;;
    *) echo "ensure-deps.sh: unknown extra '$extra'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "dlock needs these Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The npm packages, installed exactly as locked (npm ci), when node_modules is not what
# the lock file says: a copy of the lock file kept in node_modules records the last
# install. No install scripts run: the client tests need none.
node_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/service/clients/node"
stamp="$node_dir/node_modules/.dlock-package-lock.json"
if ! cmp -s "$node_dir/package-lock.json" "$stamp"; then
  echo "installing the npm packages of $node_dir (npm ci)" >&2
  (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  cp "$node_dir/package-lock.json" "$stamp"
fi
