// The extension's squeeze-excitation gate kernel (python/csrc/kernels.cu, cuda_se_gate_nhwc) outside PyTorch, so
// that compute-sanitizer sees it alone: bf16 problems on random data, each against a double-precision reference
// on the CPU. Prints one line a problem and HARNESS OK or HARNESS FAIL; exit status 0, 1 (a result off) or 2 (a
// CUDA error). Built and run under memcheck, racecheck, synccheck and initcheck by scripts/sanitize_se_gate.sh;
// the kernel's accuracy and dtypes in the extension are python/tests/test_pool.py's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "convkit/epilogue.hpp"
#include "kernels.hpp"

// The library's switch, which the extension links against; programmatic launch on, as in the extension.
namespace convkit {
bool cuda_programmatic_launch() { return true; }
}  // namespace convkit

namespace {

using convkit::Activation;

double act(double v, Activation a) {
  switch (a) {
    case Activation::relu: return v > 0 ? v : 0;
    case Activation::silu: return v / (1 + std::exp(-v));
    case Activation::sigmoid: return 1 / (1 + std::exp(-v));
    case Activation::hardsigmoid: return std::fmin(std::fmax(v + 3, 0.0), 6.0) / 6;
    default: return v;
  }
}

struct Case {
  int n, c, r, h, w;
  Activation a1, a2;
  bool bias;
};

float rnd() { return float(rand()) / RAND_MAX * 2 - 1; }

template <typename V>
bool to_device(__nv_bfloat16** d, const V& host) {
  return cudaMalloc(d, host.size() * 2) == cudaSuccess &&
         cudaMemcpy(*d, host.data(), host.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess;
}

// The largest |got - want| / (1 + |want|) over the problem's outputs, or a negative value on a CUDA error.
double run(const Case& s) {
  using bf = __nv_bfloat16;
  const size_t hw = size_t(s.h) * s.w, nx = size_t(s.n) * hw * s.c;
  std::vector<bf> x(nx), w1(size_t(s.r) * s.c), w2(size_t(s.c) * s.r), b1(s.r), b2(s.c), y(size_t(s.n) * s.c);
  for (auto& v : x) v = __float2bfloat16(rnd());
  for (auto& v : w1) v = __float2bfloat16(rnd() / 4);
  for (auto& v : w2) v = __float2bfloat16(rnd() / 4);
  for (auto& v : b1) v = __float2bfloat16(rnd());
  for (auto& v : b2) v = __float2bfloat16(rnd());
  bf *dx = nullptr, *dw1 = nullptr, *dw2 = nullptr, *db1 = nullptr, *db2 = nullptr, *dy = nullptr;
  bool ok = to_device(&dx, x) && to_device(&dw1, w1) && to_device(&dw2, w2) && to_device(&db1, b1) &&
            to_device(&db2, b2) && cudaMalloc(&dy, y.size() * 2) == cudaSuccess;
  if (ok) {
    convkit_ext::cuda_se_gate_nhwc(convkit_ext::Kind::bf16, dx, dw1, s.bias ? db1 : nullptr, dw2,
                                   s.bias ? db2 : nullptr, dy, s.n, int64_t(hw), s.c, s.r, int(s.a1), int(s.a2),
                                   nullptr);
    ok = cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  for (bf* p : {dx, dw1, dw2, db1, db2, dy}) cudaFree(p);
  if (!ok) return -1;
  const auto f = [](bf v) { return double(__bfloat162float(v)); };
  double worst = 0;
  for (int n = 0; n < s.n; ++n) {
    std::vector<double> m(s.c, 0.0), h(s.r);
    for (size_t p = 0; p < hw; ++p)
      for (int c = 0; c < s.c; ++c) m[c] += f(x[(n * hw + p) * s.c + c]);
    for (auto& v : m) v /= double(hw);
    for (int j = 0; j < s.r; ++j) {
      double a = s.bias ? f(b1[j]) : 0;
      for (int c = 0; c < s.c; ++c) a += f(w1[size_t(j) * s.c + c]) * m[c];
      h[j] = act(a, s.a1);
    }
    for (int c = 0; c < s.c; ++c) {
      double a = s.bias ? f(b2[c]) : 0;
      for (int j = 0; j < s.r; ++j) a += f(w2[size_t(c) * s.r + j]) * h[j];
      const double want = act(a, s.a2), got = f(y[size_t(n) * s.c + c]);
      worst = std::fmax(worst, std::fabs(got - want) / (1 + std::fabs(want)));
    }
  }
  return worst;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no CUDA device\nHARNESS FAIL\n");
    return 2;
  }
  const Case cases[] = {
      {1, 32, 8, 112, 112, Activation::silu, Activation::sigmoid, true},  // EfficientNet-B0's first gate
      {3, 1152, 48, 7, 7, Activation::silu, Activation::sigmoid, true},   // its last
      {2, 24, 6, 5, 3, Activation::relu, Activation::hardsigmoid, false},
      {1, 16, 4, 1, 2, Activation::silu, Activation::sigmoid, true},      // fewer pixels than the cluster's blocks
      {9, 64, 200, 3, 3, Activation::relu, Activation::sigmoid, true},    // R > C
      {4, 480, 20, 14, 14, Activation::silu, Activation::sigmoid, true},
      {2, 960, 240, 7, 7, Activation::silu, Activation::sigmoid, true},   // MobileNetV3-Large's last (R = 240)
      {1, 8, 3, 2, 2, Activation::relu, Activation::sigmoid, false},      // one channel a block
  };
  int bad = 0;
  for (const Case& s : cases) {
    if (!convkit_ext::se_gate_takes(convkit_ext::Kind::bf16, s.n, s.c, s.r)) {
      printf("n%d c%d r%d %dx%d: not taken\n", s.n, s.c, s.r, s.h, s.w);
      ++bad;
      continue;
    }
    const double worst = run(s);
    if (worst < 0) {
      printf("n%d c%d r%d %dx%d: CUDA error %s\nHARNESS FAIL\n", s.n, s.c, s.r, s.h, s.w,
             cudaGetErrorString(cudaGetLastError()));
      return 2;
    }
    printf("n%d c%d r%d %dx%d: max rel err %.2e\n", s.n, s.c, s.r, s.h, s.w, worst);
    bad += worst > 1e-2;  // (bf16 output: one rounding, 2^-8 relative)
  }
  printf(bad ? "HARNESS FAIL\n" : "HARNESS OK\n");
  return bad ? 1 : 0;
}
