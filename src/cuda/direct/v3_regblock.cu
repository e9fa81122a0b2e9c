// cuda_direct_regblock: rung 3 of the CUDA direct ladder. Adds over v2_smem_tiled: register blocking.
// Each thread accumulates kTM = 8 output pixels x kTN = 8 output channels (64 accumulators), so per
// filter tap it does 8 scalar input reads + 2 float4 filter reads from shared memory for 64 FMAs (v2: 1
// input read + 2 float4 reads for 8 FMAs). What it needs to feed those FMAs comes with it: a flat tap loop
// driven by a per-block table of shared-memory offsets (any R, S, stride, dilation), a tile shape chosen
// per problem (the block's kBM = 128 pixels are a tbp x tbq rectangle, tbq <= 16, sized so small images
// waste little; images of at most 64 pixels are packed several per block), and staging that keeps up:
// - asynchronous, double-buffered staging: chunk i+1 (filters, transposed, and the input tile with halo)
//   is copied global -> shared with cp.async (16-byte copies for input rows where alignment allows,
//   zero-fill for padding) while chunk i is computed; one barrier pair per chunk.
// - split over input channels for problems with few blocks (deep layers on small images: 512@7 has 128
//   blocks for 132 SMs): grid.z = `splits` blocks share one output tile, each summing a contiguous range
//   of input channels into a workspace; a second small kernel adds the partials in a fixed order and
//   applies the epilogue. The rule (choose_splits): split only a grid under one wave (SMs x 4 blocks).
//
// Work mapping: 128 threads = 16 pixel lanes (tx) x 8 channel lanes (ty). Thread (tx, ty) owns block
// pixels m = tx + 16*i (i < 8) and output channels k0 + 8*ty .. +7. grid.x = spatial tiles (x image
// groups), grid.y = groups * ceil(K/groups / 64) (looping past 65535), grid.z = input-channel splits.
// CONVKIT_REGBLOCK_CFG="split=4,cc=8" overrides the rule (split: 1 = none; cc: channels per chunk).
// nvcc -Xptxas -v (sm_90): 123 registers (launch bound 128 x 4 blocks), no spills; two stages <= 55 KB of
// dynamic smem for 3x3 (at most 200 KB for large halos); the reduce kernel 32 registers.
// measured: first measurement 2026-11-29 (H200, before double buffering and the split): seed000 13.74 ms
// (0.52x cuDNN fp32 7.17), r50 3x3 64@56 0.472, s2 128@56 0.511, 128@28 0.457, 256@14 0.676, 512@7 1.337,
// seed001 0.209 ms. This version (H200, 2026-11-29): seed000 11.60 ms (26.7 TFLOP/s, 0.62x PyTorch's cuDNN
// 7.17 ms), r50 3x3 64@56 0.354, s2 128@56 0.459, 128@28 0.399, 256@14 0.424, 512@7 0.407, seed001 0.162 ms.
// ncu on seed001: 123 registers, FMA pipe 46% busy, 17% occupancy (4 blocks of 128 threads), 0.44 M
// shared-load bank conflicts.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "core/overrides.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/vec.cuh"
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
constexpr int kMaxSplits = 16;
constexpr int kBlocksPerSm = 4;  // the launch bound
// NOTE: both stages together; 4 blocks x (55 KB + 1 KB reserved) = 224 KB of the H100/H200 228 KB (3x3,
// 16x16 tile: 8 channels per chunk).
constexpr int64_t kSmemPreferred = 55 * 1024;
constexpr int64_t kSmemMax = 200 * 1024;  // the most it may take (large halos, big filters)
static_assert(kTN == 8 && kBK % 4 == 0 && kTX == 16, "the loads below assume these");

// The per-problem geometry the kernel needs (host-computed, passed by value).
struct RegPlan {
  int nb, tbp, tbq;         // images per block, output tile rows and columns
  int tiles_q, tiles_p;     // tiles per image in each direction
  int ih, iw, wp, ld, cs;   // staged tile rows, columns, words per stride phase, row pitch, words per channel
  int cc;                   // input channels per chunk
  int kb_per_group;         // channel blocks per group
  int vec_in;               // 1: stage input rows with 16-byte copies from a 4-aligned column
  int splits;               // blocks (grid.z) sharing one output tile, each over cps input channels
  int cps;                  // input channels per split (a multiple of cc)
};

__device__ __forceinline__ void cp_async4(float* s, const float* g, bool pred) {
  const unsigned sa = unsigned(__cvta_generic_to_shared(s));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(g), "r"(pred ? 4 : 0));
}

// Issues (does not wait for) the copies of one chunk: cc input channels from c0 of group g, for output
// channels k0.. of the group, into one stage (s_w, s_in). Padding and channels past K/groups are zero-filled.
__device__ __forceinline__ void stage_chunk(const ConvDims& d, const RegPlan& t, const float* __restrict__ src,
                                            const float* __restrict__ wei, float* s_w, float* s_in, int g, int k0,
                                            int c0, int cc, int n0, int h0, int w0) {
  const int tid = threadIdx.x, RS = d.r * d.s, ntaps = cc * RS, u = d.stride_w;
  // Filters -> s_w[tap][kl]. In KCRS one output channel's cc*R*S taps are contiguous. A warp reads 4
  // channels x 8 consecutive taps (four 32-byte segments) and writes s_w[tap*kWPitch + kl].
  // NOTE: with kWPitch = 68 (= 4 mod 32) lane (tap 0..7, channel 0..3) hits bank 4*tap + channel:
  // 32 distinct banks, and every row stays 16-byte aligned for the float4 reads.
  {
    const float* wsrc = wei + (int64_t(g) * d.kg + k0) * d.cg * RS + int64_t(c0) * RS;
    const int tap_groups = (ntaps + 7) / 8;
#pragma unroll 1
    for (int e = tid; e < tap_groups * kBK * 8; e += kThreads) {
      const int jl = e % 8, kl = ((e / 32) % (kBK / 4)) * 4 + (e / 8) % 4, j = (e / (8 * kBK)) * 8 + jl;
      if (j < ntaps) {
        const bool live = k0 + kl < d.kg;
        cp_async4(s_w + j * kWPitch + kl, live ? wsrc + int64_t(kl) * d.cg * RS + j : wei, live);
      }
    }
  }
  // Input tile with halo for cc channels, zeros outside the image (padding) and past the batch.
  const int64_t HW = int64_t(d.h) * d.w;
  const int64_t CHW = int64_t(d.c) * HW;
  const float* xsrc = src + (int64_t(g) * d.cg + c0) * HW;  // + n*CHW + h*W + w
  const int rows = t.nb * t.ih;
  if (t.vec_in) {
    // stride_w == 1: no phase split; rows of iw (a multiple of 4) words from column w0 (a multiple of 4).
    const int v4 = t.iw / 4;
    for (int e = tid; e < rows * v4; e += kThreads) {
      const int row = e / v4, x = (e - row * v4) * 4, slot = row / t.ih, y = row - slot * t.ih;
      const int n = n0 + slot, h = h0 + y, w = w0 + x;
      const bool inside = n < d.n && h >= 0 && h < d.h && w >= 0 && w < d.w;
      const float* gp = inside ? xsrc + int64_t(n) * CHW + int64_t(h) * d.w + w : src;
      float* sp = s_in + row * t.ld + x;
#pragma unroll 1
      for (int c = 0; c < cc; ++c) cp_async16_zfill(sp + c * t.cs, inside ? gp + c * HW : src, inside);
    }
  } else {
    for (int e = tid; e < rows * t.iw; e += kThreads) {
      const int row = e / t.iw, x = e - row * t.iw, slot = row / t.ih, y = row - slot * t.ih;
      const int n = n0 + slot, h = h0 + y, w = w0 + x;
      const bool inside = n < d.n && h >= 0 && h < d.h && w >= 0 && w < d.w;
      const float* gp = inside ? xsrc + int64_t(n) * CHW + int64_t(h) * d.w + w : src;
      float* sp = s_in + row * t.ld + (x % u) * t.wp + x / u;
#pragma unroll 1
      for (int c = 0; c < cc; ++c) cp_async4(sp + c * t.cs, inside ? gp + c * HW : src, inside);
    }
  }
}

// Thread (tx, ty) of a 16x8 block computes pixels m = tx + 16*i of the block's tile x 8 output channels,
// summing input channels [z*cps, z*cps + cps) for z = blockIdx.z. splits == 1: the epilogue goes to dst;
// otherwise the raw sums go to part + z*N*K*P*Q (dst's layout) for split_reduce_kernel.
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    conv_direct_regblock_kernel(ConvDims d, RegPlan t, const float* __restrict__ src,
                                const float* __restrict__ wei, float* dst, float* part, DeviceEpilogue<float> epi) {
  extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the filter rows and 16-byte copies
  const int RS = d.r * d.s;
  const int w_words = t.cc * RS * kWPitch, in_words = t.cc * t.cs;   // per stage; both multiples of 4
  int64_t* s_opix = reinterpret_cast<int64_t*>(smem4);              // [kBM]: output offset of pixel m, channel 0
  float* s_w0 = reinterpret_cast<float*>(s_opix + kBM);              // 2 x [cc*R*S taps][kWPitch]
  float* s_in0 = s_w0 + 2 * w_words;                                 // 2 x [cc][nb][ih][ld]
  int* s_tap = reinterpret_cast<int*>(s_in0 + 2 * in_words);         // [cc*R*S]: word offset of each tap in s_in
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
  // multiple of 4 (W % 4 == 0 then makes every 16-byte copy either wholly inside a row or wholly padding).
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
  const int c_begin = blockIdx.z * t.cps, c_end = min(d.cg, c_begin + t.cps);
  const int nchunks = (c_end - c_begin + t.cc - 1) / t.cc;  // >= 1: the host makes every split non-empty

  for (int kb = blockIdx.y; kb < kblocks; kb += gridDim.y) {
    const int g = kb / t.kb_per_group;
    const int k0 = (kb % t.kb_per_group) * kBK;  // the block's first output channel within group g
    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

    // Prologue: chunk 0 into stage 0. (The previous kb's last barrier freed both stages.)
    stage_chunk(d, t, src, wei, s_w0, s_in0, g, k0, c_begin, min(t.cc, c_end - c_begin), n0, h0, w0);
    cp_async_commit();

#pragma unroll 1
    for (int ch = 0; ch < nchunks; ++ch) {
      const int c0 = c_begin + ch * t.cc, cc = min(t.cc, c_end - c0), ntaps = cc * RS;
      // Chunk ch+1 into the other stage while this one is computed. NOTE: that stage was last read by
      // chunk ch-1, which every thread finished before the barrier that ended the previous iteration.
      if (ch + 1 < nchunks) {
        const int cn = c0 + t.cc, stn = (ch + 1) & 1;
        stage_chunk(d, t, src, wei, s_w0 + stn * w_words, s_in0 + stn * in_words, g, k0, cn,
                    min(t.cc, c_end - cn), n0, h0, w0);
      }
      cp_async_commit();  // possibly an empty group: keeps "all but the newest group" = chunk ch
      cp_async_wait<1>();
      // NOTE: each thread waited for its own copies; the barrier makes everyone's copies (and, the first
      // time round, the tap table and s_opix) visible to all.
      __syncthreads();

      // NOTE: a thread's 8 pixels are 16 apart (not a 2-D patch of neighbours): the 16 lanes of a half-warp
      // then read 16 neighbouring words per tap, conflict-free for ANY tap shift, stride or dilation, where
      // a per-thread patch would need per-tap-aligned vector reads that only a fixed 3x3 stride-1 case gives.
      const float* s_in = s_in0 + (ch & 1) * in_words;
      const float* wrow = s_w0 + (ch & 1) * w_words + ty * kTN;
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
      // NOTE: everyone is done reading this stage before the next iteration's copies refill it.
      __syncthreads();
    }

    // Store. Lanes tx hold neighbouring pixels: each store instruction covers runs of consecutive q in
    // NCHW. One 64-bit offset per pixel, stepped by P*Q per channel, keeps the register count down while
    // the 64 accumulators are live.
    const int64_t PQ = int64_t(d.p) * d.q;
    const int kfirst = k0 + ty * kTN;  // this thread's first output channel within group g
    const int kcount = min(kTN, d.kg - kfirst);
    float* out = t.splits > 1 ? part + int64_t(blockIdx.z) * d.n * d.k * PQ : dst;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int64_t opix = s_opix[tx + i * kTX];
      if (opix < 0) continue;
      int64_t k = int64_t(g) * d.kg + kfirst;
      int64_t o = opix + k * PQ;
#pragma unroll
      for (int jn = 0; jn < kTN; ++jn) {
        if (jn >= kcount) break;
        // reads residual[o] first: safe when it aliases dst
        out[o] = t.splits > 1 ? acc[i][jn] : epi(acc[i][jn], k, o);
        o += PQ;
        ++k;
      }
    }
  }
}

// One thread per output element: dst[o] = epilogue(sum over z of part[z][o]), z in order (deterministic).
__global__ void __launch_bounds__(256)
    regblock_split_reduce_kernel(const float* __restrict__ part, int splits, int64_t total, int64_t PQ, int64_t K,
                                 float* dst, DeviceEpilogue<float> epi) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    float s = part[o];
    for (int z = 1; z < splits; ++z) s += part[int64_t(z) * total + o];
    dst[o] = epi(s, (o / PQ) % K, o);  // reads residual[o] before the store: safe when it aliases dst
  }
}

int sm_count_or_default() {
  // NOTE: workspace_bytes() may be asked on a machine without a GPU; 132 (H100/H200) is the fallback.
  static std::array<std::atomic<int>, 64> cache{};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= int(cache.size())) {
    (void)cudaGetLastError();
    return 132;
  }
  int n = cache[size_t(dev)].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      return 132;
    }
    cache[size_t(dev)].store(n, std::memory_order_relaxed);
  }
  return n;
}

// CONVKIT_REGBLOCK_CFG, read once: "split=S" (1..16; 1 = never split), "cc=C" (1..16 channels per chunk),
// comma-separated, either may be left out (0 = the rule decides). Unknown keys are ignored.
struct CfgOverride {
  int split = 0, cc = 0;
};
const CfgOverride& cfg_override() {
  static const CfgOverride o = [] {
    CfgOverride r;
    const char* env = env_override("CONVKIT_REGBLOCK_CFG");
    if (env == nullptr) return r;
    std::string s(env);
    size_t pos = 0;
    while (pos < s.size()) {
      size_t end = s.find(',', pos);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(pos, end - pos);
      const size_t eq = item.find('=');
      if (eq != std::string::npos) {
        const std::string key = item.substr(0, eq);
        const int v = std::atoi(item.c_str() + eq + 1);
        if (key == "split" && v >= 1 && v <= kMaxSplits) r.split = v;
        if (key == "cc" && v >= 1 && v <= kMaxChunk) r.cc = v;
      }
      pos = end + 1;
    }
    return r;
  }();
  return o;
}

int64_t plan_smem_bytes(const Conv2dProblem& pb, int64_t cc, int64_t cs) {
  const int64_t RS = pb.r * pb.s;
  return 8 * kBM + 4 * (2 * (cc * RS * kWPitch + cc * cs) + cc * RS);
}

// How many blocks share one output tile, each over a range of input channels. Rule: split only to fill
// SMs that would otherwise idle, i.e. the largest s with blocks * s <= SMs * blocks per SM (one wave), at
// most 16 and keeping >= 2 chunks per split. A grid that already fills a wave is never split: splitting it
// would add workspace traffic and a reduce kernel for no more busy SMs. Blocks per SM: 4 (the launch bound)
// unless shared memory allows fewer. H200 (132 SMs), ResNet-50 batch 32: 512@7 (128 blocks) -> 4 splits,
// 256@14 (256 blocks) -> 2, 128@28 (512 blocks), 64@56 and seed000 -> 1.
int64_t choose_splits(int64_t blocks, int64_t nchunks, int64_t smem, int sms) {
  const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(kBlocksPerSm, (228 * 1024) / (smem + 1024)));
  const int64_t slots = per_sm * std::max(sms, 1);
  int64_t s = 1;
  while (s < kMaxSplits && blocks * (s + 1) <= slots && 2 * (s + 1) <= nchunks) ++s;
  return s;
}

// Picks the tile shape, the staging geometry, the chunk size and the split; `why` says what went wrong
// if nothing fits. `vec_in`: whether the input rows may be staged with 16-byte copies (src alignment).
bool make_plan(const Conv2dProblem& pb, bool vec_ok, int sms, RegPlan* plan, std::string* why) {
  const int64_t P = pb.p(), Q = pb.q(), N = pb.n;
  // Tile shape: tbq <= 16 columns (a half-warp's 16 lanes read one row), tbp rows, kBM pixels at most,
  // balanced so the last tile in each direction is nearly full. Small images: nb whole images per block.
  const int64_t tbq = (Q + (Q + 15) / 16 - 1) / ((Q + 15) / 16);
  const int64_t max_rows = kBM / tbq;
  const int64_t tbp = (P + (P + max_rows - 1) / max_rows - 1) / ((P + max_rows - 1) / max_rows);
  int64_t nb = 1;
  if (tbp == P && tbq == Q) nb = std::max<int64_t>(1, std::min<int64_t>(N, kBM / (P * Q)));
  const bool vec_in = vec_ok && pb.stride_w == 1 && pb.w % 4 == 0;

  TileGeom g = tile_geom(pb, tbp, tbq);
  if (vec_in) {
    g.iw = (g.iw + 3 + 3) / 4 * 4;  // up to 3 lead columns, rounded up to whole 16-byte copies
    g.wp = g.iw;
  }
  // NOTE: with tbq = 16 a half-warp's 16 pixels (m = tx + 16*i) are one tile row: 16 adjacent words for
  // every tap, conflict-free with any pitch, so the row is not padded. Narrower tiles wrap a half-warp
  // over 2+ rows; the pitch_for() padding then puts the second row on the other 16 banks.
  const int64_t row_words = vec_in ? g.iw : pb.stride_w * g.wp;
  g.ld = tbq >= kTX ? (row_words + 3) / 4 * 4 : pitch_for(row_words, pb.stride_h, vec_in ? 4 : 1);
  const int64_t cs = nb * g.ih * g.ld;
  const int64_t cg = pb.c_per_group();
  int64_t cc = std::min<int64_t>(kMaxChunk, cg);
  while (cc > 1 && plan_smem_bytes(pb, cc, cs) > kSmemPreferred) --cc;
  if (cfg_override().cc > 0) cc = std::min<int64_t>(cfg_override().cc, cg);
  if (plan_smem_bytes(pb, cc, cs) > kSmemMax) {
    *why = "one input channel of its " + std::to_string(tbp) + "x" + std::to_string(tbq) + " output tile (a " +
           std::to_string(g.ih) + "x" + std::to_string(g.iw) + " input tile with halo) plus 64 filters need " +
           std::to_string(plan_smem_bytes(pb, 1, cs) / 1024) + " KB of shared memory in two stages, over the " +
           std::to_string(kSmemMax / 1024) + " KB it uses.";
    return false;
  }
  const int64_t tiles_q = (Q + tbq - 1) / tbq, tiles_p = (P + tbp - 1) / tbp, groups_n = (N + nb - 1) / nb;
  if (tiles_q * tiles_p * groups_n > INT_MAX) {
    *why = "the output has more than 2^31 tiles.";
    return false;
  }
  const int64_t kb_per_group = (pb.k_per_group() + kBK - 1) / kBK;
  const int64_t nchunks = (cg + cc - 1) / cc;
  int64_t splits = cfg_override().split > 0
                       ? cfg_override().split
                       : choose_splits(tiles_q * tiles_p * groups_n * std::min<int64_t>(pb.groups * kb_per_group, 65535),
                                       nchunks, plan_smem_bytes(pb, cc, cs), sms);
  splits = std::max<int64_t>(1, std::min(splits, nchunks));
  const int64_t cps = (nchunks + splits - 1) / splits * cc;
  splits = (cg + cps - 1) / cps;  // every split non-empty
  *plan = RegPlan{int(nb),   int(tbp),  int(tbq),  int(tiles_q), int(tiles_p), int(g.ih),      int(g.iw),
                  int(g.wp), int(g.ld), int(cs),   int(cc),      int(kb_per_group), vec_in ? 1 : 0,
                  int(splits), int(cps)};
  return true;
}

size_t partial_bytes(const Conv2dProblem& pb, const RegPlan& t) {
  return t.splits > 1 ? size_t(t.splits) * size_t(pb.n * pb.k * pb.p() * pb.q()) * sizeof(float) : 0;
}

class CudaDirectRegblock final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_direct_regblock"; }
  std::string description() const override {
    return "direct conv, 8 pixels x 8 channels per thread in registers, double-buffered cp.async staging of "
           "filters and input tile, input-channel split for small grids (ladder rung 3)";
  }

  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (Support s = require_f32_strict(cfg, /*nhwc_ok=*/false); !s) return s;
    if (Support s = dims_fit_int(pb); !s) return s;
    RegPlan plan;
    std::string why;
    if (!make_plan(pb, false, 132, &plan, &why)) return Support::no(why);
    return Support::yes();
  }

  // The partial sums of a split problem: the larger of the aligned and unaligned plans (run() picks one
  // by the input pointer's alignment, which is not known here).
  size_t workspace_bytes(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (!can_implement(pb, cfg)) return 0;
    const int sms = sm_count_or_default();
    size_t most = 0;
    for (bool vec : {false, true}) {
      RegPlan t;
      std::string why;
      if (make_plan(pb, vec, sms, &t, &why)) most = std::max(most, partial_bytes(pb, t));
    }
    return most;
  }

  std::string detail(const Conv2dProblem& pb, const ConvConfig&) const override {
    if (!cuda_present()) return {};
    RegPlan t;
    std::string why;
    if (!make_plan(pb, true, sm_count_or_default(), &t, &why)) return {};
    const int64_t blocks = int64_t(t.tiles_q) * t.tiles_p * ((pb.n + t.nb - 1) / t.nb) *
                           std::min<int64_t>(pb.groups * int64_t(t.kb_per_group), 65535);
    return "tile " + std::to_string(t.nb) + "x" + std::to_string(t.tbp) + "x" + std::to_string(t.tbq) + ", " +
           std::to_string(t.cc) + " ch/chunk, split " + std::to_string(t.splits) + ", " +
           std::to_string(blocks * t.splits) + " blocks";
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    RegPlan t;
    std::string why;
    const bool aligned = reinterpret_cast<uintptr_t>(call.src.data) % 16 == 0;
    if (!make_plan(pb, aligned, sm_count_or_default(), &t, &why))
      throw Error(StatusCode::unsupported, name() + ": " + why);
    const size_t need = partial_bytes(pb, t);
    if (need > 0 && (call.workspace == nullptr || call.workspace_bytes < need))
      throw Error(StatusCode::invalid_tensor,
                  name() + ": it needs a workspace of " + std::to_string(need) + " bytes for its partial sums.");
    static std::once_flag attr_once;  // NOTE: opt in to more than 48 KB of dynamic smem, once per process
    std::call_once(attr_once, [] {
      CK_CUDA(cudaFuncSetAttribute(conv_direct_regblock_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(kSmemMax)));
      // NOTE: 4 blocks x 55 KB need the largest shared-memory carveout.
      CK_CUDA(cudaFuncSetAttribute(conv_direct_regblock_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   int(cudaSharedmemCarveoutMaxShared)));
    });
    const int64_t kblocks = pb.groups * int64_t(t.kb_per_group);
    const dim3 grid(unsigned(int64_t(t.tiles_q) * t.tiles_p * ((pb.n + t.nb - 1) / t.nb)),
                    unsigned(std::min<int64_t>(kblocks, 65535)), unsigned(t.splits));
    const DeviceEpilogue<float> epi = DeviceEpilogue<float>::from(call.epilogue);
    float* part = need > 0 ? static_cast<float*>(call.workspace) : nullptr;
    conv_direct_regblock_kernel<<<grid, kThreads, size_t(plan_smem_bytes(pb, t.cc, t.cs)), as_stream(call.stream)>>>(
        make_dims(pb), t, static_cast<const float*>(call.src.data), static_cast<const float*>(call.wei.data),
        static_cast<float*>(call.dst.data), part, epi);
    CK_LAUNCH("conv_direct_regblock_kernel");
    if (t.splits > 1) {
      const int64_t total = pb.n * pb.k * pb.p() * pb.q();
      const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, int64_t(1) << 20));
      regblock_split_reduce_kernel<<<blocks, 256, 0, as_stream(call.stream)>>>(
          part, t.splits, total, pb.p() * pb.q(), pb.k, static_cast<float*>(call.dst.data), epi);
      CK_LAUNCH("regblock_split_reduce_kernel");
    }
  }
};

}  // namespace

const Algorithm* make_cuda_direct_regblock() {
  static CudaDirectRegblock algo;
  return &algo;
}

}  // namespace convkit::detail
