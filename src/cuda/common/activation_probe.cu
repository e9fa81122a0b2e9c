// The tests' window on the device activation (activation_probe.hpp): one thread a value, activate_out<T>
// in fp32 and no rounding to T, so that a test sees the activation's own error.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "core/cuda_hooks.hpp"
#include "cuda/common/activation_probe.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/epilogue.cuh"

namespace convkit::detail {
namespace {

template <typename T>
__global__ void activation_probe_kernel(Activation act, const float* __restrict__ x, float* __restrict__ y,
                                        int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = activate_out<T>(act, x[i]);
}

}  // namespace

std::vector<float> cuda_activation_probe(Activation act, DType out, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<float> y(x.size());
  if (n == 0) return y;
  const size_t bytes = x.size() * sizeof(float);
  std::unique_ptr<void, void (*)(void*)> dx(cuda_alloc(bytes), cuda_free), dy(cuda_alloc(bytes), cuda_free);
  cuda_copy_h2d(dx.get(), x.data(), bytes);
  const unsigned blocks = unsigned((n + 255) / 256);
  const auto* px = static_cast<const float*>(dx.get());
  auto* py = static_cast<float*>(dy.get());
  switch (out) {
    case DType::f16: activation_probe_kernel<__half><<<blocks, 256>>>(act, px, py, n); break;
    case DType::bf16: activation_probe_kernel<__nv_bfloat16><<<blocks, 256>>>(act, px, py, n); break;
    case DType::f32: activation_probe_kernel<float><<<blocks, 256>>>(act, px, py, n); break;
  }
  CK_LAUNCH("activation_probe_kernel");
  cuda_copy_d2h(y.data(), dy.get(), bytes);
  return y;
}

}  // namespace convkit::detail
