// cpu_im2col_gemm: lower the convolution to matrix multiplication and let OpenBLAS do the arithmetic.
//
// What it adds over cpu_ref: the whole inner product runs in an optimised, multithreaded SGEMM.
//   NCHW (weights KCRS), per image and group:  dst[Kg, P*Q]  = W[Kg, Cg*R*S] x col[Cg*R*S, P*Q]
//   NHWC (weights KRSC), per image and group:  dst[P*Q, Kg]  = col[P*Q, R*S*Cg] x W[Kg, R*S*Cg]^T
//                                              (dst written with leading dimension K: no transpose pass)
// A 1x1, stride-1, pad-0 convolution needs no column matrix: the input already is one (and in NHWC all
// images are folded into one GEMM with M = N*H*W).
// Parallelism: one OpenMP team; each thread owns a band of output pixels (its rows of the column matrix,
// its single-threaded SGEMM, its part of the epilogue).
// Epilogue: alpha is the GEMM's alpha; bias, residual and activation are one pass over the block just
// written (still in cache). When the residual aliases dst the GEMM accumulates onto it (beta = e.beta),
// so every residual element is read before it is overwritten.
// Workspace: one column matrix for one (image, group), exactly workspace_bytes(); none for the 1x1 case.
// Measured 2026-11-29 on the 2-vCPU AMD EPYC (Zen 4, AVX-512), OpenBLAS 0.3.21, 2 threads, quiet machine,
// `convkit bench --suite resnet50 --batch 1 --device cpu --layout nhwc`: geomean 0.71x oneDNN 2.6.3 over the
// 23 layers (0.85x in NCHW, where oneDNN also pays its reorders); before the band split 0.57x.
#include <algorithm>
#include <cstring>

#include "common/activation.hpp"
#include "core/registry.hpp"
#include "cpu/openblas_common.hpp"

#include <omp.h>

namespace convkit::detail {
namespace {

bool needs_columns(const Conv2dProblem& p) {
  return !(p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0);
}

#ifdef CONVKIT_HAVE_OPENBLAS

// Columns [pq0, pq1) of col[(c*R + r)*S + s][p*Q + q] = x[g*Cg + c][h][w] (0 in the padding), NCHW;
// col's leading dimension is P*Q.
void im2col_nchw(const Conv2dProblem& pb, const float* x /* image n */, int64_t g, float* col, int64_t pq0,
                 int64_t pq1) {
  const int64_t P = pb.p(), Q = pb.q(), Cg = pb.c_per_group(), HW = pb.h * pb.w;
  const int64_t rows = Cg * pb.r * pb.s;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t c = row / (pb.r * pb.s), r = (row / pb.s) % pb.r, s = row % pb.s;
    const float* xc = x + (g * Cg + c) * HW;
    float* out = col + row * P * Q;
    const int64_t w0 = s * pb.dilation_w - pb.pad_w;
    for (int64_t pq = pq0; pq < pq1;) {
      const int64_t p = pq / Q, q_end = std::min(Q, pq1 - p * Q);
      const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
      for (int64_t q = pq - p * Q; q < q_end; ++q, ++pq) {
        const int64_t w = w0 + q * pb.stride_w;
        out[pq] = (h >= 0 && h < pb.h && w >= 0 && w < pb.w) ? xc[h * pb.w + w] : 0.0f;
      }
    }
  }
}

// Rows [pq0, pq1) of col[p*Q + q][(r*S + s)*Cg + c] = x[h][w][g*Cg + c] (0 in the padding), NHWC.
void im2col_nhwc(const Conv2dProblem& pb, const float* x /* image n */, int64_t g, float* col, int64_t pq0,
                 int64_t pq1) {
  const int64_t Q = pb.q(), Cg = pb.c_per_group();
  const int64_t width = pb.r * pb.s * Cg;
  for (int64_t pq = pq0; pq < pq1; ++pq) {
    const int64_t p = pq / Q, q = pq % Q;
    float* out = col + pq * width;
    for (int64_t r = 0; r < pb.r; ++r) {
      const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
      for (int64_t s = 0; s < pb.s; ++s) {
        const int64_t w = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
        float* o = out + (r * pb.s + s) * Cg;
        if (h < 0 || h >= pb.h || w < 0 || w >= pb.w)
          std::fill(o, o + Cg, 0.0f);
        else
          std::memcpy(o, x + (h * pb.w + w) * pb.c + g * Cg, sizeof(float) * Cg);
      }
    }
  }
}

// The part of the epilogue the GEMM did not do, over a rows x cols block with leading dimension ld.
// `bias_on_rows` says whether bias[k] follows the row (NCHW) or the column (NHWC). The GEMM already
// added beta*residual when `res` is null but the epilogue has a residual (the aliasing case).
void finish_block(const Epilogue& e, float* y, const float* res, const float* bias, int64_t rows, int64_t cols,
                  int64_t ld, bool bias_on_rows) {
  const bool has_bias = bias != nullptr, has_res = res != nullptr;
  if (!has_bias && !has_res && e.activation == Activation::none) return;
  for (int64_t i = 0; i < rows; ++i) {
    float* yr = y + i * ld;
    const float* rr = has_res ? res + i * ld : nullptr;
    for (int64_t j = 0; j < cols; ++j) {
      const float b = has_bias ? bias[bias_on_rows ? i : j] : 0.0f;
      // alpha was applied by the GEMM: pass alpha = 1.
      yr[j] = apply_epilogue<float>(e.activation, 1.0f, e.beta, yr[j], has_bias, b, has_res, has_res ? rr[j] : 0.0f);
    }
  }
}

#endif  // CONVKIT_HAVE_OPENBLAS

class CpuIm2colGemm final : public Algorithm {
 public:
  std::string name() const override { return "cpu_im2col_gemm"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "im2col column matrix + OpenBLAS SGEMM (1x1 stride-1 needs no copy), epilogue in one pass";
  }
  Support available() const override { return openblas_available(); }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = openblas_f32_request(p, cfg); !ok) return ok;
    const int64_t int_max = 2147483647;
    if (p.gemm_k() > int_max || p.n * p.p() * p.q() > int_max || p.k > int_max)
      return Support::no("a GEMM dimension exceeds the 32-bit int that the BLAS interface takes.");
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig&) const override {
    if (!needs_columns(p)) return 0;
    return sizeof(float) * static_cast<size_t>(p.c_per_group() * p.r * p.s) * static_cast<size_t>(p.p() * p.q());
  }

  void run(const ConvCall& call) const override {
#ifndef CONVKIT_HAVE_OPENBLAS
    (void)call;
    throw Error(StatusCode::not_available, "cpu_im2col_gemm: " + available().reason);
#else
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, "cpu_im2col_gemm: " + ok.reason);
    const bool cols = needs_columns(pb);
    const size_t need = workspace_bytes(pb, call.config);
    if (cols && (call.workspace == nullptr || call.workspace_bytes < need))
      throw Error(StatusCode::invalid_tensor, "cpu_im2col_gemm needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    const Epilogue& e = call.epilogue;
    const float* x = static_cast<const float*>(call.src.data);
    const float* wt = static_cast<const float*>(call.wei.data);
    float* y = static_cast<float*>(call.dst.data);
    const float* bias = static_cast<const float*>(e.bias);
    const float* res = static_cast<const float*>(e.residual);
    // Residual aliasing dst: let the GEMM accumulate onto it (C = alpha*A*B + beta*C).
    const bool res_in_place = res != nullptr && res == y;
    const float gemm_beta = res_in_place ? e.beta : 0.0f;
    const float* res_pass = res_in_place ? nullptr : res;
    float* col = static_cast<float*>(call.workspace);

    const int64_t P = pb.p(), Q = pb.q(), PQ = P * Q, G = pb.groups;
    const int64_t Cg = pb.c_per_group(), Kg = pb.k_per_group(), CRS = Cg * pb.r * pb.s;
    const int64_t in_img = pb.c * pb.h * pb.w, out_img = pb.k * PQ;

    // NOTE: one OpenMP team does everything. Each thread owns a band of output pixels: it gathers its
    // band of the column matrix, multiplies it with a single-threaded SGEMM and finishes the epilogue on
    // it. Bands are disjoint in col and in dst, so no barrier is needed, even as col is reused across
    // images and groups. Letting OpenBLAS run its own pthreads next to OpenMP's spinning workers instead
    // cost up to 8 ms scheduler stalls per call on the 2-core machine (seen 2026-11-29).
    single_threaded_blas();
    const bool nchw = call.config.layout == Layout::nchw;
    // 1x1 s1 p0 in NHWC: one GEMM per group over all images (M = N*H*W), reading the input in place.
    const int64_t images = (nchw || cols) ? pb.n : 1, M = (nchw || cols) ? PQ : pb.n * PQ;
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t m0 = M * t / nt, m1 = M * (t + 1) / nt, mb = m1 - m0;
      for (int64_t n = 0; n < images && mb > 0; ++n)
        for (int64_t g = 0; g < G; ++g) {
          if (nchw) {  // dst[Kg, band] = W[Kg, CRS] x col[CRS, band]
            const float* xn = x + n * in_img;
            const float* b = cols ? col : xn + g * Cg * PQ;  // 1x1 s1 p0: H*W == P*Q
            if (cols) im2col_nchw(pb, xn, g, col, m0, m1);
            float* yg = y + n * out_img + g * Kg * PQ + m0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(Kg), int(mb), int(CRS), e.alpha,
                        wt + g * Kg * CRS, int(CRS), b + m0, int(PQ), gemm_beta, yg, int(PQ));
            finish_block(e, yg, res_pass ? res_pass + (yg - y) : nullptr, bias ? bias + g * Kg : nullptr, Kg, mb, PQ,
                         true);
          } else {  // dst[band, Kg] = col[band, CRS] x W[Kg, CRS]^T
            const float* a = cols ? col : x + g * Cg;
            const int64_t lda = cols ? CRS : pb.c;
            if (cols) im2col_nhwc(pb, x + n * in_img, g, col, m0, m1);
            float* yg = y + n * out_img + m0 * pb.k + g * Kg;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(mb), int(Kg), int(CRS), e.alpha, a + m0 * lda,
                        int(lda), wt + g * Kg * CRS, int(CRS), gemm_beta, yg, int(pb.k));
            finish_block(e, yg, res_pass ? res_pass + (yg - y) : nullptr, bias ? bias + g * Kg : nullptr, mb, Kg, pb.k,
                         false);
          }
        }
    }
#endif
  }
};

}  // namespace

const Algorithm* make_cpu_im2col_gemm() {
  static CpuIm2colGemm algo;
  return &algo;
}

}  // namespace convkit::detail
