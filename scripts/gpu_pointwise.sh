#!/usr/bin/env bash
# The 1x1 check on the H200 machine: build, cuda_pointwise_mma's tests and the registry sweeps that run it,
# compute-sanitizer memcheck and racecheck on them, the extension, then scripts/bench_pointwise.py (every
# 1x1 layer of ConvNeXt-T and MobileNetV2 with its epilogue) with ALGOS as its columns.
# scripts/gpu_pointwise.sh OUTDIR [BUILD_DIR]; NCU_PROBLEM=<spec> adds one Nsight Compute profile of the kernel,
# SANITIZERS="" skips compute-sanitizer, PYTHON=0 the extension and the benchmark; TEST_FILTER, SAN_FILTER,
# MODELS and ALGOS replace the tests, the sanitized tests, the benchmark's models and its columns.
set -u -o pipefail
OUT=${1:?OUTDIR}; BUILD=${2:-build-gpu}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
TORCH_CUDNN=${CONVKIT_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
CUDNN_ARGS=(); [ -f "$TORCH_CUDNN/include/cudnn_version.h" ] && CUDNN_ARGS=(-DCONVKIT_CUDNN_ROOT="$TORCH_CUDNN")
rc=0
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCONVKIT_BUILD_TESTS=ON \
  "${CUDNN_ARGS[@]}" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target convkit_tests convkit_cli >>"$OUT/build.log" 2>&1 || { echo "build FAILED"; tail -30 "$OUT/build.log"; exit 1; }
T=$BUILD/tests/convkit_tests
F=${TEST_FILTER:-'CudaPointwiseMma.*:TensorCore/Tc.*cuda_pointwise_mma*:TensorCoreHuge.F16Nhwc1x1*'}
CONVKIT_REQUIRE_GPU=1 GTEST_BRIEF=1 timeout 300 "$T" --gtest_filter="$F" >"$OUT/tests.log" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |cuda_pointwise_mma.*(wrong|problems)" "$OUT/tests.log" | head -30
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in ${SANITIZERS-memcheck racecheck}; do
  f=${SAN_FILTER:-'CudaPointwiseMma.BitEqual*:TensorCore/Tc.QuickSanitizerSubset/cuda_pointwise_mma*'}
  timeout ${SAN_S:-150} "$SAN" --tool $tool --error-exitcode 86 --print-limit 10 "$T" --gtest_filter="$f" >"$OUT/$tool.log" 2>&1 || rc=1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$tool.log" | tail -1)"
done
if [ "${PYTHON:-1}" = 1 ]; then
  env CONVKIT_CMAKE_BUILD_DIR="$PWD/$BUILD" TORCH_CUDA_ARCH_LIST=9.0 CONVKIT_ENABLE_CUDA=1 CONVKIT_BUILD_JOBS="$(nproc)" \
    python3 -m pip install --no-build-isolation --no-deps -q ./python >"$OUT/pip.log" 2>&1 || { echo "pip FAILED"; tail -20 "$OUT/pip.log"; exit 1; }
  timeout ${BENCH_S:-300} python3 scripts/bench_pointwise.py --models "${MODELS:-convnext_tiny,mobilenet_v2}" \
    --algos "${ALGOS:-auto,cuda_igemm_mma,cuda_pointwise_mma}" \
    --json "$OUT/pointwise.json" >"$OUT/pointwise.md" 2>&1 || rc=1
  cat "$OUT/pointwise.md"
fi
if [ -n "${NCU_PROBLEM:-}" ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 180 "$NCU" --kernel-name "regex:pointwise_mma" --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --metrics smsp__inst_executed.sum,smsp__cycles_elapsed.avg.per_second \
    "$BUILD/tools/convkit" bench --problem "$NCU_PROBLEM" --device cuda --dtype bf16 --layout nhwc \
    --algo cuda_pointwise_mma --no-verify >"$OUT/ncu.txt" 2>&1 || rc=1
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|L1/TEX Hit|L2 Hit|Issued Warp|No Eligible|Memory Throughput|inst_executed|per_second|Executed Instructions" "$OUT/ncu.txt" | head -24
fi
exit $rc
