// Comparing an output with a reference: the numbers every test and benchmark report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convkit/tensor.hpp"

namespace convkit::detail {

struct Comparison {
  int64_t count = 0;
  int64_t nonfinite = 0;     // NaN/Inf in the output where the reference is finite (unwritten poison shows here)
  int64_t mismatches = 0;    // elements not bit-equal to the reference (as float)
  double max_abs = 0.0;      // max |out - ref|
  double rel_l2 = 0.0;       // ||out - ref|| / ||ref||
  double ref_l2 = 0.0;
  int64_t first_bad = -1;    // index of the first non-finite or largest-error element
};

// `out` is converted to float from its dtype; `ref` holds doubles (the oracle's exact values rounded to
// the output dtype are not assumed).
Comparison compare(const void* out, DType dtype, const std::vector<double>& ref);
Comparison compare(const void* out, DType dtype, const void* ref, DType ref_dtype, int64_t count);

// Host copy of a tensor as doubles, whatever its dtype.
std::vector<double> to_doubles(const void* data, DType dtype, int64_t count);

}  // namespace convkit::detail
