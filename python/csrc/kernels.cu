// CUDA kernels of the extension's example ops (vector_add, silu, csr_matvec) and of max_pool2d, channel_mean,
// scale_channels and layer_norm_last. Grid-stride loops (64-bit indices, or int where the sizes fit); every launch is checked and
// enqueued on the caller's (PyTorch's current) stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "convkit/cuda_launch.cuh"
#include "convkit/epilogue.hpp"
#include "convkit/system.hpp"
#include "kernels.hpp"

namespace convkit_ext {
namespace {

void check_launch(const char* name) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("kernel ") + name + " failed: " + cudaGetErrorString(e));
}

// The pooling, squeeze-excitation and layer-norm kernels below are launched as the library launches its own
// (convkit/cuda_launch.cuh: programmatic dependent launch where convkit::cuda_programmatic_launch() says so),
// and call pdl_enter() first thing.
using convkit::pdl_enter;

template <typename... KernelArgs, typename... Args>
void launch_pdl(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  const cudaError_t e = convkit::launch_with_pdl(convkit::cuda_programmatic_launch(), kernel, grid, block, smem,
                                                 stream, std::forward<Args>(args)...);
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
  pdl_enter();
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

// Channel means of a channels-last tensor (squeeze-excitation's and a classifier's global average pool), in
// two kernels and without atomics, so that the sums are the same on every run. channel_sum: block (split s,
// image n) adds its share of image n's H*W pixels for every channel; `lanes` threads cover a pixel's channels
// as 16-byte vectors of V, `rows` = 256 / lanes pixels at a time; the rows are added in shared memory and
// partial[s][n][c] written in float. channel_mean_finish: one thread an (n, c), the S partials added, times
// 1 / (H*W) (torch's mean), rounded to T.
template <typename T>
__global__ void channel_sum_nhwc_kernel(const T* __restrict__ x, float* __restrict__ partial, int64_t hw, int c,
                                        int64_t per_split) {
  pdl_enter();
  constexpr int V = 16 / sizeof(T);
  extern __shared__ float red[];  // [rows][lanes * V]
  const int vecs = c / V, lanes = vecs < int(blockDim.x) ? vecs : int(blockDim.x), rows = blockDim.x / lanes;
  const int lane = threadIdx.x % lanes, row = threadIdx.x / lanes;
  const int64_t n = blockIdx.y, p0 = blockIdx.x * per_split, p1 = p0 + per_split < hw ? p0 + per_split : hw;
  for (int cv0 = 0; cv0 < vecs; cv0 += lanes) {
    const int cv = cv0 + lane;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    if (row < rows && cv < vecs) {
      const T* base = x + n * hw * c + int64_t(cv) * V;
#pragma unroll 4
      for (int64_t p = p0 + row; p < p1; p += rows) {
        const uint4 raw = *reinterpret_cast<const uint4*>(base + p * c);
        T v[V];
        memcpy(v, &raw, 16);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += load(v[e]);
      }
    }
    if (row < rows)
#pragma unroll
      for (int e = 0; e < V; ++e) red[(row * lanes + lane) * V + e] = acc[e];
    __syncthreads();
    for (int j = threadIdx.x; j < lanes * V; j += blockDim.x) {
      float sum = 0.0f;
      for (int r = 0; r < rows; ++r) sum += red[r * lanes * V + j];
      const int ch = cv0 * V + j;
      if (ch < c) partial[(int64_t(blockIdx.x) * gridDim.y + n) * c + ch] = sum;
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void channel_mean_finish_kernel(const float* __restrict__ partial, T* __restrict__ y, int64_t nc,
                                           int splits, float scale) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nc; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += partial[s * nc + i];
    y[i] = store<T>(sum * scale);
  }
}

// Squeeze-excitation's gate in one kernel: s[n] = act2(W2 act1(W1 mean(x[n]) + b1) + b2) for a channels-last x,
// W1 [R, C], W2 [C, R]; where convkit.fuse otherwise runs four kernels (the mean's two, then two 1x1
// convolutions of one pixel), each a few microseconds of latency at small batches. A cluster of S blocks an
// image (grid (S, N), cluster (S, 1, 1)); the blocks talk through distributed shared memory, in a fixed order,
// so the result is the same on every run:
//   1. block b adds its share of the image's pixels for every channel (as channel_sum_nhwc_kernel): part[C];
//   2. cluster barrier; block b takes channels [c0, c1) (C / S of them): their means (the S blocks' part
//      added in rank order), then its share of every hidden unit, hpart[j] = sum over its channels of
//      W1[j][c] m[c] (a warp a unit, lanes along the channels);
//   3. cluster barrier; every block adds the S hparts in rank order, h = act1(. + b1), and writes its channels
//      s[c] = act2(sum_j W2[c][j] h[j] + b2[c]) (a thread a channel, along its W2 row: R loads in a row, which
//      is why gates of many hidden units lose to the four kernels; convkit.nn.SqueezeExcitationGate.max_hidden);
//   4. cluster barrier, so that no block's shared memory goes while another reads it.
// Everything in float; s rounded to T once (the four kernels round the mean and h to T as well). Measured
// (H100, bf16, EfficientNet-B0 at batch 1 under the profiler): 6.5-9.8 us a gate, where the four kernels took
// about 14 us; alone in a CUDA graph on an H200, 5.3-8.5 us at batch 1 and 6.3-12.3 at batch 32 on that model's
// gates (docs/perf.md, 2026-12-07: latency, not bytes; staging the filters in shared memory or a warp a channel
// did not beat this form). The kernel needs clusters (sm_90): built for an older target, it is a trap.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ float gate_activation(float v, int act) {
  switch (static_cast<convkit::Activation>(act)) {
    case convkit::Activation::relu: return v > 0.0f ? v : 0.0f;
    case convkit::Activation::relu6: return fminf(fmaxf(v, 0.0f), 6.0f);
    case convkit::Activation::silu: return v / (1.0f + __expf(-v));
    case convkit::Activation::gelu: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case convkit::Activation::hardswish: return v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
    case convkit::Activation::sigmoid: return 1.0f / (1.0f + __expf(-v));
    case convkit::Activation::hardsigmoid: return fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
    default: return v;
  }
}
#endif

template <typename T>
__global__ void __launch_bounds__(512) se_gate_nhwc_kernel(const T* __restrict__ x, const T* __restrict__ w1,
                                                           const T* __restrict__ b1, const T* __restrict__ w2,
                                                           const T* __restrict__ b2, T* __restrict__ y, int64_t hw,
                                                           int c, int r, int64_t per_split, float inv_hw, int act1,
                                                           int act2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters: compute capability 9.0 and later (se_gate_takes); an older target's image never runs
#else
  pdl_enter();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  constexpr int V = 16 / sizeof(T);
  extern __shared__ float smem[];
  float* red = smem;                    // [rows][lanes * V], later the block's channel means
  float* part = red + blockDim.x * V;   // [c]: this block's sums
  float* hpart = part + c;              // [r]: this block's share of the hidden units
  float* h = hpart + r;                 // [r]: the hidden units
  const int S = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t n = blockIdx.y, p0 = rank * per_split, p1 = p0 + per_split < hw ? p0 + per_split : hw;
  const int vecs = c / V, lanes = vecs < int(blockDim.x) ? vecs : int(blockDim.x), rows = blockDim.x / lanes;
  const int lane = threadIdx.x % lanes, row = threadIdx.x / lanes;
  for (int cv0 = 0; cv0 < vecs; cv0 += lanes) {
    const int cv = cv0 + lane;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    if (row < rows && cv < vecs) {
      const T* base = x + n * hw * c + int64_t(cv) * V;
#pragma unroll 4
      for (int64_t p = p0 + row; p < p1; p += rows) {
        const uint4 raw = *reinterpret_cast<const uint4*>(base + p * c);
        T v[V];
        memcpy(v, &raw, 16);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += load(v[e]);
      }
    }
    if (row < rows)
#pragma unroll
      for (int e = 0; e < V; ++e) red[(row * lanes + lane) * V + e] = acc[e];
    __syncthreads();
    for (int j = threadIdx.x; j < lanes * V; j += blockDim.x) {
      float sum = 0.0f;
      for (int q = 0; q < rows; ++q) sum += red[q * lanes * V + j];
      if (cv0 * V + j < c) part[cv0 * V + j] = sum;
    }
    __syncthreads();
  }
  cluster.sync();
  const int share = (c + S - 1) / S, c0 = rank * share, c1 = c0 + share < c ? c0 + share : c;
  float* mean = red;  // [c1 - c0]
  for (int ch = c0 + int(threadIdx.x); ch < c1; ch += blockDim.x) {
    float sum = 0.0f;
    for (int q = 0; q < S; ++q) sum += cluster.map_shared_rank(part, q)[ch];
    mean[ch - c0] = sum * inv_hw;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, wlane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int j = warp; j < r; j += warps) {
    float acc = 0.0f;
    for (int ch = c0 + wlane; ch < c1; ch += 32) acc += load(w1[int64_t(j) * c + ch]) * mean[ch - c0];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (wlane == 0) hpart[j] = acc;
  }
  cluster.sync();
  for (int j = threadIdx.x; j < r; j += blockDim.x) {
    float sum = b1 != nullptr ? load(b1[j]) : 0.0f;
    for (int q = 0; q < S; ++q) sum += cluster.map_shared_rank(hpart, q)[j];
    h[j] = gate_activation(sum, act1);
  }
  __syncthreads();
  for (int ch = c0 + int(threadIdx.x); ch < c1; ch += blockDim.x) {
    float acc = b2 != nullptr ? load(b2[ch]) : 0.0f;
    const T* row2 = w2 + int64_t(ch) * r;
    for (int j = 0; j < r; ++j) acc += load(row2[j]) * h[j];
    y[n * c + ch] = store<T>(gate_activation(acc, act2));
  }
  cluster.sync();
#endif
}

// y = x * s with s of shape (N, C, 1, 1): squeeze-excitation's scaling of a channels-last x, one thread a
// 16-byte vector of x and the matching vector of s (float products rounded once, as torch's mul). I: int where
// the vector indices fit.
template <typename T, typename I>
__global__ void scale_channels_nhwc_kernel(const T* __restrict__ x, const T* __restrict__ s, T* __restrict__ y,
                                           I total, I vecs, I hw_vecs) {
  pdl_enter();
  constexpr int V = 16 / sizeof(T);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const I n = i / hw_vecs, cv = i % vecs;
    const uint4 rx = *reinterpret_cast<const uint4*>(x + int64_t(i) * V);
    const uint4 rs = *reinterpret_cast<const uint4*>(s + (int64_t(n) * vecs + cv) * V);
    T a[V], b[V], out[V];
    memcpy(a, &rx, 16);
    memcpy(b, &rs, 16);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = store<T>(load(a[e]) * load(b[e]));
    uint4 ro;
    memcpy(&ro, out, 16);
    *reinterpret_cast<uint4*>(y + int64_t(i) * V) = ro;
  }
}

// LayerNorm over the last dimension of a contiguous [rows, C] tensor (torch's layer_norm(x, {C}, w, b, eps):
// ConvNeXt's norm on channels-last activations, where torch's kernel gives each row of 96-768 channels a
// block of its own). A group of L lanes a row (L = 4, 8, 16 or 32, the fewest that leave a lane at most 4 of
// the row's 16-byte vectors, or 8 at L = 32), 32 / L rows a warp; the row stays in registers: its mean, then
// the sum of squared deviations from it (two passes over the registers), each reduced by shuffles inside the
// group; y = (x - mean) * rstd * w + b in float, rounded once. A warp's rows advance together (r0 is the
// same for its 32 lanes), so every shuffle has the whole warp.
template <typename T, int L>
__global__ void layer_norm_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                       T* __restrict__ y, int64_t rows, int c, float eps) {
  pdl_enter();
  constexpr int V = 16 / sizeof(T), kMax = L == 32 ? 8 : 4;
  const int vecs = c / V, lane = threadIdx.x % L;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r0 = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * (32 / L); r0 < rows;
       r0 += warps * (32 / L)) {
    const int64_t r = r0 + (threadIdx.x % 32) / L;
    const bool ok = r < rows;
    uint4 raw[kMax];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      const int v = j * L + lane;
      raw[j] = make_uint4(0, 0, 0, 0);
      if (ok && v < vecs) raw[j] = *reinterpret_cast<const uint4*>(x + r * c + int64_t(v) * V);
      T e[V];
      memcpy(e, &raw[j], 16);
#pragma unroll
      for (int i = 0; i < V; ++i) sum += load(e[i]);
    }
#pragma unroll
    for (int o = L / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float mean = sum / float(c);
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      if (j * L + lane >= vecs) continue;
      T e[V];
      memcpy(e, &raw[j], 16);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = load(e[i]) - mean;
        sq += d * d;
      }
    }
#pragma unroll
    for (int o = L / 2; o > 0; o /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    const float rstd = rsqrtf(sq / float(c) + eps);
    if (!ok) continue;
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      const int v = j * L + lane;
      if (v >= vecs) continue;
      T e[V], we[V], be[V], out[V];
      memcpy(e, &raw[j], 16);
      if (w) {
        const uint4 rw = *reinterpret_cast<const uint4*>(w + int64_t(v) * V);
        memcpy(we, &rw, 16);
      }
      if (b) {
        const uint4 rb = *reinterpret_cast<const uint4*>(b + int64_t(v) * V);
        memcpy(be, &rb, 16);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        float f = (load(e[i]) - mean) * rstd;
        if (w) f *= load(we[i]);
        if (b) f += load(be[i]);
        out[i] = store<T>(f);
      }
      uint4 ro;
      memcpy(&ro, out, 16);
      *reinterpret_cast<uint4*>(y + r * c + int64_t(v) * V) = ro;
    }
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
        launch_pdl("max_pool_nhwc_kernel", max_pool_nhwc_kernel<T, I>, dim3(grid_for(threads, 256)), dim3(256), 0, s,
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

namespace {
constexpr int kMeanThreads = 256;
int mean_rows(int64_t c, int64_t elem) {
  const int64_t vecs = c * elem / 16;
  return int(kMeanThreads / (vecs < kMeanThreads ? vecs : kMeanThreads));
}
}  // namespace

int64_t channel_mean_splits(Kind kind, int64_t n, int64_t hw, int64_t c) {
  const int64_t elem = kind == Kind::f32 ? 4 : 2;
  // about 512 blocks in all, each thread at least 4 pixels
  const int64_t want = (512 + n - 1) / n, most = (hw + 4 * mean_rows(c, elem) - 1) / (4 * mean_rows(c, elem));
  return want < most ? want : (most > 0 ? most : 1);
}

void cuda_channel_mean_nhwc(Kind kind, const void* x, float* partial, void* y, int64_t n, int64_t hw, int64_t c,
                            int64_t splits, void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      const auto st = static_cast<cudaStream_t>(stream);
      const int64_t per_split = (hw + splits - 1) / splits;
      const size_t smem = size_t(kMeanThreads) * (16 / sizeof(T)) * sizeof(float);
      launch_pdl("channel_sum_nhwc_kernel", channel_sum_nhwc_kernel<T>, dim3(unsigned(splits), unsigned(n)),
                 dim3(kMeanThreads), smem, st, static_cast<const T*>(x), partial, hw, int(c), per_split);
      check_launch("channel_sum_nhwc_kernel");
      launch_pdl("channel_mean_finish_kernel", channel_mean_finish_kernel<T>, dim3(grid_for(n * c, 256)), dim3(256), 0,
                 st, partial, static_cast<T*>(y), n * c, int(splits), 1.0f / float(hw));
    }
  });
  check_launch("channel_mean_finish_kernel");
}

namespace {
constexpr int kGateThreads = 512, kGateCluster = 8;
size_t se_gate_smem(int64_t elem, int64_t c, int64_t r) {
  return size_t(kGateThreads * (16 / elem) + c + 2 * r) * sizeof(float);
}
}  // namespace

bool se_gate_takes(Kind kind, int64_t n, int64_t c, int64_t r) {
  const int64_t elem = kind == Kind::f32 ? 4 : 2;
  int dev = 0, clusters = 0;  // (the current device's: a cluster launch needs compute capability 9.0)
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, dev) != cudaSuccess)
    return false;
  return clusters != 0 && (kind == Kind::f32 || kind == Kind::f16 || kind == Kind::bf16) && n >= 1 &&
         n <= 65535 && c > 0 && r > 0 && (c * elem) % 16 == 0 && se_gate_smem(elem, c, r) <= 48 * 1024;
}

void cuda_se_gate_nhwc(Kind kind, const void* x, const void* w1, const void* b1, const void* w2, const void* b2,
                       void* y, int64_t n, int64_t hw, int64_t c, int64_t r, int act1, int act2, void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(kGateCluster, unsigned(n));
      cfg.blockDim = dim3(kGateThreads);
      cfg.dynamicSmemBytes = se_gate_smem(sizeof(T), c, r);
      cfg.stream = static_cast<cudaStream_t>(stream);
      cudaLaunchAttribute attr[2];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = kGateCluster;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[1].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = convkit::cuda_programmatic_launch() ? 2 : 1;
      const int64_t per_split = (hw + kGateCluster - 1) / kGateCluster;
      const cudaError_t e = cudaLaunchKernelEx(&cfg, se_gate_nhwc_kernel<T>, static_cast<const T*>(x),
                                               static_cast<const T*>(w1), static_cast<const T*>(b1),
                                               static_cast<const T*>(w2), static_cast<const T*>(b2), static_cast<T*>(y),
                                               hw, int(c), int(r), per_split, 1.0f / float(hw), act1, act2);
      if (e != cudaSuccess)
        throw std::runtime_error(std::string("kernel se_gate_nhwc_kernel failed: ") + cudaGetErrorString(e));
    }
  });
  check_launch("se_gate_nhwc_kernel");
}

void cuda_scale_channels_nhwc(Kind kind, const void* x, const void* s, void* y, int64_t n, int64_t hw, int64_t c,
                              void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      const int64_t vecs = c / (16 / int64_t(sizeof(T))), total = n * hw * vecs;
      const auto st = static_cast<cudaStream_t>(stream);
      if (total < (int64_t(1) << 31))
        launch_pdl("scale_channels_nhwc_kernel", scale_channels_nhwc_kernel<T, int>, dim3(grid_for(total, 256)),
                   dim3(256), 0, st, static_cast<const T*>(x), static_cast<const T*>(s), static_cast<T*>(y), int(total),
                   int(vecs), int(hw * vecs));
      else
        launch_pdl("scale_channels_nhwc_kernel", scale_channels_nhwc_kernel<T, int64_t>, dim3(grid_for(total, 256)),
                   dim3(256), 0, st, static_cast<const T*>(x), static_cast<const T*>(s), static_cast<T*>(y), total, vecs,
                   hw * vecs);
    }
  });
  check_launch("scale_channels_nhwc_kernel");
}

namespace {
// lanes a row for C channels of `elem` bytes (0: more than 8 vectors a lane at 32 lanes)
int layer_norm_lanes(int64_t c, int64_t elem) {
  const int64_t vecs = c * elem / 16;
  return vecs <= 16 ? 4 : vecs <= 32 ? 8 : vecs <= 64 ? 16 : vecs <= 256 ? 32 : 0;
}
}  // namespace

bool layer_norm_rows_takes(Kind kind, int64_t c) {
  const int64_t elem = kind == Kind::f32 ? 4 : 2;
  return (kind == Kind::f32 || kind == Kind::f16 || kind == Kind::bf16) && c > 0 && (c * elem) % 16 == 0 &&
         layer_norm_lanes(c, elem) > 0;
}

void cuda_layer_norm_rows(Kind kind, const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t c,
                          float eps, void* stream) {
  by_kind(kind, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      const int lanes = layer_norm_lanes(c, sizeof(T));
      const auto st = static_cast<cudaStream_t>(stream);
      const unsigned grid = grid_for(rows, 256 / lanes);
      const auto launch = [&](auto kernel) {
        launch_pdl("layer_norm_rows_kernel", kernel, dim3(grid), dim3(256), 0, st, static_cast<const T*>(x),
                   static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), rows, int(c), eps);
      };
      switch (lanes) {
        case 4: launch(layer_norm_rows_kernel<T, 4>); break;
        case 8: launch(layer_norm_rows_kernel<T, 8>); break;
        case 16: launch(layer_norm_rows_kernel<T, 16>); break;
        default: launch(layer_norm_rows_kernel<T, 32>); break;
      }
    }
  });
  check_launch("layer_norm_rows_kernel");
}

}  // namespace convkit_ext
