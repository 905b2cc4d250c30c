#!/usr/bin/env bash
# `make demo`: the flash sale, on three redis-server processes of its own.
#
#   tools/demo.sh [BUILD_DIR] [--quick]
#
# Starts 3 redis-server on free 127.0.0.1 ports through build/dlock-test-servers (the
# test-support library's server launcher: a temp dir, no persistence; the servers stop
# when it does, on exit, Ctrl-C or TERM), then:
#   0. the sale without a lock, to show what the lock prevents (not a check);
#   1. the flash sale: buyer processes sell a stock through dlock (Redlock on 3 nodes);
#   2. the same sale, with node 3 killed (SIGKILL) once a third of the stock is sold;
#   3. fencing: holder A is stopped (SIGSTOP) past its lease, B takes the lock and
#      writes, A resumes and writes with its old fence: the resource refuses it;
#   4. the stock way beside the lock way: a buyer reserves units and is killed
#      (SIGKILL) before paying; its units come back when the lease runs out and are
#      sold to the other buyers: sold exactly the stock, never more;
#   5. the service: the flash sale by PHP buyer processes through dlockd (Redlock on the
#      3 nodes; examples/php/flash_sale.php), one of them killed (SIGKILL) while it
#      holds the lock with the others waiting: its session lock is released when its
#      connection dies, and the lock passes on at once, not when its lease ends.
# and prints a short report. Exits non-zero when anything was oversold, a fence did not
# increase, or a scene did not go as told. Needs bash, redis-server and the built
# programs (build/dlock-test-servers, build/dlock-flash-sale, build/dlock-fenced-write,
# build/dlock-stock-sale, build/dlock, build/dlockd), and php with phpredis (Debian's
# php-cli and php-redis) for scene 5; nothing else.
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
servers="$build/dlock-test-servers"
stock_sale="$build/dlock-stock-sale"
cli="$build/dlock"
dlockd="$build/dlockd"
for bin in "$sale" "$fenced" "$servers" "$stock_sale" "$cli" "$dlockd"; do
  [ -x "$bin" ] || { echo "demo: $bin is not built (run make)" >&2; exit 1; }
done
php_sale="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/examples/php/flash_sale.php"
if ! php -r "exit(class_exists('Redis') ? 0 : 1);" 2>/dev/null; then
  echo "demo: scene 5 needs php with phpredis: apt-get install php-cli php-redis" \
    "(tools/ensure-deps.sh does it as root)" >&2
  exit 1
fi

if [ "$quick" = 1 ]; then buyers=4 stock=200; else buyers=8 stock=1000; fi
held=5        # units the killed buyer holds in the stock scene
lease=1000    # their lease, ms
ttl_a=300     # A's lease in the fencing scene, ms
work_a=200    # A's work between its two writes, ms (its lease covers it, if not paused)

t_start=${EPOCHREALTIME/./}

dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo.XXXXXX")
declare -a sport=()   # the servers' ports, index 1..3
jobs_pids=()          # other processes we started (a sale, holder A)
srv_pid=              # dlock-test-servers, which owns the servers
dlockd_pid=           # dlockd, scene 5
# shellcheck disable=SC2317 # cleanup and on_signal run from traps
cleanup() {
  local p
  trap - EXIT INT TERM
  # A stopped process keeps a TERM pending until it continues: send CONT too.
  for p in "${jobs_pids[@]}"; do kill -TERM "$p" 2>/dev/null && kill -CONT "$p" 2>/dev/null; done
  [ -z "$dlockd_pid" ] || kill -TERM "$dlockd_pid" 2>/dev/null || true
  # TERM makes dlock-test-servers kill its servers before it exits.
  [ -z "$srv_pid" ] || kill -TERM "$srv_pid" 2>/dev/null || true
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

# The servers: dlock-test-servers starts them and answers one line per command on its
# standard input ("node I PORT PID" for each server, then "ready URLS"; "kill I" ->
# "killed I"; "restart I" -> "node I PORT PID"). Its stderr goes to a file, shown on a
# failure.
coproc SRV { DLOCK_TEST_TMP="$dir" exec "$servers" 3 2>"$dir/servers.err"; }
srv_pid=$SRV_PID
srv_in=${SRV[1]} srv_out=${SRV[0]}

# Read the launcher's answers until one starts with $1; "node" lines fill sport.
srv_expect() {
  local line word i port
  while IFS= read -r -t 10 -u "$srv_out" line; do
    read -r word i port _ <<<"$line"
    [ "$word" = node ] && sport[i]=$port
    [ "$word" = "$1" ] && { REPLY=$line; return 0; }
    [ "$word" = error ] && break
  done
  echo "demo: dlock-test-servers: ${line:-no answer}" >&2
  sed 's/^/    | /' "$dir/servers.err" >&2
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

# A command (GET, HGET) on node 1 over the connection on $node1_fd, which bash keeps
# open (no process per read: the sale can be quick): the bulk reply in REPLY ("" for
# nil); fails when the server does not answer.
node1_get() {
  local head
  printf '%s\r\n' "$*" >&"$node1_fd" || return 1
  IFS= read -r -t 2 -u "$node1_fd" head || return 1
  REPLY=
  [[ "$head" == \$[0-9]* ]] || return 0 # $-1 (nil)
  IFS= read -r -t 2 -u "$node1_fd" REPLY || return 1
  REPLY=${REPLY%$'\r'}
}

# nap: sleep 5 ms without starting a process (a read that times out on a pipe that
# never carries data: we hold its write end).
exec {nap_fd}<> <(:)
nap() { read -r -t 0.005 -u "$nap_fd" || true; }

# The checks every sale must pass: nothing oversold, fences strictly increasing, and
# the program's own checks (exit status 0 and ok=yes). $1 names the scene, $2 is the
# exit status, $3 the RESULT array, $4 the number of the sale's output files.
check_sale() {
  local label=$1 rc=$2 n=$4
  local -n sold=$3
  if [ "${sold[oversold]:-}" != 0 ] || [ "${sold[fences_increasing]:-}" != yes ]; then
    fail "$label: oversold ${sold[oversold]:-?}," \
      "fences strictly increasing: ${sold[fences_increasing]:-?}"
  fi
  if [ "$rc" -ne 0 ] || [ "${sold[ok]}" != yes ]; then
    fail "$label: checks failed (exit $rc)"
    show_log "$dir/sale$n.out" "$dir/sale$n.err"
  fi
}

# Show a program's messages when its scene failed.
show_log() { sed 's/^/    | /' "$@" | head -20 >&2; }

# 12345 -> "12.3": microseconds as milliseconds, or milliseconds as seconds.
ms() {
  local v=$1 sign=
  [ "$v" -lt 0 ] && sign=- v=$((-v))
  printf '%s%d.%d' "$sign" $((v / 1000)) $(((v % 1000) / 100))
}
s1() { ms "$1"; }

srv_expect ready
urls=${REPLY#ready }
exec {node1_fd}<>"/dev/tcp/127.0.0.1/${sport[1]}"

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
check_sale "1. flash sale" "$rc" r1 1

# ---- 2. the same, node 3 killed mid-run -------------------------------------------------
"$sale" -s "$urls" -b "$buyers" -n "$stock" -i sku-2 -T 200 -q \
  >"$dir/sale2.out" 2>"$dir/sale2.err" &
sale_pid=$!
jobs_pids+=("$sale_pid")
t_sale=${EPOCHREALTIME/./}
# Wait for the first third to go, reading the stock on node 1 every few ms, at most 30 s.
while kill -0 "$sale_pid" 2>/dev/null && [ $((${EPOCHREALTIME/./} - t_sale)) -lt 30000000 ]; do
  node1_get GET stock:sku-2 && [[ "$REPLY" =~ ^[0-9]+$ ]] &&
    [ "$REPLY" -le $((stock * 2 / 3)) ] && break
  nap
done
t_kill=${EPOCHREALTIME/./}
# The launcher answers once the server is killed (SIGKILL) and reaped.
echo "kill 3" >&"$srv_in"
srv_expect killed
left_at_kill='?'
node1_get GET stock:sku-2 && left_at_kill=$REPLY
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
check_sale "2. node killed" "$rc" r2 2
if ! [[ "$left_at_kill" =~ ^[0-9]+$ ]] || [ "$left_at_kill" -eq 0 ]; then
  fail "2. node killed: the kill did not land mid-sale (units left: $left_at_kill)"
fi

# ---- 3. fencing --------------------------------------------------------------------------
# Node 3 comes back on its port, empty: fences still increase (their server-TIME floor).
echo "restart 3" >&"$srv_in"
srv_expect node
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
reg_value= reg_fence=
node1_get HGET register value && reg_value=$REPLY
node1_get HGET register fence && reg_fence=$REPLY
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

# ---- 4. the stock way: a buyer killed holding reservations ------------------------------
# The lock way (1, 2) decrements a counter inside a lock: a buyer killed after its
# decrement and before paying would take that unit out of the sale for good. With
# leased reservations, a reservation nobody commits gives its units back.
stock_urls=${urls%%,*}
"$cli" -s "$stock_urls" stock set sku-4 "$stock" 2>"$dir/stock.err" ||
  fail "4. stock: dlock stock set failed: $(cat "$dir/stock.err")"
mkfifo "$dir/held.out"
"$stock_sale" -s "$urls" -i sku-4 -H "$held" -L "$lease" >"$dir/held.out" 2>"$dir/held.err" &
held_pid=$!
jobs_pids+=("$held_pid")
exec {held_fd}<"$dir/held.out"
held_line=
IFS= read -r -t 5 -u "$held_fd" held_line || true
exec {held_fd}<&-
# One block with stderr closed: bash reports a job killed by a signal at the first
# command that ends after its death, and that line is no part of the demo.
{
  kill -KILL "$held_pid"
  wait "$held_pid"
} 2>/dev/null || true
jobs_pids=()
t_killed=${EPOCHREALTIME/./}
status_line=$("$cli" -s "$stock_urls" stock status sku-4 2>&1 || true)
rc=0
"$stock_sale" -s "$urls" -i sku-4 -b "$buyers" -w 10000 -q >"$dir/sale4.out" 2>"$dir/sale4.err" ||
  rc=$?
t_sold=${EPOCHREALTIME/./}
declare -A r4=()
read_result r4 "$dir/sale4.out"
printf '4. stock way     a buyer reserved %s units (lease %s ms) and was killed (SIGKILL):\n' \
  "$held" "$lease"
printf '   %s\n' "$status_line"
printf '   %d buyers sold %s of %s, oversold %s, sold twice %s; the killed buyer'"'"'s units\n' \
  "$buyers" "${r4[sold]:-?}" "${r4[stock]:-?}" "${r4[oversold]:-?}" "${r4[sold_twice]:-?}"
printf '   came back after its lease and were sold: the sale ended %s s after the kill\n' \
  "$(s1 $(((t_sold - t_killed) / 1000)))"
if [[ "$held_line" != HELD* ]]; then
  fail "4. stock: the buyer to kill did not reserve (${held_line:-no output})"
  show_log "$dir/held.err"
elif [[ "$status_line" != *"reserved $held"* ]]; then
  fail "4. stock: after the kill, status did not show $held units reserved: $status_line"
elif [ "$rc" -ne 0 ] || [ "${r4[ok]:-}" != yes ] || [ "${r4[sold]:-}" != "$stock" ] ||
  [ "${r4[oversold]:-}" != 0 ]; then
  fail "4. stock: sold ${r4[sold]:-?} of $stock, oversold ${r4[oversold]:-?} (exit $rc)"
  show_log "$dir/sale4.out" "$dir/sale4.err"
elif [ $(((t_sold - t_killed) / 1000)) -lt $((lease - 100)) ]; then
  fail "4. stock: sold out before the killed buyer's lease ran out"
fi

# ---- 5. the service: PHP buyers through dlockd, one killed holding the lock -------------
# dlockd in front of the 3 nodes, on a free port: it logs "dlockd VERSION listening on"
# once it accepts; a port another program took makes it exit, and another is tried.
# The port is drawn below the kernel's ephemeral range, where the connections of the
# scenes before (thousands, some still in TIME_WAIT) took their local ports.
read -r eph_low _ </proc/sys/net/ipv4/ip_local_port_range
dlockd_port=
for _ in 1 2 3 4 5 6 7 8; do
  port=$((10000 + RANDOM % (eph_low - 10000)))
  "$dlockd" -s "$urls" -p "$port" --timeout 200 2>"$dir/dlockd.err" &
  dlockd_pid=$!
  for _ in $(seq 400); do
    grep -q "dlockd [^ ]* listening on" "$dir/dlockd.err" && { dlockd_port=$port; break 2; }
    kill -0 "$dlockd_pid" 2>/dev/null || break
    nap
  done
  kill -TERM "$dlockd_pid" 2>/dev/null || true
  wait "$dlockd_pid" 2>/dev/null || true
  dlockd_pid=
done

# A RESP reply from fd $1, its strings appended to the array resp (an array's elements
# in order, nil as ""): enough for INFO and LOCKINFO.
resp_read() {
  local head n i LC_ALL=C # bulk lengths count bytes
  IFS= read -r -t 2 -u "$1" head || return 1
  head=${head%$'\r'}
  case "$head" in
    [-+:]*) resp+=("${head:1}") ;;
    '$-1' | '*-1') resp+=("") ;;
    \$*)
      n=${head:1}
      IFS= read -r -d '' -N "$n" -t 2 -u "$1" head || return 1
      resp+=("$head")
      IFS= read -r -t 2 -u "$1" _ || return 1
      ;;
    \**) for ((i = 0; i < ${head:1}; i++)); do resp_read "$1" || return 1; done ;;
  esac
}
# A command to dlockd over the connection on $dlockd_fd: its reply in resp.
dlockd_cmd() {
  resp=()
  printf '%s\r\n' "$*" >&"$dlockd_fd" && resp_read "$dlockd_fd"
}
# A field of dlockd's INFO, in REPLY ("" when missing).
dlockd_info() {
  REPLY=
  dlockd_cmd INFO || return 1
  [[ "${resp[0]}" =~ (^|$'\n')$1:([0-9]+) ]] && REPLY=${BASH_REMATCH[2]}
  return 0
}

php_args=(--dlockd "127.0.0.1:$dlockd_port" --redis "127.0.0.1:${sport[1]}" --item sku-5)
victim_line='' blocked='' holder='' left_at_kill='?' after_kill='' rc=1
declare -A r5=()
if [ -z "$dlockd_port" ]; then
  fail "5. dlockd: dlockd would not start"
  show_log "$dir/dlockd.err"
else
  exec {dlockd_fd}<>"/dev/tcp/127.0.0.1/$dlockd_port"
  php "$php_sale" "${php_args[@]}" stock "$stock" >/dev/null 2>"$dir/php.err" ||
    fail "5. dlockd: putting the stock on the shelf failed: $(cat "$dir/php.err")"
  # One of the buyers, once a third of the stock is sold, stays in its critical section
  # (a request stuck in a slow call) until it is killed; the others buy as usual.
  mkfifo "$dir/victim.out"
  t_sale=${EPOCHREALTIME/./}
  php "$php_sale" "${php_args[@]}" buy --stall-at $((stock * 2 / 3)) >"$dir/victim.out" \
    2>"$dir/victim.err" &
  victim_pid=$!
  jobs_pids+=("$victim_pid")
  buyer_pids=()
  for ((i = 1; i < buyers; i++)); do
    php "$php_sale" "${php_args[@]}" buy >"$dir/buyer$i.out" 2>"$dir/buyer$i.err" &
    buyer_pids+=($!)
  done
  jobs_pids+=("${buyer_pids[@]}")
  exec {victim_fd}<"$dir/victim.out"
  IFS= read -r -t 10 -u "$victim_fd" victim_line || true
  exec {victim_fd}<&-
  # Every other buyer parks its LOCK behind it (at most 5 s), and LOCKINFO names it.
  for _ in $(seq 1000); do
    dlockd_info blocked_clients && [ "${REPLY:-0}" -ge $((buyers - 1)) ] &&
      { blocked=$REPLY; break; }
    nap
  done
  dlockd_cmd LOCKINFO sale:sku-5 && holder=${resp[3]}
  node1_get GET stock:sku-5 && left_at_kill=$REPLY
  t_kill=${EPOCHREALTIME/./}
  kill -KILL "$victim_pid" 2>/dev/null || true
  wait "$victim_pid" 2>/dev/null || true
  buyers_ok=0
  for p in "${buyer_pids[@]}"; do wait "$p" && buyers_ok=$((buyers_ok + 1)); done
  buyers_ok=$((buyers_ok + 1)) # and the one killed
  jobs_pids=()
  t_end=${EPOCHREALTIME/./}
  rc=0
  php "$php_sale" "${php_args[@]}" report --killed-at "$t_kill" >"$dir/sale5.out" \
    2>"$dir/sale5.err" || rc=$?
  read_result r5 "$dir/sale5.out"
  after_kill=${r5[after_kill_us]:-}
fi
victim=${victim_line##*pid=}
victim=${victim%% *}
printf '5. dlockd        %d PHP buyer processes through dlockd (Redlock on the 3 nodes),\n' \
  "$buyers"
printf '   stock %d, session locks with a 30 s lease\n' "$stock"
printf '   buyer %s killed (SIGKILL) inside its critical section, holding the lock,\n' \
  "${victim:-?}"
printf '   with %s buyers waiting in LOCK and %s units left\n' "${blocked:-?}" "$left_at_kill"
if [[ "$after_kill" =~ ^[0-9]+$ ]]; then
  printf '   the lock passed on %s ms after the kill: its connection closed, dlockd released it\n' \
    "$(ms "$after_kill")"
fi
printf '   sold %s, oversold %s, stock left %s, in %s s; fences strictly increasing: %s\n' \
  "${r5[sold]:-?}" "${r5[oversold]:-?}" "${r5[left]:-?}" \
  "$(s1 $(((${t_end:-$t_sale} - ${t_sale:-0}) / 1000)))" "${r5[fences_increasing]:-?}"
if [ -n "$dlockd_port" ]; then
  check_sale "5. dlockd" "$rc" r5 5
  if [[ "$victim_line" != HOLDING* ]] || [[ "$holder" != "php buyer $victim "* ]]; then
    fail "5. dlockd: the buyer to kill did not hold the lock (${victim_line:-no output}," \
      "holder ${holder:-?})"
    show_log "$dir/victim.err"
  elif [ -z "$blocked" ]; then
    fail "5. dlockd: the other buyers were not all waiting for the lock"
  elif ! [[ "$left_at_kill" =~ ^[0-9]+$ ]] || [ "$left_at_kill" -eq 0 ]; then
    fail "5. dlockd: the kill did not land mid-sale (units left: $left_at_kill)"
  elif ! [[ "$after_kill" =~ ^[0-9]+$ ]] || [ "$after_kill" -ge 2000000 ]; then
    fail "5. dlockd: the lock did not pass on at once after the kill (${after_kill:-?} us)"
  elif [ "$buyers_ok" -ne "$buyers" ] || [ "${r5[sold]:-}" != "$stock" ]; then
    fail "5. dlockd: $buyers_ok of $buyers buyers finished, sold ${r5[sold]:-?} of $stock"
    show_log "$dir"/buyer*.err
  fi
fi

elapsed_ms=$(((${EPOCHREALTIME/./} - t_start) / 1000))
echo
if [ "${#failures[@]}" -eq 0 ]; then
  printf '%sPASS%s: nothing oversold, fences strictly increasing, ' "$bold" "$off"
  printf 'the stale write refused, a killed buyer'"'"'s units sold,\n'
  printf '      a killed holder'"'"'s lock passed on in %s ms (%s s)\n' "$(ms "${after_kill:-0}")" \
    "$(s1 "$elapsed_ms")"
  exit 0
fi
printf '%sFAIL%s (%s s):\n' "$bold" "$off" "$(s1 "$elapsed_ms")"
printf '  %s\n' "${failures[@]}"
exit 1
