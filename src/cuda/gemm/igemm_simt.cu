// cuda_igemm_simt: implicit GEMM on CUDA cores (fp32, NCHW): the im2col rung without the column matrix.
//
// What it adds over cuda_im2col_cublas: the column matrix is never written. Each block gathers the slice
// of it that it needs straight from the input into shared memory, zero-filling the padding, and multiplies
// it there; the epilogue (bias, activation, residual) is applied as the results are stored. No workspace,
// one kernel, the input read through L2 instead of an R*S-times-larger copy through DRAM.
//
// The GEMM, per group g: M = N*P*Q output pixels, N = K/groups output channels, K = C/groups*R*S, with
//   A[m][k] = x[img][g*Cg + c][p*u - pad + r*d][q*u - pad + s*d]   (m = (img, p, q), k = (c, r, s))
//   B[k][n] = w[g*Kg + n][c][r][s]                                   (contiguous along k)
// How it parallelises: a block of 256 threads owns a kBlockM x kBlockN tile of the output (m x n); grid.x
// walks m, grid.y walks n, grid.z the groups. The k loop steps kBlockK = 8 at a time: each thread gathers
// kBlockM/32 A elements (one k row, m = lane + 32*j, so a warp reads 32 consecutive pixels) and kBlockN/32
// B elements into registers for slice t+1 while the block multiplies slice t out of the other of two
// shared-memory stages. The threads form a 16x16 grid (a warp is 8 x 4 of it); each one accumulates a
// (kBlockM/16) x (kBlockN/16) register tile (8x8 for the 128x128 tile) as outer products of float4
// fragments taken at tm*4 and 64 + tm*4 (the "2 x (4x4)" split: a warp's float4 reads fall on distinct
// banks or broadcast).
// The gather keeps, per thread, the input offset of each of its pixels and the (c, r, s) of its k row,
// advanced by kBlockK with carries only: no division in the k loop.
// Tiles: 128x128, 128x64, 64x128, 64x64, picked by choose_tile() (a wave-quantisation model, commented).
//
// Resources (sm_90, -O3): see `nvcc -Xptxas -v`; 128x128: <= 128 registers (launch bounds: 2 blocks of 256
// threads per SM), 16.5 KiB static shared memory, no spills. No workspace.
// measured: (pending the H200 run)
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"

namespace convkit::detail {
namespace {

constexpr int kThreads = 256;  // a 16 x 16 grid of threads over the tile
constexpr int kBlockK = 8;     // k depth of one shared-memory stage
constexpr int kPadB = 4;       // NOTE: pads B's smem rows so the transposing stores hit distinct banks
                               // (a row shifts by 4 banks; rows k and k+4 land 16 banks apart), and keeps
                               // every row 16-byte aligned for the float4 fragment reads.
// An impossible row/column origin for pixels past M: h = kFar + r*d stays negative, so the bounds test
// that zero-fills the padding also zero-fills them (can_implement keeps r*d, H and W below 2^30).
constexpr int kFar = -(1 << 30);

// One output pixel m = (img, p, q) of the block, for the gather: the offset of x[img][g*Cg][h0][w0] (it may
// point before the image, as h0, w0 < 0 in the padding) and the origin h0 = p*u - pad, w0 = q*u - pad.
struct __align__(16) PixelInfo {
  int64_t base;
  int h0, w0;
};

struct IgemmArgs {
  const float* src;
  const float* wei;
  float* dst;
  EpilogueF32 epi;  // bias, activation, residual (which may be dst itself), alpha, beta
  int64_t M;              // N*P*Q
  int Ngemm;              // K/groups
  int Kgemm;              // C/groups*R*S
  int Cg, H, W, Q, R, S;
  int64_t HW, CHW, PQ, KPQ;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int dc, dr, ds;  // kBlockK written in the mixed radix (c, r, s): kBlockK = dc*R*S + dr*S + ds
};

// A block of 256 threads computes one kBlockM x kBlockN tile (m = output pixels, n = output channels of
// group blockIdx.z); each thread an (kBlockM/16) x (kBlockN/16) register tile; k in slices of 8, two smem
// stages, the next slice prefetched into registers while the current one is multiplied.
template <int kBlockM, int kBlockN>
__global__ void __launch_bounds__(kThreads, 2) igemm_simt_kernel(const IgemmArgs a) {
  constexpr int kTM = kBlockM / 16, kTN = kBlockN / 16;  // per-thread tile
  constexpr int kLoadA = kBlockM * kBlockK / kThreads;   // A elements per thread per slice
  constexpr int kLoadB = kBlockN * kBlockK / kThreads;   // B elements per thread per slice
  constexpr int kThreadsPerN = kBlockK / kLoadB;         // threads sharing one B column (one n)
  static_assert(kThreads / 32 == kBlockK, "the A loader gives each warp one k row of the slice");
  static_assert(kTM % 4 == 0 && kTN % 4 == 0, "fragments are read as float4");

  // NOTE: A is stored k-major (As[k][m]) so a thread's m fragment is one float4; B likewise (Bs[k][n]).
  __shared__ __align__(16) float As[2][kBlockK][kBlockM];
  __shared__ __align__(16) float Bs[2][kBlockK][kBlockN + kPadB];

  const int tid = threadIdx.x;
  const int g = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.x) * kBlockM;
  const int n0 = blockIdx.y * kBlockN;

  // ---- A gather: the block's pixels, decoded once into shared memory.
  // NOTE: a table in smem instead of registers: each thread gathers kLoadA pixels, and holding their
  // 64-bit offsets and origins (4 registers each) pushed the 128x128 tile past 128 registers (spills).
  // One LDS.128 per gathered element per slice is cheap next to the 64 FMAs per thread per k.
  __shared__ PixelInfo pix[kBlockM];
  for (int i = tid; i < kBlockM; i += kThreads) {
    const int64_t m = m0 + i;
    PixelInfo info;
    if (m < a.M) {
      const int64_t img = m / a.PQ;
      const int64_t pq = m - img * a.PQ;
      const int p = int(pq / a.Q), q = int(pq - int64_t(p) * a.Q);
      info.h0 = p * a.stride_h - a.pad_h;
      info.w0 = q * a.stride_w - a.pad_w;
      info.base = img * a.CHW + int64_t(g) * a.Cg * a.HW + int64_t(info.h0) * a.W + info.w0;
    } else {
      info.h0 = kFar;
      info.w0 = kFar;
      info.base = 0;
    }
    pix[i] = info;
  }
  const int a_k = tid / 32;  // this thread's k row of every slice
  const int a_m = tid % 32;  // and its pixels: a_m + 32*j
  // (c, r, s) of k = k0 + a_k, advanced by kBlockK per slice with carries only.
  int kc, kr, ks;
  {
    const int rs = a_k % (a.R * a.S);
    kc = a_k / (a.R * a.S);
    kr = rs / a.S;
    ks = rs - kr * a.S;
  }

  // ---- B loads: kLoadB consecutive k of one output channel n (the weights are contiguous along k).
  const int b_n = tid / kThreadsPerN;
  const int b_k = (tid % kThreadsPerN) * kLoadB;
  const bool b_valid = n0 + b_n < a.Ngemm;
  // Walks along this thread's weight row; b_left = how many k of it remain (0 for a column past N).
  const float* b_ptr = a.wei + (int64_t(g) * a.Ngemm + (b_valid ? n0 + b_n : 0)) * a.Kgemm + b_k;
  int b_left = b_valid ? a.Kgemm - b_k : 0;

  float ra[kLoadA], rb[kLoadB];  // the prefetch registers

  // Gathers the current slice (see advance_k) into ra/rb (zero outside the input, past M, past K/groups, past N).
  auto load_slice = [&]() {
    const bool k_ok = kc < a.Cg;  // k < K/groups
    const int rdh = kr * a.dil_h, sdw = ks * a.dil_w;
    const int64_t koff = int64_t(kc) * a.HW + int64_t(rdh) * a.W + sdw;
#pragma unroll
    for (int j = 0; j < kLoadA; ++j) {
      const PixelInfo info = pix[a_m + 32 * j];
      const int h = info.h0 + rdh, w = info.w0 + sdw;
      ra[j] = (k_ok && unsigned(h) < unsigned(a.H) && unsigned(w) < unsigned(a.W)) ? __ldg(a.src + info.base + koff)
                                                                                  : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kLoadB; ++i) rb[i] = i < b_left ? __ldg(b_ptr + i) : 0.0f;
  };
  auto advance_k = [&]() {
    b_ptr += kBlockK;
    b_left -= kBlockK;
    ks += a.ds;
    const int carry_s = ks >= a.S;
    if (carry_s) ks -= a.S;
    kr += a.dr + carry_s;
    if (kr >= a.R) {
      kr -= a.R;
      ++kc;
    }
    kc += a.dc;
  };
  auto store_slice = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kLoadA; ++j) As[buf][a_k][a_m + 32 * j] = ra[j];
#pragma unroll
    for (int i = 0; i < kLoadB; ++i) Bs[buf][b_k + i][b_n] = rb[i];
  };

  // ---- the k loop
  // NOTE: a warp covers 8 (m) x 4 (n) threads, not 16 x 2: its float4 fragment reads then touch 8 + 4
  // distinct addresses (one 128-byte and one 64-byte wavefront) instead of 16 + 2 (256 + 32 bytes).
  const int warp = tid / 32, lane = tid % 32;
  const int tm = (lane % 8) + 8 * (warp % 2), tn = (lane / 8) + 4 * (warp / 2);
  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

  const int slices = (a.Kgemm + kBlockK - 1) / kBlockK;
  __syncthreads();  // the pixel table is complete
  load_slice();
  store_slice(0);
  __syncthreads();
  for (int t = 0; t < slices; ++t) {
    const int cur = t & 1;
    const bool more = t + 1 < slices;
    if (more) {  // issue the next slice's global loads now; they land while this slice is multiplied
      advance_k();
      load_slice();
    }
#pragma unroll
    for (int kk = 0; kk < kBlockK; ++kk) {
      float av[kTM], bv[kTN];
#pragma unroll
      for (int i = 0; i < kTM / 4; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(&As[cur][kk][i * 64 + tm * 4]);
        av[4 * i] = v.x, av[4 * i + 1] = v.y, av[4 * i + 2] = v.z, av[4 * i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < kTN / 4; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][kk][j * 64 + tn * 4]);
        bv[4 * j] = v.x, bv[4 * j + 1] = v.y, bv[4 * j + 2] = v.z, bv[4 * j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    // NOTE: stage cur^1 was last read during slice t-1, and every thread has passed the barrier that
    // ended slice t-1, so it can be overwritten now; the barrier below publishes it for slice t+1.
    if (more) store_slice(cur ^ 1);
    __syncthreads();
  }

  // ---- epilogue, fused into the store: y = act(alpha*acc + bias[k] + beta*residual), NCHW.
  // NOTE: when the residual is dst, each element is read and then written by this thread only: safe.
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int64_t m = m0 + (i / 4) * 64 + tm * 4 + (i % 4);
    if (m >= a.M) continue;
    const int64_t img = m / a.PQ;
    const int64_t out_m = img * a.KPQ + (m - img * a.PQ);  // dst[img][0][p][q]
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int n = n0 + (j / 4) * 64 + tn * 4 + (j % 4);
      if (n >= a.Ngemm) continue;
      const int64_t k = int64_t(g) * a.Ngemm + n;
      const int64_t o = out_m + k * a.PQ;
      a.dst[o] = a.epi(acc[i][j], k, o);
    }
  }
}

// ---- tile choice ------------------------------------------------------------------------------------
struct TileConfig {
  int bm, bn;
  // Relative speed of one SM running this tile, from its arithmetic intensity: per k a thread does
  // (bm/16)*(bn/16) FMAs for (bm/16 + bn/16)/4 float4 smem reads, and the per-slice gather/barrier cost is
  // shared by fewer FMAs as the tile shrinks. Rough numbers, to be replaced by measured ones.
  double eff;
  void (*launch)(const IgemmArgs&, dim3, cudaStream_t);
};

template <int BM, int BN>
void launch_tile(const IgemmArgs& a, dim3 grid, cudaStream_t stream) {
  igemm_simt_kernel<BM, BN><<<grid, kThreads, 0, stream>>>(a);
}

constexpr TileConfig kTiles[] = {
    {128, 128, 1.00, launch_tile<128, 128>},
    {128, 64, 0.85, launch_tile<128, 64>},
    {64, 128, 0.85, launch_tile<64, 128>},
    {64, 64, 0.70, launch_tile<64, 64>},
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Picks the tile with the least modelled time:
//   time ~ (tiles on the busiest SM) * (tile area / eff), tiles on the busiest SM = ceil(blocks / SMs).
// - ceil(blocks / SMs) is the wave quantisation: 98 tiles on 132 SMs take as long as 132 do.
// - tile area counts the padded tile, so a 128-wide tile over K/groups = 64 pays for its empty half.
// - an SM that holds a single block (8 warps) hides global-load and barrier latency poorly: x1.3.
// seed000 (M=262144, N=256): 128x128, 4096 blocks. ResNet-50 batch 32: 3x3 64@56 -> 128x64 (784 blocks),
// 128@28 -> 128x64, 256@14 -> 64x64 (392), 512@7 -> 64x64 (200).
// CONVKIT_IGEMM_TILE=128x64 (one of the tiles above) overrides the model: for measuring every tile on a
// new card and recalibrating eff. An unknown value is ignored.
const TileConfig& choose_tile(const Conv2dProblem& p, int sm_count) {
  if (const char* force = std::getenv("CONVKIT_IGEMM_TILE"))
    for (const TileConfig& t : kTiles)
      if (std::to_string(t.bm) + "x" + std::to_string(t.bn) == force) return t;
  const TileConfig* best = nullptr;
  double best_cost = 0;
  for (const TileConfig& t : kTiles) {  // ties keep the earlier (larger) tile
    const int64_t blocks = ceil_div(p.gemm_m(), t.bm) * ceil_div(p.gemm_n(), t.bn) * p.groups;
    const int64_t per_sm = ceil_div(blocks, std::max(sm_count, 1));
    double cost = double(per_sm) * t.bm * t.bn / t.eff;
    if (per_sm < 2) cost *= 1.3;
    if (best == nullptr || cost < best_cost) best = &t, best_cost = cost;
  }
  return *best;
}

int sm_count_of_current_device() {
  static std::array<std::atomic<int>, 64> cache{};  // 0 = not asked yet
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  if (dev < 0 || dev >= int(cache.size())) dev = 0;
  int n = cache[size_t(dev)].load(std::memory_order_relaxed);
  if (n == 0) {
    CK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    cache[size_t(dev)].store(n, std::memory_order_relaxed);
  }
  return n;
}

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

class CudaIgemmSimt final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_igemm_simt"; }
  std::string description() const override {
    return "implicit GEMM on CUDA cores: on-the-fly im2col into double-buffered smem tiles, 8x8 register "
           "tiles, fused epilogue, no workspace";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_f32_strict(cfg, /*nhwc_ok=*/false); !ok) return ok;
    constexpr int64_t kLim = int64_t(1) << 30;  // see kFar
    if (p.h >= kLim || p.w >= kLim || p.p() >= kLim || p.q() >= kLim || p.pad_h >= kLim || p.pad_w >= kLim ||
        p.stride_h >= kLim || p.stride_w >= kLim || p.dilation_h * (p.r - 1) >= kLim ||
        p.dilation_w * (p.s - 1) >= kLim || p.p() * p.stride_h >= kLim || p.q() * p.stride_w >= kLim)
      return Support::no("a spatial size, stride, padding or dilated filter extent reaches 2^30 (32-bit pixel "
                         "coordinates).");
    if (p.gemm_k() > INT_MAX - 2 * kBlockK) return Support::no("C/groups*R*S passes 2^31 (32-bit k index).");
    if (ceil_div(p.gemm_n(), 64) > 65535) return Support::no("K/groups passes 65535*64 (grid.y).");
    if (p.groups > 65535) return Support::no("more than 65535 groups (grid.z).");
    if (ceil_div(p.gemm_m(), 64) > INT_MAX) return Support::no("N*P*Q passes 2^37 (grid.x).");
    return Support::yes();
  }

  std::string detail(const Conv2dProblem& p, const ConvConfig&) const override {
    if (!cuda_present()) return {};
    const int sms = sm_count_of_current_device();
    const TileConfig& t = choose_tile(p, sms);
    const int64_t blocks = ceil_div(p.gemm_m(), t.bm) * ceil_div(p.gemm_n(), t.bn) * p.groups;
    return "tile " + std::to_string(t.bm) + "x" + std::to_string(t.bn) + ", " + std::to_string(blocks) +
           " blocks on " + std::to_string(sms) + " SMs";
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const Epilogue& e = call.epilogue;
    const size_t dst_bytes = call.dst.bytes();
    if (e.residual != nullptr && e.residual != call.dst.data &&
        ranges_overlap(e.residual, dst_bytes, call.dst.data, dst_bytes))
      throw Error(StatusCode::invalid_tensor,
                  "the residual partially overlaps the output; it must be the output itself or disjoint from it.");

    IgemmArgs a{};
    a.src = static_cast<const float*>(call.src.data);
    a.wei = static_cast<const float*>(call.wei.data);
    a.dst = static_cast<float*>(call.dst.data);
    a.epi = EpilogueF32::from(e);
    a.M = pb.gemm_m();
    a.Ngemm = int(pb.gemm_n());
    a.Kgemm = int(pb.gemm_k());
    a.Cg = int(pb.c_per_group());
    a.H = int(pb.h);
    a.W = int(pb.w);
    a.Q = int(pb.q());
    a.R = int(pb.r);
    a.S = int(pb.s);
    a.HW = pb.h * pb.w;
    a.CHW = pb.c * a.HW;
    a.PQ = pb.p() * pb.q();
    a.KPQ = pb.k * a.PQ;
    a.stride_h = int(pb.stride_h);
    a.stride_w = int(pb.stride_w);
    a.pad_h = int(pb.pad_h);
    a.pad_w = int(pb.pad_w);
    a.dil_h = int(pb.dilation_h);
    a.dil_w = int(pb.dilation_w);
    const int RS = a.R * a.S;
    a.dc = kBlockK / RS;
    a.dr = (kBlockK % RS) / a.S;
    a.ds = kBlockK % a.S;

    const TileConfig& t = choose_tile(pb, sm_count_of_current_device());
    const dim3 grid(unsigned(ceil_div(a.M, t.bm)), unsigned(ceil_div(a.Ngemm, t.bn)), unsigned(pb.groups));
    t.launch(a, grid, as_stream(call.stream));
    CK_LAUNCH("igemm_simt_kernel");
  }
};

}  // namespace

const Algorithm* make_cuda_igemm_simt() {
  static CudaIgemmSimt algo;
  return &algo;
}

}  // namespace convkit::detail
