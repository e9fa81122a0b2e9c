// convkit/plan.hpp: how a request becomes a kernel. plan() decides, execute() runs the decision.
//
// Every entry point goes through these two: conv2d() and conv2d_per_sample(), the CLI's run, bench, tune and
// plan commands, and the PyTorch ops. plan() is pure (it prints nothing and changes nothing but reading the
// tune cache); execute() writes the CONVKIT_LOG=dispatch line of the plan it runs, tunes when the plan says
// the choice is left to measurement, allocates a workspace when the caller gives none, and runs the kernel.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "convkit/algorithm.hpp"
#include "convkit/epilogue.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit {

struct PlanOptions {
  // "auto" (the tune cache's entry, else the heuristic), "autotune" (the entry, else measure on the first
  // execute()), or an algorithm's name. RunOptions::algo in convkit.hpp says the same at length.
  std::string algo = "auto";
  std::string variant;  // with a named algorithm only: one of its variants(); empty = its own choice
  // The caller can transform its operands between NCHW and NHWC (the PyTorch ops and `convkit run` can;
  // conv2d() on a caller's views cannot). Then, on CUDA, the plan may compute in the other layout, where the
  // registry has a faster kernel for the request (tensor-core kernels read NHWC only, the fp32 direct and
  // SIMT kernels NCHW only): for "auto"/"autotune" when the heuristic's choice in the other layout comes
  // earlier in the registry (ordered fast first); for a named algorithm when it takes only the other one.
  bool any_layout = false;
};

// One algorithm's answer to the request, in registry order: "chosen", "rejected: <reason>",
// "unavailable: <reason>", "not tried (after the chosen one); ...", "not used; it could run this problem".
struct PlanVerdict {
  std::string algorithm;
  std::string answer;
};

struct Plan {
  const Algorithm* algorithm = nullptr;  // null only when source == "autotune": execute() measures and decides
  std::string variant;                   // empty: the algorithm's own choice
  Conv2dProblem problem;                 // what it was planned for; execute() refuses another
  ConvConfig config;                     // the request's, with the layout the plan computes in
  Layout request_layout = Layout::nchw;  // the caller's layout; != config.layout: transform in and out
  size_t workspace_bytes = 0;            // what execute() needs (0 when source == "autotune")
  // "tune cache", "heuristic", "named" or "autotune" (no entry yet); source_detail says it in a sentence.
  std::string source, source_detail;
  std::vector<PlanVerdict> verdicts;  // every algorithm of the device
  std::vector<std::string> notes;     // e.g. a tune cache entry that was ignored, and why
  std::string warning;                // printed once per process by execute() (an unusable cache entry)
  Operands operands;

  bool transforms() const { return config.layout != request_layout; }
  std::string label() const;  // "name", "name[variant]", or "autotune (on first run)"
};

// What would run for this request. Throws Error(unsupported) listing every algorithm's reason when nothing
// can, Error(invalid_problem) for an unknown algorithm or variant, Error(not_available) for a named
// algorithm this build or machine lacks.
Plan plan(const Conv2dProblem& problem, const ConvConfig& config, const Operands& operands = {},
          const PlanOptions& options = {});

// Runs `plan` on tensors already in plan.config.layout (the caller transforms when plan.transforms()).
// The workspace: the caller's (at least plan.workspace_bytes) or, when null, one allocated and freed here.
// With source "autotune" the candidates are timed on these tensors first and the winner is stored in the
// tune cache. The tensors are validated against the plan's problem and configuration.
void execute(const Plan& plan, const Conv2dProblem& problem, const TensorView& src, const TensorView& wei,
             const TensorView& dst, const Epilogue& epilogue = {}, void* stream = nullptr,
             void* workspace = nullptr, size_t workspace_bytes = 0);

}  // namespace convkit
