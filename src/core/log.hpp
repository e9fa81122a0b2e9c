// The one place that prints (on stderr): CONVKIT_LOG topics and the library's warnings.
//   CONVKIT_LOG=dispatch  once per (problem, config): the choice, where it came from (heuristic, tune cache or
//                         autotune with its timings) and the verdict on every algorithm of that device.
#pragma once

#include <string>
#include <vector>

#include "convkit/algorithm.hpp"

namespace convkit::detail {

bool log_enabled(const char* topic);

// "convkit: warning: <message>" on stderr.
void log_warning(const std::string& message);
// The same, only the first time `key` is given in this process; returns whether it printed.
bool log_warning_once(const std::string& key, const std::string& message);

// What the dispatch log says about one selection.
struct DispatchReport {
  std::string chosen;   // algorithm name
  std::string variant;  // empty: the algorithm's own choice
  std::string source;   // "heuristic: ...", "tune cache: ...", "autotune: ..."
  std::vector<std::string> notes;  // more lines, e.g. the autotune timings or an ignored cache entry
  struct Verdict {
    std::string algorithm;
    std::string text;  // "chosen", "rejected: <reason>", "not tried (...)", ...
  };
  std::vector<Verdict> algorithms;  // every algorithm of the device, in registry order
};

// True when CONVKIT_LOG=dispatch is set and this (problem, config) has not been logged yet in this process:
// only then is a report worth building.
// Per-sample requests (convkit/per_sample.hpp) are a key of their own.
bool dispatch_log_pending(const Conv2dProblem& p, const ConvConfig& cfg, bool per_sample = false);
// Prints the report once per (problem, config) (later calls for the same key print nothing).
void log_dispatch(const Conv2dProblem& p, const ConvConfig& cfg, const DispatchReport& report,
                  bool per_sample = false);
// The same for a request of another kind ("backward-data", "backward-weight"), a key of its own.
bool dispatch_log_pending(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& kind);
void log_dispatch(const Conv2dProblem& p, const ConvConfig& cfg, const DispatchReport& report,
                  const std::string& kind);

// The current UTC time as 2026-11-29T12:34:56Z (tune-cache entries, bench reports).
std::string utc_now();

}  // namespace convkit::detail
