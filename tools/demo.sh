#!/usr/bin/env bash
# `make demo`: a short lock showcase on a redis-server of its own (loopback, a temp
# dir, stopped on exit and on Ctrl-C). The flash-sale demo (issue 6) will replace it.
set -euo pipefail
build=${1:-build}
dlock="$build/dlock"
[ -x "$dlock" ] || { echo "demo: $dlock is not built (run make)" >&2; exit 1; }

dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT INT TERM

# A free loopback port: try random ones until a server starts and answers.
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 20000))
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize no &
  pid=$!
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    redis-cli -p "$port" ping >/dev/null 2>&1 && break 2
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=
done
[ -n "$pid" ] || { echo "demo: could not start redis-server" >&2; exit 1; }
export DLOCK_SERVERS="redis://127.0.0.1:$port"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
step dlock acquire -t 10s nightly-backup
read -r token fence < <("$dlock" acquire -t 10s -l "demo holder" nightly-backup)
echo "$token $fence"
step dlock status nightly-backup
"$dlock" status nightly-backup
step dlock acquire -w 0 nightly-backup "   # a second owner is refused: exit 75"
set +e; "$dlock" acquire -w 0 nightly-backup; echo "exit $?"; set -e
step dlock extend -t 60s nightly-backup "$token"
"$dlock" extend -t 60s nightly-backup "$token" && echo "extended"
step dlock release nightly-backup "$token"
"$dlock" release nightly-backup "$token" && echo "released"
step dlock release nightly-backup "$token" "   # twice: the lock is not ours any more: exit 73"
set +e; "$dlock" release nightly-backup "$token"; echo "exit $?"; set -e
step dlock acquire nightly-backup "   # the next holder's fence is larger"
read -r token2 fence2 < <("$dlock" acquire nightly-backup)
echo "$token2 $fence2"
[ "$fence2" -gt "$fence" ] && echo "fence $fence2 > $fence"
"$dlock" release nightly-backup "$token2"
step dlock status --json nightly-backup
"$dlock" --json status nightly-backup
