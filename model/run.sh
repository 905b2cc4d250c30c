#!/usr/bin/env bash
# `make model`: Spin's exhaustive searches, in build-model/ (or $1), of two models, each
# with variants that must fail, or the model could not have failed and its pass would
# say nothing:
#   model/fencing.pml   fences across restarts: with the TIME floor no error; without it
#                       (-DNO_FLOOR) a counterexample;
#   model/handoff.pml   a waiter that starts on its grant's message: no error; counting
#                       its validity from its latest request (-DFROM_LAST_SEND), or
#                       starting on a grant it gave back (-DIGNORE_GIVEBACK), a
#                       counterexample.
# Prints one MODEL line per run; exits non-zero if any run is not as it must be.
# Each run's logs are kept in its directory: spin.log, pan.log, and for a counterexample
# the trail replayed step by step (trail.txt).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-build-model}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The search: a state-space search for assertion violations (-DSAFETY), states stored
# exactly but compressed (-DCOLLAPSE), memory bounded at 2 GB (-DMEMLIM, in MB: pan
# stops, and says so, rather than swap); a 2^25-slot hash table; depth bound far above
# the longest run (pan reports when it is not).
PAN_CFLAGS=(-O2 -DSAFETY -DCOLLAPSE -DMEMLIM=2048)
PAN_ARGS=(-m20000 -w25)

# search NAME MODEL SPIN-DEFINES...: spin -a, gcc, ./pan in $out/NAME.
search() {
    local name=$1 model=$2
    shift 2
    local dir="$out/$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$here/$model" "$dir/"
    (
        cd "$dir"
        spin -a "$@" "$model" >spin.log 2>&1
        gcc "${PAN_CFLAGS[@]}" -w -o pan pan.c >>spin.log 2>&1
        ./pan "${PAN_ARGS[@]}" >pan.log 2>&1 || true
    ) || { echo "model: $name: spin or gcc failed (see $dir/spin.log)" >&2; return 1; }
}

# field LOG PATTERN: the number before or after PATTERN in pan's report.
errors_of() { sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' "$1" | tail -1; }
states_of() { sed -n 's/^ *\([0-9][0-9]*\) states, stored.*/\1/p' "$1" | tail -1; }

status=0

# must_pass NAME MODEL NODES: the search of MODEL (of NODES servers) finds no error, and
# is exhaustive.
must_pass() {
    local name=$1 model=$2 nodes=$3
    search "$name" "$model" || exit 1
    local log="$out/$name/pan.log"
    local errors states
    errors=$(errors_of "$log")
    states=$(states_of "$log")
    echo "MODEL $name n=$nodes states=${states:-?} errors=${errors:-?}"
    if [ "${errors:-1}" != 0 ]; then
        echo "model: the search found an error: $log, and the trail:" >&2
        (cd "$out/$name" && spin -t -p -g "$model" >trail.txt 2>&1 || true)
        echo "  $out/$name/trail.txt" >&2
        status=1
    elif grep -q -e "Search not completed" -e "max search depth too small" -e "reached -DMEMLIM" "$log"; then
        echo "model: the search was not exhaustive (memory or depth bound): $log" >&2
        status=1
    fi
}

# must_fail NAME MODEL NODES DEFINE: the variant's search finds an assertion violated.
must_fail() {
    local name=$1 model=$2 nodes=$3 define=$4
    search "$name" "$model" "$define" || exit 1
    local log="$out/$name/pan.log"
    if grep -q "assertion violated" "$log" && [ "$(errors_of "$log")" != 0 ]; then
        (cd "$out/$name" && spin "$define" -t -p -g "$model" >trail.txt 2>&1 || true)
        echo "MODEL $name n=$nodes counterexample=yes"
    else
        echo "MODEL $name n=$nodes counterexample=no"
        echo "model: $name: the search found no counterexample: $log" >&2
        status=1
    fi
}

must_pass fencing fencing.pml 3
must_fail fencing-no-floor fencing.pml 3 -DNO_FLOOR
must_pass handoff handoff.pml 1
must_fail handoff-from-last-send handoff.pml 1 -DFROM_LAST_SEND
must_fail handoff-ignore-giveback handoff.pml 1 -DIGNORE_GIVEBACK
exit $status
