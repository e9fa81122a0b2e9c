// sgemm(): OpenBLAS, or oneDNN where OpenBLAS fell back to kernels older than the CPU (sgemm.hpp).
#include "cpu/sgemm.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <vector>

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

// oneDNN's GEMM sets itself up on its first calls: they are made here, before any parallel region
// (prepare_sgemm), once each way of transposing, so that a library that cannot run (status 3, unimplemented,
// as Debian's libdnnl did in a PyTorch process when loaded as the extension's dependency: python/convkit
// loads it first on its own) is found before the algorithms' OpenMP threads call it. 0, or the first status
// that was not success.
int warm_up_onednn() {
#ifdef CONVKIT_HAVE_ONEDNN
  constexpr int n = 64;
  std::vector<float> a(n * n, 1.0f), b(n * n, 1.0f), c(n * n, 0.0f);
  for (const char ta : {'N', 'T'})
    for (const char tb : {'N', 'T'})
      if (const dnnl_status_t s = dnnl_sgemm(ta, tb, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
          s != dnnl_success)
        return int(s);
#endif
  return 0;
}

// The choice for CONVKIT_SGEMM's value `want` (lower case, "" when unset).
void decide(const std::string& want) {
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
  if (want == "openblas" && have_openblas) {
    g_backend = SgemmBackend::openblas, g_reason = "OpenBLAS (CONVKIT_SGEMM=openblas)";
    return;
  }
  if (want == "onednn" && have_onednn) {
    warm_up_onednn();  // (a failure shows on the first call: fall_back_to_openblas)
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
  const bool generic = !user_core && cpu_has_avx2_fma() && !avx2_or_wider(lower(core));
  const std::string why = "OpenBLAS did not recognise this CPU and runs its " + core +
                          " kernels, older than the CPU's AVX2 (OPENBLAS_CORETYPE=Haswell or SkylakeX chooses "
                          "OpenBLAS's own)";
  if (generic && !have_onednn) {
    g_backend = SgemmBackend::openblas;
    g_reason = "OpenBLAS: " + why + "; no oneDNN in this build";
    return;
  }
  if (generic) {
    if (const int s = warm_up_onednn(); s != 0) {
      g_backend = SgemmBackend::openblas;
      g_reason = "OpenBLAS: " + why + ", but oneDNN's dnnl_sgemm returned status " + std::to_string(s) +
                 " on its first calls";
      return;
    }
    g_backend = SgemmBackend::onednn;
    g_reason = "oneDNN's dnnl_sgemm: " + why;
    return;
  }
  g_backend = SgemmBackend::openblas;
  g_reason = "OpenBLAS (" + (core.empty() ? std::string("unknown") : core) + " kernels)";
}

// The choice, with a word on a CONVKIT_SGEMM that did not apply (a misspelling, or a GEMM this build lacks).
void decide_and_note() {
  const char* env = env_override("CONVKIT_SGEMM");
  const std::string want = env ? lower(env) : "";
  decide(want);
  if (!want.empty() && g_reason.find("CONVKIT_SGEMM") == std::string::npos)
    g_reason += "; CONVKIT_SGEMM=" + std::string(env) + " ignored (openblas or onednn, where the build has it)";
}

#if defined(CONVKIT_HAVE_ONEDNN) && defined(CONVKIT_HAVE_OPENBLAS)
// dnnl_sgemm refused a call: OpenBLAS for it and every later one (once; any thread may get here).
void fall_back_to_openblas(int status) {
  static std::mutex m;
  const std::lock_guard<std::mutex> lock(m);
  if (g_backend.load() != SgemmBackend::onednn) return;
  g_reason = "OpenBLAS: oneDNN's dnnl_sgemm returned status " + std::to_string(status) +
             " in this process, so convkit went back to OpenBLAS (it was chosen because " + g_reason + ")";
  g_backend = SgemmBackend::openblas;
}
#endif

}  // namespace

SgemmBackend sgemm_backend() {
  std::call_once(g_once, [] {
    if (g_backend.load() == SgemmBackend::none) decide_and_note();
  });
  return g_backend.load();
}

void prepare_sgemm() { sgemm_backend(); }

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
  if (b == SgemmBackend::onednn) warm_up_onednn();
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
      if (s == dnnl_success) return;
#ifdef CONVKIT_HAVE_OPENBLAS
      fall_back_to_openblas(int(s));  // (see warm_up_onednn) this call and the rest of the process
      [[fallthrough]];
#else
      throw Error(StatusCode::internal, "dnnl_sgemm failed with status " + std::to_string(int(s)) + ".");
#endif
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
