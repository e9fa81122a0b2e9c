// convkit/epilogue.hpp: what happens to each output element on its way to memory.
//
//   y = act(alpha * conv(x, w) + bias[k] + beta * residual)
//
// bias (K elements, the output dtype) and residual (the output's shape, dtype and layout, on the output's
// device) are optional; null pointers mean "absent". The residual may alias the output (in-place add).
#pragma once

#include <string>

namespace convkit {

// relu6 = min(max(x, 0), 6) (MobileNetV2); hardswish = x * relu6(x + 3) / 6 (MobileNetV3), as PyTorch;
// sigmoid = 1 / (1 + exp(-x)) and hardsigmoid = relu6(x + 3) / 6, the gates of squeeze-excitation blocks
// (EfficientNet, RegNetY; MobileNetV3).
enum class Activation { none, relu, silu, gelu, relu6, hardswish, sigmoid, hardsigmoid };

const char* to_string(Activation);
// Throws convkit::Error(invalid_problem) naming the accepted values.
Activation parse_activation(const std::string&);

struct Epilogue {
  const void* bias = nullptr;
  const void* residual = nullptr;
  Activation activation = Activation::none;
  float alpha = 1.0f;
  float beta = 1.0f;

  bool is_identity() const {
    return bias == nullptr && residual == nullptr && activation == Activation::none && alpha == 1.0f;
  }
};

}  // namespace convkit
