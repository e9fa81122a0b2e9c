// CUDA kernels of the extension's example ops (vector_add, silu, csr_matvec) and of max_pool2d. Grid-stride
// loops with 64-bit indices; every launch is checked and enqueued on the caller's (PyTorch's current) stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels.hpp"

namespace convkit_ext {
namespace {

void check_launch(const char* name) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("kernel ") + name + " failed: " + cudaGetErrorString(e));
}

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <> struct Acc<int32_t> { using type = int32_t; };
template <> struct Acc<int64_t> { using type = int64_t; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type load(T v) { return static_cast<typename Acc<T>::type>(v); }
template <> __device__ __forceinline__ float load<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float load<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T, typename A> __device__ __forceinline__ T store(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half store<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

// One thread per element, grid-stride.
template <typename T>
__global__ void vector_add_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = store<T>(load(a[i]) + load(b[i]));
}

// One thread per element, grid-stride.
template <typename T>
__global__ void silu_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t n) {
  using A = typename Acc<T>::type;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const A v = load(x[i]);
    out[i] = store<T>(v / (A(1) + exp(-v)));
  }
}

// One warp per row: lanes stride over the row's non-zeros, then a shuffle reduction.
template <typename T, typename I>
__global__ void csr_matvec_kernel(const T* __restrict__ values, const I* __restrict__ row_ptr,
                                  const I* __restrict__ col_idx, const T* __restrict__ dense, T* __restrict__ out,
                                  int64_t rows) {
  using A = typename Acc<T>::type;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    A sum = A(0);
    for (int64_t j = int64_t(row_ptr[row]) + lane; j < int64_t(row_ptr[row + 1]); j += 32)
      sum += load(values[j]) * load(dense[col_idx[j]]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) out[row] = store<T>(sum);
  }
}

// Max pooling, NHWC, no indices (torch's CUDA max_pool2d always writes int64 indices too: on ResNet-50's
// stem, bf16 batch 32, its NHWC kernel took 0.112 ms, 7 times the bytes' floor; this one 0.036-0.039 ms on
// the H200, docs/perf.md 2026-12-04). One thread a 16-byte vector of V channels of one output pixel; the
// window's vectors are 16-byte loads (neighbouring windows overlap, so most come from L2). I: the index type
// of the output's vectors (int where they fit: a 64-bit division is a call of ~100 instructions, and each
// thread does five).
template <typename T, typename I>
__global__ void max_pool_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, I n_, I h_, I w_, I c_, I p_, I q_,
                                     int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
  constexpr int V = 16 / sizeof(T);
  const I vecs = c_ / V, total = n_ * p_ * q_ * vecs;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const I cv = i % vecs, pix = i / vecs, q = pix % q_, np = pix / q_, p = np % p_, n = np / p_;
    float m[V];
#pragma unroll
    for (int e = 0; e < V; ++e) m[e] = -INFINITY;
    for (int r = 0; r < kh; ++r) {
      const int64_t h = p * sh - ph + int64_t(r) * dh;
      if (h < 0 || h >= h_) continue;
      for (int s = 0; s < kw; ++s) {
        const int64_t w = q * sw - pw + int64_t(s) * dw;
        if (w < 0 || w >= w_) continue;
        const uint4 raw = *reinterpret_cast<const uint4*>(x + ((int64_t(n) * h_ + h) * w_ + w) * c_ + cv * V);
        T v[V];
        memcpy(v, &raw, 16);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float f = load(v[e]);
          if (f > m[e] || f != f) m[e] = f;  // a NaN, once met, stays (nothing compares greater)
        }
      }
    }
    T out[V];
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = store<T>(m[e]);
    uint4 raw;
    memcpy(&raw, out, 16);
    *reinterpret_cast<uint4*>(y + int64_t(pix) * c_ + cv * V) = raw;
  }
}

template <typename F>
void by_kind(Kind k, F&& f) {
  switch (k) {
    case Kind::f32: f(float{}); break;
    case Kind::f64: f(double{}); break;
    case Kind::f16: f(__half{}); break;
    case Kind::bf16: f(__nv_bfloat16{}); break;
    case Kind::i32: f(int32_t{}); break;
    case Kind::i64: f(int64_t{}); break;
  }
}

}  // namespace

void cuda_vector_add(Kind kind, const void* a, const void* b, void* out, int64_t n, void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    vector_add_kernel<T><<<grid_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n);
  });
  check_launch("vector_add_kernel");
}

void cuda_silu(Kind kind, const void* x, void* out, int64_t n, void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>)
      silu_kernel<T><<<grid_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const T*>(x),
                                                                                       static_cast<T*>(out), n);
  });
  check_launch("silu_kernel");
}

void cuda_csr_matvec(Kind kind, Kind index, const void* values, const void* row_ptr, const void* col_idx,
                     const void* dense, void* out, int64_t rows, void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) {
      const unsigned grid = grid_for(rows * 32, 256);
      const auto s = static_cast<cudaStream_t>(stream);
      if (index == Kind::i32)
        csr_matvec_kernel<T, int32_t><<<grid, 256, 0, s>>>(
            static_cast<const T*>(values), static_cast<const int32_t*>(row_ptr), static_cast<const int32_t*>(col_idx),
            static_cast<const T*>(dense), static_cast<T*>(out), rows);
      else
        csr_matvec_kernel<T, int64_t><<<grid, 256, 0, s>>>(
            static_cast<const T*>(values), static_cast<const int64_t*>(row_ptr), static_cast<const int64_t*>(col_idx),
            static_cast<const T*>(dense), static_cast<T*>(out), rows);
    }
  });
  check_launch("csr_matvec_kernel");
}

void cuda_max_pool_nhwc(Kind kind, const void* x, void* y, const int64_t (&g)[14], void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      const int64_t threads = g[0] * g[4] * g[5] * (g[3] / (16 / int64_t(sizeof(T))));
      const auto s = static_cast<cudaStream_t>(stream);
      const auto launch = [&](auto itag) {
        using I = decltype(itag);
        max_pool_nhwc_kernel<T, I><<<grid_for(threads, 256), 256, 0, s>>>(
            static_cast<const T*>(x), static_cast<T*>(y), I(g[0]), I(g[1]), I(g[2]), I(g[3]), I(g[4]), I(g[5]),
            int(g[6]), int(g[7]), int(g[8]), int(g[9]), int(g[10]), int(g[11]), int(g[12]), int(g[13]));
      };
      // int where every output vector's index and every input row's (n * H + h) fit it
      if (threads < (int64_t(1) << 31) && g[0] * g[1] * g[2] < (int64_t(1) << 31)) launch(int{});
      else launch(int64_t{});
    }
  });
  check_launch("max_pool_nhwc_kernel");
}

}  // namespace convkit_ext
