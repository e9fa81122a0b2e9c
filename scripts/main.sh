#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build (Release), and race convkit's algorithms
# against the peer (cuDNN on a GPU, oneDNN on the CPU) on the seed shapes, on the best device present.
# Extra arguments go to `convkit bench` (e.g. --suite resnet50 --csv out.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target convkit_cli
if [ $# -eq 0 ]; then set -- --suite seeds; fi
exec ./build/tools/convkit bench "$@"
