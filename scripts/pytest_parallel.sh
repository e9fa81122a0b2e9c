#!/usr/bin/env bash
# The extension's pytest suite as one pytest process per test file, JOBS at once (the GPU check's step: run in
# sequence on the H100/H200 machine it took over 350 s, and a capped step never reached its last files; no
# pytest-xdist there). The slowest files start first. Each file's log goes to OUTDIR/pytest_<file>.log; the
# summary is one line per file (its pytest result line, or "cut at N s" / "no result"), the last 40 lines of
# each file that did not pass, the failed and erroring tests, then a total.
#   scripts/pytest_parallel.sh OUTDIR [JOBS] [SECONDS_PER_FILE] [pytest arguments ...]
# Exit status: 0 when every file passed, 1 otherwise (a failure, an error, a cut or a crash).
set -u -o pipefail
OUT=${1:?OUTDIR}; JOBS=${2:-6}; CAP=${3:-300}; shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
# The slowest files first (measured on an H100, 2026-12-06: gradients against float64, torchrun processes,
# the CLI's plans of every edge problem), then the rest in name order.
SLOW="test_backward test_plan test_distributed test_autograd test_lowp test_fuse test_scripts"
files=()
for f in $SLOW; do [ -f "python/tests/$f.py" ] && files+=("python/tests/$f.py"); done
for f in python/tests/test_*.py; do
  case " $SLOW " in *" $(basename "$f" .py) "*) ;; *) files+=("$f") ;; esac
done
threads=$(( $(nproc) / JOBS )); [ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=$threads
export OUT CAP
printf '%s\n' "${files[@]}" | xargs -P "$JOBS" -I{} bash -c '
  f={}; log="$OUT/pytest_$(basename "$f" .py).log"
  timeout "$CAP" python3 -m pytest "$f" -q -p no:cacheprovider -rfEs --tb=short "$@" >"$log" 2>&1
  echo "rc $?" >>"$log"' _ "$@"
rc=0; passed=0; failed=0; bad=()
for f in "${files[@]}"; do
  log="$OUT/pytest_$(basename "$f" .py).log"
  frc=$(grep -E "^rc [0-9]+$" "$log" | tail -1 | cut -d" " -f2)
  line=$(grep -E "[0-9]+ (passed|failed|error)" "$log" | tail -1)
  case "$frc" in
    0) ;;
    5) line="no test selected" ;;  # (pytest arguments such as -k may leave a file none)
    124) line="cut at $CAP s (the file did not finish)"; rc=1; bad+=("$log") ;;
    *) rc=1; bad+=("$log"); [ -n "$line" ] || line="no result (rc ${frc:-none})" ;;
  esac
  printf '%-28s %s\n' "$(basename "$f" .py)" "${line:-no result}"
  p=$(grep -oE "[0-9]+ passed" <<<"$line" | cut -d" " -f1); passed=$((passed + ${p:-0}))
  n=$(grep -oE "[0-9]+ failed" <<<"$line" | cut -d" " -f1); failed=$((failed + ${n:-0}))
done
for log in "${bad[@]}"; do echo "--- the end of $(basename "$log")"; tail -40 "$log"; done
grep -hE "^(FAILED|ERROR) " "$OUT"/pytest_*.log | head -30
echo "pytest in ${#files[@]} files, $JOBS at once: $passed passed, $failed failed$([ $rc = 0 ] || echo ' (not all files passed)')"
exit $rc
