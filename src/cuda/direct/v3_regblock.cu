// cuda_direct_regblock: rung 3 of the CUDA direct ladder. Adds over v2_smem_tiled: register blocking.
// Each thread accumulates kTM = 8 output pixels x kTN = 8 output channels (64 accumulators), so per
// filter tap it does 8 scalar input reads + 2 float4 filter reads from shared memory for 64 FMAs (v2: 1
// input read + 2 float4 reads for 8 FMAs). Also new: 16-byte float4 global loads where alignment allows
// (input rows when stride_w == 1, W % 4 == 0 and the tensor is 16-byte aligned, the staged tile then
// starting on a 4-column boundary; a scalar path otherwise), conflict-free transposed filter staging, a
// flat tap loop driven by a per-block table of shared-memory offsets (any R, S, stride, dilation), and
// a tile shape chosen per problem: the block's kBM = 128 pixels are a tbp x tbq rectangle (tbq <= 16)
// sized so small images waste little, and images of at most 64 pixels are packed several per block.
//
// Work mapping: 128 threads = 16 pixel lanes (tx) x 8 channel lanes (ty). Thread (tx, ty) owns block
// pixels m = tx + 16*i (i < 8) and output channels k0 + 8*ty .. +7. grid.x = spatial tiles (x image
// groups), grid.y = groups * ceil(K/groups / 64) (looping past 65535). Input channels are walked in
// chunks of up to 16; every chunk is staged (filters + input tile with halo), then 16*R*S taps computed.
// nvcc -Xptxas -v (sm_90): 128 registers (launch bound 128 x 4 blocks), dynamic smem <= 96 KB (about 48
// KB for 3x3), no spills.
// measured: (pending the H200 run)
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/direct/direct_common.cuh"

namespace convkit::detail {
namespace {

constexpr int kBM = 128;  // output pixels per block
constexpr int kBK = 64;   // output channels per block
constexpr int kTM = 8;    // pixels per thread
constexpr int kTN = 8;    // output channels per thread
constexpr int kTX = kBM / kTM, kTY = kBK / kTN, kThreads = kTX * kTY;
constexpr int kWPitch = kBK + 4;  // filter row pitch in words (see the NOTE at the filter staging)
constexpr int kMaxChunk = 16;
constexpr int64_t kSmemPreferred = 48 * 1024;  // what a chunk may take when it can (4 blocks per SM)
constexpr int64_t kSmemMax = 96 * 1024;        // the most it may take (large halos, big filters)
static_assert(kTN == 8 && kBK % 4 == 0 && kTX == 16, "the loads below assume these");

// The per-problem geometry the kernel needs (host-computed, passed by value).
struct RegPlan {
  int nb, tbp, tbq;         // images per block, output tile rows and columns
  int tiles_q, tiles_p;     // tiles per image in each direction
  int ih, iw, wp, ld, cs;   // staged tile rows, columns, words per stride phase, row pitch, words per channel
  int cc;                   // input channels per chunk
  int kb_per_group;         // channel blocks per group
  int vec_in;               // 1: stage input rows with float4 loads from a 4-aligned column
};

// Thread (tx, ty) of a 16x8 block computes pixels m = tx + 16*i of the block's tile x 8 output channels.
__global__ void __launch_bounds__(kThreads, 4)
    conv_direct_regblock_kernel(ConvDims d, RegPlan t, const float* __restrict__ src,
                                const float* __restrict__ wei, float* dst, EpilogueF32 epi) {
  extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the filter rows and float4 stores
  const int RS = d.r * d.s;
  int64_t* s_opix = reinterpret_cast<int64_t*>(smem4);        // [kBM]: output offset of pixel m at channel 0
  float* s_w = reinterpret_cast<float*>(s_opix + kBM);       // [cc*R*S taps][kWPitch]
  float* s_in = s_w + t.cc * RS * kWPitch;                   // [cc][nb][ih][ld]
  int* s_tap = reinterpret_cast<int*>(s_in + t.cc * t.cs);   // [cc*R*S]: word offset of each tap in s_in
  const int tid = threadIdx.x, tx = tid % kTX, ty = tid / kTX;
  const int u = d.stride_w;

  // Tap j = (c, r, s) of a chunk reads, for the pixel whose window starts at word b, word b + s_tap[j].
  // Row offset r*dil_h rows; column s*dil_w after the phase split: phase (s*dil_w) % u, index (s*dil_w) / u.
  for (int j = tid; j < t.cc * RS; j += kThreads) {
    const int c = j / RS, r = (j % RS) / d.s, sd = (j % d.s) * d.dil_w;
    s_tap[j] = c * t.cs + r * d.dil_h * t.ld + (sd % u) * t.wp + sd / u;
  }

  // The block's tile: images n0 .. n0+nb-1, output rows p0 .., columns q0 ..
  int tile = blockIdx.x;
  const int q0 = (tile % t.tiles_q) * t.tbq;
  tile /= t.tiles_q;
  const int p0 = (tile % t.tiles_p) * t.tbp, n0 = (tile / t.tiles_p) * t.nb;
  const int h0 = p0 * d.stride_h - d.pad_h;
  // With vec_in the staged columns start `lead` columns left of the tile's first input column, on a
  // multiple of 4 (W % 4 == 0 then makes every float4 either wholly inside a row or wholly padding).
  const int wfirst = q0 * u - d.pad_w;
  const int lead = t.vec_in ? ((wfirst % 4) + 4) % 4 : 0;
  const int w0 = wfirst - lead;

  // This thread's pixels: the word where each one's window starts in channel 0 of s_in.
  const int tile_pix = t.tbp * t.tbq;
  int base[kTM];
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int m = tx + i * kTX, slot = m / tile_pix, pl = (m % tile_pix) / t.tbq, ql = m % t.tbq;
    const bool live = slot < t.nb && n0 + slot < d.n && p0 + pl < d.p && q0 + ql < d.q;
    // NOTE: a pixel past the image reads word 0 (valid memory) and is never stored.
    base[i] = live ? (slot * t.ih + pl * d.stride_h) * t.ld + lead + ql : 0;
  }
  // NOTE: the output offsets of the block's pixels go to shared memory, not registers: computed in the
  // store loop they made ptxas spill next to the 64 live accumulators.
  for (int m = tid; m < kBM; m += kThreads) {
    const int slot = m / tile_pix, pl = (m % tile_pix) / t.tbq, ql = m % t.tbq;
    const bool live = slot < t.nb && n0 + slot < d.n && p0 + pl < d.p && q0 + ql < d.q;
    s_opix[m] = live ? int64_t(n0 + slot) * d.k * d.p * d.q + int64_t(p0 + pl) * d.q + q0 + ql : -1;
  }

  const int kblocks = d.groups * t.kb_per_group;
  const int64_t HW = int64_t(d.h) * d.w;
  const int64_t CHW = int64_t(d.c) * HW;
  const int rows = t.nb * t.ih;  // staged rows per channel

  for (int kb = blockIdx.y; kb < kblocks; kb += gridDim.y) {
    const int g = kb / t.kb_per_group;
    const int k0 = (kb % t.kb_per_group) * kBK;  // the block's first output channel within group g
    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

    for (int c0 = 0; c0 < d.cg; c0 += t.cc) {
      const int cc = min(t.cc, d.cg - c0), ntaps = cc * RS;
      // NOTE: every thread must be done reading the previous chunk (and, the first time round, the tap
      // table must be written) before the tiles are overwritten.
      __syncthreads();

      // Filters -> s_w[tap][kl]. In KCRS one output channel's cc*R*S taps are contiguous. A warp reads 4
      // channels x 8 consecutive taps (four 32-byte segments) and writes s_w[tap*kWPitch + kl].
      // NOTE: with kWPitch = 68 (= 4 mod 32) lane (tap 0..7, channel 0..3) hits bank 4*tap + channel:
      // 32 distinct banks, and every row stays 16-byte aligned for the float4 reads below.
      {
        const float* wsrc = wei + (int64_t(g) * d.kg + k0) * d.cg * RS + int64_t(c0) * RS;
        const int tap_groups = (ntaps + 7) / 8;
#pragma unroll 1
        for (int e = tid; e < tap_groups * kBK * 8; e += kThreads) {
          const int jl = e % 8, kl = ((e / 32) % (kBK / 4)) * 4 + (e / 8) % 4, j = (e / (8 * kBK)) * 8 + jl;
          if (j < ntaps) s_w[j * kWPitch + kl] = k0 + kl < d.kg ? __ldg(wsrc + int64_t(kl) * d.cg * RS + j) : 0.0f;
        }
      }

      // Input tile with halo for cc channels, zeros outside the image (padding) and past the batch.
      const float* xsrc = src + (int64_t(g) * d.cg + c0) * HW;  // + n*CHW + h*W + w
      if (t.vec_in) {
        // stride_w == 1: no phase split; rows of iw (a multiple of 4) words from column w0.
        const int v4 = t.iw / 4;
        for (int e = tid; e < rows * v4; e += kThreads) {
          const int row = e / v4, x = (e - row * v4) * 4, slot = row / t.ih, y = row - slot * t.ih;
          const int n = n0 + slot, h = h0 + y, w = w0 + x;
          const bool inside = n < d.n && h >= 0 && h < d.h && w >= 0 && w < d.w;
          const int64_t go = inside ? int64_t(n) * CHW + int64_t(h) * d.w + w : 0;
          float4* sp = reinterpret_cast<float4*>(s_in + row * t.ld + x);
#pragma unroll 4
          for (int c = 0; c < cc; ++c)
            sp[c * (t.cs / 4)] = inside ? __ldg(reinterpret_cast<const float4*>(xsrc + go + c * HW))
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      } else {
        for (int e = tid; e < rows * t.iw; e += kThreads) {
          const int row = e / t.iw, x = e - row * t.iw, slot = row / t.ih, y = row - slot * t.ih;
          const int n = n0 + slot, h = h0 + y, w = w0 + x;
          const bool inside = n < d.n && h >= 0 && h < d.h && w >= 0 && w < d.w;
          const int64_t go = inside ? int64_t(n) * CHW + int64_t(h) * d.w + w : 0;
          float* sp = s_in + row * t.ld + (x % u) * t.wp + x / u;
#pragma unroll 4
          for (int c = 0; c < cc; ++c) sp[c * t.cs] = inside ? __ldg(xsrc + go + c * HW) : 0.0f;
        }
      }
      __syncthreads();  // the chunk is staged

      // NOTE: a thread's 8 pixels are 16 apart (not a 2-D patch of neighbours): the 16 lanes of a half-warp
      // then read 16 neighbouring words per tap, conflict-free for ANY tap shift, stride or dilation, where
      // a per-thread patch would need per-tap-aligned vector reads that only a fixed 3x3 stride-1 case gives.
      const float* wrow = s_w + ty * kTN;
#pragma unroll 2
      for (int j = 0; j < ntaps; ++j) {
        const int off = s_tap[j];
        float x[kTM];
#pragma unroll
        for (int i = 0; i < kTM; ++i) x[i] = s_in[base[i] + off];
        const float4 wa = *reinterpret_cast<const float4*>(wrow + j * kWPitch);
        const float4 wb = *reinterpret_cast<const float4*>(wrow + j * kWPitch + 4);
        const float w[kTN] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
          for (int jn = 0; jn < kTN; ++jn) acc[i][jn] = fmaf(x[i], w[jn], acc[i][jn]);
      }
    }

    // Store with the epilogue. Lanes tx hold neighbouring pixels: each store instruction covers runs of
    // consecutive q in NCHW. One 64-bit offset per pixel, stepped by P*Q per channel, keeps the register
    // count down while the 64 accumulators are live.
    const int64_t PQ = int64_t(d.p) * d.q;
    const int kfirst = k0 + ty * kTN;  // this thread's first output channel within group g
    const int kcount = min(kTN, d.kg - kfirst);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int64_t opix = s_opix[tx + i * kTX];
      if (opix < 0) continue;
      int64_t k = int64_t(g) * d.kg + kfirst;
      int64_t o = opix + k * PQ;
#pragma unroll
      for (int jn = 0; jn < kTN; ++jn) {
        if (jn >= kcount) break;
        dst[o] = epi(acc[i][jn], k, o);  // reads residual[o] first: safe when it aliases dst
        o += PQ;
        ++k;
      }
    }
  }
}

// Picks the tile shape, the staging geometry and the chunk size; `why` says what went wrong if nothing fits.
bool make_plan(const Conv2dProblem& pb, const void* src, RegPlan* plan, std::string* why) {
  const int64_t P = pb.p(), Q = pb.q(), N = pb.n;
  // Tile shape: tbq <= 16 columns (a half-warp's 16 lanes read one row), tbp rows, kBM pixels at most,
  // balanced so the last tile in each direction is nearly full. Small images: nb whole images per block.
  const int64_t tbq = (Q + (Q + 15) / 16 - 1) / ((Q + 15) / 16);
  const int64_t max_rows = kBM / tbq;
  const int64_t tbp = (P + (P + max_rows - 1) / max_rows - 1) / ((P + max_rows - 1) / max_rows);
  int64_t nb = 1;
  if (tbp == P && tbq == Q) nb = std::max<int64_t>(1, std::min<int64_t>(N, kBM / (P * Q)));
  const bool vec_in = pb.stride_w == 1 && pb.w % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;

  TileGeom g = tile_geom(pb, tbp, tbq);
  if (vec_in) {
    g.iw = (g.iw + 3 + 3) / 4 * 4;  // up to 3 lead columns, rounded up to whole float4s
    g.wp = g.iw;
  }
  // NOTE: with tbq = 16 a half-warp's 16 pixels (m = tx + 16*i) are one tile row: 16 adjacent words for
  // every tap, conflict-free with any pitch, so the row is not padded. Narrower tiles wrap a half-warp
  // over 2+ rows; the pitch_for() padding then puts the second row on the other 16 banks.
  const int64_t row_words = vec_in ? g.iw : pb.stride_w * g.wp;
  g.ld = tbq >= kTX ? (row_words + 3) / 4 * 4 : pitch_for(row_words, pb.stride_h, vec_in ? 4 : 1);
  const int64_t cs = nb * g.ih * g.ld;
  const int64_t RS = pb.r * pb.s;
  auto bytes = [&](int64_t cc) { return 8 * kBM + 4 * (cc * RS * kWPitch + cc * cs + cc * RS); };
  int64_t cc = std::min<int64_t>(kMaxChunk, pb.c_per_group());
  while (cc > 1 && bytes(cc) > kSmemPreferred) --cc;
  if (bytes(cc) > kSmemMax) {
    *why = "one input channel of its " + std::to_string(tbp) + "x" + std::to_string(tbq) + " output tile (a " +
           std::to_string(g.ih) + "x" + std::to_string(g.iw) + " input tile with halo) plus 64 filters need " +
           std::to_string(bytes(1) / 1024) + " KB of shared memory, over the " + std::to_string(kSmemMax / 1024) +
           " KB it uses.";
    return false;
  }
  const int64_t tiles_q = (Q + tbq - 1) / tbq, tiles_p = (P + tbp - 1) / tbp, groups_n = (N + nb - 1) / nb;
  if (tiles_q * tiles_p * groups_n > INT_MAX) {
    *why = "the output has more than 2^31 tiles.";
    return false;
  }
  *plan = RegPlan{int(nb),   int(tbp),  int(tbq),  int(tiles_q), int(tiles_p), int(g.ih), int(g.iw),
                  int(g.wp), int(g.ld), int(cs),   int(cc),      int((pb.k_per_group() + kBK - 1) / kBK),
                  vec_in ? 1 : 0};
  return true;
}

int64_t plan_smem_bytes(const Conv2dProblem& pb, const RegPlan& t) {
  const int64_t RS = pb.r * pb.s;
  return 8 * kBM + 4 * (int64_t(t.cc) * RS * kWPitch + int64_t(t.cc) * t.cs + int64_t(t.cc) * RS);
}

class CudaDirectRegblock final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_direct_regblock"; }
  std::string description() const override {
    return "direct conv, 8 pixels x 8 channels per thread in registers, filters and input tile in shared memory, "
           "float4 staging (ladder rung 3)";
  }

  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (Support s = require_f32_strict(cfg, /*nhwc_ok=*/false); !s) return s;
    if (Support s = dims_fit_int(pb); !s) return s;
    RegPlan plan;
    std::string why;
    if (!make_plan(pb, nullptr, &plan, &why)) return Support::no(why);
    return Support::yes();
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    RegPlan t;
    std::string why;
    if (!make_plan(pb, call.src.data, &t, &why)) throw Error(StatusCode::unsupported, name() + ": " + why);
    static std::once_flag attr_once;  // NOTE: opt in to more than 48 KB of dynamic smem, once per process
    std::call_once(attr_once, [] {
      CK_CUDA(cudaFuncSetAttribute(conv_direct_regblock_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(kSmemMax)));
    });
    const int64_t kblocks = pb.groups * int64_t(t.kb_per_group);
    const dim3 grid(unsigned(int64_t(t.tiles_q) * t.tiles_p * ((pb.n + t.nb - 1) / t.nb)),
                    unsigned(std::min<int64_t>(kblocks, 65535)));
    conv_direct_regblock_kernel<<<grid, kThreads, size_t(plan_smem_bytes(pb, t)), as_stream(call.stream)>>>(
        make_dims(pb), t, static_cast<const float*>(call.src.data), static_cast<const float*>(call.wei.data),
        static_cast<float*>(call.dst.data), EpilogueF32::from(call.epilogue));
    CK_LAUNCH("conv_direct_regblock_kernel");
  }
};

}  // namespace

const Algorithm* make_cuda_direct_regblock() {
  static CudaDirectRegblock algo;
  return &algo;
}

}  // namespace convkit::detail
