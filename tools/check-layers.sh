#!/bin/sh
# check-layers.sh SRC [OBJDIR]: hold the files of SRC (src/) to their layers.
#
# The layers, and each file's, are the map at the top of SRC/internal.h: lowest layer
# first, a layer's name in the column after " *   ", each file in the column after that
# (see that map). This reads the map and fails when
#   - a file of SRC is not in the map, or is in it twice, or the map names a missing one;
#   - a file includes a header of SRC whose layer is above its own ("dlock.h", the
#     public header, may be included anywhere);
#   - with OBJDIR (where the objects FILE.c.o are): a file's object uses a symbol
#     defined by the object of a file in a higher layer (a call the includes hide, such
#     as a declaration written by hand). A file built only into the test library
#     (hooks.c) may have no object there.
# Each finding is printed; the exit status is 1 when there is one.
set -eu

src=${1:?usage: check-layers.sh SRC [OBJDIR]}
obj=${2:-}
map=$(mktemp)
trap 'rm -f "$map" "$map.defs"' EXIT

# The map: "RANK LAYER FILE" per line. An entry's file starts at column 18 of its line
# (index 17), its layer (if it opens one) at column 6; descriptions start further right.
awk '
    NR == 1 && $0 !~ /^\/\*/ { exit 2 }
    /^ \*\// { exit }
    {
        file = substr($0, 18)
        sub(/ .*/, "", file)
        if (file !~ /^[a-z_]+\.[ch]$/ || substr($0, 1, 5) != " *   ")
            next
        head = substr($0, 6, 12)
        gsub(/ /, "", head)
        if (head != "") { layer = head; rank++ }
        if (rank == 0) { print "map: " file " has no layer" > "/dev/stderr"; exit 1 }
        print rank, layer, file
    }' "$src/internal.h" >"$map" || { echo "check-layers: cannot read the map in $src/internal.h"; exit 1; }

fail=0
say() { echo "check-layers: $*"; fail=1; }

[ -s "$map" ] || say "the map in $src/internal.h names no file"
for f in $(awk '{print $3}' "$map" | sort | uniq -d); do say "$f is in the map twice"; done
for f in $(awk '{print $3}' "$map"); do [ -f "$src/$f" ] || say "the map names $f, which $src lacks"; done

rank_of() { awk -v f="$1" '$3 == f { print $1; found = 1 } END { if (!found) print 0 }' "$map"; }
layer_of() { awk -v f="$1" '$3 == f { print $2 }' "$map"; }

for path in "$src"/*.c "$src"/*.h; do
    f=${path##*/}
    r=$(rank_of "$f")
    if [ "$r" = 0 ]; then
        say "$f is in no layer: add it to the map in internal.h"
        continue
    fi
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$path"); do
        [ "$inc" = dlock.h ] && continue
        ir=$(rank_of "$inc")
        if [ "$ir" = 0 ]; then
            say "$f includes \"$inc\", which is in no layer"
        elif [ "$ir" -gt "$r" ]; then
            say "$f ($(layer_of "$f")) includes $inc, of the higher layer $(layer_of "$inc")"
        fi
    done
done

if [ -n "$obj" ]; then
    # Every global symbol an object defines, with the rank of its file: "SYMBOL RANK FILE".
    : >"$map.defs"
    for f in $(awk '$3 ~ /\.c$/ {print $3}' "$map"); do
        o="$obj/$f.o"
        [ -f "$o" ] || continue
        nm --defined-only -g "$o" | awk -v r="$(rank_of "$f")" -v f="$f" 'NF == 3 { print $3, r, f }' >>"$map.defs"
    done
    [ -s "$map.defs" ] || say "no object of the map's files in $obj (build first)"
    for f in $(awk '$3 ~ /\.c$/ {print $3}' "$map"); do
        o="$obj/$f.o"
        [ -f "$o" ] || continue
        r=$(rank_of "$f")
        nm -u "$o" | awk '{ print $NF }' | awk -v r="$r" -v f="$f" -v lf="$(layer_of "$f")" '
            FILENAME != "-" { rank[$1] = $2; file[$1] = $3; next }
            ($1 in rank) && rank[$1] > r {
                print "check-layers: " f " (" lf ") uses " $1 " of " file[$1] ", a higher layer"
                bad = 1
            }
            END { exit bad }' "$map.defs" - || fail=1
    done
fi

if [ "$fail" = 0 ]; then
    echo "check-layers: $(wc -l <"$map") files in $(awk '{print $2}' "$map" | uniq | wc -l) layers, no include or call upward"
fi
exit "$fail"
