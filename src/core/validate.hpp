// Checking one tensor against what the problem and config expect: shared by conv2d() and
// conv2d_per_sample(), so every entry point words its errors the same way.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "convkit/algorithm.hpp"
#include "convkit/status.hpp"

namespace convkit::detail {

// "[n,c,h,w]"
std::string dims_text(const std::array<int64_t, 4>& d);

// ok, or Status(invalid_tensor, "<what>: <one sentence>") for a null pointer or a mismatch in dims, dtype,
// layout or device.
Status check_tensor(const std::string& what, const TensorView& t, const std::array<int64_t, 4>& want,
                    const ConvConfig& cfg);

}  // namespace convkit::detail
