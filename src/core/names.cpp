// Names of enums and their parsers, shared by the API, CLI and reports.
#include <string>

#include "convkit/algorithm.hpp"
#include "convkit/epilogue.hpp"
#include "convkit/status.hpp"
#include "convkit/tensor.hpp"

namespace convkit {

const char* to_string(StatusCode c) {
  switch (c) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_problem: return "invalid problem";
    case StatusCode::invalid_tensor: return "invalid tensor";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::not_available: return "not available";
    case StatusCode::cuda_error: return "CUDA error";
    case StatusCode::io_error: return "I/O error";
    case StatusCode::internal: return "internal error";
  }
  return "?";
}

const char* to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}
const char* to_string(Layout l) { return l == Layout::nchw ? "nchw" : "nhwc"; }
const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }
const char* to_string(MathMode m) { return m == MathMode::strict ? "strict" : "tf32"; }
const char* to_string(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::silu: return "silu";
    case Activation::gelu: return "gelu";
    case Activation::relu6: return "relu6";
    case Activation::hardswish: return "hardswish";
    case Activation::sigmoid: return "sigmoid";
    case Activation::hardsigmoid: return "hardsigmoid";
  }
  return "?";
}

size_t dtype_size(DType d) { return d == DType::f32 ? 4 : 2; }

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::f32;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw Error(StatusCode::invalid_problem, "unknown dtype '" + s + "' (expected f32, f16 or bf16)");
}
Layout parse_layout(const std::string& s) {
  if (s == "nchw" || s == "NCHW") return Layout::nchw;
  if (s == "nhwc" || s == "NHWC") return Layout::nhwc;
  throw Error(StatusCode::invalid_problem, "unknown layout '" + s + "' (expected nchw or nhwc)");
}
Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda" || s == "gpu") return Device::cuda;
  throw Error(StatusCode::invalid_problem, "unknown device '" + s + "' (expected cpu or cuda)");
}
Activation parse_activation(const std::string& s) {
  if (s == "none" || s.empty()) return Activation::none;
  if (s == "relu") return Activation::relu;
  if (s == "silu") return Activation::silu;
  if (s == "gelu") return Activation::gelu;
  if (s == "relu6") return Activation::relu6;
  if (s == "hardswish") return Activation::hardswish;
  if (s == "sigmoid") return Activation::sigmoid;
  if (s == "hardsigmoid") return Activation::hardsigmoid;
  throw Error(StatusCode::invalid_problem, "unknown activation '" + s +
                                               "' (expected none, relu, silu, gelu, relu6, hardswish, sigmoid or hardsigmoid)");
}

std::string ConvConfig::to_string() const {
  std::string s = std::string(convkit::to_string(dtype)) + "/" + convkit::to_string(layout) + "/" +
                  convkit::to_string(device);
  if (math == MathMode::tf32) s += "/tf32";
  return s;
}

}  // namespace convkit
