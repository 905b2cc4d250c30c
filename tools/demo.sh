#!/usr/bin/env bash
# `make demo`: the flash sale, on three redis-server processes of its own.
#
#   tools/demo.sh [BUILD_DIR] [--quick]
#
# Starts 3 redis-server on free 127.0.0.1 ports (a temp dir, no persistence; stopped by
# PID on exit, Ctrl-C or TERM), then:
#   0. the sale without a lock, to show what the lock prevents (not a check);
#   1. the flash sale: buyer processes sell a stock through dlock (Redlock on 3 nodes);
#   2. the same sale, with node 3 killed (SIGKILL) once a third of the stock is sold;
#   3. fencing: holder A is stopped (SIGSTOP) past its lease, B takes the lock and
#      writes, A resumes and writes with its old fence: the resource refuses it.
# and prints a short report. Exits non-zero when anything was oversold, a fence did not
# increase, or a scene did not go as told. Needs bash, redis-server, redis-cli and the
# examples (build/dlock-flash-sale, build/dlock-fenced-write); nothing else.
# --quick (the CTest smoke test): fewer buyers and a smaller stock.
set -euo pipefail

build=build
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -*) echo "usage: tools/demo.sh [BUILD_DIR] [--quick]" >&2; exit 64 ;;
    *) build=$arg ;;
  esac
done
sale="$build/dlock-flash-sale"
fenced="$build/dlock-fenced-write"
for bin in "$sale" "$fenced"; do
  [ -x "$bin" ] || { echo "demo: $bin is not built (run make)" >&2; exit 1; }
done
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null ||
    { echo "demo: $tool not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

if [ "$quick" = 1 ]; then buyers=4 stock=200; else buyers=8 stock=1000; fi
ttl_a=300     # A's lease in the fencing scene, ms
work_a=200    # A's work between its two writes, ms (its lease covers it, if not paused)

t_start=${EPOCHREALTIME/./}

dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo.XXXXXX")
declare -a spid=() sport=()   # the servers: PID and port, index 1..3
jobs_pids=()                  # other processes we started (a sale, holder A)
# shellcheck disable=SC2317 # cleanup and on_signal run from traps
cleanup() {
  local p
  trap - EXIT INT TERM
  # A stopped process keeps a TERM pending until it continues: send CONT too.
  for p in "${jobs_pids[@]}"; do kill -TERM "$p" 2>/dev/null && kill -CONT "$p" 2>/dev/null; done
  for p in "${spid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
# A signal that reaches bash just as it forks a $(...) can run its trap in that
# subshell: pass it on to the script itself, which then cleans up.
# shellcheck disable=SC2317
on_signal() {
  if [ "$BASHPID" != "$$" ]; then kill -s "$1" "$$"; fi
  exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

# Start server $1 (1..3) on port $2, or on a free port: try random ones until a
# server of ours answers (its INFO names our PID, not somebody else's).
start_server() {
  local i=$1 want=${2:-} port pid info
  for _ in $(seq 20); do
    port=${want:-$((20000 + RANDOM % 20000))}
    redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes --save "" \
      --appendonly no --dir "$dir" --logfile "$dir/redis-$i.log" --daemonize no &
    pid=$!
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      info=$(redis-cli -p "$port" info server 2>/dev/null || true)
      if [[ "$info" == *$'\n'"process_id:$pid"$'\r'* ]]; then
        spid[i]=$pid sport[i]=$port
        return 0
      fi
      sleep 0.02
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ -z "$want" ] || break
  done
  echo "demo: could not start redis-server $i" >&2
  exit 1
}

failures=()
fail() { failures+=("$*"); }

# Read a RESULT line ("RESULT k=v k=v ...") from file $2 into the associative array $1.
read_result() {
  local -n res=$1
  local line kv
  line=$(grep '^RESULT ' "$2" || true)
  [ -n "$line" ] || { res["ok"]=no; return 0; }
  for kv in ${line#RESULT }; do
    # shellcheck disable=SC2034 # res is a nameref: it fills the caller's array
    res["${kv%%=*}"]=${kv#*=}
  done
}

# GET key $1 on node 1 over the connection on $stock_fd: the value in REPLY ("" for
# nil); fails when the server does not answer.
stock_get() {
  local head
  printf 'GET %s\r\n' "$1" >&"$stock_fd" || return 1
  IFS= read -r -t 2 -u "$stock_fd" head || return 1
  REPLY=
  [[ "$head" == \$[0-9]* ]] || return 0 # $-1 (nil)
  IFS= read -r -t 2 -u "$stock_fd" REPLY || return 1
  REPLY=${REPLY%$'\r'}
}

# nap: sleep 5 ms without starting a process (a read that times out on a pipe that
# never carries data: we hold its write end).
exec {nap_fd}<> <(:)
nap() { read -r -t 0.005 -u "$nap_fd" || true; }

# Show a program's messages when its scene failed.
show_log() { sed 's/^/    | /' "$@" | head -20 >&2; }

# 12345 -> "12.3": microseconds as milliseconds, or milliseconds as seconds.
ms() {
  local v=$1 sign=
  [ "$v" -lt 0 ] && sign=- v=$((-v))
  printf '%s%d.%d' "$sign" $((v / 1000)) $(((v % 1000) / 100))
}
s1() { ms "$1"; }

for i in 1 2 3; do start_server "$i"; done
urls="redis://127.0.0.1:${sport[1]},redis://127.0.0.1:${sport[2]},redis://127.0.0.1:${sport[3]}"

bold=; off=
if [ -t 1 ]; then bold=$'\033[1m' off=$'\033[0m'; fi
printf '%sdlock demo%s: 3 redis-server on 127.0.0.1:%s,%s,%s (temp dir, no persistence)\n' \
  "$bold" "$off" "${sport[1]}" "${sport[2]}" "${sport[3]}"
printf 'the stock lives on node 1; the lock "stock:ITEM" is taken on a quorum of the 3\n\n'

# ---- 0. no lock ----------------------------------------------------------------------
"$sale" -s "$urls" -b "$buyers" -n "$stock" -i nolock -u -q \
  >"$dir/sale0.out" 2>"$dir/sale0.err" || true
declare -A r0=()
read_result r0 "$dir/sale0.out"
printf 'without a lock   %d buyers sold %s units of a stock of %d: oversold %s\n' \
  "$buyers" "${r0[sold]:-?}" "$stock" "${r0[oversold]:-?}"

# ---- 1. the flash sale -----------------------------------------------------------------
declare -A r1=()
rc=0
"$sale" -s "$urls" -b "$buyers" -n "$stock" -i sku-1 -T 200 -q \
  >"$dir/sale1.out" 2>"$dir/sale1.err" || rc=$?
read_result r1 "$dir/sale1.out"
printf '1. flash sale    %d buyer processes, stock %d, Redlock on 3 nodes\n' "$buyers" "$stock"
printf '   sold %s, oversold %s, stock left %s, in %s s\n' "${r1[sold]:-?}" \
  "${r1[oversold]:-?}" "${r1[left]:-?}" "$(s1 "${r1[elapsed_ms]:-0}")"
printf '   %s handoffs between buyers: latency p50 %s ms, p99 %s ms\n' "${r1[handoffs]:-?}" \
  "$(ms "${r1[handoff_p50_us]:-0}")" "$(ms "${r1[handoff_p99_us]:-0}")"
printf '   fences %s .. %s over %s sections, strictly increasing: %s\n' \
  "${r1[fence_first]:-?}" "${r1[fence_last]:-?}" "${r1[sections]:-?}" "${r1[fences_increasing]:-?}"
if [ "${r1[oversold]:-}" != 0 ] || [ "${r1[fences_increasing]:-}" != yes ]; then
  fail "1. flash sale: oversold ${r1[oversold]:-?}," \
    "fences strictly increasing: ${r1[fences_increasing]:-?}"
fi
if [ "$rc" -ne 0 ] || [ "${r1[ok]}" != yes ]; then
  fail "1. flash sale: checks failed (exit $rc)"
  show_log "$dir/sale1.out" "$dir/sale1.err"
fi

# ---- 2. the same, node 3 killed mid-run -------------------------------------------------
"$sale" -s "$urls" -b "$buyers" -n "$stock" -i sku-2 -T 200 -q \
  >"$dir/sale2.out" 2>"$dir/sale2.err" &
sale_pid=$!
jobs_pids+=("$sale_pid")
t_sale=${EPOCHREALTIME/./}
# Wait for the first third to go, reading the stock on node 1 every few ms through one
# connection bash keeps open (no process per read: the sale can be quick), at most 30 s.
exec {stock_fd}<>"/dev/tcp/127.0.0.1/${sport[1]}"
left=
while kill -0 "$sale_pid" 2>/dev/null && [ $((${EPOCHREALTIME/./} - t_sale)) -lt 30000000 ]; do
  stock_get stock:sku-2 && [[ "$REPLY" =~ ^[0-9]+$ ]] && [ "$REPLY" -le $((stock * 2 / 3)) ] &&
    break
  nap
done
t_kill=${EPOCHREALTIME/./}
# Disowned first, or bash prints its own "Killed" line; it still reaps the process.
disown "${spid[3]}"
kill -KILL "${spid[3]}"
for _ in $(seq 400); do kill -0 "${spid[3]}" 2>/dev/null || break; nap; done
unset 'spid[3]'
left_at_kill='?'
stock_get stock:sku-2 && left_at_kill=$REPLY
exec {stock_fd}>&-
rc=0
wait "$sale_pid" || rc=$?
jobs_pids=()
declare -A r2=()
read_result r2 "$dir/sale2.out"
printf '2. node 3 killed (SIGKILL) %s ms into the same sale, with %s units left\n' \
  $(((t_kill - t_sale) / 1000)) "$left_at_kill"
printf '   sold %s, oversold %s, stock left %s, in %s s: %s sold on the 2 nodes left\n' \
  "${r2[sold]:-?}" "${r2[oversold]:-?}" "${r2[left]:-?}" "$(s1 "${r2[elapsed_ms]:-0}")" \
  "$left_at_kill"
printf '   failed acquires %s; fences strictly increasing: %s\n' \
  "${r2[failed_acquires]:-?}" "${r2[fences_increasing]:-?}"
if [ "${r2[oversold]:-}" != 0 ] || [ "${r2[fences_increasing]:-}" != yes ]; then
  fail "2. node killed: oversold ${r2[oversold]:-?}," \
    "fences strictly increasing: ${r2[fences_increasing]:-?}"
fi
if [ "$rc" -ne 0 ] || [ "${r2[ok]}" != yes ]; then
  fail "2. node killed: checks failed (exit $rc)"
  show_log "$dir/sale2.out" "$dir/sale2.err"
fi
if ! [[ "$left_at_kill" =~ ^[0-9]+$ ]] || [ "$left_at_kill" -eq 0 ]; then
  fail "2. node killed: the kill did not land mid-sale (units left: $left_at_kill)"
fi

# ---- 3. fencing --------------------------------------------------------------------------
# Node 3 comes back on its port, empty: fences still increase (their server-TIME floor).
start_server 3 "${sport[3]}"
printf '3. fencing       node 3 restarted empty; A holds "report" with a %d ms lease\n' "$ttl_a"
mkfifo "$dir/a.out"
"$fenced" -s "$urls" -a A -t "$ttl_a" -n 2 -p "$work_a" report register "A's report" \
  >"$dir/a.out" 2>"$dir/a.err" &
a_pid=$!
jobs_pids+=("$a_pid")
exec {a_fd}<"$dir/a.out"
a_lines=()
working='' stopped=
# A prints one line per step. When it says its lease covers its next piece of work,
# stop it (a GC pause, a swapped-out process): it will not run again until B is done.
while IFS= read -r -t 5 -u "$a_fd" line; do
  a_lines+=("$line")
  if [[ "$line" == *"lease has"* ]]; then
    working=yes
    kill -STOP "$a_pid"
    t_stop=${EPOCHREALTIME/./}
    # The signal takes effect asynchronously: wait (up to 2 s) to see A stopped.
    for _ in $(seq 400); do
      stat=$(<"/proc/$a_pid/stat") || break
      state=${stat##*) }
      [ "${state%% *}" = T ] && { stopped=yes; break; }
      nap
    done
    break
  fi
done
rc_b=0
"$fenced" -s "$urls" -a B -w 5000 report register "B's report" >"$dir/b.out" 2>&1 || rc_b=$?
kill -CONT "$a_pid" 2>/dev/null || true
t_cont=${EPOCHREALTIME/./}
while IFS= read -r -t 5 -u "$a_fd" line; do a_lines+=("$line"); done
exec {a_fd}<&-
rc_a=0
wait "$a_pid" || rc_a=$?
jobs_pids=()

# The three writes, from the programs' own lines: "X: wrote "V" with fence F: RESULT".
show_write() {
  local line=$1 who fence verdict value
  who=${line%%:*}
  value=${line#*wrote \"}
  value=${value%%\" with fence*}
  fence=${line##*with fence }
  verdict=${fence#*: }
  fence=${fence%%:*}
  printf '   %s  fence %s  wrote %-20s %s\n' "$who" "$fence" "\"$value\"" "$verdict"
}
a_writes=() b_took=
for line in "${a_lines[@]}"; do [[ "$line" == *" wrote "* ]] && a_writes+=("$line"); done
b_write=$(grep ' wrote ' "$dir/b.out" || true)
b_took=$(sed -n 's/^B: took "report" after \([0-9]*\) ms.*/\1/p' "$dir/b.out")
[ "${#a_writes[@]}" -ge 1 ] && show_write "${a_writes[0]}"
[ -n "$stopped" ] &&
  printf '      A stopped (SIGSTOP) inside that work, for %s ms: its lease runs out\n' \
    $(((t_cont - t_stop) / 1000))
[ -n "$b_write" ] && show_write "$b_write"
[ -n "$b_took" ] &&
  printf '      (B waited %s ms for the lock: the rest of A'"'"'s lease)\n' "$b_took"
[ "${#a_writes[@]}" -ge 2 ] && show_write "${a_writes[1]}"
reg_value=$(redis-cli -p "${sport[1]}" hget register value 2>/dev/null || true)
reg_fence=$(redis-cli -p "${sport[1]}" hget register fence 2>/dev/null || true)
printf '   the resource holds "%s" with fence %s\n' "$reg_value" "$reg_fence"

b_fence=${b_write##*with fence }
b_fence=${b_fence%%:*}
if [ -z "$working" ] || [ -z "$stopped" ]; then
  if [ -z "$working" ]; then
    fail "3. fencing: A did not get to its work (exit $rc_a)"
  else
    fail "3. fencing: A could not be stopped"
  fi
  printf '%s\n' "${a_lines[@]}" >"$dir/a.lines"
  show_log "$dir/a.lines" "$dir/a.err" "$dir/b.out"
elif [ "$rc_a" -ne 3 ] || [ "$rc_b" -ne 0 ] || [ "${#a_writes[@]}" -ne 2 ] ||
  [[ "${a_writes[1]}" != *"REFUSED, DLOCK_ERR_FENCED"* ]] || [ "$reg_value" != "B's report" ] ||
  [ "$reg_fence" != "$b_fence" ]; then
  fail "3. fencing: A's stale write was not refused as expected (A exit $rc_a, B exit $rc_b)"
  printf '%s\n' "${a_lines[@]}" >"$dir/a.lines"
  show_log "$dir/a.lines" "$dir/a.err" "$dir/b.out"
fi

elapsed_ms=$(((${EPOCHREALTIME/./} - t_start) / 1000))
echo
if [ "${#failures[@]}" -eq 0 ]; then
  printf '%sPASS%s: nothing oversold, fences strictly increasing, ' "$bold" "$off"
  printf 'the stale write refused (%s s)\n' "$(s1 "$elapsed_ms")"
  exit 0
fi
printf '%sFAIL%s (%s s):\n' "$bold" "$off" "$(s1 "$elapsed_ms")"
printf '  %s\n' "${failures[@]}"
exit 1
