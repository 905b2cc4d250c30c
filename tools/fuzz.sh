#!/usr/bin/env bash
# Build the libFuzzer targets (fuzz/) with clang into build-fuzz/, run each over its seed
# corpus, then fuzz each for SECONDS (default 60). Any crash, leak, undefined behaviour
# or hang fails the script; the input that caused it is saved in fuzz/crashes/.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]     SECONDS 0: build and corpus runs only (smoke)
#
# Environment:
#   DLOCK_FUZZ_BUILD  build directory (default build-fuzz)
#   FUZZ_MERGE=1      afterwards, add the inputs that found new coverage to the seed
#                     corpus in the tree (fuzz/corpus/TARGET), minimized by -merge=1
#   FUZZ_JOBS=N       run N fuzzing processes per target (libFuzzer -fork=N); default 1
#   WERROR=ON         warnings are errors, as in CI
#
# clang and the libFuzzer runtime are installed when missing and running as root
# (tools/ensure-deps.sh clang); otherwise the script stops with the command to run.
# Fuzzing that was asked for is never skipped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

secs=${1:-60}
shift || true
case "$secs" in
'' | *[!0-9]*)
  echo "usage: tools/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 64
  ;;
esac
all_targets=(fuzz_url fuzz_cluster fuzz_duration fuzz_reply fuzz_lock fuzz_resp)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
build=${DLOCK_FUZZ_BUILD:-build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)

tools/ensure-deps.sh clang
if ! command -v clang >/dev/null; then
  echo "tools/fuzz.sh: clang is not on PATH (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

echo "== building the fuzz targets with clang in $build"
cmake -S fuzz -B "$build" -DCMAKE_C_COMPILER=clang -DDLOCK_WERROR="${WERROR:-OFF}" >/dev/null
cmake --build "$build" -j "$jobs"

echo "== every target over its seed corpus (fuzz/corpus/TARGET)"
ctest --test-dir "$build" -L fuzz --output-on-failure -R "$(IFS='|'; echo "${targets[*]}")"
[ "$secs" -gt 0 ] || exit 0

mkdir -p fuzz/crashes
failed=()
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  mkdir -p "$work"
  log="$build/$t.log"
  opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    -artifact_prefix="$root/fuzz/crashes/$t-")
  [ -f "fuzz/$t.dict" ] && opts+=(-dict="fuzz/$t.dict")
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && opts+=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
  echo "== $t for ${secs}s (log: $log)"
  # New inputs go to the work corpus in the build directory, the first directory given;
  # the tree's seed corpus is only read.
  if "$build/$t" "${opts[@]}" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    grep -E 'ERROR:|SUMMARY:|Test unit written|runtime error' "$log" | head -20 >&2 || true
  fi
  # The figures: executions, coverage (edges, features) and corpus size at the end.
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  echo "FUZZ $t status=$status seconds=$secs execs=${execs:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corp:-?}"
  if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$status" = ok ]; then
    "$build/$t" -merge=1 "fuzz/corpus/$t" "$work" >"$build/$t.merge.log" 2>&1
    echo "   merged into fuzz/corpus/$t: $(ls "fuzz/corpus/$t" | wc -l) inputs"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "tools/fuzz.sh: FAILED: ${failed[*]} (reproducers in fuzz/crashes/; rerun one with" \
    "$build/TARGET fuzz/crashes/FILE)" >&2
  exit 1
fi
echo "tools/fuzz.sh: no crash in ${targets[*]}"
