// Selection for conv2d's "auto" and "autotune": the heuristic (the first registered algorithm that can), the
// tune cache (core/tune_cache.hpp) and the autotuner that fills it. docs/tuning.md describes the behaviour.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "convkit/plan.hpp"
#include "core/tune_cache.hpp"

namespace convkit::detail {

// What the cache key says about the machine: the device's name and its driver.
struct DeviceIdentity {
  std::string name;    // "NVIDIA H200 (132 SMs)"; on the CPU its model and OpenMP thread count
  std::string driver;  // the CUDA driver version ("13000"); "-" on the CPU
};
DeviceIdentity device_identity(Device device);
// The current CUDA device's identity (src/cuda/common/tune_device.cu; a stub without CUDA). Never throws:
// a failure gives a name that says so.
DeviceIdentity cuda_device_identity();

// The key of a request; per-sample requests are keyed apart (their layout field reads "nhwc+per_sample").
TuneKey make_tune_key(const Conv2dProblem& p, const ConvConfig& cfg, bool per_sample = false);

// Whether the planner, the tune cache and the autotuner may choose `a` for this request: available, exact
// (not approximate()), can_implement the problem and accepts() the operands. The reason when not, prefixed
// "unavailable: " when the algorithm cannot run at all here.
Support usable(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops);
// usable(), and not passed over by the heuristic (Algorithm::heuristic_choice): the heuristic's filter.
Support heuristic_usable(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops);
// The non-peer algorithms of a device, in registry order.
std::vector<const Algorithm*> device_algorithms(Device d);
// "rejected: <reason>" or "unavailable: <reason>".
std::string reject_text(const Support& s);

// Reference algorithms (*_ref, *_naive): timed only when nothing faster can run the problem.
bool is_reference_algorithm(const std::string& name);

constexpr int kMaxTuneCandidates = 24;

struct TuneCandidate {
  const Algorithm* algorithm = nullptr;
  std::string variant;  // empty: the algorithm's own choice (it has no variants)
  double ms = NAN;      // median of the timed runs, or the single probe run when pruned
  int runs = 0;         // timed runs behind `ms`
  bool pruned = false;  // its probe run was over 3x the best median so far: not timed further
  std::string error;    // it failed (then ms is NaN)

  bool ok() const { return error.empty() && std::isfinite(ms); }
  std::string label() const;  // "name" or "name[variant]"
};

struct TuneResult {
  const Algorithm* algorithm = nullptr;  // the winner
  std::string variant;
  double ms = NAN;
  std::vector<TuneCandidate> candidates;  // in timing order (registry order, variants in the algorithm's order)
  std::vector<std::string> skipped;       // "name: why" for the algorithms of the device not timed
  // The fastest other candidate that ran (nullptr if none).
  const TuneCandidate* runner_up() const;
};

// The candidates for this problem: every non-peer algorithm of cfg.device that is available and can implement
// it, times each of its variants() (its first variant first), at most kMaxTuneCandidates (every algorithm's
// first variant before any second one), references only when nothing else can. `skipped` gets why the others
// are not candidates.
std::vector<TuneCandidate> tune_candidates(const Conv2dProblem& p, const ConvConfig& cfg,
                                           std::vector<std::string>* skipped, const Operands& ops = {});

// Times every candidate on the call's tensors and returns the fastest (the cache is not touched). The output
// goes to a scratch buffer of the tuner's own (with the call's bias and activation, and its residual unless
// the residual aliases dst, which is then left out), each candidate gets its own workspace, and nothing of
// the caller's is written. CUDA: events on call.stream, L2 flushed; CPU: a steady clock. One warm-up and one
// probe run, then (unless pruned) the median of 10 runs. Throws Error(unsupported) when no candidate ran.
TuneResult autotune(const ConvCall& call);

// The heuristic: the first algorithm of cfg.device that is heuristic_usable() for the request, with every algorithm's
// verdict; nullptr (and the verdicts: every rejection) when none is.
const Algorithm* first_usable(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops,
                              std::vector<PlanVerdict>* verdicts);

// Writes the dispatch log of an autotune run (CONVKIT_LOG=dispatch).
void log_autotune(const ConvCall& call, const TuneResult& t, const std::vector<std::string>& notes);

}  // namespace convkit::detail
