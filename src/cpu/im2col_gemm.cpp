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
// f16/bf16: the same float32 GEMM on widened operands, the output rounded once (fp32 accumulation, as the GPU
// kernels). The column matrix widens the input as it gathers it (so the 1x1 case builds one too), the
// workspace also holds the weight widened once a call and one image's float32 output, which the epilogue pass
// rounds into dst. Before, convkit's only 16-bit CPU convolution was cpu_ref: 20-35x slower on MobileNetV2's
// 1x1 layers (scripts/bench_host.py --device cpu --dtype bf16 --hw 4).
// bfloat16 NHWC, where the build's CPU has AVX512-BF16: no widening; the weight packed once a call for
// gemm_bf16 (src/cpu/gemm_bf16.hpp, the dot-product instruction), 16-bit columns (or the input itself for an
// unpadded stride-1 1x1 layer with an even channel count a group), each thread's float32 band rounded by the
// epilogue pass (run_bf16_dot). ResNet-50's 512 -> 512 3x3 at 5x5, batch 1, 2 threads: 2.23 ms widened, 0.56
// with it (torch's oneDNN 0.62); docs/kernels.md, docs/perf.md 2026-12-05.
// Measured 2026-11-29 on the 2-vCPU AMD EPYC (Zen 4, AVX-512), OpenBLAS 0.3.21, 2 threads, quiet machine,
// `convkit bench --suite resnet50 --batch 1 --device cpu --layout nhwc`: geomean 0.71x oneDNN 2.6.3 over the
// 23 layers (0.85x in NCHW, where oneDNN also pays its reorders); before the band split 0.57x.
#include <algorithm>
#include <cstring>

#include "common/activation.hpp"
#include "common/element.hpp"
#include "convkit/convkit.hpp"
#include "core/registry.hpp"
#include "cpu/epilogue_span.hpp"
#include "cpu/gemm_bf16.hpp"
#include "cpu/im2col.hpp"
#include "cpu/openblas_common.hpp"
#include "cpu/sgemm.hpp"

#include <omp.h>

namespace convkit::detail {
namespace {

// bfloat16 NHWC on the CPU's bfloat16 dot product (gemm_bf16.hpp), where the build has it.
bool bf16_dot(const ConvConfig& cfg) {
  return cfg.dtype == DType::bf16 && cfg.layout == Layout::nhwc && gemm_bf16_available();
}

// The bfloat16 dot-product path's plan: the reduction padded to an even length; the input itself is the
// column matrix where the layer is 1x1, stride 1, unpadded with an even channel count a group.
struct DotPlan {
  int64_t crs = 0, crse = 0;  // R*S*Cg and it rounded up to even
  bool direct = false;
  bool turned = false;        // few pixels: the columns packed, the weight read as it is (gemm_bf16_turned)
  int64_t fold = 1;           // turned: images a GEMM (their pixels consecutive rows), at most kTurnedPixels rows
  int64_t packed = 0;         // packed elements: the weight a group, or (turned) the fold's columns
  size_t bytes = 0;           // workspace: an image's float32 output, the packed operand, the column matrix
};

// At most this many output pixels an image, and at least this many output channels a group, the bfloat16
// path packs the columns rather than the weight (gemm_bf16_turned): packing a deep layer's weight cost as
// much as its product (ResNet-50's 512 -> 512 3x3 at 5x5: 2.4 M weight elements for 25 pixels). Measured
// (2 Zen 4 threads, batch 1, through the op, ms, packed weight -> turned, torch's oneDNN): 512 3x3 at 5x5
// 0.56 -> 0.41 (0.62-0.70), 1024 -> 2048 1x1 at 5x5 -> 0.40 (1.02), 2048 -> 512 1x1 -> 0.23 (0.92); at 10x10
// (100 pixels) turned was slower: 256 -> 1024 1x1 0.18 -> 0.34, 256 3x3 0.37 -> 0.40. Several images of
// few pixels are one turned GEMM of up to kTurnedPixels rows (their pixels consecutive rows of the columns and
// of the output), so that the weight is read once for them, not once an image (ResNet-18's 512 3x3 at 2x2,
// batch 8: eight passes over its 2.4 M weight elements for 4 rows each). Past kTurnedPixels rows in all (a
// batch), a reduction shorter than kTurnedDepth goes back to the packed weight: the turned tile's stores are a
// scatter an element, as costly as the product where the reduction is short, and the packed weight serves
// every image (bf16 batch 8, ms, turned -> packed: 256 -> 1024 1x1 at 8x8 1.49 -> 0.30, 512 -> 2048 1x1 at
// 4x4 0.82 -> 0.35, 1024 -> 256 1x1 at 8x8 0.35 -> 0.30; but 2048 -> 512 1x1 at 4x4 0.36 -> 0.51 and 256 3x3
// at 4x4 0.18 -> 0.20, hence the depth).
constexpr int64_t kTurnedPixels = 64, kTurnedChannels = 64, kTurnedDepth = 2048;

DotPlan dot_plan(const Conv2dProblem& p) {
  DotPlan d;
  d.crs = p.c_per_group() * p.r * p.s;
  d.crse = d.crs + (d.crs & 1);
  d.direct = p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 &&
             p.c_per_group() % 2 == 0;
  const int64_t PQ = p.p() * p.q();
  d.turned = PQ <= kTurnedPixels && p.k_per_group() >= kTurnedChannels && p.k < (int64_t(1) << 25) &&
             (p.n * PQ <= kTurnedPixels || d.crs >= kTurnedDepth);
  if (d.turned) d.fold = std::clamp<int64_t>(kTurnedPixels / std::max<int64_t>(1, PQ), 1, std::max<int64_t>(1, p.n));
  d.packed = d.turned ? gemm_bf16_packed_elems(d.fold * PQ, d.crse) : gemm_bf16_packed_elems(p.k_per_group(), d.crse);
  const size_t pq = size_t(d.fold * PQ), copies = d.turned ? 1 : size_t(p.groups);
  d.bytes = sizeof(float) * pq * size_t(p.k) + sizeof(uint16_t) * (copies * size_t(d.packed) + (d.direct ? 0 : pq * size_t(d.crse)));
  return d;
}

// Below this many output pixels a thread (per image and group), cpu_im2col_gemm's float32 path splits the
// output channels among the threads instead of the pixels (run()).
constexpr int64_t kChannelSplitPixels = 128;

bool needs_columns(const Conv2dProblem& p, DType dt) {
  return dt != DType::f32 ||
         !(p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0);
}

// float32 NHWC with a column matrix: the images a GEMM, as many as a column matrix of kFoldFloats holds. Their
// pixels are consecutive rows of the column matrix and of dst, so a batch of small images is one GEMM, not
// one thin GEMM an image that packs the weight again (ResNet-18's 512 3x3 at 2x2, batch 8: 8 GEMMs of 4 rows).
constexpr int64_t kFoldFloats = int64_t(1) << 22;
int64_t images_a_gemm(const Conv2dProblem& p, const ConvConfig& cfg) {
  if (cfg.dtype != DType::f32 || cfg.layout != Layout::nhwc || !needs_columns(p, cfg.dtype)) return 1;
  const int64_t floats = p.c_per_group() * p.r * p.s * p.p() * p.q();
  return std::clamp<int64_t>(kFoldFloats / std::max<int64_t>(1, floats), 1, p.n);
}

#ifdef CONVKIT_HAVE_OPENBLAS

// The part of the epilogue the GEMM did not do (alpha it applied), over a rows x cols block: the float32 GEMM
// block y (leading dimension ldy) plus bias and beta * residual (dt's elements, leading dimension ldd like d),
// activated, stored into d as dt. `bias_on_rows` says whether bias[k] follows the row (NCHW) or the column
// (NHWC). d may be y (float32), and the residual may be d: each element is read before it is written. A run
// of cols outputs at a time (epilogue_span.hpp: the per-element switch was most of a 1x1 layer's time).
void finish_block(const Epilogue& e, DType dt, const float* y, int64_t ldy, void* d, const void* res, const void* bias,
                  int64_t rows, int64_t cols, int64_t ldd, bool bias_on_rows) {
  if (dt == DType::f32 && d == y && bias == nullptr && res == nullptr && e.activation == Activation::none) return;
  const size_t es = dtype_size(dt);
  auto at = [es](const void* p, int64_t i) { return static_cast<const char*>(p) + size_t(i) * es; };
  for (int64_t i = 0; i < rows; ++i)
    epilogue_span(e, 1.0f, dt, y + i * ldy, const_cast<char*>(at(d, i * ldd)), cols,
                  bias == nullptr ? nullptr : at(bias, bias_on_rows ? i : 0),
                  bias_on_rows ? SpanBias::one : SpanBias::per_element, res == nullptr ? nullptr : at(res, i * ldd));
}

#endif  // CONVKIT_HAVE_OPENBLAS

class CpuIm2colGemm final : public Algorithm {
 public:
  std::string name() const override { return "cpu_im2col_gemm"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return std::string("im2col column matrix + OpenBLAS SGEMM (1x1 stride-1 needs no copy), epilogue in one pass; "
                       "f16/bf16 widened into the columns, the output rounded once") +
           (gemm_bf16_available() ? "; bf16 NHWC on the CPU's bfloat16 dot product (AVX512-BF16) instead" : "");
  }
  Support available() const override { return openblas_available(); }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    ConvConfig widened = cfg;  // f16/bf16 are widened to f32 around the same GEMM
    if (cfg.dtype != DType::f32 && cfg.math == MathMode::strict) widened.dtype = DType::f32;
    if (Support ok = openblas_f32_request(p, widened); !ok) return ok;
    const int64_t int_max = 2147483647;
    if (p.gemm_k() > int_max || p.n * p.p() * p.q() > int_max || p.k > int_max)
      return Support::no("a GEMM dimension exceeds the 32-bit int that the BLAS interface takes.");
    return Support::yes();
  }
  // A 16-bit depthwise layer is one tiny GEMM a channel: cpu_ref's direct loop measured faster there (CPU,
  // MobileNetV2's depthwise layers at 4x4, bf16: 960 channels 1.18 ms against 0.26; scripts/bench_host.py).
  // (With one channel a group and out, cpu_depthwise comes first; this is for multipliers above 1.)
  // A network's first layer (float32, up to 4 input channels, a 3x3 or larger filter: the RGB stem) goes to
  // cpu_direct: its column matrix is R*S*C rows of every output pixel, built and read once for a GEMM 3 to 4
  // x R*S deep. Measured (2-vCPU AMD EPYC, batch 1 and 4, against this in the same process; docs/perf.md
  // 2026-12-05): ResNet's 7x7 stride-2 3 -> 64 at 160 and 224, 1.8-2.2x in NCHW and 1.8-2.1x in NHWC;
  // MobileNet's 3x3 stride-2 3 -> 32, 1.6x in NCHW and 1.7-1.8x in NHWC (cpu_direct with its activation
  // over a tile at once; an element at a time, relu6 and SiLU made it slower than this).
  Support heuristic_choice(const Conv2dProblem& p, const ConvConfig& cfg, const Operands&) const override {
    if (cfg.dtype != DType::f32 && p.c_per_group() == 1 && p.groups > 1)
      return Support::no("a 16-bit depthwise layer is one tiny GEMM a channel here: cpu_ref measured faster.");
    if (cfg.dtype == DType::f32 && p.groups == 1 && p.c <= 4 && p.r * p.s >= 9) {
      const Algorithm* direct = find_algorithm("cpu_direct");
      if (direct != nullptr && direct->can_implement(p, cfg))
        return Support::no("a float32 stem (up to 4 input channels, 3x3 or larger): cpu_direct measured faster.");
    }
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!needs_columns(p, cfg.dtype)) return 0;
#ifdef CONVKIT_HAVE_OPENBLAS
    if (bf16_dot(cfg)) return dot_plan(p).bytes;
#endif
    const size_t crs = static_cast<size_t>(p.c_per_group() * p.r * p.s), pq = static_cast<size_t>(p.p() * p.q());
    size_t floats = crs * pq * size_t(images_a_gemm(p, cfg));        // the column matrix
    if (cfg.dtype != DType::f32) floats += static_cast<size_t>(p.k) * (crs + pq);  // the weight, an image's output
    return sizeof(float) * floats;
  }

  void run(const ConvCall& call) const override {
#ifndef CONVKIT_HAVE_OPENBLAS
    (void)call;
    throw Error(StatusCode::not_available, "cpu_im2col_gemm: " + available().reason);
#else
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, "cpu_im2col_gemm: " + ok.reason);
    const bool cols = needs_columns(pb, call.config.dtype);
    const size_t need = workspace_bytes(pb, call.config);
    if (cols && (call.workspace == nullptr || call.workspace_bytes < need))
      throw Error(StatusCode::invalid_tensor, "cpu_im2col_gemm needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    const Epilogue& e = call.epilogue;
    if (bf16_dot(call.config)) return run_bf16_dot(call);
    if (call.config.dtype != DType::f32) return run16(call);
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
    // The GEMMs' rows: an image's pixels (NCHW), `fold` images' (NHWC with a column matrix: images_a_gemm) or
    // all of them (NHWC 1x1 stride 1: the input itself); chunk c covers images [c * fold, ..).
    const int64_t fold = nchw ? 1 : cols ? images_a_gemm(pb, call.config) : pb.n;
    const int64_t chunks = (pb.n + fold - 1) / fold, M = fold * PQ;  // (M: the first chunk's rows, the most)
    auto rows_of = [&](int64_t c) { return std::min(fold, pb.n - c * fold) * PQ; };
    // rows [r0, r1) of chunk c's NHWC column matrix (a range may span images)
    auto nhwc_columns = [&](int64_t c, int64_t g, int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1;) {
        const int64_t n = c * fold + i / PQ, pq0 = i % PQ, pq1 = std::min(PQ, pq0 + (r1 - i));
        im2col_nhwc(pb, x + n * in_img, DType::f32, g, col + (i - pq0) * CRS, CRS, pq0, pq1);
        i += pq1 - pq0;
      }
    };
    // Few output pixels a thread and many output channels (deep layers at batch 1): each thread takes a range
    // of output channels instead, so that its SGEMM packs only its rows of the weight (with pixel bands every
    // thread packed the whole weight for its few columns: ResNet-50's 2048 -> 512 1x1 at 5x5, NCHW, 25 pixels
    // in two bands); the column matrix is then built by all threads together, with barriers around it.
    const int64_t threads = omp_get_max_threads();
    const bool by_channels = threads > 1 && M < kChannelSplitPixels * threads && Kg >= 32 * threads;
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      if (by_channels) {
        const int64_t k0 = Kg / 16 * t / nt * 16, k1 = t + 1 == nt ? Kg : Kg / 16 * (t + 1) / nt * 16, kb = k1 - k0;
        for (int64_t c = 0; c < chunks; ++c)
          for (int64_t g = 0; g < G; ++g) {
            const int64_t Mc = rows_of(c);
            const float* xn = x + c * fold * in_img;  // (the chunk's first image)
            if (cols) {
#pragma omp for schedule(static)
              for (int64_t c0 = 0; c0 < Mc; c0 += 16) {
                if (nchw)
                  im2col_nchw(pb, xn, DType::f32, g, col, c0, std::min(Mc, c0 + 16));
                else
                  nhwc_columns(c, g, c0, std::min(Mc, c0 + 16));
              }
            }
            const float* wg = wt + (g * Kg + k0) * CRS;
            if (kb > 0 && nchw) {  // dst[k0:k1, PQ] = W[k0:k1, CRS] x col[CRS, PQ]
              float* yg = y + c * out_img + (g * Kg + k0) * PQ;
              sgemm(false, false, int(kb), int(Mc), int(CRS), e.alpha, wg,
                          int(CRS), cols ? col : xn + g * Cg * PQ, int(PQ), gemm_beta, yg, int(PQ));
              finish_block(e, DType::f32, yg, PQ, yg, res_pass ? res_pass + (yg - y) : nullptr,
                           bias ? bias + g * Kg + k0 : nullptr, kb, Mc, PQ, true);
            } else if (kb > 0) {  // dst[Mc, k0:k1] = col[Mc, CRS] x W[k0:k1, CRS]^T
              float* yg = y + c * fold * out_img + g * Kg + k0;
              sgemm(false, true, int(Mc), int(kb), int(CRS), e.alpha,
                          cols ? col : x + g * Cg, int(cols ? CRS : pb.c), wg, int(CRS), gemm_beta, yg, int(pb.k));
              finish_block(e, DType::f32, yg, pb.k, yg, res_pass ? res_pass + (yg - y) : nullptr,
                           bias ? bias + g * Kg + k0 : nullptr, Mc, kb, pb.k, false);
            }
            if (cols) {
#pragma omp barrier
            }
          }
      }
      for (int64_t n = 0; n < chunks && !by_channels; ++n) {
        const int64_t Mc = rows_of(n), m0 = Mc * t / nt, m1 = Mc * (t + 1) / nt, mb = m1 - m0;
        for (int64_t g = 0; g < G && mb > 0; ++g) {
          if (nchw) {  // dst[Kg, band] = W[Kg, CRS] x col[CRS, band]
            const float* xn = x + n * in_img;
            const float* b = cols ? col : xn + g * Cg * PQ;  // 1x1 s1 p0: H*W == P*Q
            if (cols) im2col_nchw(pb, xn, DType::f32, g, col, m0, m1);
            float* yg = y + n * out_img + g * Kg * PQ + m0;
            sgemm(false, false, int(Kg), int(mb), int(CRS), e.alpha,
                        wt + g * Kg * CRS, int(CRS), b + m0, int(PQ), gemm_beta, yg, int(PQ));
            finish_block(e, DType::f32, yg, PQ, yg, res_pass ? res_pass + (yg - y) : nullptr,
                         bias ? bias + g * Kg : nullptr, Kg, mb, PQ, true);
          } else {  // dst[band, Kg] = col[band, CRS] x W[Kg, CRS]^T
            const float* a = cols ? col : x + g * Cg;
            const int64_t lda = cols ? CRS : pb.c;
            if (cols) nhwc_columns(n, g, m0, m1);
            float* yg = y + n * fold * out_img + m0 * pb.k + g * Kg;
            sgemm(false, true, int(mb), int(Kg), int(CRS), e.alpha, a + m0 * lda,
                        int(lda), wt + g * Kg * CRS, int(CRS), gemm_beta, yg, int(pb.k));
            finish_block(e, DType::f32, yg, pb.k, yg, res_pass ? res_pass + (yg - y) : nullptr,
                         bias ? bias + g * Kg : nullptr, mb, Kg, pb.k, false);
          }
        }
        // A shorter last chunk gives the threads other bands of the column matrix: all done with this one
        // first. (Equal chunks keep each thread on its own rows, as one image a GEMM did.)
        if (cols && n + 2 == chunks && rows_of(n + 1) != Mc) {
#pragma omp barrier
        }
      }
    }
#endif
  }

 private:
#ifdef CONVKIT_HAVE_OPENBLAS
  // f16/bf16 (the file's header): widened columns and weight, one image's float32 output, rounded into dst
  // by the epilogue pass. Threads own bands of output pixels as in run().
  void run16(const ConvCall& call) const {
    const Conv2dProblem& pb = call.problem;
    const Epilogue& e = call.epilogue;
    const DType dt = call.config.dtype;
    const auto* x = static_cast<const uint16_t*>(call.src.data);
    const auto* wt16 = static_cast<const uint16_t*>(call.wei.data);
    auto* y = static_cast<uint16_t*>(call.dst.data);
    const auto* bias = static_cast<const uint16_t*>(e.bias);
    const auto* res = static_cast<const uint16_t*>(e.residual);
    const int64_t P = pb.p(), Q = pb.q(), PQ = P * Q, G = pb.groups;
    const int64_t Cg = pb.c_per_group(), Kg = pb.k_per_group(), CRS = Cg * pb.r * pb.s;
    const int64_t in_img = pb.c * pb.h * pb.w, out_img = pb.k * PQ;
    float* col = static_cast<float*>(call.workspace);
    float* wt = col + CRS * PQ;   // [K, CRS], the layout's own order (KCRS or KRSC)
    float* yf = wt + pb.k * CRS;  // one image's output, the layout's own order
    single_threaded_blas();
    const bool nchw = call.config.layout == Layout::nchw;
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < pb.k * CRS; i += 4096)
        copy_elements(wt16 + i, wt + i, std::min<int64_t>(4096, pb.k * CRS - i), dt);
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t m0 = PQ * t / nt, m1 = PQ * (t + 1) / nt, mb = m1 - m0;
      for (int64_t n = 0; n < pb.n && mb > 0; ++n)
        for (int64_t g = 0; g < G; ++g) {
          const uint16_t* xn = x + n * in_img;
          const uint16_t* bg = bias ? bias + g * Kg : nullptr;
          if (nchw) {  // yf[Kg, band] = W[Kg, CRS] x col[CRS, band]
            im2col_nchw(pb, xn, dt, g, col, m0, m1);
            float* yg = yf + g * Kg * PQ + m0;
            sgemm(false, false, int(Kg), int(mb), int(CRS), e.alpha,
                        wt + g * Kg * CRS, int(CRS), col + m0, int(PQ), 0.0f, yg, int(PQ));
            const int64_t off = n * out_img + g * Kg * PQ + m0;
            finish_block(e, dt, yg, PQ, y + off, res ? res + off : nullptr, bg, Kg, mb, PQ, true);
          } else {  // yf[band, Kg] = col[band, CRS] x W[Kg, CRS]^T
            im2col_nhwc(pb, xn, dt, g, col, CRS, m0, m1);
            float* yg = yf + m0 * pb.k + g * Kg;
            sgemm(false, true, int(mb), int(Kg), int(CRS), e.alpha, col + m0 * CRS,
                        int(CRS), wt + g * Kg * CRS, int(CRS), 0.0f, yg, int(pb.k));
            const int64_t off = n * out_img + m0 * pb.k + g * Kg;
            finish_block(e, dt, yg, pb.k, y + off, res ? res + off : nullptr, bg, mb, Kg, pb.k, false);
          }
        }
    }
  }

  // bfloat16 NHWC on gemm_bf16: the weight packed once a call (threads share the blocks), then as run16 with
  // 16-bit columns (or the input itself) and the float32 output of the thread's band rounded by the epilogue.
  // The bfloat16 paths' operands and workspace: an image's float32 output [PQ][K] (turned: the fold's), the
  // packed operand (the weight of every group, or the fold's columns where turned), the column matrix [PQ][crse]
  // (turned: the fold's).
  struct Dot16 {
    const uint16_t *x, *w, *bias, *res;
    uint16_t* y;
    float* yf;
    uint16_t *packed, *col;
    int64_t PQ, G, Cg, Kg, in_img, out_img;
  };
  static Dot16 dot16(const ConvCall& call, const DotPlan& dp) {
    const Conv2dProblem& pb = call.problem;
    Dot16 d;
    d.x = static_cast<const uint16_t*>(call.src.data);
    d.w = static_cast<const uint16_t*>(call.wei.data);
    d.bias = static_cast<const uint16_t*>(call.epilogue.bias);
    d.res = static_cast<const uint16_t*>(call.epilogue.residual);
    d.y = static_cast<uint16_t*>(call.dst.data);
    d.PQ = pb.p() * pb.q(), d.G = pb.groups, d.Cg = pb.c_per_group(), d.Kg = pb.k_per_group();
    d.in_img = pb.c * pb.h * pb.w, d.out_img = pb.k * d.PQ;
    d.yf = static_cast<float*>(call.workspace);
    d.packed = reinterpret_cast<uint16_t*>(d.yf + dp.fold * d.PQ * pb.k);
    d.col = d.packed + (dp.turned ? 1 : d.G) * dp.packed;
    return d;
  }

  void run_bf16_dot(const ConvCall& call) const {
    const Conv2dProblem& pb = call.problem;
    const Epilogue& e = call.epilogue;
    const DotPlan dp = dot_plan(pb);
    if (dp.turned) return run_bf16_turned(call, dp);
    const Dot16 d = dot16(call, dp);
    const uint16_t *x = d.x, *w = d.w, *bias = d.bias, *res = d.res;
    uint16_t *y = d.y, *packed = d.packed, *col = d.col;
    float* yf = d.yf;
    const int64_t PQ = d.PQ, G = d.G, Cg = d.Cg, Kg = d.Kg, in_img = d.in_img, out_img = d.out_img;
    const int64_t blocks = (Kg + kGemmBf16Cols - 1) / kGemmBf16Cols;
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < G * blocks; ++t) {
        const int64_t g = t / blocks, jb = t % blocks;
        gemm_bf16_pack(w + g * Kg * dp.crs, dp.crs, Kg, dp.crse, dp.crs, packed + g * dp.packed, jb, jb + 1);
      }
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t m0 = PQ * t / nt, m1 = PQ * (t + 1) / nt, mb = m1 - m0;
      for (int64_t n = 0; n < pb.n && mb > 0; ++n)
        for (int64_t g = 0; g < G; ++g) {
          const uint16_t* xn = x + n * in_img;
          const uint16_t* a = dp.direct ? xn + m0 * pb.c + g * Cg : col + m0 * dp.crse;
          if (!dp.direct) im2col_nhwc(pb, xn, DType::bf16, g, col, dp.crse, m0, m1);
          float* yg = yf + m0 * pb.k + g * Kg;
          gemm_bf16(a, dp.direct ? pb.c : dp.crse, packed + g * dp.packed, mb, Kg, dp.crse, e.alpha, yg, pb.k);
          const int64_t off = n * out_img + m0 * pb.k + g * Kg;
          finish_block(e, DType::bf16, yg, pb.k, y + off, res ? res + off : nullptr, bias ? bias + g * Kg : nullptr,
                       mb, Kg, pb.k, false);
        }
    }
  }

  // The turned bfloat16 path (few pixels, many output channels): per fold of images (dp.fold, their pixels
  // consecutive rows) and group, the columns built and packed by all threads together, then each thread
  // multiplies them by its range of output channels, the weight's rows read as they are (gemm_bf16_turned),
  // and finishes those channels.
  void run_bf16_turned(const ConvCall& call, const DotPlan& dp) const {
    const Conv2dProblem& pb = call.problem;
    const Epilogue& e = call.epilogue;
    const Dot16 d = dot16(call, dp);
    const uint16_t *x = d.x, *w = d.w, *bias = d.bias, *res = d.res;
    uint16_t *y = d.y, *packed = d.packed, *col = d.col;
    float* yf = d.yf;
    const int64_t PQ = d.PQ, G = d.G, Cg = d.Cg, Kg = d.Kg, in_img = d.in_img, out_img = d.out_img;
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t k0 = Kg / 8 * t / nt * 8, k1 = t + 1 == nt ? Kg : Kg / 8 * (t + 1) / nt * 8, kb = k1 - k0;
      for (int64_t n0 = 0; n0 < pb.n; n0 += dp.fold) {
        const int64_t images = std::min(dp.fold, pb.n - n0), M = images * PQ;
        const int64_t blocks = (M + kGemmBf16Cols - 1) / kGemmBf16Cols;
        for (int64_t g = 0; g < G; ++g) {
          if (!dp.direct) {
#pragma omp for schedule(static)
            for (int64_t r0 = 0; r0 < M; r0 += 8)  // rows r0 .. r0 + 7 of the fold
              im2col_nhwc_images(pb, x + n0 * in_img, DType::bf16, g, col, dp.crse, r0, std::min(M, r0 + 8));
          }
          const uint16_t* a = dp.direct ? x + n0 * in_img + g * Cg : col;  // NHWC: the images' pixels in a row
#pragma omp for schedule(static)
          for (int64_t ib = 0; ib < blocks; ++ib)
            gemm_bf16_pack(a, dp.direct ? pb.c : dp.crse, M, dp.crse, dp.crse, packed, ib, ib + 1);
          if (kb > 0) {
            float* yg = yf + g * Kg;
            gemm_bf16_turned(packed, w + g * Kg * dp.crs, dp.crs, dp.crs, M, k0, k1, dp.crse, e.alpha, yg, pb.k);
            const int64_t off = n0 * out_img + g * Kg + k0;
            finish_block(e, DType::bf16, yg + k0, pb.k, y + off, res ? res + off : nullptr,
                         bias ? bias + g * Kg + k0 : nullptr, M, kb, pb.k, false);
          }
#pragma omp barrier
        }
      }
    }
  }
#else
  void run16(const ConvCall&) const {}
  void run_bf16_dot(const ConvCall&) const {}
#endif
};

}  // namespace

const Algorithm* make_cpu_im2col_gemm() {
  static CpuIm2colGemm algo;
  return &algo;
}

}  // namespace convkit::detail
