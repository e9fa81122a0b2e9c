// cuda_direct_smem: rung 2 of the CUDA direct ladder. Adds over v1_naive: a block stages an input tile
// WITH its halo in shared memory once per chunk of input channels, together with the filters of its
// output channels, and every thread computes several output channels (kBlockK) of one output pixel from
// that staged tile. Each input value read from shared memory now feeds kBlockK FMAs instead of one, and
// global memory is read once per block instead of once per (output, tap).
//
// Work mapping: a 16x16 block computes a 16x16 output tile (one pixel per thread) x kBlockK = 8 output
// channels of one group and one image: grid.x = spatial tiles, grid.y = groups * ceil(K/groups / 8),
// grid.z = images (y and z loop past 65535). Input channels are walked in chunks of up to 8.
// Stride and dilation set the halo: the tile is ((16-1)*u + (R-1)*d + 1) rows by ((16-1)*u + (S-1)*d + 1)
// columns, its columns phase-split by the stride (see direct_common.cuh). NCHW fp32 only.
// nvcc -Xptxas -v (sm_90): 48 registers, 1 barrier, dynamic smem only (<= 64 KB, about 30 KB for 3x3), no spills.
// measured (H200, 2026-11-29): seed000 20.56 ms (15.0 TFLOP/s, 12x rung 1), seed001 0.357 ms. ncu on
// seed001: 48 registers, FMA pipe 31% busy, 57% occupancy; 3.2 M shared-store bank conflicts (the staging
// writes) but only 31 K on the loads the padding was meant for: one input read feeds 8 FMAs, too few.
#include <algorithm>
#include <mutex>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/direct/direct_common.cuh"

namespace convkit::detail {
namespace {

constexpr int kTileP = 16, kTileQ = 16;  // output pixels per block: one per thread
constexpr int kBlockK = 8;               // output channels per block (accumulators per thread)
constexpr int kMaxChunk = 8;             // input channels staged at once
constexpr int64_t kSmemBudget = 64 * 1024;

// The per-problem geometry the kernel needs (host-computed, passed by value).
struct SmemPlan {
  int ih, iw, wp, ld;  // staged tile: rows, columns, words per stride phase, row pitch
  int cc;              // input channels per chunk
  int tiles_q, tiles_p, kb_per_group;
};

int64_t smem_bytes(const Conv2dProblem& pb, const TileGeom& g, int64_t cc) {
  return 4 * (cc * pb.r * pb.s * kBlockK + cc * g.ih * g.ld) + 4 * (g.iw + pb.s);
}

// Thread (tx, ty) computes output pixel (p0+ty, q0+tx) for kBlockK output channels of one group and image.
__global__ void __launch_bounds__(kTileP* kTileQ)
    conv_direct_smem_kernel(ConvDims d, SmemPlan t, const float* __restrict__ src, const float* __restrict__ wei,
                            float* dst, DeviceEpilogue<float> epi) {
  extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the filter rows
  const int RS = d.r * d.s;
  float* s_w = reinterpret_cast<float*>(smem4);                    // [cc][R][S][kBlockK]
  float* s_in = s_w + t.cc * RS * kBlockK;                         // [cc][ih][ld]
  int* s_col = reinterpret_cast<int*>(s_in + t.cc * t.ih * t.ld);  // [iw]: word of tile column x in a row
  int* s_soff = s_col + t.iw;                                      // [S]: word of tap s relative to column q*u
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kTileQ + tx;
  const int u = d.stride_w;
  for (int x = tid; x < t.iw; x += kTileP * kTileQ) s_col[x] = (x % u) * t.wp + x / u;
  for (int s = tid; s < d.s; s += kTileP * kTileQ) s_soff[s] = ((s * d.dil_w) % u) * t.wp + (s * d.dil_w) / u;

  const int q0 = (blockIdx.x % t.tiles_q) * kTileQ, p0 = (blockIdx.x / t.tiles_q) * kTileP;
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * u - d.pad_w;  // input origin of the tile
  const int kblocks = d.groups * t.kb_per_group;
  const int64_t HW = int64_t(d.h) * d.w;
  const int chan_words = t.ih * t.ld;

  for (int n = blockIdx.z; n < d.n; n += gridDim.z)
    for (int kb = blockIdx.y; kb < kblocks; kb += gridDim.y) {
      const int g = kb / t.kb_per_group;
      const int k0 = (kb % t.kb_per_group) * kBlockK;  // the block's first output channel within group g
      float acc[kBlockK];
#pragma unroll
      for (int j = 0; j < kBlockK; ++j) acc[j] = 0.0f;

      for (int c0 = 0; c0 < d.cg; c0 += t.cc) {
        const int cc = min(t.cc, d.cg - c0), nrs = cc * RS;
        // NOTE: this barrier protects the tiles: every thread is done reading the previous chunk (and,
        // the first time round, the s_col/s_soff tables are written) before anyone overwrites them.
        __syncthreads();
        // Filters: for each of the kBlockK output channels, cc*R*S contiguous values in KCRS, stored
        // transposed so that one tap's kBlockK weights are two adjacent float4s.
        const float* wsrc = wei + (int64_t(g) * d.kg + k0) * d.cg * RS + int64_t(c0) * RS;
        for (int e = tid; e < kBlockK * nrs; e += kTileP * kTileQ) {
          const int kl = e / nrs, j = e - kl * nrs;
          s_w[j * kBlockK + kl] = k0 + kl < d.kg ? wsrc[int64_t(kl) * d.cg * RS + j] : 0.0f;
        }
        // Input tile with halo, zeros outside the image (the padding). Each element's position is
        // computed once and reused for the chunk's cc channels.
        const float* xsrc = src + (int64_t(n) * d.c + int64_t(g) * d.cg + c0) * HW;
        for (int e = tid; e < t.ih * t.iw; e += kTileP * kTileQ) {
          const int y = e / t.iw, x = e - y * t.iw;
          const int h = h0 + y, w = w0 + x;
          const bool inside = h >= 0 && h < d.h && w >= 0 && w < d.w;
          const int64_t go = inside ? int64_t(h) * d.w + w : 0;
          const int pos = y * t.ld + s_col[x];
          for (int c = 0; c < cc; ++c) s_in[c * chan_words + pos] = inside ? xsrc[c * HW + go] : 0.0f;
        }
        __syncthreads();  // the chunk is staged

        for (int c = 0; c < cc; ++c)
          for (int r = 0; r < d.r; ++r) {
            const float* row = s_in + c * chan_words + (ty * d.stride_h + r * d.dil_h) * t.ld + tx;
            const float* wr = s_w + (c * RS + r * d.s) * kBlockK;
            for (int s = 0; s < d.s; ++s) {
              const float x = row[s_soff[s]];
              const float4 wa = *reinterpret_cast<const float4*>(wr + s * kBlockK);
              const float4 wb = *reinterpret_cast<const float4*>(wr + s * kBlockK + 4);
              acc[0] = fmaf(x, wa.x, acc[0]);
              acc[1] = fmaf(x, wa.y, acc[1]);
              acc[2] = fmaf(x, wa.z, acc[2]);
              acc[3] = fmaf(x, wa.w, acc[3]);
              acc[4] = fmaf(x, wb.x, acc[4]);
              acc[5] = fmaf(x, wb.y, acc[5]);
              acc[6] = fmaf(x, wb.z, acc[6]);
              acc[7] = fmaf(x, wb.w, acc[7]);
            }
          }
      }

      const int p = p0 + ty, q = q0 + tx;
      if (p < d.p && q < d.q) {
#pragma unroll
        for (int j = 0; j < kBlockK; ++j) {
          if (k0 + j >= d.kg) break;
          const int64_t k = int64_t(g) * d.kg + k0 + j;
          const int64_t o = ((int64_t(n) * d.k + k) * d.p + p) * d.q + q;
          dst[o] = epi(acc[j], k, o);  // reads residual[o] first: safe when it aliases dst
        }
      }
    }
}

class CudaDirectSmem final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_direct_smem"; }
  std::string description() const override {
    return "direct conv, input tile + halo and filters staged in shared memory, 8 output channels per thread "
           "(ladder rung 2)";
  }

  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (Support s = require_f32_strict(cfg, /*nhwc_ok=*/false); !s) return s;
    if (Support s = dims_fit_int(pb); !s) return s;
    const TileGeom g = tile_geom(pb, kTileP, kTileQ);
    if (smem_bytes(pb, g, 1) > kSmemBudget)
      return Support::no("its 16x16 output tile needs a " + std::to_string(g.ih) + "x" + std::to_string(g.iw) +
                         " input tile (halo included) whose shared memory, with the filters, exceeds the " +
                         std::to_string(kSmemBudget / 1024) + " KB it uses.");
    const int64_t tiles = ((pb.p() + kTileP - 1) / kTileP) * ((pb.q() + kTileQ - 1) / kTileQ);
    if (tiles > INT_MAX) return Support::no("the output has more than 2^31 16x16 tiles.");
    return Support::yes();
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    const TileGeom g = tile_geom(pb, kTileP, kTileQ);
    int64_t cc = std::min<int64_t>(kMaxChunk, pb.c_per_group());
    while (cc > 1 && smem_bytes(pb, g, cc) > kSmemBudget) --cc;
    const SmemPlan t{int(g.ih), int(g.iw), int(g.wp), int(g.ld), int(cc),
                     int((pb.q() + kTileQ - 1) / kTileQ), int((pb.p() + kTileP - 1) / kTileP),
                     int((pb.k_per_group() + kBlockK - 1) / kBlockK)};
    static std::once_flag attr_once;  // NOTE: opt in to more than 48 KB of dynamic smem, once per process
    std::call_once(attr_once, [] {
      CK_CUDA(cudaFuncSetAttribute(conv_direct_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(kSmemBudget)));
    });
    const dim3 grid(unsigned(t.tiles_q) * unsigned(t.tiles_p),
                    unsigned(std::min<int64_t>(int64_t(pb.groups) * t.kb_per_group, 65535)),
                    unsigned(std::min<int64_t>(pb.n, 65535)));
    conv_direct_smem_kernel<<<grid, dim3(kTileQ, kTileP), size_t(smem_bytes(pb, g, cc)), as_stream(call.stream)>>>(
        make_dims(pb), t, static_cast<const float*>(call.src.data), static_cast<const float*>(call.wei.data),
        static_cast<float*>(call.dst.data), DeviceEpilogue<float>::from(call.epilogue));
    CK_LAUNCH("conv_direct_smem_kernel");
  }
};

}  // namespace

const Algorithm* make_cuda_direct_smem() {
  static CudaDirectSmem algo;
  return &algo;
}

}  // namespace convkit::detail
