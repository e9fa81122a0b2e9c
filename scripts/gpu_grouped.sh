#!/usr/bin/env bash
# The grouped-convolution check on the H200 machine: build, the GPU tests of cuda_grouped_mma and cuda_grouped
# and of the registry sweeps that reach them, compute-sanitizer memcheck and racecheck on their tests, then
# `convkit bench` on the grouped layers of the resnext50 suite (both against the implicit GEMMs and cuDNN, bf16
# and f32 NHWC) and ncu counters of one kernel on one of them.
#   scripts/gpu_grouped.sh OUTDIR [BUILD_DIR]
# Writes OUTDIR/grouped.log (everything) and OUTDIR/bench_grouped_<dtype>.json.
# Environment: GROUPED_TESTS (gtest filter), SAN_FILTER (the sanitizers' gtest filter), GROUPED_ALGOS (bench
# algorithms), GROUPED_DTYPES (bench types, default "bf16 f32"), VARIANTS=1 (every variant its own row),
# NCU_PROBLEM, NCU_ALGO, NCU_KERNEL (kernel-name regex), TAR_TO=FILE (OUTDIR packed into one file).
set -u -o pipefail
OUT=${1:?OUTDIR}; BUILD=${2:-build-gpu}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
LOG=$OUT/grouped.log
: >"$LOG"
TORCH_CUDNN=${CONVKIT_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
CUDNN_ARGS=(); [ -f "$TORCH_CUDNN/include/cudnn_version.h" ] && CUDNN_ARGS=(-DCONVKIT_CUDNN_ROOT="$TORCH_CUDNN")
rc=0
t0=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCONVKIT_BUILD_TESTS=ON \
  -DCONVKIT_BUILD_TOOLS=ON "${CUDNN_ARGS[@]}" >"$OUT/build.tmp" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target convkit_tests convkit_cli >>"$OUT/build.tmp" 2>&1 ||
  { echo "build FAILED"; tail -30 "$OUT/build.tmp"; exit 1; }
grep -E "spill" "$OUT/build.tmp" | head -4 | tee -a "$LOG"; rm -f "$OUT/build.tmp"
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
T=$BUILD/tests/convkit_tests
CLI=$BUILD/tools/convkit
export CONVKIT_REQUIRE_GPU=1 GTEST_BRIEF=1
F=${GROUPED_TESTS:-'*Grouped*:*Depthwise*:Registry*'}
timeout 200 "$T" --gtest_filter="$F" >"$OUT/tests.tmp" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" "$OUT/tests.tmp" | head -40 | tee -a "$LOG"
echo "tests: $(grep -E '^\[==========\]' "$OUT/tests.tmp" | tail -1)" | tee -a "$LOG"; rm -f "$OUT/tests.tmp"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in ${SAN_TOOLS-memcheck racecheck}; do
  timeout ${SAN_S:-90} "$SAN" --tool $tool --error-exitcode 86 --print-limit 10 "$T" --gtest_filter="${SAN_FILTER:-CudaGrouped*}" \
    >"$OUT/san.tmp" 2>&1 || rc=1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san.tmp" | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/san.tmp" | tail -1)" | tee -a "$LOG"
  grep -E "^========= (Invalid|Race|Error)" "$OUT/san.tmp" | head -5 | tee -a "$LOG"
done
rm -f "$OUT/san.tmp"
PROBS=$(grep -E '^rnx50_g3x3' bench/shapes/resnext50.txt | awk '{printf "--problem %s ", $2}')
ALGOS=${GROUPED_ALGOS:-cuda_grouped_mma,cuda_grouped,cuda_igemm_wgmma,cuda_igemm_mma}
VARS=(); [ "${VARIANTS:-0}" = 1 ] && VARS=(--variants)
for dt in ${GROUPED_DTYPES:-bf16 f32}; do
  # shellcheck disable=SC2086
  timeout 150 "$CLI" bench $PROBS --device cuda --dtype $dt --layout nhwc --algo "$ALGOS" "${VARS[@]}" \
    --json "$OUT/bench_grouped_$dt.json" >>"$LOG" 2>&1 || rc=1
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
P=${NCU_PROBLEM:-n32c128h56w56k128r3s3p1g32}
A=${NCU_ALGO:-cuda_grouped_mma}
K=${NCU_KERNEL:-grouped_mma_kernel}; [ "$A" = cuda_grouped ] && K=grouped_nhwc_kernel
echo "== ncu $A $P bf16 nhwc" >>"$LOG"
timeout 120 "$NCU" --clock-control none --kernel-name "regex:$K" --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section LaunchStats "$CLI" bench --problem "$P" --device cuda --dtype bf16 --layout nhwc --algo "$A" \
  --runs 1 --no-verify "${VARS[@]}" >>"$LOG" 2>&1 || rc=1
[ -n "${TAR_TO:-}" ] && tar -czf "$TAR_TO" -C "$OUT" .
exit $rc
