// What the tensor-core kernels (cuda_igemm_wmma, cuda_igemm_mma, cuda_igemm_wgmma) share: the configuration
// gate and tf32 rounding. Element conversion and the fused epilogue are cuda/common/epilogue.cuh's.
//
// Tensor-core configurations: NHWC activations with KRSC weights, and
//   f16 or bf16 tensors (fp32 accumulation, output rounded once, to nearest even), or
//   f32 tensors with MathMode::tf32 (operands rounded to tf32 on the way into the MMA, fp32 accumulation).
// Strict fp32 is never computed on tensor cores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "common/activation.hpp"
#include "convkit/algorithm.hpp"
#include "convkit/epilogue.hpp"
#include "cuda/common/epilogue.cuh"

namespace convkit::detail {

inline Support require_tensor_core_config(const ConvConfig& cfg) {
  if (cfg.layout != Layout::nhwc)
    return Support::no("tensor-core kernels read NHWC activations and KRSC weights; NCHW tensors need an explicit "
                       "transform first (convkit bench --layout nchw shows its cost).");
  if (cfg.dtype == DType::f32 && cfg.math != MathMode::tf32)
    return Support::no("strict fp32 does not run on tensor cores; ask for tf32 math (--dtype tf32) or use f16/bf16.");
  return Support::yes();
}

// fp32 -> tf32 (10 mantissa bits kept, the low 13 bits zero): convkit's tf32, to nearest with ties to
// even, in every tensor-core kernel (the host oracle of tests/test_tensor_core.cpp rounds the same way).
// sm_90 does it in one instruction (cvt.rn.tf32.f32 -> F2FP.TF32); cvt.rna (ties away, the only form
// before sm_90) is 3 there. Older targets round in integer arithmetic: add half an ulp (less one on an
// even tf32 mantissa), then clear the low bits; inf passes, NaN stays a (quiet) NaN.
// NOTE: cuda_igemm_wgmma rounds every activation stage in shared memory with this: cvt.rna made it
// 14 instructions per 16-byte chunk, cvt.rn 6 (docs/perf.md, 2026-11-29, commit d26f16b).
__device__ __forceinline__ uint32_t tf32_rne_bits(uint32_t f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(f)));
  return r;
#else
  if ((f & 0x7f800000u) == 0x7f800000u) return (f & 0x007fffffu) != 0 ? ((f | 0x00400000u) & 0xffffe000u) : f;
  return (f + 0x00000fffu + ((f >> 13) & 1u)) & 0xffffe000u;
#endif
}
__device__ __forceinline__ float tf32_rne(float f) { return __uint_as_float(tf32_rne_bits(__float_as_uint(f))); }

}  // namespace convkit::detail
