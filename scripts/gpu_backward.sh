#!/usr/bin/env bash
# The gradient check on the H200 machine: build, the gradient tests (C++ and pytest), compute-sanitizer
# memcheck and racecheck on the CUDA ones (the depthwise kernels and the dense weight-gradient kernel), then
# scripts/bench_backward.py (every depthwise layer of the three suites against cuDNN by default; BENCH_ARGS
# for the dense weight gradients and the training steps).
#   scripts/gpu_backward.sh OUTDIR [BUILD_DIR]
# Environment: BENCH_ARGS (more bench_backward.py arguments), SAN_TOOLS (default "memcheck racecheck"),
# PYTESTS (the pytest files).
set -u -o pipefail
OUT=${1:?OUTDIR}; BUILD=${2:-build-gpu}
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
mkdir -p "$OUT"
TORCH_CUDNN=${CONVKIT_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
CUDNN_ARGS=(); [ -f "$TORCH_CUDNN/include/cudnn_version.h" ] && CUDNN_ARGS=(-DCONVKIT_CUDNN_ROOT="$TORCH_CUDNN")
rc=0
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCONVKIT_BUILD_TESTS=ON \
  -DCONVKIT_BUILD_TOOLS=ON "${CUDNN_ARGS[@]}" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target convkit_tests convkit_cli >>"$OUT/build.log" 2>&1 ||
  { echo "build FAILED"; tail -30 "$OUT/build.log"; exit 1; }
grep -E "spill" "$OUT/build.log" | head -4
T=$BUILD/tests/convkit_tests
CONVKIT_REQUIRE_GPU=1 GTEST_BRIEF=1 timeout 200 "$T" --gtest_filter='*Backward*' >"$OUT/tests.log" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|rel|error" "$OUT/tests.log" | head -30
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in ${SAN_TOOLS-memcheck racecheck}; do
  f='CudaBackward.*:-CudaBackward.DepthwisePast2To31Elements'
  [ $tool = racecheck ] && f='CudaBackward.DepthwiseBitEqual*:CudaBackward.DepthwiseWeightGradient*:CudaBackward.Dense*'
  CONVKIT_REQUIRE_GPU=1 timeout ${SAN_S:-120} "$SAN" --tool $tool --error-exitcode 86 --print-limit 10 "$T" \
    --gtest_filter="$f" >"$OUT/$tool.log" 2>&1 || rc=1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$tool.log" | tail -1)"
done
t0=$(date +%s)
env CONVKIT_CMAKE_BUILD_DIR="$ROOT/$BUILD" TORCH_CUDA_ARCH_LIST=9.0 CONVKIT_ENABLE_CUDA=1 CONVKIT_BUILD_JOBS="$(nproc)" \
  python3 -m pip install --no-build-isolation --no-deps -q ./python >"$OUT/python.log" 2>&1 || { rc=1; tail -20 "$OUT/python.log"; }
echo "pip install: $(( $(date +%s) - t0 )) s"
timeout 200 python3 -m pytest ${PYTESTS:-python/tests/test_backward.py python/tests/test_autograd.py} -q -p no:cacheprovider \
  >>"$OUT/python.log" 2>&1 || rc=1
tail -3 "$OUT/python.log"; grep -E "^FAILED|Error" "$OUT/python.log" | head -10
timeout ${BENCH_S:-240} python3 scripts/bench_backward.py --json "$OUT/backward.json" ${BENCH_ARGS:-} \
  >"$OUT/backward.md" 2>"$OUT/backward.err" || { rc=1; tail -20 "$OUT/backward.err"; }
cat "$OUT/backward.md"
exit $rc
