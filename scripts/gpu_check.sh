#!/usr/bin/env bash
# The one GPU check: build, doctor, GPU tests, compute-sanitizer, the PyTorch extension, benchmarks, PyTorch
# anchors, chart.
#
#   scripts/gpu_check.sh OUTDIR [--skip-build] [--only tests,sanitize,bench,python] [--suites "resnet50:bf16 seeds"]
#
# Meant for the H200 machine (one device call of at most 10 minutes): every step has its own timeout and
# the whole run keeps to a budget (GPU_CHECK_BUDGET seconds, default 560), skipping what no longer fits.
# Writes at most 8 files into OUTDIR:
#   summary.md  sanitizer.log  build_tests.log  bench.txt  bench_json.tgz (bench_<suite>[_<dtype>].json)
#   chart.png  python.log (the PyTorch extension: install, pytest on the GPU, scripts/bench_torch.py)
# A suite is NAME (fp32, NCHW, every algorithm) or NAME:DTYPE with DTYPE f16, bf16 or tf32 (NHWC, the
# tensor-core algorithms and cuDNN): `convkit tune` runs first and the bench uses its variants (--tuned).
# and prints the short summary at the end. Exits non-zero if the build, a test, a sanitizer run or a
# benchmark failed; later steps still run and everything is still written.
#
# Environment knobs: GPU_CHECK_BUDGET (s), GPU_CHECK_SKIP_PYTHON (non-empty: no PyTorch step),
# GPU_CHECK_SKIP_ANCHOR (non-empty: no PyTorch cuDNN anchors after the benchmarks), TEST_FILTER (gtest filter for the GPU test run;
# unset: the whole suite through ctest, TEST_JOBS at a time, default 10, the CPU algorithms' own tests left to CI
# unless GPU_CHECK_CPU_TESTS is non-empty), GPU_CHECK_TESTS_S (that step's cap, default 200),
# MEMCHECK_FILTER / RACECHECK_FILTER (gtest filters; default: picked from the test list by algorithm name),
# BUILD_DIR (default build-gpu), JOBS (default nproc), CUDA_ARCHS (default 90),
# TC_ALGOS (the convkit algorithms of the NAME:DTYPE suites, default cuda_igemm_wgmma,cuda_igemm_mma,cuda_igemm_wmma).
set -u
set -o pipefail

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
OUTDIR=$1; shift
SKIP_BUILD=0; ONLY=all; SUITES="resnet50:bf16 resnet50:f16 resnet50:tf32 seeds:bf16"
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) SKIP_BUILD=1 ;;
    --only) shift; ONLY=${1:-}  # one step or a comma list, e.g. tests,sanitize,python
      for o in ${ONLY//,/ }; do case "$o" in tests|sanitize|bench|python) ;; *) usage ;; esac; done ;;
    --suites) shift; SUITES=${1:-} ;;
    -h|--help) usage ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
ARCHS=${CUDA_ARCHS:-90}
BUDGET=${GPU_CHECK_BUDGET:-560}
TC_ALGOS=${TC_ALGOS:-cuda_igemm_wgmma,cuda_igemm_mma,cuda_igemm_wmma}
T0=$(date +%s)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

SUMMARY=$OUTDIR/summary.md
BLOG=$OUTDIR/build_tests.log
SLOG=$OUTDIR/sanitizer.log
BTXT=$OUTDIR/bench.txt
: >"$BLOG"; : >"$SLOG"; : >"$BTXT"
ROWS=$TMP/rows; : >"$ROWS"
NOTES=$TMP/notes; : >"$NOTES"
FAILED=0

CLI=$BUILD/tools/convkit
TESTS=$BUILD/tests/convkit_tests
# Every CUDA algorithm and peer the build registers is required (set from `convkit list` after the build):
# a new rung is checked without touching this script.
REQUIRE_ALGOS=cudnn
# A fresh tune cache: tests and benchmarks never see one left by an earlier run.
export CONVKIT_REQUIRE_GPU=1 CONVKIT_REQUIRE_ALGOS=$REQUIRE_ALGOS GTEST_COLOR=no PYTHONUNBUFFERED=1 \
  CONVKIT_TUNE_CACHE=$TMP/tune-v1.txt

want() { case ",$ONLY," in *,all,*|*,"$1",*) return 0 ;; esac; return 1; }
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
row() { printf '| %s | %s | %ss | %s |\n' "$1" "$2" "$3" "$4" >>"$ROWS"; echo "gpu_check: $1: $2 ($3 s) $4"; }
fail() { FAILED=1; }

# run_step NAME CAP LOG CMD...: runs CMD with timeout min(CAP, budget left - 10 s), appending to LOG.
# Sets STEP_RC (124 = timed out, 125 = skipped for lack of time) and STEP_S.
run_step() {
  local name=$1 cap=$2 log=$3; shift 3
  local t=$(( $(left) - 10 )); [ "$t" -gt "$cap" ] && t=$cap
  STEP_S=0
  if [ "$t" -lt 5 ]; then STEP_RC=125; echo "== $name: skipped, the time budget is spent" >>"$log"; return; fi
  echo "== $name (timeout ${t}s): $*" >>"$log"
  local s
  s=$(date +%s)
  timeout --kill-after=5 "$t" "$@" >>"$log" 2>&1
  STEP_RC=$?
  STEP_S=$(( $(date +%s) - s ))
  echo "== $name: exit $STEP_RC after ${STEP_S}s" >>"$log"
}
status_of() {  # status text for STEP_RC
  case "$STEP_RC" in 0) echo ok ;; 124|137) echo TIMEOUT ;; 125) echo SKIPPED ;; *) echo "FAIL (exit $STEP_RC)" ;; esac
}

# ---- build ---------------------------------------------------------------------------------------
if [ "$SKIP_BUILD" = 0 ]; then
  CUDNN_ARGS=()
  # PyTorch's cuDNN (9.19) rather than the system's 9.14: headers and library from the same place.
  TORCH_CUDNN=${CONVKIT_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
  [ -f "$TORCH_CUDNN/include/cudnn_version.h" ] && CUDNN_ARGS=(-DCONVKIT_CUDNN_ROOT="$TORCH_CUDNN")
  run_step configure 120 "$BLOG" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" "${CUDNN_ARGS[@]}"
  if [ "$STEP_RC" = 0 ]; then
    cfg_s=$STEP_S
    run_step build 330 "$BLOG" cmake --build "$BUILD" -j "$JOBS"
    st=$(status_of); [ "$STEP_RC" = 0 ] || fail
    warn=$(grep -c -i -E "warning[: ]" "$BLOG" || true)
    spills=$(grep -c "spill" "$BLOG" || true)
    row build "$st" $(( cfg_s + STEP_S )) "$warn warning lines, $spills spill lines (see build_tests.log)"
    # Stack frames against tests/local_memory_allowed.txt (a fresh build folder: every kernel compiled).
    lmem=$(scripts/check_local_memory.sh "$BLOG" 2>&1) && lst=ok || { lst=FAIL; fail; }
    row "local memory" "$lst" 0 "$(echo "$lmem" | head -1)"
    echo "$lmem" >>"$BLOG"
  else
    fail; row build "configure $(status_of)" "$STEP_S" "see build_tests.log"
  fi
  grep -E "convkit: (CUDA|cuDNN)" "$BLOG" | sed 's/^-- //' >>"$NOTES"
else
  row build skipped 0 "--skip-build: using $BUILD"
fi

if [ -x "$CLI" ]; then
  # (cuda_conv_wgmma_halo computes f16/bf16 only by design, and a required tensor-core algorithm must take
  # tf32 too: it is swept like the others, but not required.)
  REQUIRE_ALGOS=$("$CLI" list | awk 'NR > 1 && $2 == "cuda" && $1 != "cuda_conv_wgmma_halo" {print $1}' |
    paste -sd, -)
  export CONVKIT_REQUIRE_ALGOS=$REQUIRE_ALGOS
  echo "required algorithms: $REQUIRE_ALGOS" >>"$NOTES"
fi

# ---- doctor --------------------------------------------------------------------------------------
DOCTOR=$TMP/doctor.txt; : >"$DOCTOR"
if [ -x "$CLI" ]; then
  run_step doctor 30 "$DOCTOR" "$CLI" doctor
  st=$(status_of); [ "$STEP_RC" = 0 ] || fail
  # This script is for a GPU machine: no usable GPU, or no code for it, is a failure.
  if grep -q -E '^GPU: none|code for it: NO|^CUDA: not in this build' "$DOCTOR"; then st="FAIL (no usable GPU)"; fail; fi
  row doctor "$st" "$STEP_S" "$(grep -v '^==' "$DOCTOR" | grep -m1 -E '^GPU' | tr -s ' ' | cut -c1-100)"
else
  fail; row doctor "FAIL" 0 "no CLI binary at $CLI"
fi

# ---- GPU tests -----------------------------------------------------------------------------------
if want tests; then
  if [ -x "$TESTS" ]; then
    if [ -n "${TEST_FILTER:-}" ]; then
      run_step tests "${GPU_CHECK_TESTS_S:-200}" "$BLOG" env GTEST_BRIEF=1 "$TESTS" --gtest_filter="$TEST_FILTER"
      st=$(status_of)
      passed=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$BLOG" | tail -1 | grep -oE '[0-9]+' | head -1)
      failed_list=$(sed -n '/^\[  FAILED  \] [0-9]* test/,$p' "$BLOG" | grep -E '^\[  FAILED  \] [A-Za-z]' | \
                    sed 's/^\[  FAILED  \] //; s/,.*//' | head -8 | tr '\n' ' ')
      skipped=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$BLOG" | tail -1 | grep -oE '[0-9]+' | head -1)
    else
      # The whole suite: one process per test, TEST_JOBS at a time (the CPU oracles of the sweeps run in
      # parallel; 2026-12-01 on the H200 it took ~9 minutes at -j 10, the cuDNN peer's random sweep alone
      # 169 s: give it a device call of its own, `--only tests` with GPU_CHECK_TESTS_S=540).
      # The CPU algorithms' own tests (Cpu*, Im2colGemm, Winograd, TensorCoreHarness and the registry's cpu_*
      # instances: 86 of 853, about 300 of the suite's 1900 CPU-seconds on the H200 machine, 2026-12-06) are
      # left to CI, which runs them on the same code; GPU_CHECK_CPU_TESTS (non-empty) runs them here too.
      CLOG=$TMP/ctest.log
      CPU_ONLY=(); [ -z "${GPU_CHECK_CPU_TESTS:-}" ] &&
        CPU_ONLY=(-E '^(Cpu[A-Z][A-Za-z]*|Im2colGemm|Winograd|TensorCoreHarness)\.|/cpu_')
      run_step tests "${GPU_CHECK_TESTS_S:-200}" "$CLOG" ctest --test-dir "$BUILD" -j "${TEST_JOBS:-10}" \
        --timeout 400 --output-on-failure "${CPU_ONLY[@]}"
      st=$(status_of)
      cat "$CLOG" >>"$BLOG"
      passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$CLOG" || true)
      skipped=$(grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped' "$CLOG" || true)
      failed_list=$(sed -n '/The following tests FAILED:/,$p' "$CLOG" | grep -E '^\s+[0-9]+ - ' | \
                    sed -E 's/^\s+[0-9]+ - //; s/ \(.*//' | head -8 | tr '\n' ' ')
      unfinished=$(comm -23 <(grep -oE 'Start +[0-9]+: [^ ]+' "$CLOG" | awk '{print $3}' | sort) \
                            <(grep -oE 'Test +#[0-9]+: [^ ]+' "$CLOG" | awk '{print $3}' | sort) | head -4 | tr '\n' ' ')
      [ -n "$unfinished" ] && failed_list="$failed_list (still running at the cut: $unfinished)"
    fi
    note="${passed:-0} passed"
    [ -n "$skipped" ] && note="$note, $skipped skipped"
    [ -n "$failed_list" ] && note="$note; failed: $failed_list"
    if [ "$STEP_RC" != 0 ] || [ "${passed:-0}" = 0 ]; then
      fail; [ "${passed:-0}" = 0 ] && [ "$STEP_RC" = 0 ] && st="FAIL (no test ran)"
    fi
    row tests "$st" "$STEP_S" "$note"
    # cuda_igemm_wgmma's persistent tiles again with a grid of one block, which then walks every tile of a
    # problem (pipeline slots and staging areas reused across tiles; at full size few test shapes have
    # more tiles than SMs).
    if [ -z "${TEST_FILTER:-}" ]; then
      PF='TensorCore/Tc.*/cuda_igemm_wgmma_bf16:TensorCore/Tc.*/cuda_igemm_wgmma_f16'
      run_step tests-persistent 120 "$BLOG" env GTEST_BRIEF=1 CONVKIT_WGMMA_PERSISTENT_BLOCKS=1 "$TESTS" --gtest_filter="$PF"
      st=$(status_of); [ "$STEP_RC" = 0 ] || fail
      passed=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$BLOG" | tail -1 | grep -oE '[0-9]+' | head -1)
      row tests-persistent "$st" "$STEP_S" "${passed:-0} passed (CONVKIT_WGMMA_PERSISTENT_BLOCKS=1)"
    fi
  else
    fail; row tests FAIL 0 "no test binary at $TESTS"
  fi
fi

# ---- compute-sanitizer ---------------------------------------------------------------------------
# pick_tests PER PATTERN ALGO...: from the test list, up to PER tests per algorithm whose line mentions the
# algorithm (case-insensitive) and matches the regex PATTERN, falling back to any test of that algorithm.
pick_tests() {
  local per=$1 pattern=$2; shift 2
  local list=$TMP/tests.list picked=""
  # "Suite.Test<TAB>whole line": a parameterised test may name its algorithm only in "# GetParam() = ...".
  [ -s "$list" ] || "$TESTS" --gtest_list_tests 2>/dev/null | awk '
    /^[^ ]/ { suite=$1; next }
    /^  [^ ]/ { print suite $1 "\t" suite $0 }' >"$list"
  for algo in "$@"; do
    local mine
    mine=$(grep -i -F -- "$algo" "$list" | grep -E -- "$pattern" | cut -f1 | head -n "$per")
    [ -n "$mine" ] || mine=$(grep -i -F -- "$algo" "$list" | cut -f1 | head -n "$per")
    picked="$picked $(echo "$mine" | tr '\n' ' ')"
  done
  echo "$picked" | tr ' ' '\n' | grep -v '^$' | awk '!seen[$0]++' | paste -sd: -
}
sanitize() {  # sanitize TOOL FILTER CAP [VAR=VALUE: the tests' environment]
  local tool=$1 filter=$2 cap=$3
  if [ -z "$filter" ]; then STEP_RC=125; STEP_S=0; echo "== $tool: no matching test" >>"$SLOG"; return; fi
  run_step "$tool" "$cap" "$SLOG" env ${4:-} "$SANITIZER" --tool "$tool" --error-exitcode 86 --print-limit 20 \
    "$TESTS" --gtest_filter="$filter"
}
if want sanitize; then
  SANITIZER=$(command -v compute-sanitizer || true)
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$SANITIZER" ] && [ -x "$c" ] && SANITIZER=$c
  done
  if [ -z "$SANITIZER" ]; then
    fail; row sanitizer FAIL 0 "compute-sanitizer is neither on PATH nor in /usr/local/cuda"
  elif [ ! -x "$TESTS" ]; then
    fail; row sanitizer FAIL 0 "no test binary at $TESTS"
  else
    # memcheck: the edge set (odd sizes, tile remainders) of every GPU algorithm; racecheck (slower): two
    # small hand-checked cases of each kernel that uses shared memory.
    # The tensor-core kernels: their quick subset (C=3, groups, split-K, dilation, K=65; every variant).
    # The depthwise, grouped and pointwise kernels and the depthwise gradients: their own tests (the 2^31 one aside).
    mfilter=${MEMCHECK_FILTER:-$(pick_tests 1 'EdgeSet' cuda_ref cuda_direct_naive cuda_direct_smem \
                                   cuda_direct_regblock cuda_im2col_cublas cuda_igemm_simt cudnn):TensorCore/Tc.QuickSanitizerSubset/cuda_igemm_*_bf16:TensorCore/Tc.QuickSanitizerSubset/cuda_igemm_mma_tf32:TensorCore/Tc.QuickSanitizerSubset/cuda_conv_wgmma_halo_bf16:TensorCore/Tc.QuickSanitizerSubset/cuda_pointwise_mma_bf16:CudaPointwiseMma.BitEqual*:CudaDepthwise.*:CudaGrouped*:CudaBackward.DepthwiseBitEqual*:CudaBackward.DepthwiseSixteen*:CudaBackward.DepthwiseWeightGradient*}
    rfilter=${RACECHECK_FILTER:-$(pick_tests 2 'HandChecked(K2BiasRelu|Stride2)' cuda_direct_smem \
                                   cuda_direct_regblock cuda_igemm_simt):TensorCore/Tc.QuickSanitizerSubset/cuda_igemm_*_f16:TensorCore/Tc.QuickSanitizerSubset/cuda_conv_wgmma_halo_f16:TensorCore/Tc.QuickSanitizerSubset/cuda_pointwise_mma_f16:CudaDepthwise.BitEqualToReferenceOnSmallIntegersF32:CudaDepthwise.TmaKernelEveryVariant:CudaGrouped*.BitEqual*:CudaBackward.DepthwiseWeightGradient*}
    # (and cuda_igemm_wgmma's quick subset once more with one persistent block walking every tile)
    for tool in memcheck racecheck memcheck-persistent racecheck-persistent; do
      pf='TensorCore/Tc.QuickSanitizerSubset/cuda_igemm_wgmma_bf16'
      case $tool in
        memcheck) sanitize memcheck "$mfilter" 90; f=$mfilter ;;
        racecheck) sanitize racecheck "$rfilter" 90; f=$rfilter ;;
        *) sanitize "${tool%-persistent}" "$pf" 60 CONVKIT_WGMMA_PERSISTENT_BLOCKS=1; f=$pf ;;
      esac
      st=$(status_of)
      n=$(echo "$f" | tr ':' '\n' | grep -c . || true)
      if grep -q -E "Device not supported|Unable to find injection library|Target application terminated before first instrumented API call" "$SLOG"; then
        st="UNAVAILABLE"; note="compute-sanitizer cannot attach on this machine (see sanitizer.log)"; fail
      else
        errs=$(grep -E "ERROR SUMMARY: [0-9]+ error" "$SLOG" | tail -1 | sed 's/.*ERROR SUMMARY: //')
        hazards=$(grep -E "RACECHECK SUMMARY" "$SLOG" | tail -1 | sed 's/.*RACECHECK SUMMARY: //')
        note="$n tests; ${errs:-no summary}"
        [ "${tool%-persistent}" = racecheck ] && note="$n tests; ${hazards:-${errs:-no summary}}"
        case "$STEP_RC" in 0) ;; 125) note="no CUDA test matched the algorithm names" ; fail ;; *) fail ;; esac
      fi
      row "$tool" "$st" "$STEP_S" "$note"
    done
    # the extension's squeeze-excitation gate kernel alone (no PyTorch): its harness under all four tools
    run_step se_gate 180 "$SLOG" scripts/sanitize_se_gate.sh "$TMP/se_gate"
    st=$(status_of)
    [ "$STEP_RC" = 0 ] || fail
    row se_gate "$st" "$STEP_S" "python/tests/se_gate_harness.cu under memcheck, racecheck, synccheck, initcheck"
  fi
fi

# ---- the PyTorch extension -----------------------------------------------------------------------
# NOTE: before the benchmarks: when the budget runs short, a benchmark suite is the step to lose, not the
# extension's tests (2026-11-29: the f16 and tf32 suites took 97 s and 82 s and pytest was cut at 85%).
if want python && [ -z "${GPU_CHECK_SKIP_PYTHON:-}" ]; then
  PLOG=$OUTDIR/python.log; : >"$PLOG"
  # NOTE: the library's build folder is shared with the steps above: the install only relinks it.
  run_step "pip install ./python" 240 "$PLOG" env CONVKIT_CMAKE_BUILD_DIR="$ROOT/$BUILD" \
    TORCH_CUDA_ARCH_LIST=9.0 CONVKIT_ENABLE_CUDA=1 CONVKIT_BUILD_JOBS="$JOBS" \
    python3 -m pip install --no-build-isolation --no-deps -q ./python
  st=$(status_of); [ "$STEP_RC" = 0 ] || fail
  row "python install" "$st" "$STEP_S" "see python.log"
  if [ "$STEP_RC" = 0 ]; then
    # one pytest process per test file, six at once (scripts/pytest_parallel.sh; in sequence the suite took
    # over 350 s on an H100, 2026-12-06), each file capped at 200 s; python.log gets the per-file lines and the
    # end of each file's log that did not pass
    run_step pytest 240 "$PLOG" env CONVKIT_CLI="$ROOT/$BUILD/tools/convkit" scripts/pytest_parallel.sh "$TMP/pytest" 6 200
    st=$(status_of); [ "$STEP_RC" = 0 ] || fail
    row pytest "$st" "$STEP_S" "$(grep -E '^pytest in ' "$PLOG" | tail -1 | cut -c1-90)"
    run_step "bench_torch" 150 "$PLOG" python3 scripts/bench_torch.py
    st=$(status_of); [ "$STEP_RC" = 0 ] || fail
    row "bench_torch" "$st" "$STEP_S" "see python.log"
  fi
fi

# ---- benchmarks ----------------------------------------------------------------------------------
JSONS=()
if want bench; then
  if [ -x "$CLI" ]; then
    for spec in $SUITES; do
      suite=${spec%%:*}; dt=${spec#*:}; [ "$dt" = "$spec" ] && dt=""
      tag=$suite${dt:+_$dt}
      json=$TMP/bench_$tag.json csv=$TMP/bench_$tag.csv out=$TMP/bench_$tag.txt
      : >"$out"
      if [ -n "$dt" ]; then
        run_step "tune $tag" 90 "$out" "$CLI" tune --suite "$suite" --device cuda --dtype "$dt" --layout nhwc
        [ "$STEP_RC" = 0 ] || fail
        row "tune $tag" "$(status_of)" "$STEP_S" "convkit tune (variants of the tensor-core kernels)"
        run_step "bench $tag" 150 "$out" "$CLI" bench --suite "$suite" --device cuda --dtype "$dt" --layout nhwc \
          --algo "$TC_ALGOS" --tuned --json "$json" --csv "$csv"
      else
        run_step "bench $tag" 200 "$out" "$CLI" bench --suite "$suite" --device cuda --algo all \
          --json "$json" --csv "$csv"
      fi
      st=$(status_of); [ "$STEP_RC" = 0 ] || fail
      [ -s "$json" ] && JSONS+=("$json")
      # "algo 1.23x" for each line of the geomean block, and the INCORRECT warning if any.
      geo=$(awk '/geomean speed-up/ {on=1; next} on && /^  [^ ]/ {printf "%s %s; ", $1, $2} on && !/^  / {on=0}' "$out")
      bad=$(grep -m1 -o "WARNING: [0-9]* results\{0,1\} [a-z]* INCORRECT" "$out")
      row "bench $tag" "$st" "$STEP_S" "${bad:+$bad; }${geo:-no geomean (see bench.txt)}"
      cat "$out" >>"$BTXT"
      if [ -s "$csv" ]; then { echo "== $tag CSV"; cat "$csv"; } >>"$BTXT"; fi
      grep -q "INCORRECT" "$out" && fail
    done
  else
    fail; row bench FAIL 0 "no CLI binary at $CLI"
  fi
  # PyTorch's cuDNN on the same shapes: our cudnn peer should be within ~10% of it.
  ANCHOR=$TMP/anchor.txt; : >"$ANCHOR"
  # One dtype per comparison: bf16 NHWC when a bf16 suite ran, else fp32 NCHW.
  A_DT=f32; A_LAYOUT=nchw; A_SUITES=""; A_JSONS=()
  for spec in $SUITES; do case "$spec" in *:bf16) A_DT=bf16; A_LAYOUT=nhwc ;; esac; done
  for spec in $SUITES; do
    dt=${spec#*:}; [ "$dt" = "$spec" ] && dt=f32
    [ "$dt" = "$A_DT" ] || continue
    A_SUITES="$A_SUITES ${spec%%:*}"
    j=$TMP/bench_${spec%%:*}$([ "$dt" = f32 ] || echo "_$dt").json; [ -s "$j" ] && A_JSONS+=("$j")
  done
  if [ -z "${GPU_CHECK_SKIP_ANCHOR:-}" ]; then
    run_step "torch anchor" 90 "$ANCHOR" python3 scripts/torch_anchor.py --suites "${A_SUITES# }" --ceilings \
      --dtype "$A_DT" --layout "$A_LAYOUT" --compare "${A_JSONS[@]}"
    row "torch anchor" "$(status_of)" "$STEP_S" "$(grep -m1 'compare geomean' "$ANCHOR" | cut -c1-90)"
  else
    row "torch anchor" skipped 0 "GPU_CHECK_SKIP_ANCHOR"
  fi
  cat "$ANCHOR" >>"$BTXT"
  if [ -f scripts/plot_bench.py ] && [ ${#JSONS[@]} -gt 0 ]; then
    # The roofline's ceilings: this run's PyTorch measurements when they came, else ANCHORS.md's.
    bw=$(awk '/^ceiling copy/ {print $3}' "$ANCHOR"); fp32=$(awk '/^ceiling sgemm.*fp32/ {print $5}' "$ANCHOR")
    run_step plot 40 "$BTXT" python3 scripts/plot_bench.py "${JSONS[@]}" -o "$OUTDIR/chart.png" \
      --peak "fp32=${fp32:-51}" --bandwidth "${bw:-4.26}"
    row plot "$(status_of)" "$STEP_S" "$([ -s "$OUTDIR/chart.png" ] && echo chart.png || echo 'no chart')"
  else
    row plot skipped 0 "no scripts/plot_bench.py or no bench JSON"
  fi
  [ ${#JSONS[@]} -gt 0 ] && tar -czf "$OUTDIR/bench_json.tgz" -C "$TMP" $(cd "$TMP" && ls bench_*.json)
fi

# ---- summary -------------------------------------------------------------------------------------
{
  echo "# gpu_check $(date -u +%Y-%m-%dT%H:%MZ) ($(elapsed) s, budget ${BUDGET} s)"
  echo
  echo "| step | status | time | note |"
  echo "|---|---|---|---|"
  cat "$ROWS"
  echo
  [ -s "$NOTES" ] && { cat "$NOTES"; echo; }
  if [ -s "$DOCTOR" ]; then echo '## convkit doctor'; echo '```'; head -40 "$DOCTOR"; echo '```'; fi
  if [ -s "${ANCHOR:-/nonexistent}" ]; then echo '## PyTorch cuDNN anchors'; echo '```'; cat "$ANCHOR"; echo '```'; fi
  echo
  echo "Files: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
  echo "RESULT: $([ "$FAILED" = 0 ] && echo PASS || echo FAIL)"
} >"$SUMMARY"

# The short form on stdout (the device tool returns only the tail of the output).
echo
sed -n '1,/^$/p' "$SUMMARY"
echo "| step | status | time | note |"
cat "$ROWS"
grep -v '^==' "$DOCTOR" 2>/dev/null | grep -E '^(CUDA|cuDNN|GPU|  code)' | head -6
[ -s "${ANCHOR:-/nonexistent}" ] && grep -E "^(compare|ceiling)" "$ANCHOR" | head -30
echo "RESULT: $([ "$FAILED" = 0 ] && echo PASS || echo FAIL) (details in $OUTDIR/summary.md)"
exit "$FAILED"
