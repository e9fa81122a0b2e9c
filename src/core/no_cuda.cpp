// Stand-ins for the CUDA hooks in a build without CUDA: every device request says so.
#include "convkit/status.hpp"
#include "convkit/system.hpp"
#include "core/backward.hpp"
#include "core/cuda_hooks.hpp"

namespace convkit::detail {
namespace {
[[noreturn]] void no_cuda() {
  throw Error(StatusCode::not_available,
              "this convkit was built without CUDA (nvcc was not found at configure time); "
              "no CUDA algorithms in this build.");
}
}  // namespace

bool cuda_built() { return false; }
bool cuda_present() { return false; }
void* cuda_alloc(size_t) { no_cuda(); }
void cuda_free(void*) noexcept {}
void cuda_copy_h2d(void*, const void*, size_t) { no_cuda(); }
void cuda_copy_d2h(void*, const void*, size_t) { no_cuda(); }
void cuda_memset(void*, int, size_t) { no_cuda(); }
void cuda_sync() {}
bool pdl_enabled() { return false; }

std::vector<double> cuda_time_runs(void*, const std::function<void()>&, const TimingOptions&) { no_cuda(); }

Support cuda_backward_supports(const Conv2dProblem&, const ConvConfig&) {
  return Support::no("this convkit was built without CUDA (nvcc was not found at configure time).");
}
std::string cuda_backward_kernel_name(const Conv2dProblem&, const ConvConfig&, bool) { return "none"; }
void cuda_depthwise_backward_data(const Conv2dProblem&, const ConvConfig&, const void*, const void*, void*, void*) {
  no_cuda();
}
size_t cuda_depthwise_backward_weight_workspace(const Conv2dProblem&, const ConvConfig&) { return 0; }
void cuda_depthwise_backward_weight(const Conv2dProblem&, const ConvConfig&, const void*, const void*, void*, void*,
                                    void*) {
  no_cuda();
}

Support cuda_dense_wgrad_supports(const Conv2dProblem&, const ConvConfig&) {
  return Support::no("this convkit was built without CUDA (nvcc was not found at configure time).");
}
std::string cuda_dense_wgrad_kernel_name(const Conv2dProblem&, const ConvConfig&) { return "none"; }
size_t cuda_dense_wgrad_workspace(const Conv2dProblem&, const ConvConfig&) { return 0; }
void cuda_dense_wgrad(const Conv2dProblem&, const ConvConfig&, const void*, const void*, void*, void*, void*) {
  no_cuda();
}

void fill_cuda_info(SystemInfo& info) {
  info.cuda_built = false;
  info.cuda_error = "this convkit was built without CUDA (nvcc was not found at configure time).";
}

}  // namespace convkit::detail
