#!/usr/bin/env bash
# `make deb`: the Debian binary packages libdlock0, libdlock-dev, dlock and dlockd in
# OUT (default build/deb), built by dpkg-buildpackage with debhelper over debian/, then
# checked by lintian: an error (E:) fails the script; warnings are either overridden
# with their reason in debian/*.lintian-overrides or printed here.
#
#   tools/deb.sh [OUT]
#
# The build runs in a copy of the tree (OUT/src), so that the tree gets none of
# debhelper's files and dpkg-buildpackage's output, written beside the directory it
# builds, lands in OUT. The version is dlock.h's (DLOCK_VERSION_STRING), the project's one
# source of it: debian/changelog is written into the copy from it. The test suite does
# not run (debian/rules); `make test` runs it on the tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-build/deb}
cd "$root"

tools/ensure-deps.sh build deb

ver=$(sed -n 's/^#define DLOCK_VERSION_STRING "\(.*\)"/\1/p' include/dlock.h)
case "$ver" in
[0-9]*.[0-9]*.[0-9]*) ;;
*) echo "tools/deb.sh: no version in include/dlock.h (got '$ver')" >&2; exit 1 ;;
esac

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
src="$out/src/dlock-$ver"
mkdir -p "$src"

# The copy: in a git checkout, the files git tracks and the new ones it does not
# ignore, as they are in the work tree; elsewhere, the tree less its build directories.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -co --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -C "$src" -xf -
  # The packages' dates: the last commit's, so that one tree gives the same packages.
  export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
else
  tar --exclude=./build --exclude='./build-*' --exclude=./.git --exclude=node_modules \
    -cf - . | tar -C "$src" -xf -
fi

cat >"$src/debian/changelog" <<CHANGES
dlock ($ver) unstable; urgency=medium

  * dlock $ver, built from its source tree (CHANGELOG.md says what changed).

 -- $(sed -n 's/^Maintainer: //p' debian/control)  $(date -R ${SOURCE_DATE_EPOCH:+-d "@$SOURCE_DATE_EPOCH"})
CHANGES

echo "== dpkg-buildpackage -us -uc -b (log: $out/build.log)"
if ! (cd "$src" && dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1; then
  { grep -E '(error|warning):' "$out/build.log" | head -20; tail -30 "$out/build.log"; } >&2
  echo "tools/deb.sh: dpkg-buildpackage failed (whole log: $out/build.log)" >&2
  exit 1
fi
find "$out/src" -maxdepth 1 -type f -exec mv -t "$out" {} +
rm -rf "$out/src"

debs=("$out"/*.deb)
for p in libdlock0 libdlock-dev dlock dlockd; do
  [ -f "$out/${p}_${ver}_$(dpkg --print-architecture).deb" ] ||
    { echo "tools/deb.sh: ${p}_${ver} was not built" >&2; exit 1; }
done

echo "== lintian"
# --allow-root: CI builds as root; lintian only reads the packages.
lintian --allow-root --fail-on error --info "${debs[@]}" | tee "$out/lintian.log"
echo "DEB packages in $out: $(cd "$out" && ls ./*.deb | sed 's|^\./||' | paste -sd' ')"
