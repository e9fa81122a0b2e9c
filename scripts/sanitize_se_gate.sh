#!/usr/bin/env bash
# The PyTorch extension's squeeze-excitation gate kernel (python/csrc/kernels.cu) under compute-sanitizer:
# python/tests/se_gate_harness.cu builds it alone with nvcc (no PyTorch) and checks eight problems against a
# CPU reference; it runs once as it is, then under memcheck, racecheck, synccheck and initcheck. Needs a GPU
# of compute capability 9.0 (the kernel launches clusters).
#
#   scripts/sanitize_se_gate.sh [OUTDIR]      (default: a temporary directory for the binary)
#
# Prints the harness's lines, then each tool's summary line; exit 1 if the harness or a tool reports an error.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT" || exit 2
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$SAN" ] || { echo "compute-sanitizer not found" >&2; exit 2; }
nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -Ipython/csrc python/tests/se_gate_harness.cu python/csrc/kernels.cu \
  -o "$OUT/se_gate_harness" || exit 2
"$OUT/se_gate_harness"
status=$?
[ $status -eq 2 ] && exit 2  # no device, or a CUDA error: the tools would say no more
for tool in memcheck racecheck synccheck initcheck; do
  log=$OUT/se_gate_$tool.log
  timeout 300 "$SAN" --tool "$tool" --error-exitcode 3 "$OUT/se_gate_harness" >"$log" 2>&1
  rc=$?
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1) (exit $rc)"
  [ $rc -eq 0 ] || { status=1; grep -m5 -E '=========.*(Invalid|Error|Hazard|Race)' "$log"; }
done
exit $status
