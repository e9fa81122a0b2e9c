// The registry (every algorithm, in the heuristic's order, and the peers) and the tensor checks every entry
// point shares. conv2d() itself is a plan and its execution: core/planner.cpp.
#include "core/registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

#include "convkit/convkit.hpp"
#include "core/tune.hpp"
#include "core/validate.hpp"

namespace convkit {

const char* version() { return CONVKIT_VERSION_STRING; }

// The order is the heuristic's: `auto` without a tune cache entry runs the first algorithm that can implement
// the problem and accepts its operands (core/planner.cpp). Each line says why it sits where it does.
const std::vector<const Algorithm*>& algorithms() {
  static const std::vector<const Algorithm*> list = [] {
    std::vector<const Algorithm*> v;
#ifdef CONVKIT_WITH_CUDA
    // Depthwise layers only (groups = C): every GEMM tile there is mostly zeros, so it goes before them all.
    v.push_back(detail::make_cuda_depthwise());
    // Grouped layers of 2-64 channels a group with K = C (ResNeXt), f16/bf16: tensor cores on whole groups,
    // where a GEMM tile of 64-256 output channels is mostly zeros: 1.3-1.9x cuda_igemm_mma on 8 channels, 10x
    // its gather path on 4 (docs/perf.md, 2026-12-01). Alone, a 16-32-channel layer ran 1.2-2.3x faster on
    // cuda_igemm_mma; in the whole ResNeXt-50 the opposite held (convert 4.07 ms with this kernel on every
    // grouped layer, 4.60 with the implicit GEMMs on the 16-32-channel ones; eager 4.42 in both runs), so
    // it is first for all of them until that is understood (docs/perf.md).
    v.push_back(detail::make_cuda_grouped_mma());
    // The other grouped layers of 2-64 channels a group: strict fp32 (1.2x cuDNN's FMA kernels over the
    // resnext50 suite), and f16/bf16 whose C/groups the tensor-core kernels only take through their gather
    // path (4.7x cuda_igemm_mma's on 4 channels). Passed over for f16/bf16 with C/groups % 8 == 0.
    v.push_back(detail::make_cuda_grouped());
    // 1x1 layers with C <= 192 (f16/bf16) and a SiLU or sigmoid epilogue: the whole reduction staged once,
    // the epilogue on the fragments of many blocks an SM; inside EfficientNet-B0 1.3-2.2x cuda_igemm_wgmma
    // there, which is faster on the other 1x1 layers (heuristic_choice, docs/perf.md 2026-12-04).
    v.push_back(detail::make_cuda_pointwise_mma());
    // 1-4 input channels (the RGB stem), f16/bf16 NHWC: cuda_igemm_wgmma cannot take C % 8 != 0, and
    // cuda_igemm_mma gathers 6-byte pixels element by element (ResNet-50's 7x7 stem 0.159 ms of its 1.27 ms
    // forward; cuDNN 0.228): 0.100 ms with this kernel. Picked for up to 64 filters with two pixel tiles an
    // SM, where it measured faster (heuristic_choice).
    v.push_back(detail::make_cuda_stem_mma());
    // The fastest dense kernel where it applies (Hopper; f16/bf16 with C/groups % 8, tf32 with % 4; 16-byte
    // aligned operands); also per-sample weights (f16/bf16).
    v.push_back(detail::make_cuda_igemm_wgmma());
    // Everything it takes (Hopper, stride 1, C % 64) cuda_igemm_wgmma takes too, so the heuristic never picks
    // it: it is registered for the autotuner and `convkit tune` (it wins some small-filter-bank layers; the
    // tune cache then names it) and to be run by name.
    v.push_back(detail::make_cuda_conv_wgmma_halo());
    // Tensor cores on any sm_80+ GPU and any C (a gather path for misaligned C or pointers); per-sample weights.
    v.push_back(detail::make_cuda_igemm_mma());
    // The portable tensor-core rung (WMMA); the mma kernel above is faster wherever both run.
    v.push_back(detail::make_cuda_igemm_wmma());
    // The fastest strict-fp32 kernel (NCHW); per-sample weights in f32 NCHW.
    v.push_back(detail::make_cuda_igemm_simt());
    // The direct rungs, fastest first: they take what the GEMMs refuse (their index limits).
    v.push_back(detail::make_cuda_direct_regblock());
    v.push_back(detail::make_cuda_direct_smem());
    // cuBLAS on an im2col workspace: exact and general, slower than the implicit GEMMs, before the naive rungs.
    v.push_back(detail::make_cuda_im2col_cublas());
    v.push_back(detail::make_cuda_direct_naive());
    // Per-sample weights only, in any dtype, layout and alignment: after the faster per-sample modes.
    v.push_back(detail::make_cuda_per_sample());
    // The oracle: last, it takes every valid problem.
    v.push_back(detail::make_cuda_ref());
#endif
    // Depthwise layers only (groups = C, multiplier 1): before the GEMM, whose tiles would be mostly zeros.
    v.push_back(detail::make_cpu_depthwise());
    // Grouped layers with K = C and few channels a group: before the GEMM, whose one GEMM a group is a few
    // columns wide.
    v.push_back(detail::make_cpu_grouped());
    // OpenBLAS on an im2col workspace: the fastest general CPU path.
    v.push_back(detail::make_cpu_im2col_gemm());
    // No library, no workspace: takes what the GEMM cannot (no OpenBLAS, workspace limits).
    v.push_back(detail::make_cpu_direct());
    // Approximate (approximate_rel_l2): never chosen automatically; registered to run by name.
    v.push_back(detail::make_cpu_winograd());
    // Per-sample weights only (conv2d_per_sample).
    v.push_back(detail::make_cpu_per_sample());
    // The oracle: last, it takes every valid problem.
    v.push_back(detail::make_cpu_ref());
    return v;
  }();
  return list;
}

const std::vector<const Algorithm*>& peers() {
  static const std::vector<const Algorithm*> list = [] {
    std::vector<const Algorithm*> v;
#ifdef CONVKIT_WITH_CUDA
    v.push_back(detail::make_cudnn_peer());
#endif
    v.push_back(detail::make_onednn_cpu());
    return v;
  }();
  return list;
}

const Algorithm* find_algorithm(const std::string& name) {
  for (const auto* a : algorithms())
    if (a->name() == name) return a;
  for (const auto* a : peers())
    if (a->name() == name) return a;
  return nullptr;
}

std::array<int64_t, 4> input_dims(const Conv2dProblem& p) { return {p.n, p.c, p.h, p.w}; }
std::array<int64_t, 4> weight_dims(const Conv2dProblem& p) { return {p.k, p.c_per_group(), p.r, p.s}; }
std::array<int64_t, 4> output_dims(const Conv2dProblem& p) { return {p.n, p.k, p.p(), p.q()}; }

namespace detail {

std::string dims_text(const std::array<int64_t, 4>& d) {
  std::ostringstream o;
  o << "[" << d[0] << "," << d[1] << "," << d[2] << "," << d[3] << "]";
  return o.str();
}

Status check_tensor(const std::string& what, const TensorView& t, const std::array<int64_t, 4>& want,
                    const ConvConfig& cfg) {
  auto bad = [&](const std::string& m) { return Status::Fail(StatusCode::invalid_tensor, what + ": " + m); };
  if (t.data == nullptr) return bad("data pointer is null.");
  if (t.dims != want) return bad("dims " + dims_text(t.dims) + " do not match the problem's " + dims_text(want) + ".");
  if (t.dtype != cfg.dtype)
    return bad(std::string("dtype ") + to_string(t.dtype) + " differs from the requested " + to_string(cfg.dtype) + ".");
  if (t.layout != cfg.layout)
    return bad(std::string("layout ") + to_string(t.layout) + " differs from the requested " +
               to_string(cfg.layout) + ".");
  if (t.device != cfg.device)
    return bad(std::string("tensor is on ") + to_string(t.device) + " but the request is for " +
               to_string(cfg.device) + ".");
  return Status::Ok();
}

}  // namespace detail

Status validate_tensors(const Conv2dProblem& p, const ConvConfig& cfg, const TensorView& src, const TensorView& wei,
                        const TensorView& dst, const Epilogue& epi) {
  if (Status s = p.validate(); !s.ok()) return s;
  if (cfg.math == MathMode::tf32 && cfg.dtype != DType::f32)
    return Status::Fail(StatusCode::invalid_problem, "tf32 math applies to f32 tensors only.");
  if (Status s = detail::check_tensor("input", src, input_dims(p), cfg); !s.ok()) return s;
  if (Status s = detail::check_tensor("weight", wei, weight_dims(p), cfg); !s.ok()) return s;
  if (Status s = detail::check_tensor("output", dst, output_dims(p), cfg); !s.ok()) return s;
  if (!std::isfinite(epi.alpha) || !std::isfinite(epi.beta))
    return Status::Fail(StatusCode::invalid_problem, "epilogue alpha and beta must be finite.");
  if (dst.data == src.data || dst.data == wei.data)
    return Status::Fail(StatusCode::invalid_tensor, "output: must not alias the input or the weight.");
  return Status::Ok();
}

}  // namespace convkit
