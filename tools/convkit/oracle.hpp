// What `convkit bench` checks each algorithm against: the full output of a reference algorithm (cpu_ref on
// the CPU for small problems, cuda_ref on CUDA), or, where that is too slow, the exact value in double at
// up to 2048 random output points, the same points for every algorithm of a problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "core/compare.hpp"

namespace convkit::cli {

// Deterministic N(0,1) values (xoshiro256** + Box-Muller), stored in `dtype`; the same for a given seed on
// every platform.
void fill_gaussian(void* data, DType dtype, int64_t count, uint64_t seed);
// A 64-bit hash of a string mixed with a seed (per-problem seeds that do not depend on the suite order).
uint64_t mix_seed(uint64_t seed, const std::string& s);

// conv(x, w) at one output element, in double. `y` describes the output (dims and layout; data unused);
// `offset` is the element's offset in it.
double reference_at(const Conv2dProblem& p, const TensorView& x, const TensorView& w, const TensorView& y,
                    int64_t offset);

struct Oracle {
  std::string source;  // "cpu_ref", "cuda_ref" or "double at N sampled points"
  bool full = false;
  std::vector<double> full_ref;   // every output element (when full)
  std::vector<int64_t> points;    // sampled output offsets (always computed: cheap)
  std::vector<double> point_ref;  // the exact values there

  // Compares a host copy of the output (the problem's whole output, in `dtype`).
  detail::Comparison check(const void* out, DType dtype, bool force_sampled = false) const;
};

// Builds the oracle for one problem. x/w are host views of the inputs (as given to every algorithm);
// dev_x/dev_w the same data on `cfg.device` (for cuda_ref). `want_full` asks for the full reference.
Oracle make_oracle(const Conv2dProblem& p, const ConvConfig& cfg, const TensorView& x, const TensorView& w,
                   const TensorView& dev_x, const TensorView& dev_w, bool want_full, uint64_t seed);

}  // namespace convkit::cli
