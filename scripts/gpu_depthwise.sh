#!/usr/bin/env bash
# The depthwise check on the H200 machine: build, the depthwise tests (and the registry sweeps of
# cuda_depthwise), compute-sanitizer memcheck and racecheck on them, then the depthwise suites against cuDNN
# in bf16 NHWC and strict f32 NCHW. scripts/gpu_depthwise.sh OUTDIR [BUILD_DIR]
# TAR_TO=FILE packs OUTDIR into one .tgz at the end (the device tool brings back at most 8 files: give it an
# OUTDIR outside its $OUT and TAR_TO=$OUT/dw.tgz). BENCH_S: seconds a suite may take (150).
set -u -o pipefail
OUT=${1:?OUTDIR}; BUILD=${2:-build-gpu}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
TORCH_CUDNN=${CONVKIT_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
CUDNN_ARGS=(); [ -f "$TORCH_CUDNN/include/cudnn_version.h" ] && CUDNN_ARGS=(-DCONVKIT_CUDNN_ROOT="$TORCH_CUDNN")
rc=0
if [ ! -x "$BUILD/tools/convkit" ] || [ "${REBUILD:-1}" = 1 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${CUDNN_ARGS[@]}" >"$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target convkit_tests convkit_cli >>"$OUT/build.log" 2>&1 || { echo "build FAILED"; tail -30 "$OUT/build.log"; exit 1; }
fi
grep -E "depthwise.*(registers|spill)" "$OUT/build.log" | head -4
T=$BUILD/tests/convkit_tests
F='*Depthwise*:*cuda_depthwise*'
CONVKIT_REQUIRE_GPU=1 GTEST_BRIEF=1 timeout 240 "$T" --gtest_filter="$F" >"$OUT/tests.log" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/tests.log" | head -20
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  f=${MEMCHECK_FILTER:-CudaDepthwise.EveryVariant*}; [ $tool = racecheck ] && f=${RACECHECK_FILTER:-CudaDepthwise.BitEqual*}
  timeout ${SAN_S:-150} "$SAN" --tool $tool --error-exitcode 86 --print-limit 10 "$T" --gtest_filter="$f" >"$OUT/$tool.log" 2>&1 || rc=1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$tool.log" | tail -1)"
done
for spec in ${SUITES:-mobilenet_v2:bf16:nhwc efficientnet_b0:bf16:nhwc convnext_tiny:bf16:nhwc mobilenet_v2:f32:nchw efficientnet_b0:f32:nchw convnext_tiny:f32:nchw}; do
  IFS=: read -r suite dt lay <<<"$spec"
  timeout "${BENCH_S:-150}" "$BUILD/tools/convkit" bench --suite "$suite" --device cuda --dtype "$dt" --layout "$lay" \
    --algo cuda_depthwise --variants --json "$OUT/dw_${suite}_${dt}.json" >"$OUT/dw_${suite}_${dt}.txt" 2>&1 || rc=1
  echo "== $suite $dt $lay"; grep -E "dw|INCORRECT|geomean" "$OUT/dw_${suite}_${dt}.txt" | grep -v unsupported | head -40
done
# One kernel under Nsight Compute when NCU_KERNEL (a regex of its name) and NCU_PROBLEM (a problem spec) are set:
# the first launch that matches, in bf16 NHWC unless NCU_DTYPE/NCU_LAYOUT say otherwise.
if [ -n "${NCU_KERNEL:-}" ] && [ -n "${NCU_PROBLEM:-}" ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 180 "$NCU" --kernel-name "regex:$NCU_KERNEL" --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    "$BUILD/tools/convkit" bench --problem "$NCU_PROBLEM" --device cuda --dtype "${NCU_DTYPE:-bf16}" \
    --layout "${NCU_LAYOUT:-nhwc}" --algo cuda_depthwise --variants >"$OUT/ncu.txt" 2>&1 || rc=1
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|L1/TEX Hit|L2 Hit|Issued Warp|No Eligible|Memory Throughput" "$OUT/ncu.txt" | head -20
fi
[ -n "${TAR_TO:-}" ] && tar czf "$TAR_TO" -C "$(dirname "$OUT")" "$(basename "$OUT")"
exit $rc
