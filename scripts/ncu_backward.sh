#!/usr/bin/env bash
# Hardware counters of the depthwise gradient kernels and of cuDNN's on one layer (default mbv2_dw3x3_144_56,
# bf16 channels_last, batch 32), for docs/kernels.md: speed of light, memory, occupancy, warp stalls.
#   scripts/ncu_backward.sh OUTFILE [SPEC] [DTYPE] [LAYOUT]
# Needs the extension installed (pip install ./python), ncu, and a GPU whose counters it may read.
set -u
OUT=$1; SPEC=${2:-n32c144h56w56k144r3s3p1g144}; DT=${3:-bf16}; LAY=${4:-nhwc}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
cd "$(dirname "$0")" || exit 2
PY=$(mktemp --suffix .py)
trap 'rm -f "$PY"' EXIT
cat >"$PY" <<PYEOF
import sys, torch
from torch_anchor import parse_spec
import convkit
v = parse_spec("$SPEC")
dt = dict(bf16=torch.bfloat16, f16=torch.float16, f32=torch.float32)["$DT"]
mf = torch.channels_last if "$LAY" == "nhwc" else torch.contiguous_format
torch.backends.cudnn.benchmark = True
st, pd, dl = (v["uh"], v["uw"]), (v["ph"], v["pw"]), (v["dh"], v["dw"])
x = torch.randn(v["n"], v["c"], v["h"], v["w"], device="cuda").to(dt).contiguous(memory_format=mf)
w = torch.randn(v["k"], v["c"] // v["g"], v["r"], v["s"], device="cuda").to(dt).contiguous(memory_format=mf)
gz = torch.randn(torch.nn.functional.conv2d(x, w, stride=st, padding=pd, dilation=dl, groups=v["g"]).shape,
                 device="cuda").to(dt).contiguous(memory_format=mf)
for i in range(4):
    if i == 3:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("profiled")
    torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), list(st), list(pd), list(dl), v["g"])
    torch.ops.convkit.conv2d_backward_data(gz, w, list(x.shape), list(st), list(pd), list(dl), v["g"])
    torch.ops.aten.convolution_backward(gz, x, w, None, st, pd, dl, False, [0, 0], v["g"], [True, True, False])
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PYEOF
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats)
echo "== $SPEC $DT $LAY: the kernels of the 4th iteration (convkit wgrad, dgrad, then cuDNN's backward)" >"$OUT"
# Only the NVTX range "profiled" (the 4th iteration; cuDNN's benchmark search ran in the first).
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 300 "$NCU" --clock-control none --nvtx --nvtx-include "profiled/" "${SECTIONS[@]}" python3 "$PY" >>"$OUT" 2>&1
