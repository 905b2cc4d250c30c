#!/usr/bin/env bash
# `make model`: Spin's exhaustive search of model/fencing.pml, twice, in build-model/
# (or $1). With the TIME floor it must find no error; without it (-DNO_FLOOR) it must
# find a counterexample, or the model could not have failed and its pass says nothing.
# Prints one MODEL line per run; exits non-zero if either run is not as it must be.
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

# search NAME SPIN-DEFINES...: spin -a, gcc, ./pan in $out/NAME.
search() {
    local name=$1
    shift
    local dir="$out/$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$here/fencing.pml" "$dir/"
    (
        cd "$dir"
        spin -a "$@" fencing.pml >spin.log 2>&1
        gcc "${PAN_CFLAGS[@]}" -w -o pan pan.c >>spin.log 2>&1
        ./pan "${PAN_ARGS[@]}" >pan.log 2>&1 || true
    ) || { echo "model: $name: spin or gcc failed (see $dir/spin.log)" >&2; return 1; }
}

# field LOG PATTERN: the number before or after PATTERN in pan's report.
errors_of() { sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' "$1" | tail -1; }
states_of() { sed -n 's/^ *\([0-9][0-9]*\) states, stored.*/\1/p' "$1" | tail -1; }

status=0

search fencing || exit 1
log="$out/fencing/pan.log"
errors=$(errors_of "$log")
states=$(states_of "$log")
echo "MODEL fencing n=3 states=${states:-?} errors=${errors:-?}"
if [ "${errors:-1}" != 0 ]; then
    echo "model: the search found an error: $log, and the trail:" >&2
    (cd "$out/fencing" && spin -t -p -g fencing.pml >trail.txt 2>&1 || true)
    echo "  $out/fencing/trail.txt" >&2
    status=1
elif grep -q -e "Search not completed" -e "max search depth too small" -e "reached -DMEMLIM" "$log"; then
    echo "model: the search was not exhaustive (memory or depth bound): $log" >&2
    status=1
fi

search fencing-no-floor -DNO_FLOOR || exit 1
log="$out/fencing-no-floor/pan.log"
if grep -q "assertion violated" "$log" && [ "$(errors_of "$log")" != 0 ]; then
    (cd "$out/fencing-no-floor" && spin -DNO_FLOOR -t -p -g fencing.pml >trail.txt 2>&1 || true)
    echo "MODEL fencing-no-floor n=3 counterexample=yes"
else
    echo "MODEL fencing-no-floor n=3 counterexample=no"
    echo "model: without the TIME floor the search found no counterexample: $log" >&2
    status=1
fi
exit $status
