#!/bin/sh
# test_check_layers.sh SOURCE_DIR OBJDIR: tools/check-layers.sh passes on src/ as it
# is, and fails, naming the file, on each kind of breach planted in a copy of src/: an
# include from a higher layer, a call to a higher layer that no include shows, and a
# file the map does not name.
set -u
top=${1:?usage: test_check_layers.sh SOURCE_DIR OBJDIR}
obj=${2:?usage: test_check_layers.sh SOURCE_DIR OBJDIR}
check="$top/tools/check-layers.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect STATUS PATTERN ARGS...: the check exits STATUS and prints a line matching PATTERN.
expect() {
    want=$1 pattern=$2
    shift 2
    out=$(sh "$check" "$@" 2>&1)
    got=$?
    if [ "$got" != "$want" ] || ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
        echo "FAIL: check-layers $* exited $got (want $want), output:"
        printf '%s\n' "$out"
        echo "(wanted a line matching: $pattern)"
        failed=1
    else
        echo "ok: $pattern"
    fi
}

fresh() {
    rm -rf "$tmp/src"
    cp -r "$top/src" "$tmp/src"
}

expect 0 "no include or call upward" "$top/src" "$obj"

# The base layer's clock includes the calls layer's header.
fresh
sed -i 's/^#include "base.h"$/#include "internal.h"/' "$tmp/src/clock.c"
grep -q '^#include "internal.h"$' "$tmp/src/clock.c" || { echo "FAIL: nothing planted"; exit 1; }
expect 1 "clock.c (base) includes internal.h, of the higher layer calls" "$tmp/src"

# round.c's calls, seen from the base layer: the map moved, the objects as built.
fresh
awk '/^ \*               round\.c / { next }
     /^ \*               alloc\.c / { print " *               round.c     planted" }
     { print }' "$top/src/internal.h" >"$tmp/src/internal.h"
expect 1 "round.c (base) uses dlock__fanout of fanout.c, a higher layer" "$tmp/src" "$obj"

# A file in no layer.
fresh
printf '#include "internal.h"\n' >"$tmp/src/stray.c"
expect 1 "stray.c is in no layer" "$tmp/src"

exit "$failed"
