// convkit/convkit.hpp: the public entry points.
#pragma once

#include <string>
#include <vector>

#include "convkit/algorithm.hpp"
#include "convkit/epilogue.hpp"
#include "convkit/memory.hpp"
#include "convkit/problem.hpp"
#include "convkit/status.hpp"
#include "convkit/tensor.hpp"

namespace convkit {

const char* version();

struct RunOptions {
  // "auto" selects the first registered algorithm that can implement the problem; otherwise the name of
  // one algorithm (an error, with its reason, if it cannot).
  std::string algo = "auto";
  MathMode math = MathMode::strict;
  void* stream = nullptr;         // cudaStream_t for CUDA tensors
  void* workspace = nullptr;      // caller-provided workspace; if null, conv2d allocates (and frees) it
  size_t workspace_bytes = 0;
};

// y = act(alpha*conv(src, wei) + bias + beta*residual). src/dst/residual share dtype, layout and device;
// wei has the same dtype and the matching weight layout (KCRS for nchw, KRSC for nhwc).
// Throws convkit::Error with a one-sentence reason on any invalid input.
void conv2d(const Conv2dProblem& problem, const TensorView& src, const TensorView& wei,
            const TensorView& dst, const Epilogue& epilogue = {}, const RunOptions& options = {});

// The registry, in selection order (fast first, the reference last). Peers are listed separately.
const std::vector<const Algorithm*>& algorithms();
const std::vector<const Algorithm*>& peers();
// Any algorithm or peer by name; nullptr if none has that name.
const Algorithm* find_algorithm(const std::string& name);

// The algorithm conv2d("auto") would use, or throws Error(unsupported) listing every rejection.
const Algorithm& select(const Conv2dProblem& problem, const ConvConfig& config);

// Checks the tensors (and epilogue) against the problem and config: shape, dtype, layout, device, nulls.
Status validate_tensors(const Conv2dProblem& problem, const ConvConfig& config, const TensorView& src,
                        const TensorView& wei, const TensorView& dst, const Epilogue& epilogue);

// Expected logical dims of each operand.
std::array<int64_t, 4> input_dims(const Conv2dProblem& p);
std::array<int64_t, 4> weight_dims(const Conv2dProblem& p);
std::array<int64_t, 4> output_dims(const Conv2dProblem& p);

}  // namespace convkit
