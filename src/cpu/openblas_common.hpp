// What the OpenBLAS-backed CPU algorithms (cpu_im2col_gemm, cpu_winograd) share: whether OpenBLAS is in the
// build, the checks each makes first, and single-threaded BLAS inside their own OpenMP threads.
#pragma once

#include <mutex>

#include "convkit/algorithm.hpp"
#include "cpu/sgemm.hpp"

#ifdef CONVKIT_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace convkit::detail {

inline Support openblas_available() {
#ifdef CONVKIT_HAVE_OPENBLAS
  return Support::yes();
#else
  return Support::no("built without OpenBLAS (apt-get install libopenblas-dev, then reconfigure).");
#endif
}

// The CPU, f32, strict math, a valid problem.
inline Support openblas_f32_request(const Conv2dProblem& p, const ConvConfig& cfg) {
  if (cfg.device != Device::cpu) return Support::no("runs on the CPU only.");
  if (cfg.dtype != DType::f32) return Support::no("OpenBLAS SGEMM computes in f32 only; f16/bf16 are not supported.");
  if (cfg.math == MathMode::tf32) return Support::no("the CPU has no tf32 mode; ask for strict f32.");
  if (Status s = p.validate(); !s.ok()) return Support::no(s.message);
  return Support::yes();
}

#ifdef CONVKIT_HAVE_OPENBLAS
// OpenBLAS runs single-threaded inside our OpenMP threads (see the NOTE in cpu_im2col_gemm's run()). This is
// process-wide: convkit is the only OpenBLAS user it knows of; a host application that wants threaded BLAS
// elsewhere can set it back after its convkit calls.
inline void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
  prepare_sgemm();  // (outside the caller's parallel region: sgemm.hpp)
}
#endif

}  // namespace convkit::detail
