// The geometry every CUDA kernel shares: the problem's sizes as ints (ConvDims, passed to kernels by
// value), the check that they fit, and the output pixel decode m -> (image, p, q) of the implicit-GEMM
// kernels. The filter-tap walk of the tensor-core kernels is in cuda/tc/igemm_tc.cuh (it belongs to their
// k-slice order).
#pragma once

#include <climits>
#include <cstdint>

#include "convkit/algorithm.hpp"

namespace convkit::detail {

// The problem's sizes as ints (the tiled kernels index shared memory and loop counters in 32 bits; global
// offsets are always formed in 64 bits from these).
struct ConvDims {
  int n, c, h, w, k, r, s;
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int groups, cg, kg, p, q;
};

// Each size must fit an int (products are formed in 64 bits where they can pass 2^31).
inline Support dims_fit_int(const Conv2dProblem& pb) {
  const int64_t sizes[] = {pb.n,      pb.c,        pb.h,       pb.w,         pb.k,         pb.r,
                           pb.s,      pb.pad_h,    pb.pad_w,   pb.stride_h,  pb.stride_w,  pb.dilation_h,
                           pb.dilation_w, pb.groups, pb.p(),   pb.q()};
  for (int64_t v : sizes)
    if (v > (int64_t(1) << 28))
      return Support::no("a size of the problem passes 2^28, which its 32-bit tile indexing does not allow.");
  return Support::yes();
}

inline ConvDims make_dims(const Conv2dProblem& pb) {
  ConvDims d;
  d.n = int(pb.n), d.c = int(pb.c), d.h = int(pb.h), d.w = int(pb.w), d.k = int(pb.k), d.r = int(pb.r),
  d.s = int(pb.s);
  d.pad_h = int(pb.pad_h), d.pad_w = int(pb.pad_w), d.stride_h = int(pb.stride_h), d.stride_w = int(pb.stride_w);
  d.dil_h = int(pb.dilation_h), d.dil_w = int(pb.dilation_w);
  d.groups = int(pb.groups), d.cg = int(pb.c_per_group()), d.kg = int(pb.k_per_group());
  d.p = int(pb.p()), d.q = int(pb.q());
  return d;
}

// Division of a non-negative 32-bit int n < 2^31 by a divisor fixed for a launch, d in [1, 2^31), as a
// multiply-high, an add and a shift (Granlund and Montgomery's round-up method): a kernel's integer
// division is a ~20-instruction sequence, and a persistent kernel's tile decode ran three a tile. Built on
// the host (the magic number needs a 64-bit division), passed to the kernel by value; tests/test_fast_div.cpp
// checks it against / and % on both sides of every power of two.
#if defined(__CUDACC__)
#define CONVKIT_GEOM_HD __host__ __device__ __forceinline__
#else
#define CONVKIT_GEOM_HD inline
#endif
struct FastDiv {
  uint32_t d = 1, mul = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while (shift < 31 && (uint32_t(1) << shift) < d) ++shift;  // 2^shift >= d
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  CONVKIT_GEOM_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = uint32_t((uint64_t(n) * mul) >> 32);
#endif
    return (hi + n) >> shift;  // hi <= n < 2^31: the sum fits 32 bits
  }
  // n / d, and n % d in `rem`.
  CONVKIT_GEOM_HD uint32_t divmod(uint32_t n, uint32_t& rem) const {
    const uint32_t q = div(n);
    rem = n - q * d;
    return q;
  }
};
#undef CONVKIT_GEOM_HD

// An output pixel m of N*P*Q (image-major, then rows, then columns), decoded: 32-bit divisions whenever the
// whole range fits them (far cheaper than 64-bit ones, which are a ~100-instruction call), 64-bit otherwise.
// `fits32`: N*P*Q <= INT_MAX (a kernel argument, the same for every thread).
struct PixelPos {
  int64_t img;
  int p, q;
};
#if defined(__CUDACC__)
__device__ __forceinline__ PixelPos decode_pixel(int64_t m, int64_t PQ, int Q, bool fits32) {
  PixelPos r;
  if (fits32) {
    const unsigned um = unsigned(m), upq = unsigned(PQ);
    const unsigned uimg = um / upq, pq = um - uimg * upq;
    r.img = uimg;
    r.p = int(pq / unsigned(Q));
    r.q = int(pq - unsigned(r.p) * unsigned(Q));
  } else {
    r.img = m / PQ;
    const int64_t pq = m - r.img * PQ;
    r.p = int(pq / Q), r.q = int(pq - int64_t(r.p) * Q);
  }
  return r;
}
#endif

}  // namespace convkit::detail
