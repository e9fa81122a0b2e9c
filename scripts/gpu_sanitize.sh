#!/usr/bin/env bash
# The whole GPU test suite under one compute-sanitizer tool, one shard at a time, so that the work can be
# spread over several device calls (the GPU check's sanitizer step runs a chosen subset only):
#
#   scripts/gpu_sanitize.sh OUTDIR TOOL SHARD TOTAL [SECONDS]
#
# TOOL is memcheck, racecheck, synccheck or initcheck. The test list (every test whose name or parameter
# mentions CUDA, cuDNN, a GPU kernel or the planner's GPU cases) is cut into TOTAL shards, and shard SHARD
# (0-based) runs, one compute-sanitizer process per test, until SECONDS (default 540) have passed. Writes
# OUTDIR/<tool>_<shard>.log (the sanitizer's report of every test that failed) and prints one line per
# test that failed, naming it and its first error, then the totals. Exit 1 if a test failed or reported
# an error, 3 if the time ran out before the shard was done (the log says how far it got).
# Expects the GPU check's build (BUILD_DIR, default build-gpu): run scripts/gpu_check.sh first, or
# cmake --build it yourself.
set -u
[ $# -ge 4 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUTDIR=$1 TOOL=$2 SHARD=$3 TOTAL=$4 BUDGET=${5:-540}
case "$TOOL" in memcheck|racecheck|synccheck|initcheck) ;; *) echo "unknown tool '$TOOL'" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESTS=$ROOT/${BUILD_DIR:-build-gpu}/tests/convkit_tests
[ -x "$TESTS" ] || { echo "no test binary at $TESTS (build first)" >&2; exit 2; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$SAN" ] || { echo "compute-sanitizer not found" >&2; exit 2; }
mkdir -p "$OUTDIR"
LOG=$OUTDIR/${TOOL}_${SHARD}.log; : >"$LOG"
export CONVKIT_REQUIRE_GPU=1 CONVKIT_TUNE_CACHE=off GTEST_COLOR=no

# "Suite.Test" for every GPU test: a CUDA algorithm or the peer in its name or parameter, or a GPU suite.
mapfile -t ALL < <("$TESTS" --gtest_list_tests | awk '
  /^[^ ]/ { suite=$1; next }
  /^  [^ ]/ { name=suite $1; line=suite $0
              if (line ~ /cuda|cudnn|Cuda|Gpu|GPU|TensorCore|Large|Huge/) print name }')
T0=$(date +%s) ran=0 failed=0 errors=0 left=0
for i in "${!ALL[@]}"; do
  [ $(( i % TOTAL )) -eq "$SHARD" ] || continue
  if [ $(( $(date +%s) - T0 )) -ge "$BUDGET" ]; then left=$(( left + 1 )); continue; fi
  t=${ALL[$i]}
  out=$("$SAN" --tool "$TOOL" --error-exitcode 86 --print-limit 10 "$TESTS" --gtest_filter="$t" 2>&1)
  rc=$?
  ran=$(( ran + 1 ))
  # A skipped test (nothing on this machine to run) passes; a sanitizer report or a test failure does not.
  if [ $rc -ne 0 ]; then
    failed=$(( failed + 1 ))
    [ $rc -eq 86 ] && errors=$(( errors + 1 ))
    first=$(echo "$out" | grep -m1 -E '^========= (Invalid|Race|Barrier|Uninitialized|Program hit|ERROR)|Failure' |
      cut -c1-160)
    echo "FAILED $t (exit $rc): ${first:-see $LOG}"
    { echo "==== $t (exit $rc)"; echo "$out" | tail -60; } >>"$LOG"
  fi
done
echo "$TOOL shard $SHARD/$TOTAL: $ran tests run, $failed failed ($errors with sanitizer errors), $left not reached" \
  "in $(( $(date +%s) - T0 )) s"
[ $failed -eq 0 ] || exit 1
[ $left -eq 0 ] || exit 3
exit 0
