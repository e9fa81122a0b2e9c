#!/usr/bin/env bash
# Same-machine A/B of two source trees on the GPU: builds each tree's CLI, then for each suite `convkit tune`
# and `convkit bench` (the tensor-core algorithms against cuDNN, in the same process) of A and B alternately,
# ROUNDS times each, and compares them with scripts/ab_compare.py (per problem the best convkit algorithm,
# its ratio to cuDNN in each tree, B's speed-up over A; geomeans).
#
#   scripts/gpu_ab.sh OUTDIR DIR_A DIR_B [SUITE:DTYPE ...]      (default resnet50:bf16)
#
# DIR_A and DIR_B are source trees, e.g. `mkdir -p ab/old && git archive 2e411d6 | tar -x -C ab/old` on the
# machine that has the repository, before the device call. Environment: ROUNDS (default 2), ALGOS (default
# cuda_igemm_wgmma,cuda_igemm_mma), BENCH_S (seconds a bench, default 150). Writes OUTDIR/ab.md and the JSON
# files (ab_<tree>_<suite>_<dtype>_<round>.json); exit 1 if a build or a bench failed.
set -u -o pipefail
[ $# -ge 3 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT=$1 A=$2 B=$3; shift 3
SUITES=${*:-resnet50:bf16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
TORCH_CUDNN=${CONVKIT_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
CUDNN_ARGS=(); [ -f "$TORCH_CUDNN/include/cudnn_version.h" ] && CUDNN_ARGS=(-DCONVKIT_CUDNN_ROOT="$TORCH_CUDNN")
rc=0
tree_dir() { [ "$1" = A ] && echo "$A" || echo "$B"; }
for tree in A B; do
  src=$(tree_dir $tree)
  t0=$(date +%s)
  cmake -S "$src" -B "$src/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCONVKIT_BUILD_TOOLS=ON -DCONVKIT_BUILD_TESTS=OFF "${CUDNN_ARGS[@]}" >"$OUT/build_$tree.log" 2>&1 &&
    cmake --build "$src/build-ab" -j "$(nproc)" --target convkit_cli >>"$OUT/build_$tree.log" 2>&1 ||
    { echo "build of $tree ($src) FAILED"; tail -20 "$OUT/build_$tree.log"; exit 1; }
  echo "build $tree: $(( $(date +%s) - t0 )) s"
done
{
  echo "A = $A, B = $B; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); $(date -u +%F)"
  for spec in $SUITES; do
    suite=${spec%%:*} dt=${spec#*:}
    a_files=() b_files=()
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for tree in A B; do
        cli=$(tree_dir $tree)/build-ab/tools/convkit json=$OUT/ab_${tree}_${suite}_${dt}_$round.json
        cache=$(mktemp)
        CONVKIT_TUNE_CACHE=$cache timeout 90 "$cli" tune --suite "$suite" --device cuda --dtype "$dt" --layout nhwc \
          >/dev/null 2>&1 || echo "tune $tree $suite:$dt round $round failed"
        CONVKIT_TUNE_CACHE=$cache timeout "${BENCH_S:-150}" "$cli" bench --suite "$suite" --device cuda --dtype "$dt" \
          --layout nhwc --algo "${ALGOS:-cuda_igemm_wgmma,cuda_igemm_mma}" --tuned --json "$json" >/dev/null 2>&1 ||
          { echo "bench $tree $suite:$dt round $round failed"; rc=1; }
        rm -f "$cache"
        [ -s "$json" ] && { [ $tree = A ] && a_files+=("$json") || b_files+=("$json"); }
      done
    done
    echo; echo "### $suite $dt, ${ROUNDS:-2} rounds each, A and B alternating"; echo
    python3 "$ROOT/scripts/ab_compare.py" --a "${a_files[@]}" --b "${b_files[@]}" || rc=1
  done
} >"$OUT/ab.md"
cat "$OUT/ab.md"
exit $rc
