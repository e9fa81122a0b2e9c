#!/usr/bin/env bash
# Installs what convkit needs on a fresh Debian 12 machine (idempotent; apt-get runs only if something is
# missing). The CUDA toolkit is not installed here: with nvcc on PATH the CUDA algorithms are built too.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config
      libopenblas-dev                        # CPU: im2col+GEMM, Winograd
      libdnnl-dev ocl-icd-opencl-dev         # the oneDNN peer (Debian's dnnl config requires OpenCL)
      libcli11-dev libfmt-dev nlohmann-json3-dev libstb-dev   # the CLI
      libgtest-dev libgmock-dev)             # tests
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
