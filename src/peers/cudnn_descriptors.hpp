// The cuDNN peer's building blocks (included once, by cudnn_peer.cpp, inside its CONVKIT_HAVE_CUDNN part):
// cuDNN's status as a sentence, an owning backend descriptor, tensor descriptors, and the legacy API's
// descriptors with PyTorch's math types. cudnn_peer.cpp has the plan cache, the engine search and the peer.
#pragma once

#include <cudnn_cnn.h>
#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "convkit/algorithm.hpp"
#include "convkit/status.hpp"

namespace convkit::detail {
namespace {

// ---- errors ----------------------------------------------------------------------------------------

std::string cudnn_message(cudnnStatus_t s) {
  std::string msg = cudnnGetErrorString(s);
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  if (last[0]) msg += std::string(" (") + last + ")";
  return msg;
}

[[noreturn]] void throw_cudnn(const char* what, cudnnStatus_t s, const char* file, int line) {
  throw_cuda_error(what, cudnn_message(s).c_str(), file, line);
}

#define CK_CUDNN(call)                                                                  \
  do {                                                                                  \
    const cudnnStatus_t ck_st_ = (call);                                                \
    if (ck_st_ != CUDNN_STATUS_SUCCESS) throw_cudnn(#call, ck_st_, __FILE__, __LINE__); \
  } while (0)

// Same, naming what was being set up instead of the (uninformative) call text.
#define CK_CUDNN_WHAT(call, what)                                                     \
  do {                                                                                \
    const cudnnStatus_t ck_st_ = (call);                                              \
    if (ck_st_ != CUDNN_STATUS_SUCCESS) throw_cudnn(what, ck_st_, __FILE__, __LINE__); \
  } while (0)

std::string version_text(size_t v) {  // 91900 -> "9.19.0"
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

// ---- an owning backend descriptor ------------------------------------------------------------------

class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    CK_CUDNN_WHAT(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      if (d_) cudnnBackendDestroyDescriptor(d_);
      d_ = o.d_;
      o.d_ = nullptr;
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* addr() { return &d_; }

  void set(cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type, int64_t count, const void* v,
           const char* what) {
    CK_CUDNN_WHAT(cudnnBackendSetAttribute(d_, attr, type, count, v), what);
  }
  void set_i64(cudnnBackendAttributeName_t a, int64_t v, const char* what) { set(a, CUDNN_TYPE_INT64, 1, &v, what); }
  void set_desc(cudnnBackendAttributeName_t a, const Desc& o, const char* what) {
    cudnnBackendDescriptor_t p = o.get();
    set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, what);
  }
  void finalize(const char* what) { CK_CUDNN_WHAT(cudnnBackendFinalize(d_), what); }
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
  }
  return CUDNN_DATA_FLOAT;
}

// A packed 4-D tensor: dims always N,C,H,W (K,C/g,R,S for weights); strides from the layout.
Desc make_tensor(int64_t uid, DType dt, Layout layout, std::array<int64_t, 4> d, int64_t align) {
  std::array<int64_t, 4> st{};
  if (layout == Layout::nchw) {
    st = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  } else {  // channels last: NHWC activations, KRSC weights
    st = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  }
  const cudnnDataType_t t = cudnn_dtype(dt);
  Desc desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  desc.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, "tensor data type");
  desc.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d.data(), "tensor dimensions");
  desc.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st.data(), "tensor strides");
  desc.set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid, "tensor unique id");
  desc.set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, align, "tensor byte alignment");
  desc.finalize("cudnnBackendFinalize(tensor)");
  return desc;
}

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

// ---- the legacy API's descriptors -----------------------------------------------------------------

// x, w, y and the convolution for cudnnFindConvolutionForwardAlgorithmEx / cudnnConvolutionForward, owned.
struct LegacyDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  LegacyDescs() = default;
  ~LegacyDescs() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  LegacyDescs(const LegacyDescs&) = delete;
  LegacyDescs& operator=(const LegacyDescs&) = delete;
};

// PyTorch's choice: FMA in strict fp32 (no TF32), DEFAULT (TF32 allowed) for tf32, tensor ops for 16-bit.
cudnnMathType_t legacy_math(const ConvConfig& cfg) {
  if (cfg.dtype == DType::f32) return cfg.math == MathMode::strict ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

// The legacy twin of numerics_veto(): whether an algorithm's reported math type is allowed; if not, why.
const char* legacy_veto(cudnnMathType_t m, const ConvConfig& cfg) {
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return "down-converted inputs";
  if (m == CUDNN_TENSOR_OP_MATH && cfg.dtype == DType::f32 && cfg.math == MathMode::strict)
    return "tensor cores (TF32) in strict fp32";
  return nullptr;
}

const char* legacy_algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
  }
}

const char* legacy_math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    case CUDNN_FMA_MATH: return "FMA math";
    default: return "unknown math";
  }
}

// The legacy descriptors for this call, or nullptr with *why_not set when the legacy API cannot describe
// the problem (its descriptors hold 32-bit dimensions and strides). cuDNN errors throw.
std::unique_ptr<LegacyDescs> build_legacy(const ConvCall& call, std::string* why_not) {
  const Conv2dProblem& p = call.problem;
  const ConvConfig& cfg = call.config;
  const int64_t biggest = std::max({p.input_elems(), p.weight_elems(), p.output_elems()});
  const int64_t dims[] = {p.n, p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                          p.dilation_h, p.dilation_w, p.groups, p.p(), p.q()};
  bool fits = biggest <= INT_MAX;
  for (int64_t d : dims) fits = fits && d <= INT_MAX;
  if (!fits) {
    *why_not = "the legacy API's 32-bit descriptors cannot hold this problem";
    return nullptr;
  }
  const auto i32 = [](int64_t v) { return static_cast<int>(v); };
  const cudnnTensorFormat_t fmt = cfg.layout == Layout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  const cudnnDataType_t t = cudnn_dtype(cfg.dtype);
  auto ld = std::make_unique<LegacyDescs>();
  CK_CUDNN(cudnnCreateTensorDescriptor(&ld->x));
  CK_CUDNN(cudnnCreateTensorDescriptor(&ld->y));
  CK_CUDNN(cudnnCreateFilterDescriptor(&ld->w));
  CK_CUDNN(cudnnCreateConvolutionDescriptor(&ld->conv));
  CK_CUDNN(cudnnSetTensor4dDescriptor(ld->x, fmt, t, i32(p.n), i32(p.c), i32(p.h), i32(p.w)));
  CK_CUDNN(cudnnSetTensor4dDescriptor(ld->y, fmt, t, i32(p.n), i32(p.k), i32(p.p()), i32(p.q())));
  // Filter dims are always K, C/g, R, S; the format says how they lie (KCRS, or KRSC for NHWC).
  CK_CUDNN(cudnnSetFilter4dDescriptor(ld->w, t, fmt, i32(p.k), i32(p.c_per_group()), i32(p.r), i32(p.s)));
  CK_CUDNN(cudnnSetConvolution2dDescriptor(ld->conv, i32(p.pad_h), i32(p.pad_w), i32(p.stride_h),
                                           i32(p.stride_w), i32(p.dilation_h), i32(p.dilation_w),
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CK_CUDNN(cudnnSetConvolutionGroupCount(ld->conv, i32(p.groups)));
  CK_CUDNN(cudnnSetConvolutionMathType(ld->conv, legacy_math(cfg)));
  return ld;
}

}  // namespace
}  // namespace convkit::detail
