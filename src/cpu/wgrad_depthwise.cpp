// The weight gradient of a depthwise layer on the CPU (conv2d_backward_weight with BackwardOptions::cpu_fast):
// dL/dw[k][r][s] = sum over n, p, q of gz[n, k, p, q] * x[n, k / M, p*u - pad + r*d, q*v - pad + s*d]
// (groups = C, M = K / C output channels an input channel).
//
// What it adds over the PyTorch extension's correlation form (x and gz copied transposed, then a convolution
// of one channel a group: the copies were 16% of a MobileNetV2 training step on the CPU) and over the float64
// reference: a loop that reads x and gz where they are, vectorised along what is contiguous.
//   NHWC: OpenMP over (image, output row) blocks; for each tap a thread adds gz's row of K channels times x's
//         at the tap's pixel into its own [R*S][K] float32 sums (the channel axis contiguous in both for
//         M = 1; x's channel k / M otherwise); the threads' sums are then added in thread order.
//   NCHW: OpenMP over output channels (each thread owns whole filters: no reduction); per tap, a row of gz
//         times the row of x it meets, along the row.
// float32 sums in a fixed order (the same bits on every call with the same thread count); f16/bf16 widened as
// they are read, the result rounded once.
#include <algorithm>
#include <vector>

#include "common/element.hpp"
#include "cpu/wgrad_gemm.hpp"

#include <omp.h>

namespace convkit::detail {
namespace {

template <DType D>
void run(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw) {
  const int64_t P = pb.p(), Q = pb.q(), K = pb.k, C = pb.c, M = K / C, RS = pb.r * pb.s;
  const int64_t H = pb.h, W = pb.w;
  auto tap_range = [&](int64_t s, int64_t& q0, int64_t& q1) {  // outputs q whose column for tap s is inside
    const int64_t off = s * pb.dilation_w - pb.pad_w;            // w = q * stride + off
    q0 = off >= 0 ? 0 : (-off + pb.stride_w - 1) / pb.stride_w;
    q1 = W - off <= 0 ? 0 : std::min(Q, (W - off + pb.stride_w - 1) / pb.stride_w);
  };
  if (x.layout == Layout::nhwc) {
    const int nt = omp_get_max_threads();
    std::vector<float> part(size_t(nt) * size_t(RS * K), 0.0f);
#pragma omp parallel num_threads(nt)
    {
      float* acc = part.data() + size_t(omp_get_thread_num()) * size_t(RS * K);
#pragma omp for collapse(2) schedule(static)
      for (int64_t n = 0; n < pb.n; ++n)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t r = 0; r < pb.r; ++r) {
            const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
            if (h < 0 || h >= H) continue;
            for (int64_t s = 0; s < pb.s; ++s) {
              int64_t q0, q1;
              tap_range(s, q0, q1);
              float* a = acc + (r * pb.s + s) * K;
              for (int64_t q = q0; q < q1; ++q) {
                const int64_t w = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
                const int64_t go = ((n * P + p) * Q + q) * K, xo = ((n * H + h) * W + w) * C;
                if (M == 1) {
#pragma omp simd
                  for (int64_t k = 0; k < K; ++k) a[k] += load_as_float(gz.data, D, go + k) * load_as_float(x.data, D, xo + k);
                } else {
                  for (int64_t k = 0; k < K; ++k) a[k] += load_as_float(gz.data, D, go + k) * load_as_float(x.data, D, xo + k / M);
                }
              }
            }
          }
    }
    // the threads' sums in thread order; gw is [K][R][S][1] (KRSC with one channel)
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t t = 0; t < RS; ++t) {
        float v = 0.0f;
        for (int i = 0; i < nt; ++i) v += part[size_t(i) * size_t(RS * K) + size_t(t * K + k)];
        store_from_float(gw.data, D, k * RS + t, v);
      }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < K; ++k) {
    const int64_t c = k / M;
    for (int64_t r = 0; r < pb.r; ++r)
      for (int64_t s = 0; s < pb.s; ++s) {
        int64_t q0, q1;
        tap_range(s, q0, q1);
        float v = 0.0f;
        for (int64_t n = 0; n < pb.n; ++n)
          for (int64_t p = 0; p < P; ++p) {
            const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
            if (h < 0 || h >= H) continue;
            const int64_t go = ((n * K + k) * P + p) * Q, xo = ((n * C + c) * H + h) * W + s * pb.dilation_w - pb.pad_w;
            for (int64_t q = q0; q < q1; ++q)
              v += load_as_float(gz.data, D, go + q) * load_as_float(x.data, D, xo + q * pb.stride_w);
          }
        store_from_float(gw.data, D, (k * pb.r + r) * pb.s + s, v);
      }
  }
}

}  // namespace

void cpu_wgrad_depthwise(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw) {
  switch (x.dtype) {
    case DType::f32: return run<DType::f32>(pb, x, gz, gw);
    case DType::f16: return run<DType::f16>(pb, x, gz, gw);
    case DType::bf16: return run<DType::bf16>(pb, x, gz, gw);
  }
}

}  // namespace convkit::detail
