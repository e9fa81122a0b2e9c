// CUDA-event timing for benchmarks (declared in core/cuda_hooks.hpp, options in core/timing.hpp).
//
// Each timed run is bracketed by its own pair of events on the caller's stream. Before every timed run the
// L2 cache is flushed by a cudaMemsetAsync over a buffer of twice the L2 size (allocated once per device
// and process, lazily); the start event is recorded AFTER the flush, so the flush is not timed but the run
// starts with a cold L2, as it would inside a network. Warm-up runs come first. At least min_runs runs are
// timed; more, up to max_runs, while the wall-clock budget lasts. Nothing is allocated inside the loop: the
// events are created before it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda_hooks.hpp"
#include "core/timing.hpp"
#include "cuda/common/check.cuh"

namespace convkit::detail {
namespace {

struct FlushBuffer {
  void* data = nullptr;
  size_t bytes = 0;
};

// One flush buffer per device, allocated on first use and kept until the process exits (the driver
// reclaims it then; freeing it from a static destructor would race the CUDA runtime's own teardown).
FlushBuffer flush_buffer_for_current_device() {
  static std::mutex mu;
  static std::map<int, FlushBuffer> buffers;
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = buffers.find(dev);
  if (it != buffers.end()) return it->second;
  int l2 = 0;
  CK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  FlushBuffer fb;
  // NOTE: twice the L2 so that no line of the timed run's data survives the flush, whatever the
  // replacement policy; at least 1 MiB in case the attribute reads 0.
  fb.bytes = std::max<size_t>(size_t(2) * size_t(std::max(l2, 0)), size_t(1) << 20);
  CK_CUDA(cudaMalloc(&fb.data, fb.bytes));
  buffers[dev] = fb;
  return fb;
}

// The events of one timing call, created before the loop and destroyed however the call ends.
class EventPool {
 public:
  explicit EventPool(size_t pairs) {
    start_.reserve(pairs);
    stop_.reserve(pairs);
    for (size_t i = 0; i < pairs; ++i) {
      cudaEvent_t a = nullptr, b = nullptr;
      CK_CUDA(cudaEventCreate(&a));
      start_.push_back(a);
      CK_CUDA(cudaEventCreate(&b));
      stop_.push_back(b);
    }
  }
  ~EventPool() {
    for (cudaEvent_t e : start_) cudaEventDestroy(e);
    for (cudaEvent_t e : stop_) cudaEventDestroy(e);
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t start(size_t i) const { return start_[i]; }
  cudaEvent_t stop(size_t i) const { return stop_[i]; }

 private:
  std::vector<cudaEvent_t> start_, stop_;
};

}  // namespace

std::vector<double> cuda_time_runs(void* stream_ptr, const std::function<void()>& fn, const TimingOptions& opt) {
  if (!cuda_present()) throw Error(StatusCode::not_available, "no CUDA device is present on this machine.");
  cudaStream_t stream = as_stream(stream_ptr);
  const int min_runs = std::max(1, opt.min_runs);
  const int max_runs = std::max(min_runs, opt.max_runs);

  FlushBuffer flush;
  if (opt.flush_l2) flush = flush_buffer_for_current_device();
  EventPool events(static_cast<size_t>(max_runs));

  for (int i = 0; i < opt.warmup; ++i) fn();
  CK_CUDA(cudaStreamSynchronize(stream));

  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  int enqueued = 0;
  auto enqueue = [&](int count) {
    for (int i = 0; i < count; ++i, ++enqueued) {
      if (flush.data) CK_CUDA(cudaMemsetAsync(flush.data, enqueued & 0xff, flush.bytes, stream));
      CK_CUDA(cudaEventRecord(events.start(static_cast<size_t>(enqueued)), stream));
      fn();
      CK_CUDA(cudaEventRecord(events.stop(static_cast<size_t>(enqueued)), stream));
    }
    CK_CUDA(cudaStreamSynchronize(stream));
  };

  // The first min_runs unconditionally; then batches sized to what the remaining budget should hold
  // (estimated from the wall time per run so far, flush included).
  enqueue(min_runs);
  while (enqueued < max_runs) {
    const double spent_s = std::chrono::duration<double>(clock::now() - t_start).count();
    const double per_run_s = spent_s / enqueued;
    if (spent_s >= opt.budget_s || per_run_s <= 0.0) break;
    const double fits = std::floor((opt.budget_s - spent_s) / per_run_s);
    const int batch = static_cast<int>(std::min<double>(fits, max_runs - enqueued));
    if (batch < 1) break;
    enqueue(batch);
  }

  std::vector<double> ms(static_cast<size_t>(enqueued));
  for (int i = 0; i < enqueued; ++i) {
    float t = 0.0f;
    CK_CUDA(cudaEventElapsedTime(&t, events.start(static_cast<size_t>(i)), events.stop(static_cast<size_t>(i))));
    ms[static_cast<size_t>(i)] = static_cast<double>(t);
  }
  return ms;
}

}  // namespace convkit::detail
