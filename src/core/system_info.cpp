// system_info(): the CPU half (version, OpenBLAS, oneDNN, threads) here; the CUDA half is
// detail::fill_cuda_info (src/cuda/common, or the stub in no_cuda.cpp).
#include "convkit/system.hpp"

#include <omp.h>

#include "convkit/convkit.hpp"
#include "core/cuda_hooks.hpp"
#include "cpu/epilogue_span.hpp"
#include "cpu/gemm_bf16.hpp"
#include "cpu/sgemm.hpp"

#ifdef CONVKIT_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef CONVKIT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace convkit {

SystemInfo system_info() {
  SystemInfo info;
  info.convkit_version = version();
#ifdef CONVKIT_HAVE_OPENBLAS
  if (const char* cfg = openblas_get_config()) info.openblas = cfg;
  if (const char* core = openblas_get_corename()) info.openblas_core = core;
#endif
#ifdef CONVKIT_HAVE_ONEDNN
  if (const dnnl_version_t* v = dnnl_version())
    info.onednn_version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
#endif
  info.cpu_threads = omp_get_max_threads();
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  info.cpu_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
  info.cpu_sgemm = cpu_float32_gemm();
  info.cpu_bf16_native = cpu_bf16_native();
  info.cpu_vector_math = detail::epilogue_span_vector_math();
  detail::fill_cuda_info(info);
  return info;
}

bool cpu_bf16_native() { return detail::gemm_bf16_available(); }
bool cuda_programmatic_launch() { return detail::pdl_enabled(); }

std::string cpu_float32_gemm() {
  return detail::sgemm_backend() == detail::SgemmBackend::none ? std::string() : detail::sgemm_backend_reason();
}

}  // namespace convkit
