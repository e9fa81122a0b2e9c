// cuda_conv_wgmma_halo: Hopper wgmma with the im2col done by the addresses of ldmatrix, from one input
// "halo" per block of output pixels, and the block's whole filter bank resident in shared memory.
// fp16 / bf16, NHWC activations, KRSC weights, stride 1, dilation 1, one group, C % 64 == 0, and a filter
// bank of 64 output channels that fits in shared memory next to the halo (3x3 with C = 64 or 128, 1x1 up to
// C = 1152). sm_90a only. No per-sample-weights mode (accepts() says so).
//
// What it adds over cuda_igemm_wgmma (one idea: each input element leaves L2 about once, not R*S times):
//  - cuda_igemm_wgmma's im2col mode fetches, for every filter tap, the 128 bytes of channels of every
//    output pixel of its tile (R*S reads of each input element from L2: 1152 bytes per pixel for a 3x3
//    64-channel layer) and the block's slice of the weights for every k stage (576 more bytes per pixel at
//    128x64). Here one TMA box brings, per 64 channels, the rows of input the block's output pixels need,
//    padding included (a "halo": (rows spanned + R - 1) x (Q + S - 1) pixels, zeros outside the image),
//    and every tap's A operand is read out of it by ldmatrix, each lane giving the address of its own
//    pixel's row shifted by the tap (r * width + s rows of 128 bytes): 265-350 bytes per pixel;
//  - A therefore comes from registers (wgmma's RS form: ldmatrix.x4 gives one warp's 16 x 16 fragment,
//    loaded two k steps ahead), B (the weights, K-major, 64 output channels) from shared memory;
//  - the weights of the block's 64 output channels are loaded once (every tap and 64-channel slice, one TMA
//    box each) and stay while consecutive work units use them: the grid is persistent (one block per SM),
//    each block walks a contiguous range of 64-pixel units ordered so that units sharing the weights are
//    neighbours (per output-channel block);
//  - a producer warpgroup (one thread) keeps a ring of 1-2 halo stages loading on full/empty mbarriers;
//    two consumer warpgroups each take one 64-pixel unit of a step (two units of one image share a halo);
//  - the epilogue is cuda_igemm_wgmma's (per warpgroup, through its own staging buffer), so bias, residual
//    and every activation are as there.
// Ordering: a halo slot is refilled only after every consumer warp's wgmma.wait_group retired the multiplies
// that read it (the empty barrier); the weights are replaced only after every consumer warp has finished
// the last unit that used them (the weights' own empty barrier, one phase per reload).
// Not here: stride or dilation other than 1, groups, C % 64 != 0, tf32, filter banks too large for shared
// memory, rows wider than 256 padded pixels: cuda_igemm_wgmma runs those.
//
// measured (H200, 2026-11-30, bf16, batch 32, vs cuDNN in the same process): a negative result, kept as the
// rung that shows it: 3x3 64->64 at 56x56 0.0302 ms against cuda_igemm_wgmma's 0.0295-0.0303 and cuDNN's
// ~0.027. The profile and the designs tried are in docs/perf.md (2026-11-30, commit 87a0b7c).
#include "cuda/tc/wgmma_common.cuh"
#include "cuda/tc/mma_sync.cuh"

#include <algorithm>
#include <atomic>

namespace convkit::detail {
namespace {

constexpr int kUnit = 64;                 // output pixels per work unit: one consumer warpgroup's rows
constexpr int kBoxBytes = 64 * kRowBytes;  // one weight box: 64 output channels x 128 bytes of k
constexpr int kEpiBytes = kUnit * (64 + 8) * 4;  // a warpgroup's fp32 staging tile (wgmma_epilogue's)
constexpr int kSmemLimit = 227 * 1024;

// D[64 x 64] += A[64 x 16] (registers: the fragment ldmatrix.x4 gives, rows 16w.. of warp w) * B[16 x 64]
// (shared memory, K-major, 128-byte swizzle).
template <typename T>
__device__ __forceinline__ void wgmma_rs64(float (&d)[32], const uint32_t (&a)[4], uint64_t db);
#define CK_HALO_RS(T, TYPE)                                                                                   \
  template <>                                                                                               \
  __device__ __forceinline__ void wgmma_rs64<T>(float(&d)[32], const uint32_t(&a)[4], uint64_t db) {        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                               \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" CK_WGMMA_D64 "}, "          \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                               \
                 : CK_WGMMA_OPS64                                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                             \
  }
CK_HALO_RS(__half, "f16")
CK_HALO_RS(__nv_bfloat16, "bf16")

// The launch's geometry beyond TcArgs (which the epilogue reads in its per-sample form: Mb = P*Q, image b's
// rows from b * P*Q).
struct HaloArgs {
  int WB, HB;          // the halo box: WB = Q + S - 1 pixels wide, HB rows
  int slices, taps;    // C / 64, R * S
  int stages;          // halo slots (1 or 2)
  int halo_bytes;      // one slot (a multiple of 1024)
  int units_img;       // 64-pixel units per image: ceil(P*Q / 64)
  int nblk;            // 64-channel output blocks: ceil(K / 64)
  int n_img;           // N
  int64_t units;       // n_img * nblk * units_img
};

// (The 4-D box of the NHWC input, tma_load_4d, is in cuda/common/tma.cuh: channel, column, row, image.)

// One step of the walk: the block's next one or two units (two when the next unit is in range, in the same
// image and under the same weights).
struct Step {
  int img, nbk, cnt;
  int m0;       // first output pixel (within the image)
};
__device__ __forceinline__ Step step_at(const HaloArgs& h, int64_t u, int64_t u_end) {
  Step s;
  const int64_t rest = u / h.units_img;
  const int mt = int(u - rest * h.units_img);
  s.nbk = int(rest / h.n_img);  // (the channel block: which weights)
  s.img = int(rest - int64_t(s.nbk) * h.n_img);
  s.cnt = (u + 1 < u_end && mt + 1 < h.units_img) ? 2 : 1;
  s.m0 = mt * kUnit;
  return s;
}

// Threads: 2 consumer warpgroups (256) + the producer warpgroup (128; one thread works). One block per SM,
// blockIdx.x walks units [x*U/grid, (x+1)*U/grid).
template <typename T>
__global__ void __launch_bounds__(384, 1) conv_wgmma_halo_kernel(const TcArgs a, const HaloArgs h,
                                                                  const __grid_constant__ CUtensorMap wmap,
                                                                  const __grid_constant__ CUtensorMap xmap) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kConsumers = 256, kConsumerWarps = kConsumers / 32;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (kAtomBytes - (raw & (kAtomBytes - 1))) & (kAtomBytes - 1);
  const uint32_t wbuf = raw + pad;  // the weights: box t * slices + cs = tap t, channels 64cs..
  const uint32_t w_bytes = uint32_t(h.taps * h.slices * kBoxBytes);
  const uint32_t halo0 = wbuf + w_bytes;  // the halo slots
  const uint32_t epi_off = pad + w_bytes + uint32_t(h.stages * h.halo_bytes);  // 2 staging tiles
  const uint32_t bars = raw + epi_off + 2 * kEpiBytes;
  const uint32_t full = bars, empty = bars + 8 * 2, wfull = bars + 32, wempty = bars + 40;

  const int tid = threadIdx.x;
  const int64_t u_begin = int64_t(blockIdx.x) * h.units / gridDim.x;
  const int64_t u_end = int64_t(blockIdx.x + 1) * h.units / gridDim.x;

  if (tid == 0) {
    for (int s = 0; s < h.stages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kConsumerWarps);
    }
    mbar_init(wfull, 1);
    mbar_init(wempty, kConsumerWarps);
    mbar_init_fence();
  }
  __syncthreads();

  if (tid >= kConsumers) {
    // ---- the producer
    if (tid != kConsumers) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&xmap)) : "memory");
    int key = -1;          // the channel block whose weights are loaded
    int j = 0, epoch = 0;  // halo loads issued, weight loads issued
    for (int64_t u = u_begin; u < u_end;) {
      const Step st = step_at(h, u, u_end);
      const int p0 = st.m0 / a.Q;
      for (int cs = 0; cs < h.slices; ++cs, ++j) {
        const int slot = j % h.stages;
        if (j >= h.stages) mbar_wait(empty + 8 * slot, uint32_t(j / h.stages - 1) & 1);
        mbar_arrive_expect_tx(full + 8 * slot, uint32_t(kRowBytes * h.WB * h.HB));
        tma_load_4d(halo0 + uint32_t(slot * h.halo_bytes), &xmap, cs * 64, -a.pad_w, p0 - a.pad_h, st.img,
                    full + 8 * slot);
        if (cs == 0 && st.nbk != key) {
          // New weights, after the first halo of the step is on its way: the consumers must first be done
          // with the old ones (every warp arrives once per reload).
          if (epoch > 0) mbar_wait(wempty, uint32_t(epoch - 1) & 1);
          mbar_arrive_expect_tx(wfull, w_bytes);
          const int row = st.nbk * 64;
          for (int t = 0; t < h.taps; ++t)
            for (int c = 0; c < h.slices; ++c)
              tma_load_2d(wbuf + uint32_t((t * h.slices + c) * kBoxBytes), &wmap, t * a.C + c * 64, row, wfull);
          key = st.nbk;
          ++epoch;
        }
      }
      u += st.cnt;
    }
    return;
  }

  // ---- the consumers: warpgroup wg computes unit wg of each step (if the step has it)
  const int wg = tid / 128, ltid = tid & 127, lane = tid & 31, wq = ltid >> 5;
  const int mi = lane >> 3, li = lane & 7;  // ldmatrix: this lane addresses row li of matrix mi
  const int row_in_warp = (mi & 1) * 8 + li, chunk_hi = mi >> 1;
  unsigned char* epi = smem_raw + epi_off + wg * kEpiBytes;
  int key = -1;
  int j = 0, epoch = 0;
  for (int64_t u = u_begin; u < u_end;) {
    const Step st = step_at(h, u, u_end);
    const bool active = wg < st.cnt;
    if (st.nbk != key) {
      if (epoch > 0 && lane == 0) mbar_arrive_if(wempty, true);  // done with the old weights
      mbar_wait(wfull, uint32_t(epoch) & 1);
      key = st.nbk;
      ++epoch;
    }
    // This lane's pixel and its halo row at tap (0, 0); pixels past the image read row 0 (never stored).
    const int p0 = st.m0 / a.Q;
    const int m = st.m0 + wg * kUnit + wq * 16 + row_in_warp;
    const int pm = m / a.Q;
    const int off = m < a.PQ ? (pm - p0) * h.WB + (m - pm * a.Q) : 0;
    float acc[1][32];
#pragma unroll
    for (int e = 0; e < 32; ++e) acc[0][e] = 0.0f;
    for (int cs = 0; cs < h.slices; ++cs, ++j) {
      const int slot = j % h.stages;
      mbar_wait(full + 8 * slot, uint32_t(j / h.stages) & 1);
      if (active) {
        // One filter tap per wgmma group (4 k steps of 32 bytes), at most 2 groups in flight, three register
        // sets of fragments.
        // NOTE: the first version loaded each fragment right before its wgmma, one group per k step, at most 2
        // in flight: 3x3 64@56 bf16 0.0356 ms; fragments two k steps ahead (4 sets, same groups) 0.0312; one
        // group per tap with two sets (the next tap loaded after this one's wait, right before its own
        // group: ncu's source view put 15% of the warps' stall samples on the wgmma fence waiting for those
        // loads) 0.0306.
        const uint32_t halo = halo0 + uint32_t(slot * h.halo_bytes);
        const uint32_t wslice = wbuf + uint32_t(cs * kBoxBytes);
        // (tap_off: r * WB + s of the current tap, kept by additions: no division in the loop)
        auto frag_addr = [&](int tap_off, int kk) {
          const int row = off + tap_off;
          return halo + uint32_t(row) * kRowBytes + uint32_t(((2 * kk + chunk_hi) ^ (row & 7)) * 16);
        };
        uint32_t x[3][4][4];  // three taps' fragments: 32 bytes of k each (kk), per warp 16 rows
        auto load_tap = [&](uint32_t(&f)[4][4], int tap_off) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) ldmatrix_x4(f[kk], frag_addr(tap_off, kk));
        };
        auto multiply_tap = [&](uint32_t(&f)[4][4], int tap) {
          const uint64_t db = smem_desc(wslice + uint32_t(tap * h.slices * kBoxBytes));
          fence_accumulators(acc[0]);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) wgmma_rs64<T>(acc[0], f[kk], db + uint64_t(2 * kk));
          wgmma_commit();
          wgmma_wait<1>();  // the tap before has retired
          fence_accumulators(acc[0]);
        };
        int tap_off = 0, s_now = 0;
        auto next_tap = [&] {
          const bool wrap = s_now + 1 == a.S;
          tap_off = wrap ? tap_off + h.WB - (a.S - 1) : tap_off + 1;
          s_now = wrap ? 0 : s_now + 1;
        };
        // Tap t+1's fragments go to set (t+1) % 3, loaded before tap t's group is issued (their latency hidden
        // behind tap t-1's group, still running): that set was last read by tap t-2, retired by the wait<1>
        // after tap t-1's commit.
        load_tap(x[0], 0);
        for (int tap = 0; tap < h.taps; tap += 3) {
          if (tap + 1 < h.taps) next_tap(), load_tap(x[1], tap_off);
          multiply_tap(x[0], tap);
          if (tap + 1 >= h.taps) break;
          if (tap + 2 < h.taps) next_tap(), load_tap(x[2], tap_off);
          multiply_tap(x[1], tap + 1);
          if (tap + 2 >= h.taps) break;
          if (tap + 3 < h.taps) next_tap(), load_tap(x[0], tap_off);
          multiply_tap(x[2], tap + 2);
        }
        wgmma_wait<0>();
        fence_accumulators(acc[0]);
      }
      mbar_arrive_if(empty + 8 * slot, lane == 0);  // this warp no longer reads the slot
    }
    if (active) {
      named_barrier(1 + wg, 128);  // the warpgroup's previous epilogue has read its staging tile
      wgmma_epilogue<T, kUnit, 64, kEpiBytes, 128>(a, acc, epi, st.m0 + wg * kUnit, st.nbk * 64, st.img, 0, 0,
                                                   ltid, [wg] { named_barrier(1 + wg, 128); });
    }
    u += st.cnt;
  }
#else
  __trap();
#endif
}

// ---- host side -------------------------------------------------------------------------------------

// The halo box and shared-memory budget of a problem (0 stages: it does not fit).
struct Geometry {
  int WB = 0, HB = 0, slices = 0, taps = 0, stages = 0, halo_bytes = 0;
  int smem = 0;
};
Geometry geometry_of(const Conv2dProblem& p) {
  Geometry g;
  const int64_t P = p.p(), Q = p.q();
  g.WB = int(std::min<int64_t>(Q + p.s - 1, 1 << 20));
  // Rows of output spanned by two units (128 pixels from a multiple of 64), at most the image's.
  const int64_t spanned = std::min<int64_t>(P, (Q - 1 + 2 * kUnit - 1) / Q + 1);
  g.HB = int(std::min<int64_t>(spanned + p.r - 1, 1 << 20));
  g.slices = int(p.c / 64);
  g.taps = int(p.r * p.s);
  const int64_t halo = (int64_t(kRowBytes) * g.WB * g.HB + kAtomBytes - 1) / kAtomBytes * kAtomBytes;
  g.halo_bytes = int(std::min<int64_t>(halo, INT_MAX));
  const int64_t fixed = int64_t(g.taps) * g.slices * kBoxBytes + 2 * kEpiBytes + 48 + kAtomBytes;
  for (int st = 2; st >= 1; --st)
    if (fixed + st * halo <= kSmemLimit) {
      g.stages = st;
      g.smem = int(fixed + st * halo);
      break;
    }
  return g;
}

Support halo_limits(const Conv2dProblem& p, DType dt) {
  if (dt != DType::f16 && dt != DType::bf16)
    return Support::no("it computes f16 and bf16 tensors (tf32 would need its activations rounded on their way "
                       "from the halo); cuda_igemm_wgmma runs tf32.");
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1)
    return Support::no("its halo holds whole rows of neighbouring pixels: stride 1 and dilation 1 only.");
  if (p.groups != 1) return Support::no("it runs one group (the halo holds every channel of a pixel).");
  if (p.c % 64 != 0) return Support::no("C must be a multiple of 64 (128-byte channel slices of the halo).");
  if (Support ok = tc_limits(p); !ok) return ok;
  if (p.q() + p.s - 1 > 256)
    return Support::no("a halo row (Q + S - 1 = " + std::to_string(p.q() + p.s - 1) +
                       " pixels) is wider than a TMA box (256).");
  const Geometry g = geometry_of(p);
  if (g.HB > 256) return Support::no("the halo is taller than a TMA box (256 rows).");
  if (g.stages == 0)
    return Support::no("the filter bank of 64 output channels (" +
                       std::to_string(int64_t(g.taps) * g.slices * kBoxBytes / 1024) + " KiB) and one halo (" +
                       std::to_string(g.halo_bytes / 1024) + " KiB) do not fit in shared memory.");
  if (p.n > INT_MAX || p.n * p.k > INT_MAX || p.n * p.h * p.w > INT_MAX)
    return Support::no("N*K or N*H*W passes 2^31 (32-bit TMA coordinates).");
  return Support::yes();
}

// The input as the 4-D tensor [N][H][W][C], boxes of 64 channels x WB columns x HB rows x 1 image.
CUtensorMap halo_map(const TcArgs& a, DType dt, const Geometry& g, int64_t n_img) {
  CUtensorMap map;
  const int es = int(dtype_size(dt));
  const cuuint64_t dims[4] = {cuuint64_t(a.C), cuuint64_t(a.W), cuuint64_t(a.H), cuuint64_t(n_img)};
  const cuuint64_t strides[3] = {cuuint64_t(a.C) * es, cuuint64_t(a.W) * a.C * es, cuuint64_t(a.H) * a.W * a.C * es};
  const cuuint32_t box[4] = {64, cuuint32_t(g.WB), cuuint32_t(g.HB), 1};
  const cuuint32_t estrides[4] = {1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, dt == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
      const_cast<void*>(a.src), dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_conv_wgmma_halo: cuTensorMapEncodeTiled failed (CUresult " +
                                            std::to_string(int(r)) + ") for the input halo " +
                                            std::to_string(g.WB) + "x" + std::to_string(g.HB) + ".");
  return map;
}

template <typename T>
void launch_halo(const TcArgs& a, const HaloArgs& h, const Geometry& g, cudaStream_t stream) {
  static std::atomic<bool> prepared{false};
  if (!prepared.load(std::memory_order_acquire)) {
    CK_CUDA(cudaFuncSetAttribute(conv_wgmma_halo_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemLimit));
    prepared.store(true, std::memory_order_release);
  }
  const DType dt = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  const CUtensorMap wmap = weight_map(a, dt, 64);
  const CUtensorMap xmap = halo_map(a, dt, g, h.n_img);
  const int grid = int(std::min<int64_t>(h.units, sm_count_of_current_device()));
  conv_wgmma_halo_kernel<T><<<grid, 384, g.smem, stream>>>(a, h, wmap, xmap);
  CK_LAUNCH("conv_wgmma_halo_kernel");
}

void run_halo(const Conv2dProblem& pb, DType dt, const TensorView& src, const TensorView& wei,
              const TensorView& dst, const Epilogue& e, cudaStream_t stream) {
  check_residual_overlap(e.residual, dst.data, dst.bytes());
  TcArgs a = make_tc_args(pb, true, src, wei, dst, e, 1, 1, 1, nullptr, 64);
  // NOTE: the per-sample form of the arguments (the epilogue addresses image b's rows as b * P*Q + m), with
  // shared weights: no per-image bias offset, and the weight map spans K rows (nb = 1; a box's rows past K
  // feed output channels never stored, or arrive as zeros past the tensor).
  a.wei_b_stride = 0, a.bias_b_stride = 0, a.nb = 1;
  const Geometry g = geometry_of(pb);
  HaloArgs h{};
  h.WB = g.WB;
  h.HB = g.HB;
  h.slices = g.slices;
  h.taps = g.taps;
  h.stages = g.stages;
  h.halo_bytes = g.halo_bytes;
  h.units_img = int(ceil_div(int64_t(a.PQ), kUnit));
  h.nblk = int(ceil_div(int64_t(a.K), 64));
  h.n_img = int(pb.n);
  h.units = int64_t(h.n_img) * h.nblk * h.units_img;
  if (dt == DType::f16)
    launch_halo<__half>(a, h, g, stream);
  else
    launch_halo<__nv_bfloat16>(a, h, g, stream);
}

class CudaConvWgmmaHalo final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_conv_wgmma_halo"; }
  std::string description() const override {
    return "Hopper wgmma with A from registers: the im2col by ldmatrix addresses from one input halo per 128 "
           "output pixels (TMA, zero padding), the 64-channel filter bank resident in shared memory, persistent "
           "warp-specialized blocks (f16/bf16; NHWC; stride 1, C % 64; sm_90a)";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_tensor_core_config(cfg); !ok) return ok;
    if (Support ok = halo_limits(p, cfg.dtype); !ok) return ok;
    if (!cuda_present()) return Support::yes();
    return require_sm90();
  }
  // The TMA reads 16-byte-aligned tensors only (a view into a larger buffer may not be).
  Support accepts(const Conv2dProblem&, const ConvConfig&, const Operands& ops) const override {
    if (ops.per_sample) return Support::no("it has no per-sample-weights mode.");
    if (ops.operand_align() < 16)
      return Support::no("the TMA needs the input and the weight 16-byte aligned (" + ops.to_string() + ").");
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem&, const ConvConfig&) const override { return 0; }
  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!can_implement(p, cfg)) return {};
    const Geometry g = geometry_of(p);
    return "halo " + std::to_string(g.WB) + "x" + std::to_string(g.HB) + " pixels (" +
           std::to_string(g.halo_bytes / 1024) + " KiB) x " + std::to_string(g.stages) + " stages, weights " +
           std::to_string(int64_t(g.taps) * g.slices * kBoxBytes / 1024) + " KiB resident, " +
           std::to_string(g.smem / 1024) + " KiB of shared memory per block";
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    if (Support ok = accepts(pb, call.config, Operands::of(call.src, call.wei, call.dst, call.epilogue)); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    run_halo(pb, call.config.dtype, call.src, call.wei, call.dst, call.epilogue, as_stream(call.stream));
  }
};

}  // namespace

const Algorithm* make_cuda_conv_wgmma_halo() {
  static CudaConvWgmmaHalo algo;
  return &algo;
}

}  // namespace convkit::detail
