// Timing for benchmarks (never for tests). CPU: steady clock around each run. CUDA: events around each
// run on the given stream, with the L2 flushed before every timed run (a buffer of twice the L2 size,
// allocated once per process, is overwritten on the same stream), so the cache is not what is measured.
// Nothing is allocated inside the timed loop.
#pragma once

#include <functional>
#include <vector>

#include "convkit/tensor.hpp"

namespace convkit::detail {

struct TimingOptions {
  int warmup = 3;            // untimed runs first (module load, plan building, clocks ramp)
  int min_runs = 50;         // at least this many timed runs ...
  int max_runs = 200;        // ... at most this many ...
  double budget_s = 2.0;     // ... and more than min_runs only while the budget lasts
  int cpu_min_runs = 5;      // on the CPU: at least this many; stop at min_runs or budget_s, whichever first
  bool flush_l2 = true;      // CUDA only
};

// Per-run times in milliseconds (unsorted). `fn` enqueues one run (asynchronously on CUDA).
std::vector<double> time_runs(Device device, void* stream, const std::function<void()>& fn,
                              const TimingOptions& opt);

double median(std::vector<double> v);
// The interquartile range over the median, (p75 - p25) / p50: how far apart the middle half of the runs
// lie. NaN for fewer than 4 runs.
double spread(std::vector<double> v);
// Above this spread a median is not a number to compare: bench marks the row "noisy" and prints no ratio.
constexpr double kNoisySpread = 0.25;

}  // namespace convkit::detail
