#!/usr/bin/env bash
# Make sure the Debian packages dlock builds and tests with are installed.
# As root, missing ones are installed with apt-get; otherwise the exact command is
# printed and the script fails, so `make` stops with a message instead of a
# confusing compiler error.
set -euo pipefail

pkgs=(cmake make gcc pkg-config libhiredis-dev libssl-dev libcmocka-dev redis-server redis-tools)
# dlockd's event loop, and the Redis clients its tests use as any user would (redis-cli
# comes with redis-tools).
pkgs+=(libuv1-dev python3-redis php-cli php-redis)
# The fault suite's network-namespace tier (fault_partition, in `make test-faults`)
# builds its network with ip(8) and iptables-restore(8); a fresh Debian 12 has neither
# for certain, and the test fails (never skips) without them.
pkgs+=(iproute2 iptables)
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
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "dlock needs these Debian packages: ${missing[*]}" >&2
  echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
