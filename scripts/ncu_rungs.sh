#!/usr/bin/env bash
# Hardware counters for each CUDA rung on one problem (default: the seed001 shape), for docs/kernels.md:
# FMA-pipe and SM throughput, DRAM throughput, achieved occupancy, shared-memory bank conflicts, registers.
#   scripts/ncu_rungs.sh CLI OUTFILE [PROBLEM]
# Needs ncu (Nsight Compute) and a GPU whose counters it may read; clocks are left alone (--clock-control none).
set -u
CLI=$1; OUT=$2; PROBLEM=${3:-n16c64h56w56k64r3s3p0}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
METRICS=launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,gpu__time_duration.sum
: >"$OUT"
for pair in cuda_direct_naive:conv_direct_naive cuda_direct_smem:conv_direct_smem cuda_direct_regblock:conv_direct_regblock \
            cuda_im2col_cublas:im2col_kernel cuda_igemm_simt:igemm_simt_kernel; do
  algo=${pair%%:*}; kern=${pair#*:}
  echo "== $algo ($kern) on $PROBLEM" >>"$OUT"
  timeout 120 "$NCU" --clock-control none --kernel-name "regex:$kern" --launch-skip 3 --launch-count 1 \
    --metrics "$METRICS" --csv "$CLI" bench --problem "$PROBLEM" --device cuda --algo "$algo" --runs 1 \
    --no-verify 2>&1 | grep -E '^"' | awk -F'","' '{gsub(/"/,"",$NF); print $(NF-2) " = " $NF " " $(NF-1)}' >>"$OUT"
done
cat "$OUT"
