// convkit/convkit.hpp: the public entry points.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convkit/algorithm.hpp"
#include "convkit/epilogue.hpp"
#include "convkit/memory.hpp"
#include "convkit/plan.hpp"
#include "convkit/problem.hpp"
#include "convkit/status.hpp"
#include "convkit/tensor.hpp"

namespace convkit {

const char* version();

struct RunOptions {
  // How the algorithm is picked (docs/tuning.md):
  //   "auto"      the tune cache's entry for this problem, configuration and device, if there is one that
  //               still applies (an entry whose algorithm can no longer implement the problem is ignored
  //               with a one-time warning); else the first registered algorithm that can implement it.
  //   "autotune"  as "auto", but on a cache miss every candidate (each non-peer algorithm of the device that
  //               can implement the problem, times each of its variants(); at most 24; the *_ref and *_naive
  //               references only when nothing faster can) is timed on these tensors, the winner is stored
  //               in the cache and then run. Tuning writes into a scratch output of its own (with the bias
  //               and activation, without a residual that aliases dst): dst is written once, by the winner.
  //   a name      that algorithm (an error, with its reason, if it cannot).
  // The cache file: $CONVKIT_TUNE_CACHE ("off": none, entries are kept for the process only), else
  // $XDG_CACHE_HOME/convkit/tune-v1.txt, else $HOME/.cache/convkit/tune-v1.txt. `convkit tune` fills it.
  std::string algo = "auto";
  // With a named algorithm: one of its variants() (see Algorithm::variants), passed on as ConvCall::variant;
  // empty = the algorithm's own choice. Must be empty with "auto" and "autotune" (they pick the variant).
  std::string variant;
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

// The heuristic's choice: the first registered algorithm of the device that can implement the problem (an
// approximate one, Algorithm::approximate(), never), or throws Error(unsupported) listing every rejection. (conv2d("auto") prefers a tune cache entry: select_auto.)
const Algorithm& select(const Conv2dProblem& problem, const ConvConfig& config);

// What conv2d("auto") would run: the algorithm, its variant (empty = its own choice) and where the choice came
// from ("tune cache" or "heuristic"). Throws like select().
struct Selection {
  const Algorithm* algorithm = nullptr;
  std::string variant;
  std::string source;
};
Selection select_auto(const Conv2dProblem& problem, const ConvConfig& config);
// A number that changes whenever a tune cache of this process is opened or read, or an entry is stored in
// one: what select_auto() answers for a (problem, config) can change only with it, or with the environment
// that names the cache (CONVKIT_TUNE_CACHE, XDG_CACHE_HOME, HOME). For callers that remember its answers.
std::uint64_t tune_cache_generation();

// Copies `src` into `dst` converting between NCHW and NHWC (for weights: KCRS and KRSC, the same thing): the
// same dims, dtype and device, non-overlapping; the same layout on both is a plain copy. CUDA tensors: a
// tiled transpose enqueued on `stream` (cudaStream_t; asynchronous). Throws Error(invalid_tensor) on
// mismatched views.
void transform_layout(const TensorView& src, const TensorView& dst, void* stream = nullptr);

// Checks the tensors (and epilogue) against the problem and config: shape, dtype, layout, device, nulls.
Status validate_tensors(const Conv2dProblem& problem, const ConvConfig& config, const TensorView& src,
                        const TensorView& wei, const TensorView& dst, const Epilogue& epilogue);

// Expected logical dims of each operand.
std::array<int64_t, 4> input_dims(const Conv2dProblem& p);
std::array<int64_t, 4> weight_dims(const Conv2dProblem& p);
std::array<int64_t, 4> output_dims(const Conv2dProblem& p);

}  // namespace convkit
