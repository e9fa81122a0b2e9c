// The weight gradient of a dense convolution (groups = 1) on tensor cores: conv2d_backward_weight
// (convkit/backward.hpp) for f16/bf16 NHWC with C and K multiples of 8, and through it the PyTorch
// extension's autograd.
//
// Adds over the correlation form (the extension's weight_grad: x and grad_out transposed into copies, then
// a convolution whose filter is grad_out): no copy. dW is one GEMM read straight from the NHWC tensors,
//   dW[k][j] = sum over pixels l of gz[l][k] * im2col(x)[l][j],   l = (n, p, q) of N*P*Q, j = (r, s, c) of R*S*C,
// whose reduction axis is the pixels: both operands are stored reduction-major (a pixel's K channels, a
// pixel's C channels), so ldmatrix.trans turns a staged [pixel][channel] tile into mma's fragments. A
// 16-byte piece of a column block is 8 channels of one filter tap (C % 8 == 0): the im2col gather is an
// address (or zeros outside the image) per piece, copied by cp.async.
// Work mapping: a block = 64 output channels (kBM) x 128 columns (kBN) x one slice of the pixels, in chunks
// of 32 pixels (kBL) through 3 cp.async stages (36 KiB of static shared memory). 8 warps as 2 (channels) x 4
// (columns), a warp's 32 x 32 tile = 2 m16 x 4 n8 mma.sync m16n8k16 tiles, fp32 accumulators in registers.
// A thread's cp.async pieces keep one column (tap, channel) for the whole slice, so the tap's offsets are
// decoded once; its two pixel rows are decoded per chunk. Staged rows are 128 (gz) and 256 (x) bytes with
// their 16-byte pieces XOR-swizzled by the row (piece ^ (row & 7)), so that the 8 rows an ldmatrix phase
// reads fall on distinct banks.
// Deterministic: each slice writes its fp32 partial dW to the workspace ([slice][K][R*S*C]), and
// wgrad_reduce_kernel adds the slices in order and rounds once. The slice count aims at 4 blocks an SM,
// so the bits depend on the problem and the device's SM count, not on the call.
// nvcc -Xptxas -v (sm_90): 96 registers, 36 KiB static shared memory, no spills; reduce 32 registers.
// measured (H200, 2026-12-02, bf16 batch 32, docs/perf.md): r50_3x3_64_56 0.0804 ms
// (0.42x cuDNN), r50_3x3_512_7 0.0872 (0.25x); geomean over ResNet-50's 10 dense non-GEMM layers 0.34x cuDNN
// (the correlation form it replaces: 0.20x).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>

#include "convkit/status.hpp"
#include "core/backward.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/geometry.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/tc/mma_sync.cuh"

namespace convkit::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kBM = 64;    // output channels a block
constexpr int kBN = 128;   // columns (tap, channel) a block
constexpr int kBL = 32;    // pixels a chunk (two k16 steps)
constexpr int kStages = 3;
constexpr int kAStage = kBL * kBM * 2;  // bytes of one stage's gz tile: 32 rows of 128 bytes
constexpr int kBStage = kBL * kBN * 2;  // bytes of one stage's x tile: 32 rows of 256 bytes
constexpr int64_t kMaxWorkspace = int64_t(512) << 20;

struct WgradArgs {
  ConvDims d;
  int64_t pixels;        // N*P*Q
  int rsc;               // R*S*C: the columns of dW
  int chunks;            // ceil(pixels / kBL)
  int chunks_per_slice;  // the last slice may hold fewer
  bool fits32;           // pixels <= INT_MAX (32-bit pixel decode)
};

struct WgradPlan {
  WgradArgs args;
  int col_blocks = 1, row_blocks = 1, slices = 1;
};

WgradPlan plan_of(const Conv2dProblem& pb) {
  WgradPlan t;
  WgradArgs& a = t.args;
  a.d = make_dims(pb);
  a.pixels = pb.n * pb.p() * pb.q();
  a.rsc = int(pb.r * pb.s * pb.c);
  a.chunks = int((a.pixels + kBL - 1) / kBL);
  a.fits32 = a.pixels <= INT_MAX;
  t.col_blocks = (a.rsc + kBN - 1) / kBN;
  t.row_blocks = int((pb.k + kBM - 1) / kBM);
  const int64_t tiles = int64_t(t.col_blocks) * t.row_blocks;
  // 4 blocks an SM (2 resident, two waves), each slice at least 4 chunks (128 pixels) long, the partial
  // sums within kMaxWorkspace.
  const int64_t sms = cuda_present() ? sm_count_of_current_device() : 132;
  int64_t slices = std::max<int64_t>(1, (4 * sms + tiles - 1) / tiles);
  slices = std::min<int64_t>(slices, std::max<int64_t>(1, a.chunks / 4));
  slices = std::min<int64_t>(slices, std::max<int64_t>(1, kMaxWorkspace / (pb.k * a.rsc * 4)));
  slices = std::min<int64_t>(slices, 65535);
  a.chunks_per_slice = int((a.chunks + slices - 1) / slices);
  t.slices = (a.chunks + a.chunks_per_slice - 1) / a.chunks_per_slice;
  return t;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    wgrad_mma_kernel(const WgradArgs a, const T* __restrict__ x, const T* __restrict__ gz, float* __restrict__ partial) {
  __shared__ __align__(128) unsigned char smem[kStages * (kAStage + kBStage)];
  const ConvDims& d = a.d;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // the warp's 32 channels, 32 columns
  const int k0 = int(blockIdx.y) * kBM, j0 = int(blockIdx.x) * kBN;
  const int slice = int(blockIdx.z);
  const int c_begin = slice * a.chunks_per_slice;
  const int n_chunks = min(a.chunks, c_begin + a.chunks_per_slice) - c_begin;
  const int64_t PQ = int64_t(d.p) * d.q;
  const uint32_t s_base = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t s_a = s_base, s_b = s_base + kStages * kAStage;

  // The thread's gz piece: pixel row tid / 8 of the chunk, 8 output channels (tid % 8).
  const int a_row = tid >> 3, a_piece = tid & 7;
  const int a_k = k0 + a_piece * 8;
  const bool a_in = a_k < d.k;  // K % 8 == 0: a piece is wholly in or out
  const uint32_t a_dst = uint32_t(a_row * 128 + ((a_piece ^ (a_row & 7)) << 4));
  // The thread's x pieces: pixel rows tid / 16 and tid / 16 + 16, 8 columns (tid % 16) of one tap.
  const int b_row = tid >> 4, b_piece = tid & 15;
  const int j = j0 + b_piece * 8;
  const bool b_in = j < a.rsc;
  const int tap = b_in ? j / d.c : 0, b_c = b_in ? j - tap * d.c : 0;
  const int fr = tap / d.s, fs = tap - fr * d.s;
  const int off_h = fr * d.dil_h - d.pad_h, off_w = fs * d.dil_w - d.pad_w;
  // rows b_row and b_row + 16 have the same row & 7
  const uint32_t b_dst = uint32_t(b_row * 256 + (((b_piece & 8) | ((b_piece ^ b_row) & 7)) << 4));

  auto load = [&](int chunk, int stage) {
    const int64_t l0 = int64_t(c_begin + chunk) * kBL;
    {
      const int64_t l = l0 + a_row;
      const bool ok = a_in && l < a.pixels;
      cp_async16(s_a + stage * kAStage + a_dst, ok ? gz + l * d.k + a_k : gz, ok);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t l = l0 + b_row + 16 * i;
      bool ok = b_in && l < a.pixels;
      const T* src = x;
      if (ok) {
        const PixelPos pp = decode_pixel(l, PQ, d.q, a.fits32);
        const int h = pp.p * d.stride_h + off_h, w = pp.q * d.stride_w + off_w;
        ok = unsigned(h) < unsigned(d.h) && unsigned(w) < unsigned(d.w);
        if (ok) src = x + ((pp.img * d.h + h) * d.w + w) * int64_t(d.c) + b_c;
      }
      cp_async16(s_b + stage * kBStage + b_dst + i * 16 * 256, src, ok);
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_chunks) load(st, st);
    cp_async_commit();
  }
  for (int it = 0; it < n_chunks; ++it) {
    cp_async_wait<kStages - 2>();  // this thread's pieces of chunk it have landed ...
    __syncthreads();               // ... everyone's, and everyone is done with the stage refilled below
    if (it + kStages - 1 < n_chunks) load(it + kStages - 1, (it + kStages - 1) % kStages);
    cp_async_commit();
    const int st = it % kStages;
    const uint32_t sa = s_a + st * kAStage, sb = s_b + st * kBStage;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        // matrices: (pixels 0-7, channels 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = a0, a1, a2, a3
        const int row = kk * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int piece = (wm * 32 + mt * 16 + ((lane >> 3) & 1) * 8) >> 3;
        ldmatrix_x4_trans(af[mt], sa + uint32_t(row * 128 + ((piece ^ (row & 7)) << 4)));
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        // matrices: (pixels 0-7, columns 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = b0, b1 of two n8 tiles
        const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int piece = (wn * 32 + np * 16 + (lane >> 4) * 8) >> 3;
        ldmatrix_x4_trans(bf[np], sb + uint32_t(row * 256 + (((piece & 8) | ((piece ^ row) & 7)) << 4)));
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const uint32_t b[2] = {bf[nt >> 1][(nt & 1) * 2], bf[nt >> 1][(nt & 1) * 2 + 1]};
          Mma<T>::run(acc[mt][nt], af[mt], b);
        }
    }
  }
  cp_async_wait<0>();

  // The slice's partial dW: c0, c1 at (channel g, columns 2t, 2t+1), c2, c3 at channel g + 8.
  const int g = lane >> 2, t4 = lane & 3;
  float* out = partial + int64_t(slice) * d.k * a.rsc;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = k0 + wm * 32 + mt * 16 + g + half * 8;
      if (k >= d.k) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = j0 + wn * 32 + nt * 8 + 2 * t4;  // R*S*C is even: both columns in or out
        if (col >= a.rsc) continue;
        *reinterpret_cast<float2*>(out + int64_t(k) * a.rsc + col) =
            make_float2(acc[mt][nt][half * 2], acc[mt][nt][half * 2 + 1]);
      }
    }
}

// dW = the slices' partial sums added in order, rounded once to T.
template <typename T>
__global__ void __launch_bounds__(256)
    wgrad_reduce_kernel(int64_t elems, int slices, const float* __restrict__ partial, T* __restrict__ gw) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < elems; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < slices; ++k) s += partial[int64_t(k) * elems + i];
    gw[i] = float_to_elem<T>(s);
  }
}

template <typename T>
void run(const Conv2dProblem& pb, const T* x, const T* gz, T* gw, float* partial, cudaStream_t st) {
  const WgradPlan t = plan_of(pb);
  const dim3 grid(unsigned(t.col_blocks), unsigned(t.row_blocks), unsigned(t.slices));
  wgrad_mma_kernel<T><<<grid, kThreads, 0, st>>>(t.args, x, gz, partial);
  CK_LAUNCH("wgrad_mma_kernel");
  const int64_t elems = pb.k * pb.r * pb.s * pb.c;
  const int64_t blocks = std::min<int64_t>((elems + 255) / 256, 8 * int64_t(sm_count_of_current_device()));
  wgrad_reduce_kernel<T><<<unsigned(blocks), 256, 0, st>>>(elems, t.slices, partial, gw);
  CK_LAUNCH("wgrad_reduce_kernel");
}

}  // namespace

Support cuda_dense_wgrad_supports(const Conv2dProblem& pb, const ConvConfig& cfg) {
  if (!cuda_present()) return Support::no("no CUDA device is present on this machine.");
  if (pb.groups != 1) return Support::no("the dense weight-gradient kernel takes ungrouped convolutions only.");
  if (cfg.dtype != DType::f16 && cfg.dtype != DType::bf16)
    return Support::no("the dense weight-gradient kernel computes f16 and bf16 (tensor cores), not " +
                       std::string(to_string(cfg.dtype)) + ".");
  if (cfg.layout != Layout::nhwc)
    return Support::no("the dense weight-gradient kernel reads NHWC tensors (a pixel's channels contiguous).");
  if (pb.c % 8 != 0 || pb.k % 8 != 0)
    return Support::no("the dense weight-gradient kernel needs C and K multiples of 8 (16-byte pieces).");
  if (Support s = dims_fit_int(pb); !s) return s;
  if (pb.r * pb.s * pb.c >= INT_MAX / 2 || pb.k * pb.r * pb.s * pb.c >= (int64_t(1) << 40))
    return Support::no("the filter has too many elements for the kernel's 32-bit column index.");
  if ((pb.k + kBM - 1) / kBM > 65535) return Support::no("more than 65535 blocks of 64 output channels (grid.y).");
  return Support::yes();
}

size_t cuda_dense_wgrad_workspace(const Conv2dProblem& pb, const ConvConfig&) {
  const WgradPlan t = plan_of(pb);
  return size_t(t.slices) * size_t(pb.k) * size_t(t.args.rsc) * sizeof(float);
}

std::string cuda_dense_wgrad_kernel_name(const Conv2dProblem& pb, const ConvConfig&) {
  const WgradPlan t = plan_of(pb);
  return "wgrad_mma_kernel + wgrad_reduce_kernel (NHWC, 64x128 tiles, " + std::to_string(t.slices) +
         " pixel slices)";
}

void cuda_dense_wgrad(const Conv2dProblem& pb, const ConvConfig& cfg, const void* x, const void* gz, void* gw,
                      void* workspace, void* stream) {
  if (!aligned16(x) || !aligned16(gz))
    throw Error(StatusCode::unsupported,
                "the dense weight-gradient kernel needs x and grad_out on 16-byte aligned addresses.");
  cudaStream_t st = as_stream(stream);
  auto* partial = static_cast<float*>(workspace);
  if (cfg.dtype == DType::f16)
    return run<__half>(pb, static_cast<const __half*>(x), static_cast<const __half*>(gz), static_cast<__half*>(gw),
                       partial, st);
  run<__nv_bfloat16>(pb, static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(gz),
                     static_cast<__nv_bfloat16*>(gw), partial, st);
}

}  // namespace convkit::detail
