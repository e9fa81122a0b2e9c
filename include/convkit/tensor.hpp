// convkit/tensor.hpp: a non-owning view of a packed 4-D tensor on some device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace convkit {

enum class DType { f32, f16, bf16 };
// Activations: nchw / nhwc. Weights: nchw means KCRS, nhwc means KRSC (K plays N, C/groups plays C).
enum class Layout { nchw, nhwc };
enum class Device { cpu, cuda };
// How fp32 tensors are multiplied. tf32 is always an explicit request, never the default.
enum class MathMode { strict, tf32 };

const char* to_string(DType);
const char* to_string(Layout);
const char* to_string(Device);
const char* to_string(MathMode);
size_t dtype_size(DType);
// Parse helpers used by the CLI; they throw convkit::Error(invalid_problem) with the accepted names.
DType parse_dtype(const std::string&);
Layout parse_layout(const std::string&);
Device parse_device(const std::string&);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Layout layout = Layout::nchw;
  Device device = Device::cpu;
  // Logical sizes, always in N, C, H, W order (K, C/groups, R, S for weights) whatever the layout.
  std::array<int64_t, 4> dims{0, 0, 0, 0};

  int64_t numel() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  // Element offset of logical index (n, c, h, w), 64-bit.
  int64_t offset(int64_t n, int64_t c, int64_t h, int64_t w) const {
    if (layout == Layout::nchw) return ((n * dims[1] + c) * dims[2] + h) * dims[3] + w;
    return ((n * dims[2] + h) * dims[3] + w) * dims[1] + c;
  }
};

}  // namespace convkit
