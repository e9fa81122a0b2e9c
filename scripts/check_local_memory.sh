#!/usr/bin/env bash
# Which CUDA kernels use local memory, from a build's output: `scripts/check_local_memory.sh BUILD_LOG`.
# The build passes ptxas --warn-on-local-memory-usage (CMakeLists.txt, CONVKIT_CUDA_OPTIONS), so every kernel
# with a stack frame (spilled registers, or an array indexed at run time) prints
#   ptxas warning : Local memory used for function '<mangled>', size of stack frame: N bytes
# This compares those lines with tests/local_memory_allowed.txt (bytes, a tab, the demangled kernel up to its
# parameter list) and fails on a kernel that is not listed or whose frame grew. A local-memory array in a hot
# loop costs a kernel 2-3x (cuda_igemm_wgmma's persistent tiles kept their accumulators there for a while), and
# ptxas's spill warning does not report it. Only what the build compiled is checked: run it on a fresh build
# (CI does). Exit 0 (nothing new), 1 (a new or grown frame: the lines are printed), 2 (usage).
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 BUILD_LOG" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ALLOWED=$ROOT/tests/local_memory_allowed.txt
found=$(sed -nE "s/.*Local memory used for function '([^']+)', size of stack frame: ([0-9]+) bytes.*/\2\t\1/p" "$1" |
  while IFS=$'\t' read -r bytes mangled; do
    name=$(c++filt "$mangled")
    name=${name//"(anonymous namespace)::"/}
    printf '%s\t%s\n' "$bytes" "${name%%(*}"
  done | sort -t$'\t' -k2,2 -k1,1n -u)
count=$(printf '%s' "$found" | grep -c . || true)
echo "kernels with local memory in this build: $count"
[ -n "$found" ] || exit 0
bad=$(awk -F'\t' 'FILENAME == ARGV[1] { if ($0 !~ /^#/ && NF == 2) allowed[$2] = $1; next }
                  !($2 in allowed) || $1 + 0 > allowed[$2] + 0 {
                    print "  " $1 " bytes: " $2 (($2 in allowed) ? " (allowed " allowed[$2] ")" : " (not listed)") }' \
  "$ALLOWED" <(printf '%s\n' "$found"))
if [ -n "$bad" ]; then
  echo "new or grown local memory (see $ALLOWED):"
  echo "$bad"
  exit 1
fi
echo "all of them listed in tests/local_memory_allowed.txt"
