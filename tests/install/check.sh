#!/usr/bin/env bash
# Checks an installed dlock from its installed paths only, as its users meet it, with
# no LD_LIBRARY_PATH and nothing of the build tree but this directory's sources:
#
#   tests/install/check.sh prefix PREFIX    what `make install PREFIX=PREFIX` wrote
#   tests/install/check.sh deb DIR          the packages in DIR (`make deb`): installs
#                                           them with apt, checks, then purges them
#
# For both: `dlock --version` and `dlockd --version`; a lock taken, seen held and
# released with the installed dlock against a redis-server of its own; the installed
# dlockd serving LOCK and UNLOCK to redis-cli on a unix socket with the mode asked
# for; a C program built with `pkg-config --cflags --libs dlock`, and one with CMake's
# find_package(dlock), each taking and releasing a lock; the systemd unit as systemd
# reads it. For the packages also: the settings file is a conffile, the unit is
# enabled, and a purge leaves none of their files behind. The machine is left as it
# was: the packages must not be installed before (the check refuses), and are purged
# after, whatever happened.
#
# Needs redis-server, redis-cli, cc, pkg-config, cmake and systemd-analyze (CI runs it
# after `make test` and `make deb`, whose package groups bring them); a missing one
# fails the check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-}
where=${2:-}
case "$mode" in
prefix | deb) [ -n "$where" ] || mode= ;;
esac
[ -n "$mode" ] || { echo "usage: tests/install/check.sh prefix PREFIX | deb DIR" >&2; exit 64; }
where=$(cd "$where" && pwd)
ver=$(sed -n 's/^#define DLOCK_VERSION_STRING "\(.*\)"/\1/p' "$here/../../include/dlock.h")
unset LD_LIBRARY_PATH

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
# check DESCRIPTION CMD...: one assertion, its output shown when it fails.
check() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then ok "$what"; else fail "$what"; printf '%s\n' "$out" | sed 's/^/    /'; fi
}
need() { command -v "$1" >/dev/null || { echo "tests/install/check.sh: $1 is not installed" >&2; exit 1; }; }
for t in redis-server redis-cli cc pkg-config cmake systemd-analyze; do need "$t"; done

tmp=$(mktemp -d)
pkgs=(libdlock0 libdlock-dev dlock dlockd)
# The packages and their debug symbols, configuration files included.
purge() {
  local ours
  mapfile -t ours < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${pkgs[@]}" \
    "${pkgs[@]/%/-dbgsym}" 2>/dev/null | awk '$2 != "not-installed" {print $1}')
  [ ${#ours[@]} -eq 0 ] || dpkg -P "${ours[@]}" >/dev/null
  installed=0
}
cleanup() {
  [ -f "$tmp/redis.pid" ] && kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true
  [ -n "${dlockd_pid:-}" ] && kill "$dlockd_pid" 2>/dev/null || true
  [ "$mode" != deb ] || [ "${installed:-0}" = 0 ] || purge
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ "$mode" = deb ]; then
  for p in "${pkgs[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
      echo "tests/install/check.sh: $p is installed already; the check leaves a machine as it found it, so it will not touch that one" >&2
      exit 1
    fi
  done
  echo "== apt-get install $where/*.deb"
  installed=1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$where"/*.deb >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; exit 1; }
  bindir=/usr/bin sbindir=/usr/sbin
  unit=/lib/systemd/system/dlockd.service
  cmake_prefix=/usr
else
  bindir=$where/bin sbindir=$where/sbin
  unit=$where/lib/systemd/system/dlockd.service
  cmake_prefix=$where
  export PKG_CONFIG_PATH
  PKG_CONFIG_PATH=$(dirname "$(find "$where" -name dlock.pc | head -1)")
fi

echo "== the programs"
check "dlock --version says $ver" sh -c "'$bindir/dlock' --version | grep -qx 'dlock $ver (libdlock $ver)'"
check "dlockd --version says $ver" sh -c "'$sbindir/dlockd' --version | grep -qx 'dlockd $ver'"
for b in "$bindir/dlock" "$sbindir/dlockd"; do
  check "$(basename "$b") finds libdlock as installed" sh -c "ldd '$b' | grep -q 'libdlock.so.0 => /'"
done

redis-server --port 0 --unixsocket "$tmp/redis.sock" --daemonize yes --dir "$tmp" \
  --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" --save '' --appendonly no
for _ in $(seq 50); do [ -S "$tmp/redis.sock" ] && break; sleep 0.1; done
url="unix://$tmp/redis.sock"
dlock=("$bindir/dlock" -s "$url")
# status_says NAME PATTERN: the installed dlock's status line of NAME matches PATTERN.
status_says() { "${dlock[@]}" status "$1" | grep -q "$2"; }

echo "== a lock with the installed dlock"
read -r token fence < <("${dlock[@]}" acquire -t 30s install-job)
check "acquire prints a token and a fence" test "${#token}" -eq 32 -a "${fence:-0}" -gt 0
check "status: held" status_says install-job 'install-job: held by'
check "a second acquire is refused (exit 75)" sh -c "'$bindir/dlock' -s '$url' acquire -w 0 install-job; test \$? -eq 75"
check "release" "${dlock[@]}" release install-job "$token"
check "status: free" status_says install-job 'install-job: free'
check "run holds it while the command runs" \
  "${dlock[@]}" run install-run -- sh -c "'$bindir/dlock' -s '$url' status install-run | grep -q held"

echo "== the installed dlockd"
"$sbindir/dlockd" -s "$url" --port 0 --unixsocket "$tmp/dlockd.sock" --unixsocketperm 770 \
  >"$tmp/dlockd.log" 2>&1 &
dlockd_pid=$!
for _ in $(seq 50); do [ -S "$tmp/dlockd.sock" ] && break; sleep 0.1; done
check "its socket has the mode asked for" test "$(stat -c %a "$tmp/dlockd.sock")" = 770
dtoken=$(redis-cli -s "$tmp/dlockd.sock" LOCK install-d TTL 30000 DETACHED | head -1)
check "LOCK through dlockd gives a token" test "${#dtoken}" -eq 32
check "dlock sees dlockd's lock" status_says install-d 'install-d: held by'
check "UNLOCK through dlockd" test "$(redis-cli -s "$tmp/dlockd.sock" UNLOCK install-d "$dtoken")" = 1
kill -TERM "$dlockd_pid"
status=0
wait "$dlockd_pid" || status=$?
dlockd_pid=
check "dlockd exits 0 on SIGTERM" test "$status" -eq 0

echo "== programs built against the installed library"
# pkg-config gives no run path: outside the system's directories the program names
# the library's, as any user's program would.
rpath=$(pkg-config --variable=libdir dlock)
# shellcheck disable=SC2046
check "pkg-config --cflags --libs dlock: builds" \
  cc -std=c11 -Wall -Werror "$here/consumer.c" -o "$tmp/consumer" $(pkg-config --cflags --libs dlock) \
  -Wl,-rpath,"$rpath"
check "pkg-config's program takes and releases a lock" "$tmp/consumer" "$url"
check "find_package(dlock): configures and builds" sh -c \
  "cmake -S '$here' -B '$tmp/cm' -DCMAKE_PREFIX_PATH='$cmake_prefix' >'$tmp/cm.log' 2>&1 &&
   cmake --build '$tmp/cm' >>'$tmp/cm.log' 2>&1 || { cat '$tmp/cm.log'; exit 1; }"
check "find_package's program takes and releases a lock" "$tmp/cm/consumer" "$url"

echo "== the systemd unit"
check "systemd-analyze verify" systemd-analyze verify --man=no "$unit"
check "ExecStart is the installed dlockd" grep -qx "ExecStart=$sbindir/dlockd \$DLOCKD_OPTS" "$unit"
check "RuntimeDirectory=dlockd" grep -qx 'RuntimeDirectory=dlockd' "$unit"
if [ "$mode" = deb ]; then
  check "/etc/default/dlockd is a conffile" sh -c "dpkg-query -W -f='\${Conffiles}' dlockd | grep -q '/etc/default/dlockd '"
  check "the unit is enabled" test -L /etc/systemd/system/multi-user.target.wants/dlockd.service
  # The packages' files, listed before the purge, then looked for after it.
  dpkg -L "${pkgs[@]}" | sort -u >"$tmp/files"
  purge
  left=$(while read -r f; do [ ! -f "$f" ] || echo "$f"; done <"$tmp/files")
  check "purged: no file of theirs left" test -z "$left"
  check "purged: the settings file gone" test ! -e /etc/default/dlockd
  check "purged: the unit no longer enabled" test ! -e /etc/systemd/system/multi-user.target.wants/dlockd.service
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
