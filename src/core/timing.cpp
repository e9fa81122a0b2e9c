// Benchmark timing on the CPU (steady clock around each run); CUDA timing lives in
// src/cuda/common/timing.cu (events on the stream, L2 flushed between runs).
#include "core/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/cuda_hooks.hpp"

namespace convkit::detail {

std::vector<double> time_runs(Device device, void* stream, const std::function<void()>& fn,
                              const TimingOptions& opt) {
  if (device == Device::cuda) return cuda_time_runs(stream, fn, opt);
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < opt.warmup; ++i) fn();
  // NOTE: then warm up until stable, on a shared 2-core machine too: until two runs in a row agree within
  // 10% (at most 20 more runs or a quarter of the budget). oneDNN's first runs (its JIT, its threads'
  // first spin) took 24 ms against 1.1 ms later on seed001 and made the first table's ratio 10x off.
  {
    const auto w0 = clock::now();
    double prev = -1;
    for (int i = 0; i < 20; ++i) {
      const auto t0 = clock::now();
      fn();
      const double cur = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      if (prev > 0 && std::fabs(cur - prev) <= 0.1 * std::max(cur, prev)) break;
      prev = cur;
      if (std::chrono::duration<double>(clock::now() - w0).count() > 0.25 * opt.budget_s) break;
    }
  }
  const int most = std::max(1, std::max(opt.cpu_min_runs, std::min(opt.min_runs, opt.max_runs)));
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(most));
  const auto start = clock::now();
  // At least cpu_min_runs; then stop at min_runs (capped by max_runs) or when the budget is spent.
  while (static_cast<int>(ms.size()) < most) {
    const auto t0 = clock::now();
    fn();
    const auto t1 = clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    const double spent_s = std::chrono::duration<double>(t1 - start).count();
    if (static_cast<int>(ms.size()) >= opt.cpu_min_runs && spent_s >= opt.budget_s) break;
  }
  return ms;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lo + hi);
}

double spread(std::vector<double> v) {
  if (v.size() < 4) return NAN;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * double(v.size() - 1);
    const size_t lo = size_t(pos);
    const double f = pos - double(lo);
    return lo + 1 < v.size() ? v[lo] * (1 - f) + v[lo + 1] * f : v[lo];
  };
  const double m = at(0.5);
  return m > 0 ? (at(0.75) - at(0.25)) / m : NAN;
}

}  // namespace convkit::detail
