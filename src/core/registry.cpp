// The registry and the one conv2d() entry point: validate, select (or look up), allocate workspace, run.
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

const std::vector<const Algorithm*>& algorithms() {
  static const std::vector<const Algorithm*> list = [] {
    std::vector<const Algorithm*> v;
#ifdef CONVKIT_WITH_CUDA
    v.push_back(detail::make_cuda_depthwise());  // first: it takes depthwise layers only, where every GEMM tile is mostly zeros
    v.push_back(detail::make_cuda_igemm_wgmma());  // the fastest where it applies (Hopper; f16/bf16 with C/groups % 8 == 0, tf32 with % 4)
    v.push_back(detail::make_cuda_conv_wgmma_halo());  // Hopper, stride 1, C % 64, small filter banks: the halo kernel
    v.push_back(detail::make_cuda_igemm_mma());
    v.push_back(detail::make_cuda_igemm_wmma());
    v.push_back(detail::make_cuda_igemm_simt());
    v.push_back(detail::make_cuda_direct_regblock());
    v.push_back(detail::make_cuda_direct_smem());
    v.push_back(detail::make_cuda_im2col_cublas());
    v.push_back(detail::make_cuda_direct_naive());
    v.push_back(detail::make_cuda_ref());
#endif
    v.push_back(detail::make_cpu_depthwise());  // first: it takes depthwise layers only
    v.push_back(detail::make_cpu_im2col_gemm());
    v.push_back(detail::make_cpu_direct());
    v.push_back(detail::make_cpu_winograd());  // approximate: by name only
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

const Algorithm& select(const Conv2dProblem& problem, const ConvConfig& cfg) {
  return detail::select_heuristic(problem, cfg);
}

void conv2d(const Conv2dProblem& problem, const TensorView& src, const TensorView& wei, const TensorView& dst,
            const Epilogue& epi, const RunOptions& opt) {
  ConvConfig cfg{src.dtype, src.layout, src.device, opt.math};
  throw_if_error(validate_tensors(problem, cfg, src, wei, dst, epi));
  const Algorithm* algo = nullptr;
  std::string variant = opt.variant;
  if (opt.algo.empty() || opt.algo == "auto" || opt.algo == "autotune") {
    if (!opt.variant.empty())
      throw Error(StatusCode::invalid_problem, "variant '" + opt.variant + "' needs a named algorithm; \"" +
                                                   (opt.algo.empty() ? "auto" : opt.algo) + "\" picks its own.");
    ConvCall tuning{problem, cfg, src, wei, dst, epi, nullptr, 0, opt.stream, std::string()};
    const Selection chosen = detail::choose_for_call(tuning, opt.algo == "autotune", *detail::tune_cache());
    algo = chosen.algorithm;
    variant = chosen.variant;
  } else {
    algo = find_algorithm(opt.algo);
    if (!algo) throw Error(StatusCode::invalid_problem, "unknown algorithm '" + opt.algo + "' (see `convkit list`)");
    if (algo->device() != cfg.device)
      throw Error(StatusCode::unsupported, algo->name() + " runs on " + to_string(algo->device()) +
                                               " but the tensors are on " + to_string(cfg.device) + ".");
    if (Support av = algo->available(); !av) throw Error(StatusCode::not_available, algo->name() + ": " + av.reason);
    if (Support ok = algo->can_implement(problem, cfg); !ok)
      throw Error(StatusCode::unsupported, algo->name() + " cannot run " + problem.to_string() + ": " + ok.reason);
    if (!variant.empty()) {
      const std::vector<std::string> vs = algo->variants(problem, cfg);
      if (std::find(vs.begin(), vs.end(), variant) == vs.end()) {
        std::string list;
        for (const auto& v : vs) list += (list.empty() ? "" : ", ") + v;
        throw Error(StatusCode::invalid_problem, algo->name() + " has no variant '" + variant + "' for " +
                                                     problem.to_string() + " (" +
                                                     (list.empty() ? "it has no variants" : "its variants: " + list) +
                                                     ").");
      }
    }
  }
  ConvCall call{problem, cfg, src, wei, dst, epi, opt.workspace, opt.workspace_bytes, opt.stream, variant};
  const size_t need =
      variant.empty() ? algo->workspace_bytes(problem, cfg) : algo->variant_workspace_bytes(problem, cfg, variant);
  Buffer owned;
  if (need > 0 && (call.workspace == nullptr || call.workspace_bytes < need)) {
    if (call.workspace != nullptr)
      throw Error(StatusCode::invalid_tensor, algo->name() + " needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    owned = Buffer(cfg.device, need);
    call.workspace = owned.data();
    call.workspace_bytes = need;
  }
  algo->run(call);
  // An owned workspace is freed on return; on CUDA wait for the kernels that use it first.
  if (owned.data() != nullptr && cfg.device == Device::cuda) device_synchronize(cfg.device);
}

}  // namespace convkit
