// The smallest use of convkit: a 3x3 box filter over a 4x4 ramp, through the automatic selection.
#include <cstdio>
#include <vector>

#include <convkit/convkit.hpp>

int main() {
  using namespace convkit;
  const Conv2dProblem problem = Conv2dProblem::parse("n1c1h4w4k1r3s3p1");
  std::vector<float> x(16), w(9, 1.0f), y(16);
  for (int i = 0; i < 16; ++i) x[i] = float(i);
  auto view = [](std::vector<float>& v, std::array<int64_t, 4> dims) {
    TensorView t;
    t.data = v.data();
    t.dims = dims;
    return t;
  };
  try {
    conv2d(problem, view(x, input_dims(problem)), view(w, weight_dims(problem)), view(y, output_dims(problem)));
  } catch (const Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  // The centre 2x2 sums a full 3x3 window: y[1][1] = 0+1+2+4+5+6+8+9+10 = 45.
  std::printf("convkit %s: y[1][1] = %g (expected 45)\n", version(), y[5]);
  return y[5] == 45.0f ? 0 : 1;
}
