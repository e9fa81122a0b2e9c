// conv2d_per_sample: validation and dispatch to the CPU or CUDA batched kernel.
#include "convkit/per_sample.hpp"

#include "core/per_sample_hooks.hpp"
#include "core/validate.hpp"

namespace convkit {

std::array<int64_t, 4> per_sample_weight_dims(const Conv2dProblem& p) {
  return {p.n * p.k, p.c_per_group(), p.r, p.s};
}

Status validate_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei,
                           const TensorView& dst, const Epilogue&) {
  if (Status s = p.validate(); !s.ok()) return s;
  // The input sets what the others must be: its dtype, layout and device.
  const ConvConfig cfg{src.dtype, src.layout, src.device, MathMode::strict};
  if (Status s = detail::check_tensor("conv2d_per_sample: input", src, input_dims(p), cfg); !s.ok()) return s;
  if (Status s = detail::check_tensor("conv2d_per_sample: weight", wei, per_sample_weight_dims(p), cfg); !s.ok())
    return s;
  if (Status s = detail::check_tensor("conv2d_per_sample: output", dst, output_dims(p), cfg); !s.ok()) return s;
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
