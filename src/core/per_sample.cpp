// conv2d_per_sample's validation (the call itself is a plan, in core/planner.cpp).
#include "convkit/per_sample.hpp"

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

}  // namespace convkit
