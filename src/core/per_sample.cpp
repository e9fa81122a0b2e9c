// conv2d_per_sample: validation and dispatch to the CPU or CUDA batched kernel.
#include "convkit/per_sample.hpp"

#include <sstream>

#include "core/per_sample_hooks.hpp"

namespace convkit {

std::array<int64_t, 4> per_sample_weight_dims(const Conv2dProblem& p) {
  return {p.n * p.k, p.c_per_group(), p.r, p.s};
}

namespace {

std::string dims_text(const std::array<int64_t, 4>& d) {
  std::ostringstream o;
  o << "[" << d[0] << "," << d[1] << "," << d[2] << "," << d[3] << "]";
  return o.str();
}

Status check(const char* what, const TensorView& t, const std::array<int64_t, 4>& want, const TensorView& like) {
  auto bad = [&](const std::string& m) {
    return Status::Fail(StatusCode::invalid_tensor, std::string("conv2d_per_sample: ") + what + ": " + m);
  };
  if (t.data == nullptr) return bad("data pointer is null.");
  if (t.dims != want)
    return bad("dims " + dims_text(t.dims) + " do not match the expected " + dims_text(want) + ".");
  if (t.dtype != like.dtype)
    return bad(std::string("dtype ") + to_string(t.dtype) + " differs from the input's " + to_string(like.dtype) + ".");
  if (t.layout != like.layout)
    return bad(std::string("layout ") + to_string(t.layout) + " differs from the input's " +
               to_string(like.layout) + ".");
  if (t.device != like.device)
    return bad(std::string("tensor is on ") + to_string(t.device) + " but the input is on " +
               to_string(like.device) + ".");
  return Status::Ok();
}

}  // namespace

Status validate_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei,
                           const TensorView& dst, const Epilogue&) {
  if (Status s = p.validate(); !s.ok()) return s;
  if (Status s = check("input", src, input_dims(p), src); !s.ok()) return s;
  if (Status s = check("weight", wei, per_sample_weight_dims(p), src); !s.ok()) return s;
  if (Status s = check("output", dst, output_dims(p), src); !s.ok()) return s;
  if (dst.data == src.data || dst.data == wei.data)
    return Status::Fail(StatusCode::invalid_tensor,
                        "conv2d_per_sample: output: must not alias the input or the weight.");
  return Status::Ok();
}

void conv2d_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                       const Epilogue& epi, const RunOptions& opt) {
  throw_if_error(validate_per_sample(p, src, wei, dst, epi));
  const bool cuda = src.device == Device::cuda;
  const std::string own = cuda ? "cuda_per_sample" : "cpu_per_sample";
  if (!opt.algo.empty() && opt.algo != "auto" && opt.algo != own)
    throw Error(StatusCode::invalid_problem, "conv2d_per_sample: unknown algorithm '" + opt.algo +
                                                 "' for " + to_string(src.device) + " tensors (use 'auto' or '" +
                                                 own + "').");
  if (opt.math == MathMode::tf32 && src.dtype != DType::f32)
    throw Error(StatusCode::invalid_problem, "tf32 math applies to f32 tensors only.");
  // NOTE: both kernels compute strict fp32 products; a tf32 request gets the (more accurate) strict result.
  if (cuda)
    detail::cuda_conv2d_per_sample(p, src, wei, dst, epi, opt.stream);
  else
    detail::cpu_conv2d_per_sample(p, src, wei, dst, epi);
}

}  // namespace convkit
