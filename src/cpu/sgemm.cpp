// sgemm(): OpenBLAS, or oneDNN where OpenBLAS fell back to kernels older than the CPU (sgemm.hpp).
#include "cpu/sgemm.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "convkit/status.hpp"
#include "core/overrides.hpp"

#ifdef CONVKIT_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef CONVKIT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace convkit::detail {
namespace {

std::atomic<SgemmBackend> g_backend{SgemmBackend::none};  // none: not decided yet
std::string g_reason;
std::once_flag g_once;

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// OpenBLAS's x86 kernel sets with AVX2 or wider (its core names, lower case).
bool avx2_or_wider(const std::string& core) {
  static const char* const cores[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
  return std::any_of(std::begin(cores), std::end(cores), [&](const char* c) { return core == c; });
}

void decide() {
  constexpr bool have_openblas =
#ifdef CONVKIT_HAVE_OPENBLAS
      true;
#else
      false;
#endif
  constexpr bool have_onednn =
#ifdef CONVKIT_HAVE_ONEDNN
      true;
#else
      false;
#endif
  const char* env = env_override("CONVKIT_SGEMM");
  const std::string want = env ? lower(env) : "";
  if (want == "openblas" && have_openblas) {
    g_backend = SgemmBackend::openblas, g_reason = "OpenBLAS (CONVKIT_SGEMM=openblas)";
    return;
  }
  if (want == "onednn" && have_onednn) {
    g_backend = SgemmBackend::onednn, g_reason = "oneDNN's dnnl_sgemm (CONVKIT_SGEMM=onednn)";
    return;
  }
  if (!have_openblas) {
    g_backend = have_onednn ? SgemmBackend::onednn : SgemmBackend::none;
    g_reason = have_onednn ? "oneDNN's dnnl_sgemm (no OpenBLAS in this build)" : "none in this build";
    return;
  }
  std::string core;
#ifdef CONVKIT_HAVE_OPENBLAS
  if (const char* c = openblas_get_corename()) core = c;
#endif
  const bool user_core = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  if (have_onednn && !user_core && cpu_has_avx2_fma() && !avx2_or_wider(lower(core))) {
    g_backend = SgemmBackend::onednn;
    g_reason = "oneDNN's dnnl_sgemm: OpenBLAS did not recognise this CPU and runs its " + core +
               " kernels, older than the CPU's AVX2 (OPENBLAS_CORETYPE=Haswell or SkylakeX chooses OpenBLAS's own)";
    return;
  }
  g_backend = SgemmBackend::openblas;
  g_reason = "OpenBLAS (" + (core.empty() ? std::string("unknown") : core) + " kernels)";
}

// The choice, with a word on a CONVKIT_SGEMM that did not apply (a misspelling, or a GEMM this build lacks).
void decide_and_note() {
  decide();
  const char* env = env_override("CONVKIT_SGEMM");
  const std::string want = env ? lower(env) : "";
  if (!want.empty() && g_reason.find("CONVKIT_SGEMM") == std::string::npos)
    g_reason += "; CONVKIT_SGEMM=" + std::string(env) + " ignored (openblas or onednn, where the build has it)";
}

}  // namespace

SgemmBackend sgemm_backend() {
  std::call_once(g_once, [] {
    if (g_backend.load() == SgemmBackend::none) decide_and_note();
  });
  return g_backend.load();
}

std::string sgemm_backend_reason() {
  sgemm_backend();
  return g_reason;
}

void set_sgemm_backend(SgemmBackend b) {
  sgemm_backend();  // (decided first, so that a later first call does not overwrite this)
#ifndef CONVKIT_HAVE_OPENBLAS
  if (b == SgemmBackend::openblas) throw Error(StatusCode::not_available, "this build has no OpenBLAS.");
#endif
#ifndef CONVKIT_HAVE_ONEDNN
  if (b == SgemmBackend::onednn) throw Error(StatusCode::not_available, "this build has no oneDNN.");
#endif
  if (b == SgemmBackend::none) throw Error(StatusCode::unsupported, "set_sgemm_backend: name a GEMM.");
  g_backend = b;
  g_reason = b == SgemmBackend::onednn ? "oneDNN's dnnl_sgemm (set)" : "OpenBLAS (set)";
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  switch (sgemm_backend()) {
#ifdef CONVKIT_HAVE_ONEDNN
    case SgemmBackend::onednn: {
      const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                         beta, C, ldc);
      if (s != dnnl_success)
        throw Error(StatusCode::internal, "dnnl_sgemm failed with status " + std::to_string(int(s)) + ".");
      return;
    }
#endif
#ifdef CONVKIT_HAVE_OPENBLAS
    case SgemmBackend::openblas:
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                  alpha, A, lda, B, ldb, beta, C, ldc);
      return;
#endif
    default:
      throw Error(StatusCode::not_available, "no float32 GEMM in this build (OpenBLAS or oneDNN).");
  }
}

}  // namespace convkit::detail
