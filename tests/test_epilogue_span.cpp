// epilogue_span (src/cpu/epilogue_span.hpp), the CPU's fused epilogue over a run of outputs, on its own: every
// activation, dtype, bias indexing and residual, run lengths around its 8-value chunks, the output written
// over the sums and over the residual; against apply_epilogue in double (within a float rounding of the value
// before the activation), and exactly on small integers where the arithmetic is exact. The algorithms that
// use it (cpu_im2col_gemm, cpu_depthwise) are also in the shared sweeps of test_algorithms.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/activation.hpp"
#include "common/element.hpp"
#include "convkit/convkit.hpp"
#include "cpu/epilogue_span.hpp"

using namespace convkit;
using namespace convkit::detail;

namespace {

constexpr Activation kActs[] = {Activation::none,      Activation::relu,    Activation::relu6,
                                Activation::silu,      Activation::gelu,    Activation::hardswish,
                                Activation::sigmoid,   Activation::hardsigmoid};
constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr SpanBias kBiases[] = {SpanBias::none, SpanBias::one, SpanBias::per_element};

// n values of dt (stored as dt's bytes), each the float v(i) rounded to dt.
std::vector<unsigned char> elements(DType dt, int64_t n, const std::vector<float>& v) {
  std::vector<unsigned char> b(size_t(n) * dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) store_from_float(b.data(), dt, i, v[size_t(i)]);
  return b;
}

struct Case {
  Activation act;
  DType dt;
  SpanBias bm;
  bool res;
  int64_t n;
  std::string name() const {
    return std::string(to_string(act)) + "/" + to_string(dt) + "/bias" + std::to_string(int(bm)) +
           (res ? "/res" : "") + "/n" + std::to_string(n);
  }
};

// Runs the case on values from `draw`; returns (outputs as floats, the double reference of each).
void run_case(const Case& c, float alpha, float beta, const std::vector<float>& acc, const std::vector<float>& bias,
              const std::vector<float>& res, std::vector<float>& got, std::vector<double>& want) {
  const auto b = elements(c.dt, c.n, bias);
  const auto r = elements(c.dt, c.n, res);
  auto out = elements(c.dt, c.n, std::vector<float>(size_t(c.n), std::nanf("")));  // poisoned
  Epilogue e;
  e.activation = c.act;
  e.beta = beta;
  epilogue_span(e, alpha, c.dt, acc.data(), out.data(), c.n, c.bm == SpanBias::none ? nullptr : b.data(), c.bm,
                c.res ? r.data() : nullptr);
  got.resize(size_t(c.n));
  want.resize(size_t(c.n));
  for (int64_t j = 0; j < c.n; ++j) {
    got[size_t(j)] = load_as_float(out.data(), c.dt, j);
    const int64_t bj = c.bm == SpanBias::per_element ? j : 0;
    want[size_t(j)] = apply_epilogue<double>(c.act, alpha, beta, acc[size_t(j)], c.bm != SpanBias::none,
                                             load_as_double(b.data(), c.dt, bj), c.res, load_as_double(r.data(), c.dt, j));
  }
}

TEST(EpilogueSpan, EveryCaseWithinAFloatRoundingOfTheDoubleEpilogue) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (Activation act : kActs)
    for (DType dt : kTypes)
      for (SpanBias bm : kBiases)
        for (bool res : {false, true})
          for (int64_t n : {1, 7, 8, 9, 16, 37}) {
            const Case c{act, dt, bm, res, n};
            std::vector<float> acc(static_cast<size_t>(n)), bias = acc, rv = acc;
            for (int64_t j = 0; j < n; ++j) acc[size_t(j)] = g(rng), bias[size_t(j)] = g(rng), rv[size_t(j)] = g(rng);
            std::vector<float> got;
            std::vector<double> want;
            run_case(c, 0.75f, 1.25f, acc, bias, rv, got, want);
            // the float sum before the activation is within ~3 float roundings of the double one, and every
            // activation's slope is at most ~1.13 (GELU); 16-bit outputs add their own rounding
            const double unit = dt == DType::f32 ? 0x1p-24 : dt == DType::f16 ? 0x1p-11 : 0x1p-8;
            for (int64_t j = 0; j < n; ++j) {
              const double scale = std::fabs(0.75 * acc[size_t(j)]) + std::fabs(bias[size_t(j)]) + std::fabs(1.25 * rv[size_t(j)]);
              const double tol = 8 * 0x1p-24 * scale + 1.01 * unit * std::fabs(want[size_t(j)]) + 1e-30;
              ASSERT_NEAR(got[size_t(j)], want[size_t(j)], tol) << c.name() << " element " << j;
            }
          }
}

TEST(EpilogueSpan, ExactOnSmallIntegers) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> d(-9, 9);
  for (Activation act : {Activation::none, Activation::relu, Activation::relu6})
    for (DType dt : kTypes)
      for (SpanBias bm : kBiases)
        for (bool res : {false, true}) {
          const Case c{act, dt, bm, res, 29};
          std::vector<float> acc(29), bias(29), rv(29);
          for (int j = 0; j < 29; ++j) acc[j] = float(d(rng)), bias[j] = float(d(rng)), rv[j] = float(d(rng));
          std::vector<float> got;
          std::vector<double> want;
          run_case(c, 1.0f, 1.0f, acc, bias, rv, got, want);
          for (int j = 0; j < 29; ++j) ASSERT_EQ(double(got[j]), want[j]) << c.name() << " element " << j;
        }
}

// The output written over the sums (float32: out == acc) and over the residual (out == res), as
// cpu_im2col_gemm and an in-place residual use it.
TEST(EpilogueSpan, OutputOverTheSumsAndOverTheResidual) {
  for (Activation act : kActs) {
    const int64_t n = 21;
    std::vector<float> acc(n), bias(n), res(n);
    for (int64_t j = 0; j < n; ++j) acc[j] = 0.5f * float(j - 10), bias[j] = 0.25f * float(j % 5), res[j] = float(j % 3) - 1.0f;
    Epilogue e;
    e.activation = act;
    std::vector<float> apart(n, std::nanf(""));
    epilogue_span(e, 1.0f, DType::f32, acc.data(), apart.data(), n, bias.data(), SpanBias::per_element, res.data());
    std::vector<float> over_acc = acc;
    epilogue_span(e, 1.0f, DType::f32, over_acc.data(), over_acc.data(), n, bias.data(), SpanBias::per_element,
                  res.data());
    std::vector<float> over_res = res;
    epilogue_span(e, 1.0f, DType::f32, acc.data(), over_res.data(), n, bias.data(), SpanBias::per_element,
                  over_res.data());
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(over_acc[j], apart[j]) << to_string(act) << " " << j;
      EXPECT_EQ(over_res[j], apart[j]) << to_string(act) << " " << j;
    }
    for (DType dt : {DType::f16, DType::bf16}) {  // 16-bit: the residual is the output's buffer
      auto r16 = elements(dt, n, res), sep = elements(dt, n, std::vector<float>(n, std::nanf("")));
      epilogue_span(e, 1.0f, dt, acc.data(), sep.data(), n, nullptr, SpanBias::none, r16.data());
      epilogue_span(e, 1.0f, dt, acc.data(), r16.data(), n, nullptr, SpanBias::none, r16.data());
      EXPECT_EQ(r16, sep) << to_string(act) << " " << to_string(dt);
    }
  }
}

}  // namespace

// The vector path's bfloat16 stores and loads (SiLU: whole chunks of 16) round as float_to_bf16 does: ties to
// even, values past bfloat16's largest to infinity, NaN kept a quiet NaN. SiLU leaves x >= 128 as it is in
// float (exp(-x) underflows), so each output is the input rounded once; a residual of 0 (loaded as bfloat16)
// leaves it so.
TEST(EpilogueSpan, SixteenBitVectorsRoundAsTheScalarConversion) {
  const float big = 3.3961e38f;  // between bfloat16's largest finite value and infinity's rounding point
  const std::vector<float> acc = {257.0f, 259.0f, 258.0f, 1000.5f, 65535.0f, 131071.0f, 3.0e38f, big,
                                  INFINITY, std::nanf(""), 128.0f, 129.0f, 4097.0f, 4099.0f, 1.0e10f, 3.3e38f};
  for (bool res : {false, true}) {
    Epilogue e;
    e.activation = Activation::silu;
    const auto zero = elements(DType::bf16, 16, std::vector<float>(16, 0.0f));
    auto out = elements(DType::bf16, 16, std::vector<float>(16, std::nanf("")));
    epilogue_span(e, 1.0f, DType::bf16, acc.data(), out.data(), 16, nullptr, SpanBias::none, res ? zero.data() : nullptr);
    const auto* o = reinterpret_cast<const uint16_t*>(out.data());
    for (int j = 0; j < 16; ++j) EXPECT_EQ(o[j], float_to_bf16(acc[size_t(j)])) << "element " << j << " " << acc[size_t(j)];
  }
}

// The float16 stores and loads on whole vectors (where the build has AVX-512; else the scalar conversion, the
// same test): every output of the span rounded as float_to_half does, with ties to even, values past float16's
// largest to infinity, subnormals, signed zeros and NaN (float_to_half's quiet NaN, whatever the payload); no
// activation, so each output is the input rounded once; a residual of +0 loaded as float16 leaves it so (-0 +
// +0 = +0, as in float). 37 values: two whole chunks and a tail.
TEST(EpilogueSpan, Float16VectorsRoundAsTheScalarConversion) {
  uint32_t payload_nan_bits = 0x7fa12345u;  // a quiet NaN with a payload the instruction would keep
  float payload_nan;
  std::memcpy(&payload_nan, &payload_nan_bits, 4);
  const std::vector<float> acc = {1.0f,        2049.0f,    2051.0f,  2050.0f,   65504.0f, 65519.0f, 65520.0f,
                                  1.0e6f,      -1.0e6f,    INFINITY, -INFINITY, std::nanf(""), payload_nan,
                                  -payload_nan, 0.0f,      -0.0f,    6.0e-8f,   3.0e-8f,  2.9e-8f,  1.0e-5f,
                                  -1.0e-5f,    6.1e-5f,    0.1f,     -0.3f,     1.0005f,  1.00048828125f,
                                  1.00146484375f, 3.14159f, -2.71828f, 1000.3f, 5.96e-8f, -5.96e-8f, 1.0e-9f,
                                  65536.0f,    -65520.0f,  0.33333f, 7.0f};
  const size_t n = acc.size();
  for (bool res : {false, true}) {
    const auto zero = elements(DType::f16, int64_t(n), std::vector<float>(n, 0.0f));
    auto out = elements(DType::f16, int64_t(n), std::vector<float>(n, 1.0f));
    epilogue_span(Epilogue{}, 1.0f, DType::f16, acc.data(), out.data(), int64_t(n), nullptr, SpanBias::none,
                  res ? zero.data() : nullptr);
    const auto* o = reinterpret_cast<const uint16_t*>(out.data());
    for (size_t j = 0; j < n; ++j) {
      const float want_in = res && acc[j] == 0.0f ? 0.0f : acc[j];  // (-0 + +0 = +0)
      EXPECT_EQ(o[j], float_to_half(want_in)) << "element " << j << " " << acc[j] << (res ? " with a residual" : "");
    }
  }
}
