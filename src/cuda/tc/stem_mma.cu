// cuda_stem_mma: convolutions of 1 to 4 input channels (the RGB stem of image models: ResNet's 7x7 stride 2,
// MobileNetV2's and EfficientNet's 3x3 stride 2, ConvNeXt's 4x4 stride 4) on tensor cores, f16/bf16 NHWC,
// fp32 accumulation; any filter size, stride, dilation and padding; one group.
//
// Adds over cuda_igemm_mma (whose gather path takes these layers: a reduction of R*S*C with pixels of 6 bytes
// that no vector load fetches): the input tile and its halo are staged once in shared memory in a layout that
// makes the im2col gather an address. A staged unit is 16 bytes: one input pixel's channels (padded to 4)
// followed by those of the pixel dil_w columns to its right, so a unit is two horizontal filter taps of an
// output pixel and a k16 step two units; an A fragment row is a unit's address (ldmatrix) at any stride.
//   - With odd S the last tap of a filter row has no partner: it reads a second staged array whose units hold
//     one pixel and zeros (a pixel outside the receptive field must not meet even a zero weight: 0 * inf).
//     7x7: 28 units for 49 taps; 3x3: 6 for 9.
//   - At an even horizontal stride every unit an output pixel reads starts at an even column, so only those
//     are staged, and consecutive output pixels read consecutive units: the 8 rows of an ldmatrix phase fall
//     on distinct banks (at stride 4, on two rows of 4 banks each).
//   - A block stages its BN output channels' filters once and walks pixel tiles (grid-stride); per tile:
//     stage, multiply, apply the epilogue on the accumulators and store.
// Work mapping: block = BN output channels (64; 32 where K <= 32) x tiles of tp x tq output pixels of one
// image (tp*tq <= 128: 8 m16 tiles); 8 warps as (8 / (BN/32)) x (BN/32); a warp kWM = BN/32 m16 tiles x 4 n8
// tiles (m16n8k16 mma.sync, A and B fragments by ldmatrix.x4). Three blocks an SM (the launch bounds cap the
// registers at 85): the kernel is latency-bound, and with two (120 registers) ncu found an eligible warp in
// 38% of the issue cycles; the third block took ResNet's 7x7 from 0.123 to 0.100 ms.
// Measured (H200, bf16 NHWC, batch 32, median, L2 flushed; docs/perf.md 2026-12-04): ResNet-50's 7x7 stride 2
// 0.100 ms (cuDNN 0.228, cuda_igemm_mma 0.155); MobileNetV2's 3x3 stride 2 to 32 channels 0.048 (cuDNN
// 0.070-0.090, cuda_igemm_mma 0.058).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/geometry.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/tc/mma_sync.cuh"

namespace convkit::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxC = 4;       // channels a staged pixel (8 bytes): a unit is two of them
constexpr int kMaxM = 128;     // output pixels a tile (8 m16 tiles)
constexpr int kUnit = 16;      // bytes a unit
constexpr int64_t kSmemBudget = 96 * 1024;

struct StPlan {
  int bn = 64;           // output channels a block
  int tp = 1, tq = 1;    // output tile: tp rows x tq columns of one image
  int ih = 1, iw = 1;    // staged rows; columns a unit may start at (halo included)
  int de = 1;            // 2: only even columns staged (even stride_w), else 1
  int iws = 1;           // units a staged row: ceil(iw / de)
  int sp = 1;            // tap pairs a filter row: ceil(S / 2)
  bool single = false;   // S odd: the second array, of one-pixel units, for the last tap of a row
  int units = 0;         // R * sp
  int steps = 0;         // k16 steps: ceil(units / 2)
  int wstride = 0;       // a filter row in units (odd: the 8 rows of an ldmatrix phase on distinct banks)
  int mtiles = 1;        // m16 tiles a tile: ceil(tp * tq / 16)
  int tiles_p = 1, tiles_q = 1;
  int64_t tiles = 0;     // N * tiles_p * tiles_q
  int tq_mul = 0;        // m / tq as (m * tq_mul) >> 16: exact for m < 128, tq <= 128
  bool pairs = false;    // the epilogue stores 2 channels as one 4-byte word (K even, dst 4-byte aligned)
  int64_t smem_in = 0;   // one staged array: ih * iws units
  int64_t smem_w = 0, smem = 0;
};

// Whole tiles of up to 128 output pixels, 16 columns wide where the output is (rows of at most 16 columns
// whole), halved (rows, then columns) until the staged arrays and the filters fit kSmemBudget.
StPlan plan_of(const Conv2dProblem& pb) {
  StPlan t;
  t.bn = pb.k <= 32 ? 32 : 64;
  t.de = pb.stride_w % 2 == 0 ? 2 : 1;
  t.sp = int((pb.s + 1) / 2);
  t.single = pb.s % 2 == 1;
  t.units = int(pb.r) * t.sp;
  t.steps = (t.units + 1) / 2;
  t.wstride = (2 * t.steps) | 1;
  t.smem_w = int64_t(t.bn) * t.wstride * kUnit;
  const int64_t P = pb.p(), Q = pb.q();
  t.tq = int(std::min<int64_t>(Q, 16));
  t.tp = int(std::max<int64_t>(1, std::min<int64_t>(P, kMaxM / t.tq)));
  for (;;) {
    t.ih = int((t.tp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1);
    t.iw = int((t.tq - 1) * pb.stride_w + 2 * (t.sp - 1) * pb.dilation_w + 1);
    t.iws = (t.iw + t.de - 1) / t.de;
    t.smem_in = int64_t(t.ih) * t.iws * kUnit;
    // the staged array(s), the filters, 16 bytes of zeros (the padding unit's A rows), the unit table
    t.smem = (t.single ? 2 : 1) * t.smem_in + t.smem_w + kUnit + int64_t(2 * t.steps) * 4;
    if (t.smem <= kSmemBudget) break;
    if (t.tp > 1) { t.tp = (t.tp + 1) / 2; continue; }
    if (t.tq > 8) { t.tq = (t.tq + 1) / 2; continue; }
    break;  // does not fit: can_implement says so
  }
  t.mtiles = (t.tp * t.tq + 15) / 16;
  t.tiles_p = int((P + t.tp - 1) / t.tp);
  t.tiles_q = int((Q + t.tq - 1) / t.tq);
  t.tiles = pb.n * t.tiles_p * t.tiles_q;
  t.tq_mul = (65536 + t.tq - 1) / t.tq;
  return t;
}

// A pixel's first C (<= 4) channels, zeros past C and outside the image, into e[0..3].
template <typename T>
__device__ __forceinline__ void st_pixel(const ConvDims& d, const T* __restrict__ src, int64_t n, int h, int w, T (&e)[8],
                                         int at) {
  const bool in = h >= 0 && h < d.h && w >= 0 && w < d.w;
  const T* g = src + ((n * d.h + h) * d.w + w) * d.c;
#pragma unroll
  for (int c = 0; c < kMaxC; ++c) e[at + c] = in && c < d.c ? g[c] : float_to_elem<T>(0.0f);
}

// The tile of image n whose first output is (p0, q0): unit (y, slot) of s_pair = the pixels at (h0 + y,
// w0 + slot * de) and dil_w columns to the right; of s_single (odd S) = the first of them and zeros.
template <typename T>
__device__ __forceinline__ void st_stage_input(const ConvDims& d, const StPlan& t, const T* __restrict__ src,
                                               unsigned char* s_pair, unsigned char* s_single, int64_t n, int p0,
                                               int q0) {
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * d.stride_w - d.pad_w;
  for (int i = threadIdx.x; i < t.ih * t.iws; i += kThreads) {
    const int y = i / t.iws, slot = i - y * t.iws;
    const int h = h0 + y, w = w0 + slot * t.de;
    T e[8];
    st_pixel(d, src, n, h, w, e, 0);
    st_pixel(d, src, n, h, w + d.dil_w, e, 4);
    uint4 v;
    memcpy(&v, e, 16);
    *reinterpret_cast<uint4*>(s_pair + i * kUnit) = v;
    if (t.single) {
#pragma unroll
      for (int c = 4; c < 8; ++c) e[c] = float_to_elem<T>(0.0f);
      memcpy(&v, e, 16);
      *reinterpret_cast<uint4*>(s_single + i * kUnit) = v;
    }
  }
}

// The filters of output channels k0 .. k0 + bn - 1 as rows of wstride units (unit (r, pair j) = taps 2j and
// 2j + 1 of filter row r, 4 channels each, zeros past C, past S, past the last unit and past K); 16 bytes of
// zeros at s_zero; the unit table: unit u -> byte offset of its staged unit from an output pixel's first
// (tap 0, 0) in s_pair (the single array lies single_delta bytes further), -1 for the padding unit.
template <typename T>
__device__ __forceinline__ void st_stage_filters(const ConvDims& d, const StPlan& t, const T* __restrict__ wei,
                                                 unsigned char* s_w, unsigned char* s_zero, int* s_unit, int k0,
                                                 int single_delta) {
  for (int i = threadIdx.x; i < t.bn * t.wstride; i += kThreads) {
    const int nl = i / t.wstride, u = i - nl * t.wstride, k = k0 + nl;
    T e[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) e[j] = float_to_elem<T>(0.0f);
    if (u < t.units && k < d.k) {
      const int r = u / t.sp, s0 = 2 * (u - r * t.sp);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int s = s0 + j / 4, c = j % 4;  // static indices: a runtime one would put e in local memory
        if (s < d.s && c < d.c) e[j] = wei[((int64_t(k) * d.r + r) * d.s + s) * d.c + c];
      }
    }
    uint4 v;
    memcpy(&v, e, 16);
    *reinterpret_cast<uint4*>(s_w + i * kUnit) = v;
  }
  if (threadIdx.x < 4) reinterpret_cast<uint32_t*>(s_zero)[threadIdx.x] = 0;
  for (int u = threadIdx.x; u < 2 * t.steps; u += kThreads) {
    int e = -1;
    if (u < t.units) {
      const int r = u / t.sp, j = u - r * t.sp;
      e = (r * d.dil_h * t.iws + (2 * j * d.dil_w) / t.de) * kUnit;
      if (t.single && j == t.sp - 1) e += single_delta;
    }
    s_unit[u] = e;
  }
}

// Block: x = a share of the pixel tiles (grid-stride), y = BN-channel block.
template <typename T, int BN>
__global__ void __launch_bounds__(kThreads, 3)
    stem_mma_kernel(ConvDims d, StPlan t, const T* __restrict__ src, const T* __restrict__ wei, T* dst,
                    DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kWarpsN = BN / 32, kWarpsM = 8 / kWarpsN, kWM = 8 / kWarpsM, kWN = 4;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* s_pair = smem;                               // [ih][iws] units
  unsigned char* s_single = smem + t.smem_in;                 // the same, one pixel a unit (odd S only)
  unsigned char* s_w = s_single + (t.single ? t.smem_in : 0);  // [bn][wstride] units
  unsigned char* s_zero = s_w + t.smem_w;                     // 16 bytes of zeros
  int* s_unit = reinterpret_cast<int*>(s_zero + kUnit);       // unit -> byte offset; padding: -1

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int k0 = blockIdx.y * BN;
  st_stage_filters(d, t, wei, s_w, s_zero, s_unit, k0, int(t.smem_in));

  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const bool active = wm * kWM < t.mtiles;
  const int n_base = wn * kWN * 8;  // the warp's first output channel in the block
  const int b_row = n_base + (lane & 7) + ((lane >> 4) & 1) * 8, b_unit = (lane >> 3) & 1;
  const uint32_t w_addr = uint32_t(__cvta_generic_to_shared(s_w)) + uint32_t((b_row * t.wstride + b_unit) * kUnit);
  const uint32_t in_addr = uint32_t(__cvta_generic_to_shared(s_pair));
  const uint32_t zero_addr = uint32_t(__cvta_generic_to_shared(s_zero));
  const int a_unit = lane >> 4;
  // A rows: lane l reads row l % 8 of matrix l / 8: pixel (l % 8) + 8 * ((l / 8) % 2) of an m16 tile (past
  // the tile: pixel 0, computed and never stored), at its first unit (tap 0, 0)
  int arow[kWM];
#pragma unroll
  for (int i = 0; i < kWM; ++i) {
    int m = (wm * kWM + i) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    if (m >= t.tp * t.tq) m = 0;
    const int py = (m * t.tq_mul) >> 16, px = m - py * t.tq;
    arow[i] = (py * d.stride_h * t.iws + (px * d.stride_w) / t.de) * kUnit;
  }

  for (int tile = blockIdx.x; tile < int(t.tiles); tile += gridDim.x) {  // tiles < 2^31 (can_implement)
    const int tq_i = tile % t.tiles_q;
    const int rest = tile / t.tiles_q;
    const int tp_i = rest % t.tiles_p;
    const int64_t n = rest / t.tiles_p;
    const int p0 = tp_i * t.tp, q0 = tq_i * t.tq;
    __syncthreads();  // the previous tile's A reads are done (and, the first time, the filters are staged)
    st_stage_input(d, t, src, s_pair, s_single, n, p0, q0);
    __syncthreads();
    if (!active) continue;

    float acc[kWM][kWN][4];
    zero_fragments(acc);
    for (int step = 0; step < t.steps; ++step) {
      const int ue = s_unit[2 * step + a_unit];
      uint32_t b[kWN][2];
#pragma unroll
      for (int j = 0; j < kWN; j += 2) {
        uint32_t r4[4];
        ldmatrix_x4(r4, w_addr + uint32_t(step * 2 * kUnit + j * 8 * t.wstride * kUnit));
        b[j][0] = r4[0], b[j][1] = r4[1], b[j + 1][0] = r4[2], b[j + 1][1] = r4[3];
      }
#pragma unroll
      for (int i = 0; i < kWM; ++i) {
        uint32_t a[4];
        ldmatrix_x4(a, ue < 0 ? zero_addr : in_addr + uint32_t(ue + arow[i]));
#pragma unroll
        for (int j = 0; j < kWN; ++j) Mma<T>::run(acc[i][j], a, b[j]);
      }
    }

    // C fragment: lane l holds rows l / 4 and l / 4 + 8, columns 2 * (l % 4) + 0, 1 of each 16 x 8 tile.
#pragma unroll
    for (int i = 0; i < kWM; ++i)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int m = (wm * kWM + i) * 16 + lane / 4 + hf * 8;
        if (m >= t.tp * t.tq) continue;
        const int py = (m * t.tq_mul) >> 16, px = m - py * t.tq, p = p0 + py, q = q0 + px;
        if (p >= d.p || q >= d.q) continue;
        const int64_t o = ((n * d.p + p) * d.q + q) * d.k;
#pragma unroll
        for (int j = 0; j < kWN; ++j) {
          const int k = k0 + n_base + j * 8 + 2 * (lane % 4);
          if (k < d.k) store_pair(dst, epi, o, k, d.k, acc[i][j][hf * 2], acc[i][j][hf * 2 + 1], t.pairs);
        }
      }
  }
}

template <typename T, int BN>
void launch_bn(const ConvCall& call, StPlan t) {
  const Conv2dProblem& pb = call.problem;
  t.pairs = pb.k % 2 == 0 && reinterpret_cast<uintptr_t>(call.dst.data) % 4 == 0;
  const unsigned kblocks = unsigned((pb.k + BN - 1) / BN);
  auto kernel = stem_mma_kernel<T, BN>;
  const void* kp = reinterpret_cast<const void*>(kernel);
  opt_in_dynamic_smem(kp, t.smem);
  // as many blocks as are resident at once, shared by the channel blocks; each walks its share of the tiles
  const int64_t slots = int64_t(blocks_per_sm(kp, kThreads, t.smem)) * sm_count_of_current_device();
  const int64_t per_kblock = std::clamp<int64_t>((slots + kblocks - 1) / kblocks, 1, t.tiles);
  launch_pdl(kernel, dim3(unsigned(per_kblock), kblocks), dim3(kThreads), size_t(t.smem), as_stream(call.stream),
             make_dims(pb), t, static_cast<const T*>(call.src.data), static_cast<const T*>(call.wei.data),
             static_cast<T*>(call.dst.data), DeviceEpilogue<T>::from(call.epilogue));
  CK_LAUNCH("stem_mma_kernel");
}

template <typename T>
void launch(const ConvCall& call) {
  if (call.problem.output_elems() == 0) return;
  const StPlan t = plan_of(call.problem);
  if (t.bn == 32) return launch_bn<T, 32>(call, t);
  launch_bn<T, 64>(call, t);
}

class CudaStemMma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_stem_mma"; }
  std::string description() const override {
    return "convolutions of 1-4 input channels (image stems) on tensor cores (mma.sync): the input tile staged "
           "once as 16-byte units of two horizontal taps, so the im2col gather is an address; any filter, "
           "stride, dilation and padding; f16/bf16 NHWC, one group";
  }
  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (pb.c > kMaxC) return Support::no("it computes layers of at most 4 input channels (image stems).");
    if (pb.groups != 1) return Support::no("it computes ungrouped convolutions only.");
    if (cfg.layout != Layout::nhwc) return Support::no("it reads NHWC tensors only.");
    if (cfg.dtype == DType::f32) return Support::no("it computes f16/bf16 tensors only (fp32 accumulation).");
    if (Support s = dims_fit_int(pb); !s) return s;
    const StPlan t = plan_of(pb);
    if (t.smem > kSmemBudget)
      return Support::no("the dilated filter extent is too large: the smallest tile needs " + std::to_string(t.smem) +
                         " bytes of shared memory (" + std::to_string(kSmemBudget) + " available).");
    if ((pb.k + t.bn - 1) / t.bn > 65535) return Support::no("more than 65535 channel blocks (grid.y).");
    if (t.tiles >= (int64_t(1) << 31)) return Support::no("2^31 pixel tiles or more (a 32-bit tile index).");
    return Support::yes();
  }
  // NOTE: where auto picks it (bf16 on the H200 against cuda_igemm_mma, the next in line; bench/shapes/stems.txt,
  // docs/perf.md 2026-12-04): every stem of one channel block (K <= 64) with two pixel tiles an SM or more.
  // Batch 32: ResNet's 7x7 stride 2 0.100 ms against 0.155, MobileNetV2's 3x3 stride 2 to 32 channels 0.048
  // against 0.058, MobileNetV3's to 16 0.038 against 0.057. cuda_igemm_mma won ConvNeXt's 4x4 stride 4 to 96
  // channels (0.042 against 0.062: two channel blocks, each staging the input) and the 7x7 at batch 1 (98
  // tiles on 132 SMs: 0.014 against 0.020).
  Support heuristic_choice(const Conv2dProblem& pb, const ConvConfig&, const Operands&) const override {
    if (pb.k > 64)
      return Support::no("more than 64 filters: each channel block stages the input again, and cuda_igemm_mma "
                         "was faster there.");
    if (cuda_present() && plan_of(pb).tiles < 2 * int64_t(sm_count_of_current_device()))
      return Support::no("fewer than two pixel tiles an SM: cuda_igemm_mma's smaller tiles were faster there.");
    return Support::yes();
  }
  std::string detail(const Conv2dProblem& pb, const ConvConfig&) const override {
    const StPlan t = plan_of(pb);
    return std::to_string(t.tp) + "x" + std::to_string(t.tq) + " outputs x " + std::to_string(t.bn) +
           " channels a tile, " + std::to_string(t.units) + " units of two taps (" + std::to_string(t.steps) +
           " k16 steps), " + std::to_string(t.smem / 1024) + " KiB smem";
  }
  void run(const ConvCall& call) const override {
    if (Support ok = can_implement(call.problem, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + call.problem.to_string() + ": " + ok.reason);
    if (!call.variant.empty())
      throw Error(StatusCode::invalid_problem, name() + " has no variants (asked for '" + call.variant + "').");
    check_residual_overlap(call.epilogue.residual, call.dst.data,
                           size_t(call.problem.output_elems()) * dtype_size(call.config.dtype));
    switch (call.config.dtype) {
      case DType::f16: launch<__half>(call); break;
      case DType::bf16: launch<__nv_bfloat16>(call); break;
      case DType::f32: throw Error(StatusCode::unsupported, "cuda_stem_mma computes f16/bf16 only.");
    }
  }
};

}  // namespace

const Algorithm* make_cuda_stem_mma() {
  static CudaStemMma algo;
  return &algo;
}

}  // namespace convkit::detail
