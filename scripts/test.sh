#!/usr/bin/env bash
# Builds and runs every test: the Release build's GoogleTest suite (CPU tests; CUDA tests skip without a
# GPU), the same CPU tests under AddressSanitizer + UndefinedBehaviorSanitizer, and an install + the
# find_package(convkit) consumer example, then the PyTorch extension's pytest suite (torch 2.11 from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs=$(nproc)

echo "== Release build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONVKIT_BUILD_TESTS=ON -DCONVKIT_BUILD_TOOLS=ON >/dev/null
cmake --build build -j "$jobs" 2>&1 | tee build/build.log
# The CUDA kernels' stack frames against tests/local_memory_allowed.txt (of what this build compiled: all of
# them on a fresh clone).
scripts/check_local_memory.sh build/build.log
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900

echo "== optional dependencies hidden or broken: the configure still succeeds, the algorithm is unavailable"
probe=$(mktemp -d)
mkdir -p "$probe/broken-dnnl"
echo 'find_package(NoSuchDependencyOfDnnl REQUIRED)' >"$probe/broken-dnnl/dnnlConfig.cmake"
check_configure() {  # check_configure WHAT EXPECTED-LINE CMAKE-ARGS...
  local what=$1 want=$2; shift 2
  local out
  out=$(cmake -S . -B "$probe/build" -G Ninja "$@" 2>&1) || { echo "$out" | tail -20; echo "configure failed: $what"; exit 1; }
  echo "$out" | grep -q -- "$want" || { echo "$out" | grep convkit; echo "no '$want' ($what)"; exit 1; }
  echo "  $what: configure ok, '$want'"
  rm -rf "$probe/build"
}
check_configure "oneDNN config broken" "oneDNN=OFF" -DCONVKIT_ENABLE_CUDA=OFF -DCONVKIT_BUILD_TESTS=OFF \
  -Ddnnl_DIR="$probe/broken-dnnl"
check_configure "oneDNN hidden" "oneDNN=OFF" -DCONVKIT_ENABLE_CUDA=OFF -DCONVKIT_BUILD_TESTS=OFF -DCONVKIT_WITH_ONEDNN=OFF
check_configure "OpenBLAS hidden" "OpenBLAS=OFF" -DCONVKIT_ENABLE_CUDA=OFF -DCONVKIT_BUILD_TESTS=OFF \
  -DCONVKIT_WITH_OPENBLAS=OFF
if command -v nvcc >/dev/null; then
  check_configure "cuDNN hidden" "cuDNN=OFF" -DCONVKIT_BUILD_TESTS=OFF -DCONVKIT_WITH_CUDNN=OFF
fi
rm -rf "$probe"

echo "== ASan + UBSan build (CPU only) and tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONVKIT_SANITIZE=ON \
      -DCONVKIT_ENABLE_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1800

echo "== install + find_package(convkit) consumer"
rm -rf build/install build/consumer
cmake --install build --prefix build/install >/dev/null
cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/consumer
LD_LIBRARY_PATH="$PWD/build/install/lib:${LD_LIBRARY_PATH:-}" ./build/consumer/consumer
echo "== PyTorch extension (CPU tests; CUDA tests skip without a GPU)"
PY=${PYTHON:-python3}
# A bare Debian 12 has no python3, and its python3 is "externally managed" (PEP 668: pip refuses to install
# into it): there the tests get a virtual environment of their own (.venv-test) on Debian's python3.
externally_managed() {
  $PY -c "import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()['stdlib'], 'EXTERNALLY-MANAGED')) else 1)"
}
if ! command -v "$PY" >/dev/null 2>&1 || ! $PY -m pip --version >/dev/null 2>&1 || externally_managed; then
  if [ ! -x .venv-test/bin/python ]; then
    need=()
    for p in python3 python3-venv python3-dev; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then
      SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
    fi
    /usr/bin/python3 -m venv .venv-test
  fi
  PY=$PWD/.venv-test/bin/python
fi
if ! $PY -c "import torch, torchvision, sys; sys.exit(0 if torch.__version__.startswith('2.11') else 1)" 2>/dev/null; then
  $PY -m pip install -q "torch==2.11.0" "torchvision==0.26.0"
fi
$PY -m pip install -q pytest numpy wheel "setuptools>=64" "timm==1.0.15"  # timm: test_fuse.py's timm models
CONVKIT_CMAKE_BUILD_DIR="$PWD/build-python" CONVKIT_BUILD_JOBS="$jobs" \
  $PY -m pip install -q --no-build-isolation ./python
CONVKIT_CLI="$PWD/build/tools/convkit" $PY -m pytest python/tests -q -p no:cacheprovider
if command -v nvcc >/dev/null; then
  # the extension's kernels for an older target as well (TORCH_CUDA_ARCH_LIST="8.0;9.0"): the cluster kernel
  # compiles to a trap there, and se_gate_takes keeps it off such a device
  echo "== the extension's kernels for sm_80 and sm_90 (compile only)"
  nvcc -std=c++17 -O1 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Iinclude \
    -Ipython/csrc -c python/csrc/kernels.cu -o build/kernels_sm80_sm90.o
fi
echo "== all tests passed"
