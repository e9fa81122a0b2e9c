// The weight gradient on the CPU as GEMMs (conv2d_backward_weight with BackwardOptions::cpu_fast): per image
// and group, dL/dw[Kg, CRS] += grad_out^T [Kg, P*Q] x col [P*Q, CRS], col the image's column matrix (im2col,
// as cpu_im2col_gemm builds it), by OpenBLAS's SGEMM in float32.
//
// What it adds over the float64 reference (the default on the CPU, the tests' oracle: one loop nest per filter
// element) and over the PyTorch extension's former weight gradient (x correlated with grad_out as a
// convolution, after copying both transposed: a ResNet-18 training step on the CPU spent a third of its time in
// those copies): no transposed copies, one SGEMM a thread and image.
// Work mapping: one OpenMP team; per image and group the threads build the column matrix together (bands of
// pixels), then each multiplies for its own range of output channels (rows of dL/dw), accumulating over the
// images in order: the same bits on every call with the same thread count. f32 operands are read in place;
// f16/bf16 ones widened (the column matrix, grad_out an image at a time), the float32 sums rounded once:
// straight from a thread's buffer of 256 columns where one GEMM takes every image, else from the whole float32
// gradient after the last GEMM. bfloat16 NHWC whose every image's column matrix fits kDotElems runs on the
// CPU's bfloat16 dot product instead (wgrad_bf16_dot, below).
// Workspace (allocated here, not zero-filled): the column matrix of the images a GEMM, and for 16-bit tensors
// their grad_out and either a thread's 256 columns of the gradient or the float32 gradient.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "common/element.hpp"
#include "convkit/backward.hpp"
#include "cpu/epilogue_span.hpp"
#include "cpu/gemm_bf16.hpp"
#include "cpu/im2col.hpp"
#include "cpu/openblas_common.hpp"
#include "cpu/sgemm.hpp"
#include "cpu/wgrad_gemm.hpp"

#include <omp.h>

namespace convkit::detail {

bool cpu_wgrad_gemm_available() {
#ifdef CONVKIT_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

#ifdef CONVKIT_HAVE_OPENBLAS
namespace {

// Rows [pq0, pq1) of col[pq][(r*S + s)*Cg + c] (NHWC) or columns [pq0, pq1) of col[(c*R + r)*S + s][pq]
// (NCHW) of image n, group g, as floats: im2col.hpp's column matrix, the elements widened where 16-bit.
void columns(const Conv2dProblem& pb, const TensorView& x, int64_t n, int64_t g, float* col, int64_t pq0,
             int64_t pq1) {
  const int64_t img = pb.c * pb.h * pb.w, CRS = pb.c_per_group() * pb.r * pb.s;
  const bool nhwc = x.layout == Layout::nhwc;
  if (x.dtype == DType::f32) {
    const float* xn = static_cast<const float*>(x.data) + n * img;
    if (nhwc) return im2col_nhwc(pb, xn, x.dtype, g, col, CRS, pq0, pq1);
    return im2col_nchw(pb, xn, x.dtype, g, col, pq0, pq1);
  }
  const uint16_t* xn = static_cast<const uint16_t*>(x.data) + n * img;
  if (nhwc) return im2col_nhwc(pb, xn, x.dtype, g, col, CRS, pq0, pq1);
  im2col_nchw(pb, xn, x.dtype, g, col, pq0, pq1);
}

// n float32 sums rounded once to dt (epilogue_span with no epilogue: the dtype decided once a run).
void round_sums(const float* a, DType dt, uint16_t* o, int64_t n) {
  epilogue_span(Epilogue{}, 1.0f, dt, a, o, n, nullptr, SpanBias::none, nullptr);
}

// Columns of the gradient a GEMM where its 16-bit sums are rounded straight from a thread's buffer.
constexpr int64_t kRoundColumns = 256;

// At most this many elements of the column matrix (every image's) on the bfloat16 dot-product path.
constexpr int64_t kDotElems = int64_t(1) << 22;

bool bf16_dot_takes(const Conv2dProblem& pb, const TensorView& x) {
  const int64_t rows = pb.n * pb.p() * pb.q(), crs = pb.c_per_group() * pb.r * pb.s;
  return x.dtype == DType::bf16 && x.layout == Layout::nhwc && gemm_bf16_available() && (rows + 1) * crs <= kDotElems;
}

// bfloat16 NHWC with every image's column matrix in kDotElems, on the CPU's bfloat16 dot product (gemm_bf16.hpp,
// two multiply-adds a lane an instruction, where the widened SGEMM does one; oneDNN's weight gradient, PyTorch's
// on the CPU, multiplies bfloat16 too). Per group: dL/dw[Kg][CRS] = gz^T [Kg][rows] x col [rows][CRS] with the
// rows (every image's pixels, padded to an even count with a zero row) as the reduction. gz is copied
// transposed once ([K][rows]: A's rows). The column matrix is never stored as such: each pair of rows is
// built in bfloat16 in a thread's buffer and laid straight into gemm_bf16's packing (32 columns a block, the
// two rows' values side by side). Then units of a 32-column block x a part of the output channels (as many as
// keep the threads busy) multiply, their float32 sums rounded once into gw.
void wgrad_bf16_dot(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw) {
  const int64_t PQ = pb.p() * pb.q(), G = pb.groups, Kg = pb.k_per_group(), CRS = pb.c_per_group() * pb.r * pb.s;
  const int64_t rows = pb.n * PQ, re = rows + (rows & 1);
  const int64_t blocks = (CRS + kGemmBf16Cols - 1) / kGemmBf16Cols;
  const std::unique_ptr<uint16_t[]> packed(new uint16_t[size_t(gemm_bf16_packed_elems(CRS, re))]);
  const std::unique_ptr<uint16_t[]> gzt(new uint16_t[size_t(pb.k * re)]);  // [K][re], the pad column zeros
  const auto* x16 = static_cast<const uint16_t*>(x.data);
  const auto* g16 = static_cast<const uint16_t*>(gz.data);
  auto* w16 = static_cast<uint16_t*>(gw.data);
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t mparts = std::clamp<int64_t>((4 * nt + blocks - 1) / blocks, 1, (Kg + 7) / 8);
    const std::unique_ptr<uint16_t[]> two(new uint16_t[size_t(2 * blocks * kGemmBf16Cols)]);  // two rows, padded
    const std::unique_ptr<float[]> part(new float[size_t((Kg / mparts + 1) * kGemmBf16Cols)]);
    std::fill(two.get(), two.get() + 2 * blocks * kGemmBf16Cols, uint16_t(0));  // (past CRS: zeros, kept)
#pragma omp for schedule(static)
    for (int64_t k0 = 0; k0 < pb.k; k0 += 16) {  // 16 output channels' rows of gz^T, 32 of its columns at a time
      const int64_t k1 = std::min(pb.k, k0 + 16);
      uint16_t tile[16][32];  // through a buffer: written straight, each 2-byte store went to another line (3x
                              // the GEMM's time at 32 channels and 8192 pixels)
      for (int64_t r0 = 0; r0 < rows; r0 += 32) {
        const int64_t r1 = std::min(rows, r0 + 32);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t k = k0; k < k1; ++k) tile[k - k0][r - r0] = g16[r * pb.k + k];
        for (int64_t k = k0; k < k1; ++k) std::memcpy(gzt.get() + k * re + r0, tile[k - k0], sizeof(uint16_t) * (r1 - r0));
      }
      for (int64_t k = k0; k < k1 && re > rows; ++k) gzt[size_t(k * re + rows)] = 0;
    }
    for (int64_t g = 0; g < G; ++g) {
#pragma omp for schedule(static)
      for (int64_t pr = 0; pr < re / 2; ++pr) {  // rows 2 pr and 2 pr + 1 into every block's pair pr
        uint16_t* b0 = two.get();
        uint16_t* b1 = b0 + blocks * kGemmBf16Cols;
        for (int e = 0; e < 2; ++e) {
          const int64_t row = 2 * pr + e;
          uint16_t* b = e == 0 ? b0 : b1;
          if (row < rows)
            im2col_nhwc_images(pb, x16, DType::bf16, g, b, CRS, row, row + 1, row);
          else
            std::fill(b, b + CRS, uint16_t(0));
        }
        for (int64_t jb = 0; jb < blocks; ++jb) {
          uint16_t* o = packed.get() + (jb * re + 2 * pr) * kGemmBf16Cols;
          const uint16_t *a0 = b0 + jb * kGemmBf16Cols, *a1 = b1 + jb * kGemmBf16Cols;
          for (int64_t c = 0; c < kGemmBf16Cols; ++c) o[2 * c] = a0[c], o[2 * c + 1] = a1[c];
        }
      }
#pragma omp for schedule(static)
      for (int64_t u = 0; u < blocks * mparts; ++u) {
        const int64_t jb = u / mparts, mp = u % mparts, m0 = Kg * mp / mparts, m1 = Kg * (mp + 1) / mparts;
        const int64_t j0 = jb * kGemmBf16Cols, cols = std::min(kGemmBf16Cols, CRS - j0);
        if (m1 == m0) continue;
        gemm_bf16(gzt.get() + (g * Kg + m0) * re, re, packed.get() + jb * kGemmBf16Cols * re, m1 - m0, cols, re, 1.0f,
                  part.get(), kGemmBf16Cols);
        for (int64_t i = 0; i < m1 - m0; ++i)
          round_sums(part.get() + i * kGemmBf16Cols, DType::bf16, w16 + (g * Kg + m0 + i) * CRS + j0, cols);
      }
    }
  }
}

}  // namespace

void cpu_wgrad_gemm(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw) {
  if (bf16_dot_takes(pb, x)) return wgrad_bf16_dot(pb, x, gz, gw);
  const int64_t P = pb.p(), Q = pb.q(), PQ = P * Q, G = pb.groups, Cg = pb.c_per_group(), Kg = pb.k_per_group();
  const int64_t CRS = Cg * pb.r * pb.s;
  const bool nhwc = x.layout == Layout::nhwc, f32 = x.dtype == DType::f32;
  // NHWC: several images a GEMM (their pixels are consecutive rows of grad_out and of the column matrix), as
  // many as a column matrix of kFoldFloats holds: a deep layer's few pixels an image made one thin GEMM an
  // image, each reading and writing the whole float32 gradient (ResNet-18's 512 3x3 at 2x2, batch 8: 4.5 ms).
  constexpr int64_t kFoldFloats = int64_t(1) << 22;
  const int64_t fold = nhwc ? std::clamp<int64_t>(kFoldFloats / std::max<int64_t>(1, PQ * CRS), 1, pb.n) : 1;
  const int64_t rows_max = fold * PQ;
  // (not zero-filled: every element is written before it is read; a zero-filled float32 gradient of 2.4 M
  // elements cost as much as its GEMM)
  const std::unique_ptr<float[]> col(new float[size_t(rows_max * CRS)]);
  const std::unique_ptr<float[]> gzf(f32 ? nullptr : new float[size_t(rows_max * pb.k)]);  // grad_out, widened
  // 16-bit with every image in one GEMM (the float32 sums complete after it): each thread's rows of the
  // gradient kRoundColumns at a time into its own buffer, rounded from there while it is in cache; otherwise
  // the whole float32 gradient, summed over the GEMMs, then rounded (ResNet-18's 512 3x3 at 2x2, batch 8, in
  // a training step: 2.6 ms a call with the 9.4 MB buffer, written and read back out of cache).
  const bool direct_round = !f32 && fold >= pb.n;
  const std::unique_ptr<float[]> acc(f32 || direct_round ? nullptr : new float[size_t(pb.k * CRS)]);
  float* out = f32 ? static_cast<float*>(gw.data) : acc.get();
  uint16_t* g16out = f32 ? nullptr : static_cast<uint16_t*>(gw.data);
  single_threaded_blas();
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t k0 = Kg * t / nt, k1 = Kg * (t + 1) / nt, kb = k1 - k0;
    const std::unique_ptr<float[]> part(direct_round && kb > 0 ? new float[size_t(kb * kRoundColumns)] : nullptr);
    for (int64_t n0 = 0; n0 < pb.n; n0 += fold) {
      const int64_t nb = std::min(fold, pb.n - n0), rows = nb * PQ;  // images [n0, n0 + nb), their pixels
      if (!f32) {
        const uint16_t* g16 = static_cast<const uint16_t*>(gz.data) + n0 * PQ * pb.k;  // (16-bit: not f32)
        const int64_t total = rows * pb.k;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < total; i += 4096)
          copy_elements(g16 + i, gzf.get() + i, std::min<int64_t>(4096, total - i), gz.dtype);
      }
      // grad_out of the images: [rows][K] (NHWC) or [K][PQ] (NCHW, one image)
      const float* gn = f32 ? static_cast<const float*>(gz.data) + n0 * PQ * pb.k : gzf.get();
      for (int64_t g = 0; g < G; ++g) {
#pragma omp for schedule(static)
        for (int64_t c0 = 0; c0 < rows; c0 += 16) {
          const int64_t c1 = std::min(rows, c0 + 16);
          for (int64_t i = c0; i < c1;) {  // (a band may span two images)
            const int64_t n = n0 + i / PQ, pq0 = i % PQ, pq1 = std::min(PQ, pq0 + (c1 - i));
            columns(pb, x, n, g, col.get() + (i - pq0) * (nhwc ? CRS : 1), pq0, pq1);
            i += pq1 - pq0;
          }
        }
        if (kb > 0 && direct_round) {
          for (int64_t j0 = 0; j0 < CRS; j0 += kRoundColumns) {  // part[kb, cw] = the columns [j0, j0 + cw)
            const int64_t cw = std::min(kRoundColumns, CRS - j0);
            if (nhwc)
              sgemm(true, false, int(kb), int(cw), int(rows), 1.0f,
                          gn + g * Kg + k0, int(pb.k), col.get() + j0, int(CRS), 0.0f, part.get(), int(cw));
            else
              sgemm(false, true, int(kb), int(cw), int(PQ), 1.0f,
                          gn + (g * Kg + k0) * PQ, int(PQ), col.get() + j0 * PQ, int(PQ), 0.0f, part.get(), int(cw));
            for (int64_t i = 0; i < kb; ++i)
              round_sums(part.get() + i * cw, gw.dtype, g16out + (g * Kg + k0 + i) * CRS + j0, cw);
          }
        } else if (kb > 0) {
          float* o = out + (g * Kg + k0) * CRS;  // (KRSC and KCRS: rows of CRS in the column matrix's order)
          const float beta = n0 == 0 ? 0.0f : 1.0f;
          if (nhwc)  // o[kb, CRS] (+)= gn[rows, g*Kg + k0 ..]^T x col[rows, CRS]
            sgemm(true, false, int(kb), int(CRS), int(rows), 1.0f,
                        gn + g * Kg + k0, int(pb.k), col.get(), int(CRS), beta, o, int(CRS));
          else  // o[kb, CRS] (+)= gn[g*Kg + k0 .., PQ] x col[CRS, PQ]^T
            sgemm(false, true, int(kb), int(CRS), int(PQ), 1.0f,
                        gn + (g * Kg + k0) * PQ, int(PQ), col.get(), int(PQ), beta, o, int(CRS));
        }
#pragma omp barrier
      }
    }
    if (acc) {  // rounded once to the 16-bit dtype
#pragma omp for schedule(static)
      for (int64_t i0 = 0; i0 < pb.k * CRS; i0 += 4096)
        round_sums(acc.get() + i0, gw.dtype, g16out + i0, std::min<int64_t>(4096, pb.k * CRS - i0));
    }
  }
}
#else
void cpu_wgrad_gemm(const Conv2dProblem&, const TensorView&, const TensorView&, const TensorView&) {
  throw Error(StatusCode::not_available, "conv2d_backward_weight: the CPU GEMM path needs OpenBLAS in the build.");
}
#endif

}  // namespace convkit::detail
