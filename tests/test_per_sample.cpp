// conv2d_per_sample: every sample's result equals cpu_ref run on that sample with its own filters (bit-equal
// on small integers), on the CPU and, where a GPU is present, on CUDA; malformed calls give errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/element.hpp"
#include "convkit/convkit.hpp"
#include "convkit/per_sample.hpp"

using namespace convkit;

namespace {

std::vector<float> small_ints(int64_t count, std::mt19937& rng, int lo = -3, int hi = 3) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& e : v) e = static_cast<float>(d(rng));
  return v;
}

TensorView view(std::vector<float>& v, Layout l, std::array<int64_t, 4> dims, Device dev = Device::cpu,
                void* data = nullptr) {
  TensorView t;
  t.data = data ? data : v.data();
  t.dtype = DType::f32;
  t.layout = l;
  t.device = dev;
  t.dims = dims;
  return t;
}

// The oracle: cpu_ref per sample with that sample's filters, bias and residual.
std::vector<float> reference(const Conv2dProblem& pb, Layout l, std::vector<float>& x, std::vector<float>& w,
                             std::vector<float>* bias, std::vector<float>* res, Activation act) {
  Conv2dProblem one = pb;
  one.n = 1;
  const int64_t xs = one.input_elems(), ws = one.weight_elems(), ys = one.output_elems();
  std::vector<float> y(static_cast<size_t>(pb.output_elems()));
  for (int64_t n = 0; n < pb.n; ++n) {
    TensorView src = view(x, l, input_dims(one), Device::cpu, x.data() + n * xs);
    TensorView wei = view(w, l, weight_dims(one), Device::cpu, w.data() + n * ws);
    TensorView dst = view(y, l, output_dims(one), Device::cpu, y.data() + n * ys);
    Epilogue e;
    e.activation = act;
    if (bias) e.bias = bias->data() + n * pb.k;
    if (res) e.residual = res->data() + n * ys;
    RunOptions o;
    o.algo = "cpu_ref";
    conv2d(one, src, wei, dst, e, o);
  }
  return y;
}

struct Case {
  const char* spec;
  bool with_bias, with_res;
  Activation act;
};

const Case kCases[] = {
    {"n3c5h9w7k6r3s3p1u1", false, false, Activation::none},
    {"n2c3h11w13k10r3s3p1u2", true, false, Activation::relu},
    {"n2c8h9w9k8r3s3p2u1d2g2", true, true, Activation::none},
    {"n4c6h7w7k6r3s3p1g6", true, true, Activation::relu},   // depthwise
    {"n2c16h5w6k12r1s1", false, true, Activation::none},     // 1x1
    {"n1c4h12w12k9r7s7p3u2", true, false, Activation::none},  // 7x7 stride 2, batch 1
    {"n2c4h6w6k20r3s3p4", true, true, Activation::relu},      // padding > R/2, K not a tile multiple
    // f32 NCHW on CUDA runs cuda_igemm_simt's per-sample mode: several pixel and channel tiles per image
    {"n3c8h20w19k136r3s3p1", true, true, Activation::relu},   // P*Q = 380 (3 tiles of 128), float4 stores
    {"n2c7h19w19k70r3s3p1", true, false, Activation::none},   // P*Q odd, C*R*S % 4 != 0: scalar paths
    {"n2c8h18w18k16r3s3p1g2", false, true, Activation::none}, // groups, 3 pixel tiles per image
};

void run_case(const Case& cs, Layout l, Device dev) {
  const Conv2dProblem pb = Conv2dProblem::parse(cs.spec);
  std::mt19937 rng(7);
  auto x = small_ints(pb.input_elems(), rng);
  auto w = small_ints(pb.n * pb.weight_elems(), rng);
  auto bias = small_ints(pb.n * pb.k, rng, -5, 5);
  auto res = small_ints(pb.output_elems(), rng, -5, 5);
  std::vector<float>* bp = cs.with_bias ? &bias : nullptr;
  std::vector<float>* rp = cs.with_res ? &res : nullptr;
  const std::vector<float> want = reference(pb, l, x, w, bp, rp, cs.act);

  std::vector<float> got(static_cast<size_t>(pb.output_elems()), std::nanf(""));
  Epilogue e;
  e.activation = cs.act;
  if (dev == Device::cpu) {
    if (bp) e.bias = bias.data();
    if (rp) e.residual = res.data();
    conv2d_per_sample(pb, view(x, l, input_dims(pb)), view(w, l, per_sample_weight_dims(pb)),
                      view(got, l, output_dims(pb)), e);
  } else {
    auto up = [](std::vector<float>& v) {
      Buffer b(Device::cuda, v.size() * 4);
      b.copy_from_host(v.data(), v.size() * 4);
      return b;
    };
    Buffer dx = up(x), dw = up(w), db = up(bias), dr = up(res), dy = up(got);
    if (bp) e.bias = db.data();
    if (rp) e.residual = dr.data();
    conv2d_per_sample(pb, view(x, l, input_dims(pb), dev, dx.data()),
                      view(w, l, per_sample_weight_dims(pb), dev, dw.data()),
                      view(got, l, output_dims(pb), dev, dy.data()), e);
    device_synchronize(dev);
    dy.copy_to_host(got.data(), got.size() * 4);
  }
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
        << cs.spec << " " << to_string(l) << " " << to_string(dev) << " element " << i << ": " << got[i]
        << " vs " << want[i];
}

// f16/bf16 NHWC on CUDA (the tensor-core per-sample modes). Small integers: every product and partial sum
// is exact in the fp32 accumulators, so the output's one rounding to the 16-bit type is the reference's
// (cpu_ref in fp32, exact, then rounded to nearest even).
const Case kLowpCases[] = {
    {"n3c16h9w7k24r3s3p1u1", false, false, Activation::none},      // cuda_igemm_wgmma on Hopper (C % 8 == 0)
    {"n2c32h11w13k40r3s3p1u2", true, false, Activation::relu},     // stride 2, bias + relu in registers
    {"n2c16h9w9k16r3s3p2u1d2g2", true, true, Activation::none},    // groups, dilation, residual
    {"n4c16h7w7k8r1s1", false, true, Activation::relu},            // 1x1
    {"n2c8h6w6k20r3s3p4", true, true, Activation::relu},           // K % 8 != 0, padding > R/2
    {"n2c64h20w20k72r3s3p1", true, false, Activation::relu},       // several m and n tiles, 9 k stages
    {"n3c5h9w7k6r3s3p1u1", true, false, Activation::none},         // C % 8 != 0: cuda_igemm_mma's general C
    {"n1c4h12w12k9r7s7p3u2", true, true, Activation::none},        // 7x7 stride 2, batch 1
    {"n3c128h7w9k32r3s3p1u2g2", true, false, Activation::relu},    // C/g = 64: activations by TMA's im2col mode
    {"n5c64h9w11k64r3s3p1", true, true, Activation::relu},         // C = 64, stride 1: residual, 5 images
    {"n4c64h7w7k40r3s3p1", false, false, Activation::none},        // 7x7 images: one partial tile each
    {"n3c128h6w10k16r1s1", true, true, Activation::none},          // 1x1, C = 128: bias and residual
};

std::vector<unsigned char> to_bytes(const std::vector<float>& v, DType dt) {
  std::vector<unsigned char> b(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) detail::store_from_double(b.data(), dt, int64_t(i), v[i]);
  return b;
}

void run_case_lowp(const Case& cs, DType dt) {
  const Conv2dProblem pb = Conv2dProblem::parse(cs.spec);
  std::mt19937 rng(11);
  auto x = small_ints(pb.input_elems(), rng);
  auto w = small_ints(pb.n * pb.weight_elems(), rng);
  auto bias = small_ints(pb.n * pb.k, rng, -5, 5);
  auto res = small_ints(pb.output_elems(), rng, -5, 5);
  const std::vector<float> want =
      reference(pb, Layout::nhwc, x, w, cs.with_bias ? &bias : nullptr, cs.with_res ? &res : nullptr, cs.act);
  const std::vector<unsigned char> want_b = to_bytes(want, dt);

  auto up = [&](const std::vector<float>& v) {
    const std::vector<unsigned char> b = to_bytes(v, dt);
    Buffer d(Device::cuda, b.size());
    d.copy_from_host(b.data(), b.size());
    return d;
  };
  Buffer dx = up(x), dw = up(w), db = up(bias), dr = up(res);
  Buffer dy(Device::cuda, want_b.size());
  dy.fill_bytes(0xFF);  // poison: NaN in both 16-bit types
  auto tv = [&](Buffer& b, std::array<int64_t, 4> dims) {
    TensorView t;
    t.data = b.data();
    t.dtype = dt;
    t.layout = Layout::nhwc;
    t.device = Device::cuda;
    t.dims = dims;
    return t;
  };
  Epilogue e;
  e.activation = cs.act;
  if (cs.with_bias) e.bias = db.data();
  if (cs.with_res) e.residual = dr.data();
  conv2d_per_sample(pb, tv(dx, input_dims(pb)), tv(dw, per_sample_weight_dims(pb)), tv(dy, output_dims(pb)), e);
  device_synchronize(Device::cuda);
  std::vector<unsigned char> got(want_b.size());
  dy.copy_to_host(got.data(), got.size());
  const size_t es = dtype_size(dt);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i * es], &want_b[i * es], es), 0)
        << cs.spec << " " << to_string(dt) << " element " << i << ": "
        << detail::load_as_double(got.data(), dt, int64_t(i)) << " vs " << want[i];
}

}  // namespace

TEST(PerSample, CudaHalfTypesNhwcExact) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dt : {DType::f16, DType::bf16})
    for (const Case& cs : kLowpCases) run_case_lowp(cs, dt);
}

TEST(PerSample, CpuMatchesRefPerSampleExact) {
  for (const Case& cs : kCases)
    for (Layout l : {Layout::nchw, Layout::nhwc}) run_case(cs, l, Device::cpu);
}

TEST(PerSample, CudaMatchesRefPerSampleExact) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& cs : kCases)
    for (Layout l : {Layout::nchw, Layout::nhwc}) run_case(cs, l, Device::cuda);
}

TEST(PerSample, ResidualMayAliasOutput) {
  const Conv2dProblem pb = Conv2dProblem::parse("n2c3h6w6k4r3s3p1");
  std::mt19937 rng(3);
  auto x = small_ints(pb.input_elems(), rng);
  auto w = small_ints(pb.n * pb.weight_elems(), rng);
  auto res = small_ints(pb.output_elems(), rng);
  const auto want = reference(pb, Layout::nchw, x, w, nullptr, &res, Activation::none);
  std::vector<float> y = res;
  Epilogue e;
  e.residual = y.data();
  conv2d_per_sample(pb, view(x, Layout::nchw, input_dims(pb)), view(w, Layout::nchw, per_sample_weight_dims(pb)),
                    view(y, Layout::nchw, output_dims(pb)), e);
  EXPECT_EQ(y, want);
}

TEST(PerSample, BadCallsGiveErrors) {
  const Conv2dProblem pb = Conv2dProblem::parse("n2c4h6w6k4r3s3p1");
  std::vector<float> x(static_cast<size_t>(pb.input_elems())), w(static_cast<size_t>(pb.n * pb.weight_elems())),
      y(static_cast<size_t>(pb.output_elems()));
  const TensorView src = view(x, Layout::nchw, input_dims(pb)), dst = view(y, Layout::nchw, output_dims(pb));
  const TensorView wei = view(w, Layout::nchw, per_sample_weight_dims(pb));
  auto code_of = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
      return e.code();
    }
    return StatusCode::ok;
  };
  // A shared (not per-sample) weight has too few rows.
  TensorView shared = view(w, Layout::nchw, weight_dims(pb));
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, src, shared, dst); }), StatusCode::invalid_tensor);
  TensorView nhwc_w = wei;
  nhwc_w.layout = Layout::nhwc;
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, src, nhwc_w, dst); }), StatusCode::invalid_tensor);
  TensorView half_x = src, half_w = wei, half_y = dst;
  half_x.dtype = half_w.dtype = half_y.dtype = DType::f16;
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, half_x, half_w, half_y); }), StatusCode::unsupported);
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, src, wei, src); }), StatusCode::invalid_tensor);
  RunOptions bad_algo;
  bad_algo.algo = "no_such_algorithm";
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, src, wei, dst, {}, bad_algo); }), StatusCode::invalid_problem);
  bad_algo.algo = "cpu_direct";  // no per-sample mode
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, src, wei, dst, {}, bad_algo); }), StatusCode::unsupported);
  Conv2dProblem bad_groups = pb;
  bad_groups.groups = 3;
  EXPECT_NE(code_of([&] { conv2d_per_sample(bad_groups, src, wei, dst); }), StatusCode::ok);
  TensorView null_x = src;
  null_x.data = nullptr;
  EXPECT_EQ(code_of([&] { conv2d_per_sample(pb, null_x, wei, dst); }), StatusCode::invalid_tensor);
}
