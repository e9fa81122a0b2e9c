#!/usr/bin/env bash
# The whole GPU test suite under compute-sanitizer tools, one process per test, several at a time, in shards
# so that the work can be spread over several device calls (the GPU check's sanitizer step runs a chosen
# subset only):
#
#   scripts/gpu_sanitize.sh OUTDIR TOOLS SHARD TOTAL [SECONDS]
#
# TOOLS is one of memcheck, racecheck, synccheck and initcheck, or a comma list of them. The test list
# (every test whose name or parameter mentions CUDA, cuDNN, a GPU kernel or the planner's GPU cases) is cut
# into TOTAL shards, and shard SHARD (0-based) runs under each tool, SAN_JOBS processes at a time (default
# 1), each test stopped after SAN_TEST_S seconds (default 300); no test starts after SECONDS (default 540), and
# one still running 30 s later is cut (counted as not reached).
# Writes OUTDIR/<tool>_<shard>.log (the sanitizer's report of every test that failed or timed out) and
# OUTDIR/sanitize_<shard>.tsv (tool, test, status, seconds: one row a test run), prints one line per test
# that failed, naming it and its first error, then the totals per tool; a report whose every error is inside
# a cuDNN kernel (the peer's) is counted apart. Exit 1 if a test failed, reported an error (cuDNN's too) or
# timed out, 3 if the time ran out before the shard was done (the totals say how far it got).
# SAN_DONE: a sanitize_<shard>.tsv of an earlier call; the (tool, test) runs it passed or skipped are not run again.
# SAN_FROM: the index (0-based, in the list's order) of the first test to run; the ones before it are left out
# (to go on where a call that stopped at 'not reached' ended, when its tsv is not at hand).
# SAN_FILTER: an extended regular expression (grep -E); only the tests whose Suite.Test name matches it run
# (the tests past 2^31 elements need minutes under memcheck: SAN_FILTER='Past2|2e31' SAN_TEST_S=540).
# Expects the GPU check's build (BUILD_DIR, default build-gpu): run scripts/gpu_check.sh first, or
# cmake --build it yourself.
set -u
[ $# -ge 4 ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUTDIR=$1 TOOLS=$2 SHARD=$3 TOTAL=$4 BUDGET=${5:-540}
for tool in ${TOOLS//,/ }; do
  case "$tool" in memcheck|racecheck|synccheck|initcheck) ;; *) echo "unknown tool '$tool'" >&2; exit 2 ;; esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESTS=$ROOT/${BUILD_DIR:-build-gpu}/tests/convkit_tests
[ -x "$TESTS" ] || { echo "no test binary at $TESTS (build first)" >&2; exit 2; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$SAN" ] || { echo "compute-sanitizer not found" >&2; exit 2; }
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
JOBS=${SAN_JOBS:-1} TEST_S=${SAN_TEST_S:-300}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export CONVKIT_REQUIRE_GPU=1 CONVKIT_TUNE_CACHE=off GTEST_COLOR=no
T0=$(date +%s)
DEADLINE=$(( T0 + BUDGET ))

# "Suite.Test" for every GPU test: a CUDA algorithm or the peer in its name or parameter, or a GPU suite.
mapfile -t ALL < <("$TESTS" --gtest_list_tests | awk '
  /^[^ ]/ { suite=$1; next }
  /^  [^ ]/ { name=suite $1; line=suite $0
              if (line ~ /cuda|cudnn|Cuda|Gpu|GPU|TensorCore|Large|Huge/) print name }' |
  { if [ -n "${SAN_FILTER:-}" ]; then grep -E -- "$SAN_FILTER"; else cat; fi; })
# The work: (tool, test) pairs of this shard, tools interleaved so that every tool advances together.
: >"$TMP/work"
echo "${#ALL[@]} GPU tests in the list; from index ${SAN_FROM:-0}"
for i in "${!ALL[@]}"; do
  [ "$i" -ge "${SAN_FROM:-0}" ] || continue
  [ $(( i % TOTAL )) -eq "$SHARD" ] || continue
  for tool in ${TOOLS//,/ }; do
    if [ -n "${SAN_DONE:-}" ] && awk -F'\t' -v a="$tool" -v b="${ALL[$i]}" \
         '$1 == a && $2 == b && ($3 == "passed" || $3 == "skipped") { f = 1 } END { exit !f }' "$SAN_DONE"; then continue; fi
    printf '%s %s\n' "$tool" "${ALL[$i]}" >>"$TMP/work"
  done
done

# One (tool, test) run: writes its row to $TMP/rows/<n> and, when it did not pass, its report to $TMP/logs/<n>.
run_one() {
  local n=$1 tool=$2 t=$3 start rc out status lim
  start=$(date +%s)
  if [ "$start" -ge "$DEADLINE" ]; then printf '%s\t%s\tnot reached\t0\n' "$tool" "$t" >"$TMP/rows/$n"; return; fi
  # a run still going 30 s past the deadline is cut and counts as not reached, not as timed out
  lim=$(( DEADLINE + 30 - start )); [ "$lim" -lt "$TEST_S" ] || lim=$TEST_S
  out=$(timeout "$lim" "$SAN" --tool "$tool" --error-exitcode 86 --print-limit 10 "$TESTS" --gtest_filter="$t" 2>&1)
  rc=$?
  # A test that never calls CUDA (a CPU test the name filter caught, or a case skipped for this variant)
  # passes or is skipped as its gtest run says; the sanitizer only says it had nothing to watch.
  local nocuda=0
  if [ $rc -ne 0 ] && echo "$out" | grep -q 'terminated before first instrumented API call'; then
    if echo "$out" | grep -q '^\[  PASSED  \] 1 test'; then rc=0
    elif echo "$out" | grep -q '^\[  SKIPPED \] 1 test,'; then rc=0 nocuda=1; fi
  fi
  case $rc in
    0) status=passed; [ $nocuda -eq 0 ] || status=skipped ;;
    86) status="sanitizer error"
        # every report inside a cuDNN kernel (the peer's engines: cudnn, xmma or cutlass names), none in convkit's
        local at
        at=$(echo "$out" | grep -E '^=========     at ' | sed 's/^=========     at //')
        if [ -n "$at" ] && ! echo "$at" | grep -qvE 'cudnn|xmma|cutlass'; then status="peer sanitizer error"; fi ;;
    124|137) if [ "$lim" -lt "$TEST_S" ]; then status="not reached"; else status="timed out"; fi ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$tool" "$t" "$status" "$(( $(date +%s) - start ))" >"$TMP/rows/$n"
  if [ $rc -ne 0 ] && [ "$status" != "not reached" ]; then
    { echo "==== $t under $tool: $status"; echo "$out" | grep -m 80 '^=========' ; echo "---- (the run's last lines)"
      echo "$out" | tail -40; } >"$TMP/logs/$n"
    echo "$out" | grep -m1 -E '^========= (Invalid|Race|Barrier|Uninitialized|Program hit|ERROR)|Failure' |
      cut -c1-160 >"$TMP/first/$n"
  fi
}
export -f run_one
export TMP SAN TESTS TEST_S DEADLINE
mkdir -p "$TMP/rows" "$TMP/logs" "$TMP/first"
awk '{ print NR, $1, $2 }' "$TMP/work" | xargs -P "$JOBS" -n 3 bash -c 'run_one "$@"' _

TSV=$OUTDIR/sanitize_${SHARD}.tsv
: >"$TSV"
bad=0 left=0
for f in $(ls "$TMP/rows" | sort -n); do cat "$TMP/rows/$f" >>"$TSV"; done
for tool in ${TOOLS//,/ }; do
  LOG=$OUTDIR/${tool}_${SHARD}.log
  : >"$LOG"
  for f in $(ls "$TMP/logs" 2>/dev/null | sort -n); do
    if awk -F'\t' -v t="$tool" 'NR == 1 && $1 == t { ok = 1 } END { exit !ok }' "$TMP/rows/$f"; then
      cat "$TMP/logs/$f" >>"$LOG"
      printf 'FAILED %s under %s (%s): %s\n' "$(cut -f2 "$TMP/rows/$f")" "$tool" "$(cut -f3 "$TMP/rows/$f")" \
        "$(cat "$TMP/first/$f" 2>/dev/null || echo "see $LOG")"
    fi
  done
  awk -F'\t' -v t="$tool" -v shard="$SHARD/$TOTAL" '$1 == t { n[$3]++; tot++; if ($3 != "not reached") s += $4 }
    END { printf "%s shard %s: %d tests, %d passed, %d skipped, %d sanitizer errors, %d inside cuDNN only, %d failed, %d timed out, %d not reached (%d s of test time)\n",
          t, shard, tot, n["passed"], n["skipped"], n["sanitizer error"], n["peer sanitizer error"],
          tot - n["passed"] - n["skipped"] - n["sanitizer error"] - n["peer sanitizer error"] - n["timed out"] - n["not reached"],
          n["timed out"], n["not reached"], s }' "$TSV"
done
bad=$(awk -F'\t' '$3 != "passed" && $3 != "skipped" && $3 != "not reached"' "$TSV" | wc -l)
left=$(awk -F'\t' '$3 == "not reached"' "$TSV" | wc -l)
echo "total: $(wc -l <"$TSV") runs in $(( $(date +%s) - T0 )) s, $bad not passed, $left not reached"
[ "$bad" -eq 0 ] || exit 1
[ "$left" -eq 0 ] || exit 3
exit 0
