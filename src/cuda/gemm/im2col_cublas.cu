// cuda_im2col_cublas: the GEMM rung of the CUDA ladder, explicit form (fp32, NCHW).
//
// What it adds over the direct rungs: the convolution becomes a matrix product. One kernel copies every
// input patch into a column matrix (im2col) in the workspace, and cuBLAS SGEMM, a library GEMM tuned far
// beyond anything hand-written here, does all the arithmetic. The price is memory: the column matrix holds
// C*R*S x P*Q floats per image (R*S times the input for a stride-1 3x3: 2.25 GiB for seed000), and it is
// written once and read back once. This is the "memory lesson" of the ladder: its workspace is reported.
//
// How the work is split, per chunk of images (see images_per_chunk: chunks only when one chunk would pass
// kChunkCapBytes):
//   1. im2col_kernel: col[img][(c*R + r)*S + s][p*Q + q] = x[img][c][p*u - pad + r*d][q*u - pad + s*d] (0 in
//      the padding). A block row per column-matrix row, threads across the P*Q pixels: coalesced writes.
//   2. cuBLAS, per image and group, in row-major terms: Y[img][g*Kg .. +Kg][P*Q] = W_g[Kg][Cg*R*S] x
//      col[img][g rows][P*Q]: it writes NCHW directly, no transpose. Strided-batched over images (looping
//      over groups) or over groups (looping over images), whichever loop is shorter.
//   3. epilogue_kernel (only when the epilogue is not the identity): in place over dst, a block row per
//      (img, k) output plane.
// Tensor cores are off (CUBLAS_DEFAULT_MATH: fp32 stays fp32) unless ConvConfig::math == tf32.
// 1x1 stride-1 unpadded problems skip step 1: the input already is the column matrix (workspace 0).
//
// Resources: workspace = C*R*S*P*Q*4 bytes per image times the images of one chunk (= Cg*R*S*N*P*Q*4 for one
// group when nothing is chunked); the two helper kernels are trivial (no smem, few registers); cuBLAS uses
// its own kernels and the default workspace of its handle.
// measured (H200, 2026-11-29): seed000 10.68 ms (29.0 TFLOP/s; 2304 MiB column matrix), seed001 0.305 ms
// (102 MiB); the 1x1 stride-1 ResNet layers, which need no column matrix, 1.0-1.4x cuDNN.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"

// Every cuBLAS call goes through this: a failure throws convkit::Error(cuda_error) naming the call.
#define CK_CUBLAS(call)                                                                                  \
  do {                                                                                                   \
    cublasStatus_t ck_st_ = (call);                                                                      \
    if (ck_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::convkit::detail::throw_cuda_error(#call, cublasGetStatusString(ck_st_), __FILE__, __LINE__);    \
  } while (0)

namespace convkit::detail {
namespace {

// Above this the images are processed in chunks, so the column matrix never needs more than this much
// (unless one image alone needs more). 4 GiB keeps every benchmark shape unchunked (seed000: 2.25 GiB).
constexpr uint64_t kChunkCapBytes = uint64_t(4) << 30;

// ---- the cuBLAS handle ------------------------------------------------------------------------------
// One handle per device, created on first use. cublasSetStream / cublasSetMathMode change the handle's
// state, so the whole configure-and-enqueue sequence of one run holds this mutex (enqueueing is quick).
std::mutex& cublas_mutex() {
  static std::mutex mu;
  return mu;
}

// The caller holds cublas_mutex().
cublasHandle_t cublas_handle_locked(int device) {
  // NOTE: the handles are never destroyed: destroying them from a static destructor can run after the
  // CUDA runtime has shut down. The process exit releases them.
  static std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t h = nullptr;
  CK_CUBLAS(cublasCreate(&h));  // binds to the current device, which is `device`
  handles[device] = h;
  return h;
}

// ---- kernels ----------------------------------------------------------------------------------------
struct Im2colArgs {
  const float* src;  // the chunk's first image
  float* col;        // [rows][PQ], rows = images * C * R * S
  int64_t rows, PQ, HW;
  int64_t H, W, Q;
  int R, S;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

// Threads (x) across the P*Q pixels of one column-matrix row, block rows (y, grid-strided) across the rows
// (img, c, r, s): each row's decomposition is done once per thread, each pixel costs one division.
__global__ void im2col_kernel(const Im2colArgs a) {
  // NOTE: 32-bit divisions are several times cheaper than 64-bit ones; every real shape takes them.
  const bool pq32 = a.PQ <= INT32_MAX;
  const bool rows32 = a.rows <= INT32_MAX;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < a.rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    int s, r;
    int64_t plane;  // img * C + c
    if (rows32) {
      const uint32_t rs = uint32_t(row) % uint32_t(a.R * a.S);
      plane = uint32_t(row) / uint32_t(a.R * a.S);
      r = int(rs / uint32_t(a.S));
      s = int(rs - uint32_t(r) * uint32_t(a.S));
    } else {
      s = int(row % a.S);
      r = int((row / a.S) % a.R);
      plane = row / (int64_t(a.R) * a.S);
    }
    const float* in = a.src + plane * a.HW;
    const int64_t h_off = r * a.dil_h - a.pad_h, w_off = s * a.dil_w - a.pad_w;
    float* out = a.col + row * a.PQ;
    for (int64_t pq = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; pq < a.PQ;
         pq += int64_t(gridDim.x) * blockDim.x) {
      int64_t p, q;
      if (pq32) {
        p = uint32_t(pq) / uint32_t(a.Q);
        q = uint32_t(pq) - uint32_t(p) * uint32_t(a.Q);
      } else {
        p = pq / a.Q;
        q = pq - p * a.Q;
      }
      const int64_t h = p * a.stride_h + h_off, w = q * a.stride_w + w_off;
      out[pq] = (h >= 0 && h < a.H && w >= 0 && w < a.W) ? __ldg(in + h * a.W + w) : 0.0f;
    }
  }
}

struct EpilogueArgs {
  float* dst;       // [rows][PQ], rows = N * K
  DeviceEpilogue<float> epi;  // its residual is never dst itself here: that case is folded into the GEMM (beta)
  int64_t rows, PQ, K;
};

// Same shape as im2col_kernel: threads across the pixels of one output plane (img, k), block rows across
// the planes. In place: each element is read and rewritten by one thread only.
__global__ void epilogue_kernel(const EpilogueArgs a) {
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < a.rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const int64_t k = row % a.K;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.PQ; i += int64_t(gridDim.x) * blockDim.x) {
      const int64_t o = row * a.PQ + i;
      a.dst[o] = a.epi(a.dst[o], k, o);
    }
  }
}

// A 2-D launch for a [rows][cols] pass: up to 256 threads across cols (a multiple of 32, so short rows such
// as 7x7 = 49 pixels still use most lanes), the rest of the 256 across rows.
void plane_launch_shape(int64_t rows, int64_t cols, dim3* grid, dim3* block) {
  int tx = 256;
  while (tx > 32 && tx / 2 >= cols) tx /= 2;
  const int ty = 256 / tx;
  *block = dim3(unsigned(tx), unsigned(ty));
  const int64_t gx = std::min<int64_t>((cols + tx - 1) / tx, 1 << 16);
  const int64_t gy = std::min<int64_t>((rows + ty - 1) / ty, 65535);
  *grid = dim3(unsigned(gx), unsigned(gy));
}

// ---- the algorithm ----------------------------------------------------------------------------------
bool is_pointwise_identity(const Conv2dProblem& p) {
  // 1x1, stride 1, no padding: col[img] == x[img] (dilation does not matter for a 1x1 filter).
  return p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
}

uint64_t col_bytes_per_image(const Conv2dProblem& p) {
  return uint64_t(p.c) * uint64_t(p.r) * uint64_t(p.s) * uint64_t(p.p()) * uint64_t(p.q()) * sizeof(float);
}

int64_t images_per_chunk(const Conv2dProblem& p) {
  const uint64_t per_image = col_bytes_per_image(p);
  const uint64_t fit = per_image == 0 ? uint64_t(p.n) : kChunkCapBytes / per_image;
  return std::clamp<int64_t>(int64_t(std::min<uint64_t>(fit, uint64_t(p.n))), 1, p.n);
}

class CudaIm2colCublas final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_im2col_cublas"; }
  std::string description() const override {
    return "explicit im2col into the workspace, then cuBLAS SGEMM per group writing NCHW (tensor cores off "
           "unless tf32)";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.dtype != DType::f32)
      return Support::no(std::string("it computes in fp32 only; ") + to_string(cfg.dtype) +
                         " comes in a later issue.");
    if (cfg.layout != Layout::nchw) return Support::no("it handles NCHW only; NHWC comes in a later issue.");
    const int64_t pq = p.p() * p.q(), crs = p.c_per_group() * p.r * p.s;
    if (pq > INT_MAX) return Support::no("P*Q passes 2^31, the largest GEMM dimension cuBLAS takes (int).");
    if (crs > INT_MAX) return Support::no("C/groups*R*S passes 2^31, the largest GEMM dimension cuBLAS takes (int).");
    if (p.k_per_group() > INT_MAX) return Support::no("K/groups passes 2^31, the largest GEMM dimension cuBLAS takes.");
    // NOTE: on the H200 (2026-11-29) n2c2h23171w23171k2r3s3p1 came out wrong at almost every point, with the
    // 32-bit and the 64-bit cuBLAS API alike, while every other rung was exact; the cause is not found yet.
    // Until it is, refuse any problem whose GEMM operands pass 2^31 elements rather than risk a wrong answer.
    const int64_t two31 = int64_t(1) << 31;
    if (crs * pq >= two31 || p.k_per_group() * pq >= two31 || p.k_per_group() * crs >= two31)
      return Support::no("a GEMM operand (the column matrix of one image, or one image's output) would pass 2^31 "
                         "elements, where this rung gave wrong results on the H200; cuda_igemm_simt has no such limit.");
    return Support::yes();
  }

  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig&) const override {
    if (is_pointwise_identity(p)) return 0;
    return size_t(col_bytes_per_image(p) * uint64_t(images_per_chunk(p)));
  }

  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (is_pointwise_identity(p)) return "1x1 stride 1: the input is the column matrix (no im2col, no workspace)";
    const int64_t nb = images_per_chunk(p);
    std::string s = "column matrix " + std::to_string(workspace_bytes(p, cfg) >> 20) + " MiB";
    if (nb < p.n) s += " (chunks of " + std::to_string(nb) + " images)";
    return s + (cfg.math == MathMode::tf32 ? ", cuBLAS tf32" : ", cuBLAS fp32 (no tensor cores)");
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const cudaStream_t stream = as_stream(call.stream);
    const Epilogue& e = call.epilogue;
    const auto* src = static_cast<const float*>(call.src.data);
    const auto* wei = static_cast<const float*>(call.wei.data);
    auto* dst = static_cast<float*>(call.dst.data);
    const auto* residual = static_cast<const float*>(e.residual);

    const int64_t P = pb.p(), Q = pb.q(), PQ = P * Q, HW = pb.h * pb.w;
    const int64_t G = pb.groups, Cg = pb.c_per_group(), Kg = pb.k_per_group();
    const int64_t CRS = pb.c * pb.r * pb.s, CgRS = Cg * pb.r * pb.s;
    const bool direct = is_pointwise_identity(pb);
    const int64_t nb = images_per_chunk(pb);
    const size_t need = workspace_bytes(pb, call.config);
    if (need > 0 && (call.workspace == nullptr || call.workspace_bytes < need))
      throw Error(StatusCode::invalid_tensor, name() + " needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace == nullptr ? 0 : call.workspace_bytes) + ".");
    auto* col = static_cast<float*>(call.workspace);

    // The residual may be the output itself (in-place add). cuBLAS then folds it in through beta, reading
    // each element of C before it writes it; the GEMM never overwrites a residual it has not read.
    const bool res_is_dst = residual != nullptr && static_cast<const void*>(residual) == call.dst.data;
    check_residual_overlap(residual, dst, call.dst.bytes());
    const float gemm_alpha = res_is_dst ? e.alpha : 1.0f;
    const float gemm_beta = res_is_dst ? e.beta : 0.0f;

    int device = 0;
    CK_CUDA(cudaGetDevice(&device));
    {
      std::lock_guard<std::mutex> lock(cublas_mutex());
      cublasHandle_t handle = cublas_handle_locked(device);
      CK_CUBLAS(cublasSetStream(handle, stream));
      // NOTE: CUBLAS_DEFAULT_MATH never lowers fp32 to tf32; tensor cores only on an explicit tf32 request.
      CK_CUBLAS(cublasSetMathMode(handle, call.config.math == MathMode::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                             : CUBLAS_DEFAULT_MATH));
      for (int64_t n0 = 0; n0 < pb.n; n0 += nb) {
        const int64_t imgs = std::min(nb, pb.n - n0);
        const float* a_mat = src + n0 * pb.c * HW;  // the chunk's column matrix: [imgs][C*R*S][PQ]
        if (!direct) {
          Im2colArgs ia{src + n0 * pb.c * HW, col, imgs * CRS, PQ, HW, pb.h, pb.w, Q, int(pb.r), int(pb.s),
                        pb.stride_h, pb.stride_w, pb.pad_h, pb.pad_w, pb.dilation_h, pb.dilation_w};
          dim3 grid, block;
          plane_launch_shape(ia.rows, PQ, &grid, &block);
          im2col_kernel<<<grid, block, 0, stream>>>(ia);
          CK_LAUNCH("im2col_kernel");
          a_mat = col;
        }
        // Row-major Y[Kg][PQ] = W_g[Kg][CgRS] x col_g[CgRS][PQ] is, in cuBLAS's column-major terms,
        // Y^T (PQ x Kg, ld PQ) = col_g^T (PQ x CgRS, ld PQ) x W_g^T (CgRS x Kg, ld CgRS).
        // NOTE: the _64 API: a column matrix may pass 2^31 elements, which the 32-bit API mis-indexes (seen on
        // the H200 with a 2x2x23171x23171 input).
        const int64_t m = PQ, n = Kg, k = CgRS;
        if (imgs >= G) {  // loop over groups, batch over the chunk's images
          for (int64_t g = 0; g < G; ++g)
            CK_CUBLAS(cublasSgemmStridedBatched_64(
                handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &gemm_alpha, a_mat + g * CgRS * PQ, m,
                (long long)(CRS * PQ), wei + g * Kg * CgRS, k, 0LL, &gemm_beta,
                dst + n0 * pb.k * PQ + g * Kg * PQ, m, (long long)(pb.k * PQ), imgs));
        } else {  // loop over images, batch over groups
          for (int64_t i = 0; i < imgs; ++i)
            CK_CUBLAS(cublasSgemmStridedBatched_64(
                handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &gemm_alpha, a_mat + i * CRS * PQ, m,
                (long long)(CgRS * PQ), wei, k, (long long)(Kg * CgRS), &gemm_beta,
                dst + (n0 + i) * pb.k * PQ, m, (long long)(Kg * PQ), G));
        }
      }
    }

    // The rest of the epilogue, in place over dst. When the residual is dst it is already in (beta above).
    const bool has_bias = e.bias != nullptr;
    const bool need_pass = res_is_dst ? (has_bias || e.activation != Activation::none) : !e.is_identity();
    if (need_pass) {
      DeviceEpilogue<float> epi = DeviceEpilogue<float>::from(e);
      if (res_is_dst) epi.residual = nullptr, epi.alpha = 1.0f, epi.beta = 1.0f;  // already applied by the GEMM
      EpilogueArgs ea{dst, epi, pb.n * pb.k, PQ, pb.k};
      dim3 grid, block;
      plane_launch_shape(ea.rows, PQ, &grid, &block);
      epilogue_kernel<<<grid, block, 0, stream>>>(ea);
      CK_LAUNCH("epilogue_kernel (im2col_cublas)");
    }
  }
};

}  // namespace

const Algorithm* make_cuda_im2col_cublas() {
  static CudaIm2colCublas algo;
  return &algo;
}

}  // namespace convkit::detail
