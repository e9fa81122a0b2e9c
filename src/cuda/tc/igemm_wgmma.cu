// cuda_igemm_wgmma: Hopper's warpgroup MMA (wgmma.mma_async) fed by a multi-stage pipeline into 128-byte-
// swizzled shared memory; weights by the tensor memory accelerator (TMA), activations by TMA (a plain matrix
// for unpadded 1x1, the TMA's im2col mode where each stage lies in one filter tap) or gathered by cp.async.
// fp16 / bf16 tensors, and fp32 tensors in tf32 math (rounded to nearest even: the weights once per call
// into the workspace, the activations stage by stage); fp32 accumulation; NHWC activations, KRSC weights;
// per-sample weights (ConvCall::per_sample) too. sm_90a only: built as its own object, run only on devices of
// compute capability 9.0 (H100, H200).
//
// What it adds over cuda_igemm_mma (one idea: Hopper's own tensor-core path): wgmma reads both operands
// from shared memory through matrix descriptors, asynchronously (one group of multiplies in flight while the
// next stage loads), and the TMA moves whole swizzled boxes with one thread. Three kernels, one per file:
//  - igemm_wgmma_gather.cuh: BM/64 warpgroups, each 64 rows x BN of the tile; the threads gather the
//    activations (cp.async) where no TMA form applies; split-K where one wave would leave SMs idle;
//  - igemm_wgmma_ws.cuh: warp-specialized, a producer warpgroup keeps 4-8 TMA stages in flight;
//  - igemm_wgmma_persistent.cuh: one block per SM walks the output tiles, stores by TMA, overlapping a
//    tile's epilogue with the next tile's loads (16-bit, one group, no split-K).
// Work mapping: grid x = pixel tiles (N*P*Q / BM), y = channel tiles (K/groups / BN), z = (batch entry *
// groups) * splits; the persistent kernel takes one block per SM instead. The tile table, the fitted cost
// model and the variant -> kernel table are below ("tiles and plans"); the tap walk, the general epilogue
// and split-K's partials are in igemm_tc.cuh (shared with cuda_igemm_mma).
// Refused (accepts(), so the planner picks cuda_igemm_mma): input or weight not 16-byte aligned; and by
// can_implement: C/groups % 8 != 0 (% 4 for tf32).
//
// measured (H200, 2026-12-01, bf16 NHWC, batch 32, tuned variants, vs cuDNN's best engine in the same
// process): ResNet-50 layers 0.86x geomean; 2026-12-04, the heuristic's variants: the 24 1x1 layers of
// ResNet-50 and ResNeXt-50 0.70-0.97x (geomean 0.84x). The steps that led here, and what was tried and
// removed, are in docs/perf.md and docs/kernels.md.
#include <cuda.h>  // CUtensorMap (the driver's encoder is reached through the runtime: no -lcuda)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/overrides.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/tc/igemm_tc.cuh"
#include "cuda/tc/splitk_reduce.cuh"
#include "cuda/tc/wgmma_common.cuh"

#include "cuda/tc/igemm_wgmma_gather.cuh"
#include "cuda/tc/igemm_wgmma_ws.cuh"
#include "cuda/tc/igemm_wgmma_persistent.cuh"

namespace convkit::detail {
namespace {

// tf32: the weights rounded once per call, into the workspace (the kernel's TMA reads them from there).
__global__ void __launch_bounds__(256) round_to_tf32_kernel(const uint4* __restrict__ in, uint4* __restrict__ out,
                                                            int64_t n4) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = in[i];
    out[i] = make_uint4(tf32_rne_bits(v.x), tf32_rne_bits(v.y), tf32_rne_bits(v.z), tf32_rne_bits(v.w));
  }
#endif
}

// ---- tiles and plans -------------------------------------------------------------------------------

PFN_cuTensorMapEncodeIm2col_v12000 im2col_map_encoder() {
  static const auto fn = driver_function<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
  return fn;
}
// of one stage's k x box_rows rows, 128-byte swizzle (the layout the threads' gather writes).
CUtensorMap activation_map(const TcArgs& a, DType dt, int box_rows) {
  CUtensorMap map;
  const int es = int(dtype_size(dt));
  const cuuint64_t dims[2] = {cuuint64_t(a.C), cuuint64_t(a.Mtot)};
  const cuuint64_t strides[1] = {cuuint64_t(a.C) * es};  // (C*es % 16 == 0, see can_implement)
  const cuuint32_t box[2] = {cuuint32_t(bke_of(es)), cuuint32_t(box_rows)};
  const cuuint32_t estrides[2] = {1, 1};
  const CUtensorMapDataType type = dt == DType::f16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = tensor_map_encoder()(&map, type, 2, const_cast<void*>(a.src), dims, strides, box, estrides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_igemm_wgmma: cuTensorMapEncodeTiled failed (CUresult " +
                                            std::to_string(int(r)) + ") for the activations [" +
                                            std::to_string(a.Mtot) + "][" + std::to_string(a.C) + "].");
  return map;
}

// The output (or the residual, of the same shape) of the persistent tiles as the 3-D tensor [nb][Mb][K] (one
// group, 16-bit; nb = N with per-sample weights, else 1), boxes of 64 rows x 64 channels (128 bytes) of one
// batch entry in the 128-byte swizzle (the staging buffers' layout): a box's rows past its image are
// neither written nor read (zeros).
CUtensorMap output_map(const TcArgs& a, DType dt, const void* data, const char* what) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(a.K), cuuint64_t(a.Mb), cuuint64_t(a.nb)};
  const cuuint64_t strides[2] = {cuuint64_t(a.K) * 2, cuuint64_t(a.Mb) * a.K * 2};  // (K % 8 == 0: persistent_out_mode)
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint32_t estrides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, dt == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
      const_cast<void*>(data), dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, std::string("cuda_igemm_wgmma: cuTensorMapEncodeTiled failed (CUresult ") +
                                            std::to_string(int(r)) + ") for the " + what + " [" +
                                            std::to_string(a.nb) + "][" + std::to_string(a.Mb) + "][" +
                                            std::to_string(a.K) + "].");
  return map;
}
// The persistent kernel's epilogue (its out_mode): 1 (by TMA) or 2 (by TMA, the residual too), any
// activation, where the tensor maps can describe the output and the residual (16-byte aligned,
// K % 8 == 0, 32-bit row coordinates; the bias 4-byte aligned); else 0 (the threads store, as the other
// kernels).
int persistent_out_mode(const TcArgs& a) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.K % 8 != 0 || !aligned(a.dst) || a.Mb > INT_MAX ||
      reinterpret_cast<uintptr_t>(a.bias) % 4 != 0)  // (the bias read in pairs)
    return 0;
  if (a.residual == nullptr) return 1;
  return aligned(a.residual) ? 2 : 0;
}

// The activations of any other convolution whose stages each lie inside one filter tap (C/groups a multiple
// of one stage's 128 bytes of k) as the 4-D tensor [N][H][W][C] in the TMA's im2col mode: boxes of box_rows
// output pixels x 128 bytes of channels. The pixel box is where the traversal's window origins lie (the
// first output pixel's origin is -pad, the last one's (P-1)*stride - pad: the upper corner is that minus
// H-1), the element strides are the convolution's, and a load adds its tap's offsets (r*dil, s*dil).
// Corners are listed innermost dimension first (W, then H), as the dimensions.
CUtensorMap im2col_map(const TcArgs& a, DType dt, int box_rows) {
  CUtensorMap map;
  const int es = int(dtype_size(dt));
  const int64_t n_img = a.Mtot / a.PQ, P = a.PQ / a.Q;
  const cuuint64_t dims[4] = {cuuint64_t(a.C), cuuint64_t(a.W), cuuint64_t(a.H), cuuint64_t(n_img)};
  const cuuint64_t strides[3] = {cuuint64_t(a.C) * es, cuuint64_t(a.W) * a.C * es, cuuint64_t(a.H) * a.W * a.C * es};
  const int lower[2] = {-a.pad_w, -a.pad_h};
  const int upper[2] = {(a.Q - 1) * a.stride_w - a.pad_w - (a.W - 1), int(P - 1) * a.stride_h - a.pad_h - (a.H - 1)};
  const cuuint32_t estrides[4] = {1, cuuint32_t(a.stride_w), cuuint32_t(a.stride_h), 1};
  const CUtensorMapDataType type = dt == DType::f16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = im2col_map_encoder()(&map, type, 4, const_cast<void*>(a.src), dims, strides, lower, upper,
                                          cuuint32_t(bke_of(es)), cuuint32_t(box_rows), estrides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_igemm_wgmma: cuTensorMapEncodeIm2col failed (CUresult " +
                                            std::to_string(int(r)) + ") for the activations [" +
                                            std::to_string(n_img) + "][" + std::to_string(a.H) + "][" +
                                            std::to_string(a.W) + "][" + std::to_string(a.C) + "].");
  return map;
}

// How A reaches shared memory (TcArgs::a_by_tma, a_im2col).
//  - as a plain matrix, by TMA: 1x1, stride 1, no padding, one group, fewer than 2^31 pixels (32-bit box
//    coordinates);
//  - by the TMA's im2col mode: every stage inside one filter tap (C/groups % 64 for 16-bit types, % 32 for
//    tf32), and the geometry inside what the tensor map encodes: pixel-box corners in [-128, 127], strides
//    <= 8, tap offsets below 128 (this kernel's limit; the PTX offsets are 16-bit), 32-bit coordinates;
//  - gathered by the threads (cp.async) otherwise.
// CONVKIT_WGMMA_A_TMA=0 turns both TMA forms off, CONVKIT_WGMMA_IM2COL=0 the second (for comparisons).
enum class ALoad { gather, matrix, im2col };
ALoad a_load_of(const Conv2dProblem& p, DType dt) {
  static const bool tma_on = [] {
    const char* e = env_override("CONVKIT_WGMMA_A_TMA");
    return e == nullptr || std::string(e) != "0";
  }();
  static const bool im2col_on = [] {
    const char* e = env_override("CONVKIT_WGMMA_IM2COL");
    return e == nullptr || std::string(e) != "0";
  }();
  if (!tma_on) return ALoad::gather;
  if (p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 && p.groups == 1 &&
      p.n * p.h * p.w < (int64_t(1) << 31))
    return ALoad::matrix;
  if (!im2col_on || p.c_per_group() % bke_of(int(dtype_size(dt))) != 0) return ALoad::gather;
  auto corner_ok = [](int64_t v) { return v >= -128 && v <= 127; };
  const int64_t up_w = (p.q() - 1) * p.stride_w - p.pad_w - (p.w - 1);
  const int64_t up_h = (p.p() - 1) * p.stride_h - p.pad_h - (p.h - 1);
  if (!corner_ok(-p.pad_w) || !corner_ok(-p.pad_h) || !corner_ok(up_w) || !corner_ok(up_h)) return ALoad::gather;
  if (p.stride_h > 8 || p.stride_w > 8) return ALoad::gather;
  if ((p.r - 1) * p.dilation_h > 127 || (p.s - 1) * p.dilation_w > 127) return ALoad::gather;
  if (p.n > INT_MAX || p.c > INT_MAX) return ALoad::gather;
  return ALoad::im2col;
}
bool a_by_tma(const Conv2dProblem& p, DType dt) { return a_load_of(p, dt) != ALoad::gather; }
void set_a_load(TcArgs& a, const Conv2dProblem& p, DType dt) {
  const ALoad l = a_load_of(p, dt);
  a.a_by_tma = l != ALoad::gather;
  a.a_im2col = l == ALoad::im2col;
}

// A kernel of the table: the gathering one (kWs false) or the warp-specialized one, its threads and its
// dynamic shared memory.
using KernelFn = void (*)(const TcArgs, const CUtensorMap, const CUtensorMap);
template <typename T, int BM, int BN, int ST, bool kWs>
constexpr KernelFn kernel_fn() {
  if constexpr (kWs)
    return igemm_wgmma_ws_kernel<T, BM, BN, ST>;
  else
    return igemm_wgmma_kernel<T, BM, BN, ST>;
}
template <typename T, int BM, int BN, int ST, bool kWs>
struct KernelOf {
  static constexpr KernelFn fn = kernel_fn<T, BM, BN, ST, kWs>();
  static constexpr int threads = BM / 64 * 128 + (kWs ? 128 : 0);
  static constexpr int smem = kWs ? ws_smem_bytes<BM, BN, ST>() : smem_bytes<BM, BN, ST>();
};

template <typename T, int BM, int BN, int ST, bool kWs>
void prepare_kernel() {
  using K = KernelOf<T, BM, BN, ST, kWs>;
  static std::atomic<bool> done{false};
  if (!done.load(std::memory_order_acquire)) {
    CK_CUDA(cudaFuncSetAttribute(K::fn, cudaFuncAttributeMaxDynamicSharedMemorySize, K::smem));
    done.store(true, std::memory_order_release);
  }
}

template <typename T, int BM, int BN, int ST, bool kWs>
void launch_tile(const TcArgs& a, dim3 grid, cudaStream_t stream, bool /*aligned: always, see run()*/) {
  using K = KernelOf<T, BM, BN, ST, kWs>;
  prepare_kernel<T, BM, BN, ST, kWs>();
  const DType dt = std::is_same_v<T, __half> ? DType::f16 : std::is_same_v<T, float> ? DType::f32 : DType::bf16;
  const CUtensorMap map = weight_map(a, dt, BN);
  const CUtensorMap amap = a.a_im2col   ? im2col_map(a, dt, BM)
                           : a.a_by_tma ? activation_map(a, dt, BM)
                                        : map;  // (unread unless a_by_tma)
  if (a.tile_counts == nullptr) {
    launch_pdl(K::fn, dim3(grid), dim3(K::threads), size_t(K::smem), stream, a, map, amap);
    return;
  }
  // Split-K summed in the kernel: the splits of a tile wait for each other, so every block must be resident
  // at once (a cooperative launch refuses a grid that cannot be).
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(unsigned(K::threads));
  cfg.dynamicSmemBytes = size_t(K::smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK_CUDA(cudaLaunchKernelEx(&cfg, K::fn, a, map, amap));
}

// A persistent tile: one block per SM (at most one per output tile), each walking the tiles; the planner
// hands it grids of one group and one split (grid.z = the batch entries).
template <typename T, int BM, int BN, int ST>
void launch_persistent_tile(const TcArgs& a, dim3 grid, cudaStream_t stream, bool /*aligned*/) {
  constexpr auto fn = igemm_wgmma_persistent_kernel<T, BM, BN, ST>;
  constexpr int threads = BM / 64 * 128 + 128, smem = persistent_smem_bytes<BM, BN, ST>();
  static std::atomic<bool> prepared{false};
  if (!prepared.load(std::memory_order_acquire)) {
    CK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if constexpr (persistent_rebalanced(BM, BN)) {
      // (setmaxnreg: the consumers' increase is covered only by a block given 65536 / threads registers)
      cudaFuncAttributes attr{};
      CK_CUDA(cudaFuncGetAttributes(&attr, fn));
      if (attr.numRegs * threads < kPersistentProducerRegs * 128 + kPersistentConsumerRegs * (threads - 128))
        throw Error(StatusCode::internal,
                    "cuda_igemm_wgmma: the " + std::to_string(BM) + "x" + std::to_string(BN) +
                        " persistent kernel was compiled for " + std::to_string(attr.numRegs) +
                        " registers a thread, too few for its producer/consumer register split");
    }
    prepared.store(true, std::memory_order_release);
  }
  const DType dt = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  const CUtensorMap map = weight_map(a, dt, BN);
  const CUtensorMap amap = a.a_im2col ? im2col_map(a, dt, BM) : activation_map(a, dt, BM);
  const int out_mode = persistent_out_mode(a);
  const CUtensorMap omap = out_mode > 0 ? output_map(a, dt, a.dst, "output") : map;  // (unread in mode 0)
  const CUtensorMap rmap = out_mode == 2 ? output_map(a, dt, a.residual, "residual") : map;  // (only in mode 2)
  // CONVKIT_WGMMA_PERSISTENT_BLOCKS=n caps the grid (the GPU check runs the tensor-core sweeps with 1: one
  // block then walks every tile of a problem, its slots and staging areas reused across tiles).
  static const int cap = [] {
    const char* e = env_override("CONVKIT_WGMMA_PERSISTENT_BLOCKS");
    return e != nullptr && std::atoi(e) > 0 ? std::atoi(e) : INT_MAX;
  }();
  const int64_t tiles = int64_t(grid.x) * grid.y * grid.z;
  const unsigned blocks = unsigned(std::min<int64_t>({tiles, sm_count_of_current_device(), cap}));
  launch_pdl(fn, dim3(blocks), dim3(threads), size_t(smem), stream, a, map, amap, omap, rmap, out_mode);
}
int one_block_per_sm() { return 1; }

template <typename T, int BM, int BN, int ST, bool kWs>
int blocks_per_sm_of_tile() {
  using K = KernelOf<T, BM, BN, ST, kWs>;
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n == 0) {
    prepare_kernel<T, BM, BN, ST, kWs>();
    CK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, K::fn, K::threads, K::smem));
    n = std::max(n, 1);
    cached.store(n, std::memory_order_relaxed);
  }
  return n;
}

constexpr int kNumGatherTiles = 8;  // the first tiles of the table: the gathering kernel's
constexpr int kNumTiles = 22;       // then the warp-specialized and persistent kernels' (activations by TMA only)
constexpr int kNumExtraTiles = 11;  // the table's last entries, extra_tile(0..10)
// The tiles of T's table: after the gathering and warp-specialized ones, 128x256 warp-specialized for tf32,
// the persistent tiles for 16-bit types.
// NOTE: 128x256 warp-specialized in 16-bit types spilled 32 bytes (the short epilogue's registers on top of
// 128 accumulators within 168 registers), as did 256x128 (640 threads: at most 96 registers each); neither
// is built. A persistent 64x64 tile with 4 stages at two blocks an SM (83 KB, 123 registers) ran the 1x1
// layers of MobileNetV2 and EfficientNet-B0 at 0.82-0.85x these tiles' sums (H100, 2026-12-06; 0.60x at
// 16 -> 96 on 112x112, where its second column tile is half empty), so it is not built either.
template <typename T>
constexpr int num_tiles() {
  return std::is_same_v<T, float> ? kNumTiles - kNumExtraTiles + 1 : kNumTiles;
}
// The table's last entries: (tf32) 128x256 warp-specialized and copies of it, never offered; (16-bit) the
// persistent tiles, a wave being one tile per SM.
// NOTE: the persistent tiles' costs are a least-squares fit (relative error) to `convkit tune --verbose` on
// bf16 ResNet-50 (H200, 2026-11-30, 2026-11-30, commit 2b689a8; median error 6-10%); with them the picks are within 1.4%
// of the best measured variant (geomean; the picks without these tiles: 15% slower than that best).
template <typename T>
Tile extra_tile(int i) {
  if constexpr (std::is_same_v<T, float>) {
    return {128, 256, 12, 7.51, 0.89 * 0.8, launch_tile<T, 128, 256, 4, true>, blocks_per_sm_of_tile<T, 128, 256, 4, true>, 4};
  } else {
    if (i == 0) return {128, 128, 12, 2.03, 0.518, launch_persistent_tile<T, 128, 128, 4>, one_block_per_sm, 4, true};
    if (i == 1) return {128, 64, 12, 0.99, 0.397, launch_persistent_tile<T, 128, 64, 6>, one_block_per_sm, 6, true};
    // Tiles as wide as a 1x1 layer's whole K (32: K = 16, 24, 32; 96; 144), so that no column past K is
    // multiplied, activated and staged (a 128-wide tile at K = 96 spends a quarter of its epilogue on nothing;
    // two at K = 144, 44%), and the pixels are read once. They run only where they are the one column tile
    // (for_each_plan). (192 columns spilled 28 bytes at 96 accumulators; K = 192 is three 128x64 tiles.)
    // Their costs are ones the wave model never prefers: rule_plan picks them by a rule, where
    // they were measured; elsewhere only a named variant (or the tuner) runs them.
    constexpr double kUnmeasured = 1e6;
    if (i == 2) return {128, 32, 12, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 128, 32, 6>, one_block_per_sm, 6, true};
    if (i == 3) return {128, 96, 12, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 128, 96, 4>, one_block_per_sm, 4, true};
    if (i == 4) return {128, 144, 12, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 128, 144, 3>, one_block_per_sm, 3, true};
    // 256 rows (four consumer warpgroups) for the narrow layers of many pixels: a tile carries twice the
    // bytes for the same fixed costs, and twice the warps wait on memory. 16 columns (K <= 16) as one n16
    // wgmma block, at 128 and 256 rows.
    if (i == 5) return {256, 32, 20, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 256, 32, 4>, one_block_per_sm, 4, true};
    if (i == 6) return {128, 16, 12, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 128, 16, 6>, one_block_per_sm, 6, true};
    if (i == 7) return {256, 16, 20, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 256, 16, 4>, one_block_per_sm, 4, true};
    // 192 rows of 96 columns (three consumer warpgroups, three stages: 204 KB; 256 rows spilled 124 bytes at
    // 96 registers) and 256 rows of 64 (three stages: 194 KB), chosen by rule_plan's rules too.
    if (i == 8) return {192, 96, 16, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 192, 96, 3>, one_block_per_sm, 3, true};
    if (i == 9) return {256, 64, 20, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 256, 64, 3>, one_block_per_sm, 3, true};
    // 192 rows of 128 columns (three stages: 223 KB; its consumers take the producer's registers:
    // persistent_rebalanced) for deep layers whose 128-row tiles leave a last round mostly empty
    // (tall_128_tile_wins).
    return {192, 128, 16, kUnmeasured, kUnmeasured, launch_persistent_tile<T, 192, 128, 3>, one_block_per_sm, 3, true};
  }
}

// The variant -> kernel table, row by row (the variant is the name then /k<splits>; kernels' template
// arguments: T, BM, BN, stages):
//   128x128w8      igemm_wgmma_kernel<T, 128, 128, 4>             igemm_wgmma_gather.cuh
//   128x256w8      igemm_wgmma_kernel<T, 128, 256, 4>
//   256x128w16     igemm_wgmma_kernel<T, 256, 128, 4>
//   128x64w8       igemm_wgmma_kernel<T, 128, 64, 4>
//   64x128w4       igemm_wgmma_kernel<T, 64, 128, 4>
//   64x64w4        igemm_wgmma_kernel<T, 64, 64, 4>
//   128x128w8s3    igemm_wgmma_kernel<T, 128, 128, 3>
//   128x64w8s3     igemm_wgmma_kernel<T, 128, 64, 3>
//   128x64w12s8    igemm_wgmma_ws_kernel<T, 128, 64, 8>           igemm_wgmma_ws.cuh
//   128x128w12s6   igemm_wgmma_ws_kernel<T, 128, 128, 6>
//   128x64w12s4    igemm_wgmma_ws_kernel<T, 128, 64, 4>
//   128x256w12s4   igemm_wgmma_ws_kernel<float, 128, 256, 4>      (tf32 only; extra_tile)
//   128x128w12s4p  igemm_wgmma_persistent_kernel<T, 128, 128, 4>  igemm_wgmma_persistent.cuh (16-bit only)
//   128x64w12s6p   igemm_wgmma_persistent_kernel<T, 128, 64, 6>   (16-bit only)
//   128x32w12s6p   igemm_wgmma_persistent_kernel<T, 128, 32, 6>   (16-bit only; K <= 32)
//   128x96w12s4p   igemm_wgmma_persistent_kernel<T, 128, 96, 4>   (16-bit only; K <= 96)
//   128x144w12s3p  igemm_wgmma_persistent_kernel<T, 128, 144, 3>  (16-bit only; K <= 144)
//   256x32w20s4p   igemm_wgmma_persistent_kernel<T, 256, 32, 4>   (16-bit only; K <= 32)
//   128x16w12s6p   igemm_wgmma_persistent_kernel<T, 128, 16, 6>   (16-bit only; K <= 16)
//   256x16w20s4p   igemm_wgmma_persistent_kernel<T, 256, 16, 4>   (16-bit only; K <= 16)
//   192x96w16s3p   igemm_wgmma_persistent_kernel<T, 192, 96, 3>   (16-bit only; K <= 96)
//   256x64w20s3p   igemm_wgmma_persistent_kernel<T, 256, 64, 3>   (16-bit only)
//   192x128w16s3p  igemm_wgmma_persistent_kernel<T, 192, 128, 3>  (16-bit only)
template <typename T>
const std::array<Tile, kNumTiles>& tiles() {
  // 1, 2 or 4 warpgroups of 64 rows. 4 stages: one block per SM (128x256, 256x128, 128x128), two (128x64,
  // 64x128) or three (64x64). 3 stages (one load ahead), compiled for two 128x128 or three 128x64 blocks
  // per SM (__launch_bounds__: <= 128 and <= 85 registers): a block's epilogue and pipeline fill overlap
  // another's multiplies. They win on most layers with k <= 1152 (bf16 ResNet-50: 0.68x -> 0.69x cuDNN
  // for this kernel alone, 1x1 64->64 at 56x56 0.0207 -> 0.0165 ms).
  // NOTE: 3 stages for 128x128 once ran 33% slower (3x3 256@14): without the register bound the compiler
  // used more than 128 registers, so the second block never fitted.
  // NOTE: wave_us and slice_us (per 128-byte k stage) are a least-squares fit (relative error) of 191 bf16
  // timings of every variant on the ResNet-50 and seed layers (H200, 2026-11-29, `convkit tune --verbose`;
  // median error 6-12% per tile; the picks are within 2% of the best measured variant in geomean). tf32 and
  // f16 use the same costs.
  // NOTE: tf32 on the warp-specialized tiles rounds the activations in registers (multiply_stage_tf32_rs):
  // their per-slice cost is 0.8x the 16-bit fit in tf32 (grid search, as tile_set()'s split costs).
  constexpr double kWsTf32 = std::is_same_v<T, float> ? 0.8 : 1.0;
  static const std::array<Tile, kNumTiles> t = {{
      {128, 128, 8, 5.28, 0.564, launch_tile<T, 128, 128, 4, false>, blocks_per_sm_of_tile<T, 128, 128, 4, false>},
      {128, 256, 8, 7.51, 0.955, launch_tile<T, 128, 256, 4, false>, blocks_per_sm_of_tile<T, 128, 256, 4, false>},
      {256, 128, 16, 7.36, 1.075, launch_tile<T, 256, 128, 4, false>, blocks_per_sm_of_tile<T, 256, 128, 4, false>},
      {128, 64, 8, 5.55, 0.638, launch_tile<T, 128, 64, 4, false>, blocks_per_sm_of_tile<T, 128, 64, 4, false>},
      {64, 128, 4, 5.24, 0.558, launch_tile<T, 64, 128, 4, false>, blocks_per_sm_of_tile<T, 64, 128, 4, false>},
      {64, 64, 4, 4.12, 0.612, launch_tile<T, 64, 64, 4, false>, blocks_per_sm_of_tile<T, 64, 64, 4, false>},
      {128, 128, 8, 6.84, 1.056, launch_tile<T, 128, 128, 3, false>, blocks_per_sm_of_tile<T, 128, 128, 3, false>, 3},
      {128, 64, 8, 6.44, 1.116, launch_tile<T, 128, 64, 3, false>, blocks_per_sm_of_tile<T, 128, 64, 3, false>, 3},
      // Warp-specialized (w = consumer warps + the producer warpgroup's 4): 8, 6 and 4 stages fill one SM's shared memory;
      // 4 stages of 128x64 leave room for a second block.
      // NOTE: their costs are fitted the same way to the bf16 and f16 timings of `convkit tune --verbose`
      // (H200, 2026-11-29, 2026-11-29, commit a2279b1; median error 9-14%); 128x256w12s4 (tf32 only) has the gathering
      // 128x256's wave part and its slice part times the two kernels' measured tf32 ratio (0.93). The picks are
      // within 2% of the best measured variant (geomean, ResNet-50 bf16, f16 and tf32).
      {128, 64, 12, 2.69, 0.420 * kWsTf32, launch_tile<T, 128, 64, 8, true>, blocks_per_sm_of_tile<T, 128, 64, 8, true>, 8},
      {128, 128, 12, 5.03, 0.495 * kWsTf32, launch_tile<T, 128, 128, 6, true>, blocks_per_sm_of_tile<T, 128, 128, 6, true>, 6},
      {128, 64, 12, 3.66, 0.687 * kWsTf32, launch_tile<T, 128, 64, 4, true>, blocks_per_sm_of_tile<T, 128, 64, 4, true>, 4},
      extra_tile<T>(0), extra_tile<T>(1), extra_tile<T>(2), extra_tile<T>(3), extra_tile<T>(4), extra_tile<T>(5),
      extra_tile<T>(6), extra_tile<T>(7), extra_tile<T>(8), extra_tile<T>(9), extra_tile<T>(10),
  }};
  return t;
}

// The tiles a problem may use: the warp-specialized ones only where A comes by TMA (ws).
// CONVKIT_WGMMA_WS=0 leaves them out (for comparisons).
bool ws_enabled() {
  static const bool on = [] {
    const char* e = env_override("CONVKIT_WGMMA_WS");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}
template <typename T>
TileSet tile_set(bool ws) {
  ws = ws && ws_enabled();
  // Split-K: the reduce kernel's costs as cuda_igemm_mma's; summed inside the kernel (one wave at most): 100
  // us per 10^9 outputs x splits and 12 us, chosen (grid search) for the picks against `convkit tune
  // --verbose` on ResNet-50 (H200, 2026-11-29, 2026-11-29, commit 2cdf018): within 1.2% (tf32), 0.5% (bf16, f16) of the
  // best measured variant, geomean. Splits rarely win on this card: the fixed part mostly says so.
  // A last wave under 10% full is charged its fraction: per-sample 3x3 64->64 at 56x56, N = 32 (25 tiles of
  // 128 per image, 800 blocks: 3 waves of 2 x 132 and 8 stragglers) measured 128x64w12s4 at 0.0335 ms and
  // 64x64w4 at 0.0378, which the whole-wave rule chose; no ResNet-50 pick changes.
  return {tiles<T>().data(), ws ? num_tiles<T>() : kNumGatherTiles, kRowBytes, "cuda_igemm_wgmma", "CONVKIT_WGMMA_VARIANT",
          260.0, 8.7, 100.0, 12.0, 0.1};
}

// The heuristic's plan: the wave model's pick, except where a rule of tile_rules.hpp says one of the persistent
// tiles below runs instead: the 192x128 tile where tall_128_tile_wins(); else the 256x64 tile where
// tall_64_tile_wins(); else, where exact_width_tile_wins(), the narrowest exact-width tile that holds every
// column, of exact_width_rows() rows. Measured on an H100
// (2026-12-06, bf16 batch 32, scripts/bench_pointwise.py over MobileNetV2's and EfficientNet-B0's 1x1
// layers, L2 flushed; ms, the tile before the rule in brackets):
//   at most 32 columns, 128x32: 32 -> 16 at 112x112 0.0502 (0.0548), 96 -> 24 at 56x56 0.0236 (0.0259),
//     144 -> 24 at 56x56 0.0282 (0.0307), 192 -> 32 at 28x28 0.0127 (0.0140): every such layer 6-11% faster;
//   a depth of at most 32: 16 -> 96 at 112x112 0.0621 (0.0680; 0.0728 against cuda_pointwise_mma's 0.0892
//     with SiLU) on 128x96, 24 -> 144 at 56x56 0.0398 (0.0533; 0.0418 against 0.0489 with SiLU) on 128x144;
//   16 columns, 128x16 against 128x32: 32 -> 16 at 112x112 0.0479 against 0.0507 (and 0.0341 against 0.0367
//     without the residual);
//   taller: 32 -> 16 at 112x112 on 256x16 0.0370 (128x32 0.0507; torch.compile's 0.0340), 96 -> 24 and
//     144 -> 24 at 56x56 on 256x32 0.0213 and 0.0260 (0.0234, 0.0285); at 28x28 (98 tiles of 256 rows for
//     132 SMs) 256x32 lost to 128x32 (144 -> 32: 0.0122 against 0.0117) or tied; 16 -> 96 at 112x112 on
//     192x96 0.0522 (128x96 0.0627; with SiLU 0.0613 against 0.0751);
//   256x64 on the widening layers of depth <= 112: 24 -> 144 at 56x56 0.0379 (128x144 0.0403), 32 -> 192 at
//     28x28 0.0141 (0.0148), 40 -> 240 at 28x28 0.0188 (0.0197), 64 -> 384 at 14x14 0.0105 (0.0111), 112 ->
//     672 at 14x14 0.0164 (0.0185); 96 -> 576 at 14x14 0.0128 (0.0125) inside the noise; deeper or with
//     fewer tiles than SMs it lost (160 -> 960 at 7x7 0.0096 against 0.0094, 320 -> 1280 0.0141 against
//     0.0110, and every narrowing layer).
// On deeper layers of 40 to 144 columns the exact-width tiles lost 3-40% (144 -> 40, 240 -> 80, 480 -> 112,
// 576 -> 96: a long k loop on one block an SM, where the wave model's tiles keep two).
// The 192x128 tile where tall_128_tile_wins(), measured on an H100 (2026-12-06, bf16 batch 32, `convkit bench
// --variants` over ResNet-50's layers, ConvNeXt-T's Linears as 1x1 convolutions and three more, no epilogue,
// L2 flushed; ms, 128x128w12s4p in brackets). Of the 17 layers it takes, 11 ran faster: 3x3 384 at 14x14
// 0.0351 (0.0474), 3x3 128 at 28x28 0.0197 (0.0243), 1024 -> 512 at 14x14 0.0192 (0.0222), 1536 -> 384 at
// 14x14 0.0252 (0.0291), 2048 -> 512 at 14x14 0.0325 (0.0353), stride-2 3x3 128 at 56x56 0.0272 (0.0298),
// 192 -> 768 at 28x28 0.0258 (0.0286), 384 -> 1536 at 14x14 0.0217 (0.0243), 128 -> 512 at 28x28 0.0172
// (0.0189), stride-2 512 -> 1024 at 28x28 0.0197 (0.0210), 256 -> 384 at 14x14 0.0109 (0.0118); three 1-3%
// faster (256 -> 128 at 56x56, 256 -> 1024 at 14x14, stride-2 256 -> 512 at 56x56); three even (512 -> 256
// at 28x28, 768 -> 3072 at 7x7, 512 -> 128 at 28x28: 0.0212 against 0.0210, where 128x64w12s6p ran 0.0199).
// With more rows an SM it lost 14-38% (ResNet-50's 7x7 layers, 1024 -> 256 at 14x14, 3072 -> 768 at 7x7).
// With their epilogues (scripts/bench_pointwise.py, ConvNeXt-T's Linears with GELU, or scale and the
// residual): 96 -> 384 at 56x56 with GELU 0.0705 on 192x128 against 0.0825 on the 256x64 tile that
// tall_64_tile_wins gave it (0.0425 against 0.0456 without the epilogue), hence the depth of 96 and this rule
// first; 192 -> 768 at 28x28 with GELU 0.0412 (128x128: 0.0466), 384 -> 1536 at 14x14 0.0318 (0.0360), 768 ->
// 3072 at 7x7 0.0310 (0.0324). On the widening layers of depth 80-112 whose columns are not whole 128-column
// tiles, measured on an H100 (2026-12-07, bf16 batch 32 with SiLU, scripts/bench_pointwise.py over
// EfficientNet-B0's 1x1 layers; ms, 256x64w20s3p, which tall_64_tile_wins gave them before, in brackets): 80 ->
// 480 at 14x14 0.0115 (0.0130), 112 -> 672 at 14x14 0.0132 (0.0143). Shallower, 40 -> 240 at 28x28 ran 0.0145
// on 192x128 (0.0157) but 24 -> 144 at 56x56 0.0392 (0.0369): those keep 256x64 until more layers say where.
Plan rule_plan(const TileSet& ts, const Shape& s, int sms, Plan best) {
  const int64_t rows = s.nb * s.Mb;
  int bm = 0, bn = 0;  // the tile wanted: bn = 0 for the narrowest exact-width tile of bm rows
  if (tall_128_tile_wins(s.es, s.G, s.k, s.n, rows, sms)) {
    bm = 192, bn = 128;
  } else if (tall_64_tile_wins(s.es, s.G, s.k, s.n, rows, sms)) {
    bm = 256, bn = 64;
  } else if (exact_width_tile_wins(s.es, s.G, s.k, s.n)) {
    bm = exact_width_rows(s.n, rows, sms);
  } else {
    return best;
  }
  Plan pick;  // (for_each_plan offers the exact-width tiles only where they hold every column)
  for_each_plan(ts, s, sms, [&](const Plan& p) {
    if (!p.tile->persistent || p.tile->bm != bm || p.splits != 1) return;
    if (bn != 0 ? p.tile->bn == bn
                : p.tile->bn % 64 != 0 && (pick.tile == nullptr || p.tile->bn < pick.tile->bn))
      pick = p;
  });
  return pick.tile != nullptr ? pick : best;
}
template <typename T>
Plan choose_wgmma_plan(bool ws, const Shape& s, int sms, const std::string& variant) {
  const TileSet ts = tile_set<T>(ws);
  const Plan p = choose_plan(ts, s, sms, variant);
  if (!variant.empty() || env_override(ts.env) != nullptr) return p;  // (a named or forced variant)
  return rule_plan(ts, s, sms, p);
}
Plan plan_uncached(DType dt, const Shape& s, bool ws, int sms, const std::string& variant) {
  switch (dt) {
    case DType::f16: return choose_wgmma_plan<__half>(ws, s, sms, variant);
    case DType::bf16: return choose_wgmma_plan<__nv_bfloat16>(ws, s, sms, variant);
    case DType::f32: break;
  }
  return choose_plan(tile_set<float>(ws), s, sms, variant);
}
// The plan of a (problem shape, variant), remembered per thread (the last 8): one call of the PyTorch op asks
// for it two or three times (workspace size, then run), each a walk over every tile and split count.
Plan plan_of(DType dt, const Shape& s, bool ws, const std::string& variant) {
  const int sms = sm_count_of_current_device();
  const char* forced = variant.empty() ? env_override("CONVKIT_WGMMA_VARIANT") : nullptr;  // (choose_plan's)
  const std::string_view want = forced != nullptr ? std::string_view(forced) : std::string_view(variant);
  struct Entry {
    DType dt;
    Shape s;
    bool ws, forced;
    int sms;
    std::string variant;
    Plan plan;
  };
  thread_local std::array<Entry, 8> memo{};
  thread_local int next = 0;
  for (const Entry& e : memo)
    if (e.plan.tile != nullptr && e.dt == dt && e.ws == ws && e.sms == sms && e.forced == (forced != nullptr) &&
        e.s.Mb == s.Mb && e.s.n == s.n && e.s.G == s.G && e.s.nb == s.nb && e.s.k == s.k && e.s.K == s.K &&
        e.s.es == s.es && e.variant == want)
      return e.plan;
  const Plan p = plan_uncached(dt, s, ws, sms, variant);  // (throws for an unknown variant: nothing stored)
  memo[size_t(next)] = Entry{dt, s, ws, forced != nullptr, sms, std::string(want), p};
  next = (next + 1) % int(memo.size());
  return p;
}

std::vector<Plan> all_plans(DType dt, const Shape& s, bool ws) {
  const int sms = sm_count_of_current_device();
  switch (dt) {
    case DType::f16: return candidate_plans(tile_set<__half>(ws), s, sms);
    case DType::bf16: return candidate_plans(tile_set<__nv_bfloat16>(ws), s, sms);
    case DType::f32: break;
  }
  return candidate_plans(tile_set<float>(ws), s, sms);
}

// The workspace: the split-K partials, the split-K tile counts (one int per output tile, where the kernel
// sums the splits), then (tf32) the weights rounded to tf32, each at the first 256-byte boundary after what
// comes before (whatever the workspace's own alignment: 256 bytes of slack each).
size_t tile_counts_bytes(const Plan& plan) {
  return plan.sums_in_kernel ? size_t(plan.blocks / plan.splits) * sizeof(int) : 0;
}
size_t total_workspace(const Conv2dProblem& p, DType dt, const Plan& plan) {
  size_t n = plan.ws_bytes;
  if (plan.sums_in_kernel) n += 256 + tile_counts_bytes(plan);
  if (dt == DType::f32) n += 256 + size_t(p.k) * size_t(p.gemm_k()) * sizeof(float);
  return n;
}
void* align_up_256(uintptr_t v) { return reinterpret_cast<void*>((v + 255) / 256 * 256); }
int* tile_counts_of(void* workspace, const Plan& plan) {
  return static_cast<int*>(align_up_256(reinterpret_cast<uintptr_t>(workspace) + plan.ws_bytes));
}
void* tf32_weights_of(void* workspace, const Plan& plan) {
  if (!plan.sums_in_kernel) return align_up_256(reinterpret_cast<uintptr_t>(workspace) + plan.ws_bytes);
  return align_up_256(reinterpret_cast<uintptr_t>(tile_counts_of(workspace, plan)) + tile_counts_bytes(plan));
}


// Per-sample weights (conv2d_per_sample): one launch over the batch, grid.z walks the samples, the weights'
// tensor map spans all N*K filter rows.
void run_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& e, void* stream) {
  // NOTE: never split k here (as cuda_igemm_mma's per-sample mode): the batch already gives N times the
  // blocks of one image, and a per-sample call has no workspace.
  const DType dt = src.dtype;
  const Shape s = shape_of(p, dt, true);
  const bool ws = a_by_tma(p, dt);
  Plan plan = plan_of(dt, s, ws, "");
  if (plan.splits > 1) plan = plan_of(dt, s, ws, plan.tile->name() + "/k1");
  check_residual_overlap(e.residual, dst.data, dst.bytes());
  TcArgs a = make_tc_args(p, true, src, wei, dst, e, 1, plan.num_k_tiles, plan.num_k_tiles, nullptr,
                          bke_of(int(dtype_size(dt))));
  set_a_load(a, p, dt);
  const Tile& t = *plan.tile;
  const dim3 grid(unsigned(ceil_div(a.Mb, t.bm)), unsigned(ceil_div(a.Kpg, t.bn)), unsigned(int64_t(a.nb) * a.G));
  t.launch(a, grid, as_stream(stream), true);
  CK_LAUNCH("igemm_wgmma_kernel (per-sample)");
}

class CudaIgemmWgmma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_igemm_wgmma"; }
  std::string description() const override {
    return "Hopper tensor-core implicit GEMM: wgmma.mma_async from 128-byte-swizzled shared memory, weights by "
           "TMA, activations by TMA (im2col mode; 1x1 as a matrix) or cp.async, 3-8 stages, warp-specialized "
           "variants, split-K, fused epilogue (f16/bf16, tf32; NHWC; sm_90a)";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_tensor_core_config(cfg); !ok) return ok;
    // NOTE: C < 8 (the 3-channel stem) once ran here too, input and weights copied with 8 channels first:
    // 0.157 ms on the batch-32 stem in f16 and bf16, the same as cuda_igemm_mma's element gather (2.7x the
    // multiplies, every 16-byte chunk from another pixel), for 25 MiB of workspace. Not kept.
    if (p.c_per_group() % (16 / int(dtype_size(cfg.dtype))) != 0)
      return Support::no(cfg.dtype == DType::f32
                             ? "C/groups must be a multiple of 4 for tf32 (16-byte chunks inside one filter tap); "
                               "cuda_igemm_mma's general-C path runs the others."
                             : "C/groups must be a multiple of 8 (16-byte chunks inside one filter tap); "
                               "cuda_igemm_mma's general-C path runs the others.");
    if (Support ok = tc_limits(p); !ok) return ok;
    if (!cuda_present()) return Support::yes();  // (the device check needs a device; available() says no)
    return require_sm90();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    return variant_workspace_bytes(p, cfg, "");
  }
  size_t variant_workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& v) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return 0;
    return total_workspace(p, cfg.dtype, plan_of(cfg.dtype, shape_of(p, cfg.dtype, false), a_by_tma(p, cfg.dtype), v));
  }
  std::vector<std::string> variants(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const Shape s = shape_of(p, cfg.dtype, false);
    const bool ws = a_by_tma(p, cfg.dtype);
    const Plan chosen = plan_of(cfg.dtype, s, ws, "");
    std::vector<Plan> all = all_plans(cfg.dtype, s, ws);
    std::sort(all.begin(), all.end(), [](const Plan& x, const Plan& y) { return x.model_us < y.model_us; });
    // The heuristic's choice, then the best-modelled other plans: 14 in all (the tuner's limit is 24 over
    // every algorithm), so that the warp-specialized tiles and the gathering ones are both timed.
    // The persistent tiles always among them (their model is the newest: let the tuner judge).
    std::vector<std::string> out{chosen.variant()};
    auto add = [&](const Plan& q) {
      if (out.size() < 14 && std::find(out.begin(), out.end(), q.variant()) == out.end()) out.push_back(q.variant());
    };
    for (const Plan& q : all)
      if (q.tile->persistent) add(q);
    for (const Plan& q : all) add(q);
    return out;
  }
  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const Plan plan = plan_of(cfg.dtype, shape_of(p, cfg.dtype, false), a_by_tma(p, cfg.dtype), "");
    std::string d = "tile " + plan.tile->name();
    if (plan.splits > 1)
      d += ", split-K " + std::to_string(plan.splits) + " (partials " +
           std::to_string((plan.ws_bytes + (1 << 20) - 1) >> 20) + " MiB" +
           (plan.sums_in_kernel ? ", summed in the kernel)" : ", then a reduce kernel)");
    if (const ALoad l = a_load_of(p, cfg.dtype); l != ALoad::gather)
      d += l == ALoad::im2col ? ", activations by TMA (im2col mode)" : ", activations by TMA";
    if (cfg.dtype == DType::f32) d += ", weights rounded to tf32 first";
    return d + ", " + std::to_string(plan.blocks) + " blocks on " + std::to_string(sm_count_of_current_device()) + " SMs";
  }
  // TMA and cp.async read whole 16-byte chunks: the input and the weight must start on a 16-byte boundary
  // (a view into a larger buffer may not). Per-sample weights: f16/bf16, grid.z walks the samples.
  Support accepts(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) const override {
    if (ops.operand_align() < 16)
      return Support::no("TMA and cp.async need the input and the weight 16-byte aligned (" + ops.to_string() +
                         "); cuda_igemm_mma's gather path takes them.");
    if (!ops.per_sample) return Support::yes();
    if (cfg.dtype != DType::f16 && cfg.dtype != DType::bf16)
      return Support::no("its per-sample-weights mode computes f16 and bf16 only.");
    if (p.n * p.groups > 65535) return Support::no("per-sample weights: N*groups passes 65535 (grid.z).");
    if (int64_t(p.n) * p.k > INT_MAX) return Support::no("per-sample weights: N*K passes 2^31 (the tensor map's row).");
    return Support::yes();
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    if (Support ok = accepts(pb, call.config, Operands::of(call.src, call.wei, call.dst, call.epilogue, call.per_sample)); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    if (call.per_sample) {
      run_per_sample(pb, call.src, call.wei, call.dst, call.epilogue, call.stream);
      return;
    }
    const DType dt = call.config.dtype;
    const Plan plan = plan_of(dt, shape_of(pb, dt, false), a_by_tma(pb, dt), call.variant);  // (an unknown variant throws here)
    check_residual_overlap(call.epilogue.residual, call.dst.data, call.dst.bytes());
    const size_t need = total_workspace(pb, dt, plan);
    if (need > 0 && (call.workspace == nullptr || call.workspace_bytes < need))
      throw Error(StatusCode::invalid_tensor, name() + " needs " + std::to_string(need) +
                                                  " bytes of workspace (split-K partials, tf32-rounded weights) "
                                                  "but was given " +
                                                  std::to_string(call.workspace == nullptr ? 0 : call.workspace_bytes) +
                                                  ".");
    TcArgs a = make_tc_args(pb, false, call.src, call.wei, call.dst, call.epilogue, plan.splits,
                            plan.tiles_per_split, plan.num_k_tiles, call.workspace, bke_of(int(dtype_size(dt))));
    set_a_load(a, pb, dt);
    const cudaStream_t stream = as_stream(call.stream);
    if (!tc_operands_aligned(a, dt))  // (accepts() refuses these; the planner then takes cuda_igemm_mma)
      throw Error(StatusCode::unsupported, name() + ": the input and the weight must be 16-byte aligned.");
    if (dt == DType::f32) {
      // tf32: the weights rounded to tf32 once, into the workspace after the partials (the kernel rounds
      // the activations itself, stage by stage in shared memory).
      // NOTE: a pass over the weights per call (at most 9.4 MB in ResNet-50) instead of every block
      // rounding its own copy of every weight stage.
      void* rounded = tf32_weights_of(call.workspace, plan);
      const int64_t n4 = int64_t(pb.k) * pb.gemm_k() / 4;  // (C/groups % 4 == 0)
      const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(n4, 256), 132 * 8));
      round_to_tf32_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(a.wei),
                                                                      static_cast<uint4*>(rounded), n4);
      CK_LAUNCH("round_to_tf32_kernel");
      a.wei = rounded;
    }
    const Tile& t = *plan.tile;
    if (plan.sums_in_kernel) {
      // Split-K summed by the splits themselves (one wave: every block resident): each output tile's
      // arrival count starts at zero.
      // NOTE: instead of a reduce kernel after the launch: 1x1 2048->512 at 7x7 (tf32, 5 splits) spent
      // 9.2 us of 36 in the reduce (ncu, H200).
      a.tile_counts = tile_counts_of(call.workspace, plan);
      CK_CUDA(cudaMemsetAsync(a.tile_counts, 0, tile_counts_bytes(plan), stream));
    }
    const dim3 grid(unsigned(ceil_div(a.Mb, t.bm)), unsigned(ceil_div(a.Kpg, t.bn)),
                    unsigned(int64_t(a.nb) * a.G * plan.splits));
    t.launch(a, grid, stream, true);
    CK_LAUNCH("igemm_wgmma_kernel");
    if (plan.splits > 1 && !plan.sums_in_kernel) launch_splitk_reduce(a, dt, stream);
  }
};

}  // namespace

const Algorithm* make_cuda_igemm_wgmma() {
  static CudaIgemmWgmma algo;
  return &algo;
}

}  // namespace convkit::detail
