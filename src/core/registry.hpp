// The ordered list of algorithms. Each algorithm file defines one factory below; this is the only place
// that names them all. Order = selection order for "auto": fast first, the reference last.
#pragma once

#include "convkit/algorithm.hpp"
#include "convkit/status.hpp"

namespace convkit::detail {

// For the algorithms that run per-sample weights only (cpu_per_sample, cuda_per_sample): their accepts(), and
// their run()'s check (Error(unsupported) for a request without per-sample weights or a problem they refuse).
inline Support per_sample_weights_only(const Operands& ops) {
  if (!ops.per_sample) return Support::no("it runs per-sample weights only (conv2d_per_sample).");
  return Support::yes();
}
inline void check_per_sample_call(const Algorithm& a, const ConvCall& call) {
  if (!call.per_sample) throw Error(StatusCode::unsupported, a.name() + " runs per-sample weights only.");
  if (Support ok = a.can_implement(call.problem, call.config); !ok)
    throw Error(StatusCode::unsupported, a.name() + " cannot run " + call.problem.to_string() + ": " + ok.reason);
}

// CPU (always compiled; optional libraries report themselves unavailable when missing)
const Algorithm* make_cpu_ref();
const Algorithm* make_cpu_depthwise();
const Algorithm* make_cpu_grouped();
const Algorithm* make_cpu_im2col_gemm();
const Algorithm* make_cpu_direct();
const Algorithm* make_cpu_winograd();
const Algorithm* make_cpu_per_sample();  // per-sample weights only
const Algorithm* make_onednn_cpu();  // peer

#ifdef CONVKIT_WITH_CUDA
const Algorithm* make_cuda_ref();
const Algorithm* make_cuda_depthwise();  // depthwise (groups = C): f32/f16/bf16, NCHW/NHWC
const Algorithm* make_cuda_grouped();    // 2-64 channels a group: f32/f16/bf16, NHWC
const Algorithm* make_cuda_grouped_mma();  // 2-64 channels a group, K = C: f16/bf16 NHWC, tensor cores
const Algorithm* make_cuda_stem_mma();  // 1-4 input channels (image stems): f16/bf16 NHWC, tensor cores
const Algorithm* make_cuda_pointwise_mma();  // 1x1, stride 1, C <= 512: the whole reduction staged, f16/bf16 NHWC
const Algorithm* make_cuda_direct_naive();
const Algorithm* make_cuda_direct_smem();
const Algorithm* make_cuda_direct_regblock();
const Algorithm* make_cuda_im2col_cublas();
const Algorithm* make_cuda_igemm_simt();
const Algorithm* make_cuda_igemm_wmma();
const Algorithm* make_cuda_igemm_mma();  // tensor cores: f16/bf16/tf32, NHWC
const Algorithm* make_cuda_igemm_wgmma();  // Hopper wgmma (sm_90a): f16/bf16/tf32, NHWC
const Algorithm* make_cuda_conv_wgmma_halo();  // Hopper wgmma, im2col from an input halo (sm_90a): f16/bf16, NHWC
const Algorithm* make_cuda_per_sample();  // per-sample weights only
const Algorithm* make_cudnn_peer();  // peer
#endif

}  // namespace convkit::detail
