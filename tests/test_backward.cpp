// conv2d_backward_data and conv2d_backward_weight (convkit/backward.hpp).
//   CPU: the reference gradients are the adjoints of cpu_ref's forward: <conv(x, w), gz> = <x, dL/dx> =
//        <w, dL/dw> exactly on small integers, for dense, grouped and depthwise problems.
//   CUDA: the depthwise kernels bit-equal to the CPU reference on small integers in f32 (filters 1x1 to
//        31x31, multipliers 1 to 4, strides 1 to 3, dilation, padding past R/2, channel counts off the vector
//        width, 1x1 and 1xW images, both layouts, misaligned pointers), within 1e-2 (relative L2) in f16 and
//        bf16, the weight gradient the same bits on every call, past 2^31 elements, and the errors; the dense
//        weight-gradient kernel (f16/bf16 NHWC) bit-equal to the reference rounded once on small integers
//        (1x1 to 7x7, strides, dilation, padding past R/2, partial tiles of channels, columns and pixels, many
//        pixel slices), within 1e-2 on Gaussian data, the same bits on every call, and what it refuses. (A
//        problem's batch is at least 1; the PyTorch ops answer an empty batch themselves.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "convkit/backward.hpp"
#include "depthwise_specs.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

struct Grads {
  ckt::HostTensor gx, gw;
};

double dot(const ckt::HostTensor& a, const ckt::HostTensor& b) {
  const std::vector<double> x = a.logical(), y = b.logical();
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

ckt::HostTensor filled(DType t, Layout l, std::array<int64_t, 4> dims, std::mt19937& rng, bool ints) {
  ckt::HostTensor h(t, l, dims);
  h.fill_logical(ints ? ckt::small_ints(size_t(h.numel()), rng) : ckt::gaussian(size_t(h.numel()), rng));
  return h;
}

Grads cpu_grads(const Conv2dProblem& p, const ckt::HostTensor& x, const ckt::HostTensor& w,
                const ckt::HostTensor& gz) {
  Grads g{ckt::HostTensor(DType::f32, x.layout, input_dims(p)), ckt::HostTensor(DType::f32, x.layout, weight_dims(p))};
  conv2d_backward_data(p, gz.view_const(), w.view_const(), g.gx.view());
  conv2d_backward_weight(p, x.view_const(), gz.view_const(), g.gw.view());
  return g;
}

// The same values in dtype t (rounded to nearest even where t cannot hold them).
ckt::HostTensor rounded_to(DType t, const ckt::HostTensor& from) {
  ckt::HostTensor h(t, from.layout, from.dims);
  h.fill_logical(from.logical());
  return h;
}

// The same tensors in f32 (the CPU reference of a 16-bit run: the 16-bit values, exactly).
ckt::HostTensor as_f32(const ckt::HostTensor& t) { return rounded_to(DType::f32, t); }

// Device copies; `shift` elements into their buffers (a misaligned pointer when not a multiple of 8).
struct DeviceTensor {
  Buffer buf;
  TensorView view;
  // A copy of h.
  DeviceTensor(const ckt::HostTensor& h, int64_t shift) : DeviceTensor(h.dtype, h.layout, h.dims, shift) {
    copy_in(h);
  }
  // Poisoned (every byte 0xFF: NaN in every dtype).
  DeviceTensor(DType t, Layout l, std::array<int64_t, 4> dims, int64_t shift) {
    const size_t es = dtype_size(t), bytes = size_t(dims[0] * dims[1] * dims[2] * dims[3]) * es;
    buf = Buffer(Device::cuda, bytes + size_t(shift) * es + 16);
    buf.fill_bytes(0xFF);
    view = TensorView{static_cast<unsigned char*>(buf.data()) + shift * int64_t(es), t, l, Device::cuda, dims};
  }
  size_t shift_bytes() const {
    return size_t(static_cast<unsigned char*>(view.data) - static_cast<unsigned char*>(buf.data()));
  }
  // (Buffer copies from its start: a shifted view is staged through a host copy of the whole buffer)
  void copy_in(const ckt::HostTensor& h) {
    if (shift_bytes() == 0) return buf.copy_from_host(h.bytes.data(), h.bytes.size());
    std::vector<unsigned char> whole(buf.bytes(), 0);
    std::memcpy(whole.data() + shift_bytes(), h.bytes.data(), h.bytes.size());
    buf.copy_from_host(whole.data(), whole.size());
  }
  ckt::HostTensor copy_out() const {
    ckt::HostTensor h(view.dtype, view.layout, view.dims);
    if (shift_bytes() == 0) {
      buf.copy_to_host(h.bytes.data(), h.bytes.size());
      return h;
    }
    std::vector<unsigned char> whole(buf.bytes());
    buf.copy_to_host(whole.data(), whole.size());
    std::memcpy(h.bytes.data(), whole.data() + shift_bytes(), h.bytes.size());
    return h;
  }
};

Grads gpu_grads(const Conv2dProblem& p, const ckt::HostTensor& x, const ckt::HostTensor& w,
                const ckt::HostTensor& gz, int64_t shift = 0) {
  DeviceTensor dx(x, shift), dw(w, shift), dgz(gz, shift);
  DeviceTensor dgx(x.dtype, x.layout, x.dims, shift), dgw(w.dtype, w.layout, w.dims, shift);
  conv2d_backward_data(p, dgz.view, dw.view, dgx.view);
  conv2d_backward_weight(p, dx.view, dgz.view, dgw.view);
  device_synchronize(Device::cuda);
  return {dgx.copy_out(), dgw.copy_out()};
}

double rel_l2(const ckt::HostTensor& got, const ckt::HostTensor& want) {
  const std::vector<double> a = got.logical(), b = want.logical();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

bool gpu_here() {
  if (cuda_device_available()) return true;
  if (ckt::require_gpu()) ADD_FAILURE() << "CONVKIT_REQUIRE_GPU=1 but no CUDA device is available";
  return false;
}

TEST(Backward, CpuReferenceIsTheAdjointOfTheForward) {
  const char* specs[] = {"n2c4h7w9k6r3s3p1",          "n1c6h8w8k4r3s3p1u2g2",    "n2c5h9w7k5r3s3p1g5",
                         "n1c3h11w10k6r5s3ph3pw1d2g3", "n1c4h6w13k8r1s1u3g4",      "n2c3h5w5k3r3s3p3g3",
                         "n1c2h9w9k4r7s7p2u2g1",       "n1c8h10w6k8r3s3p1uh2uw1g4"};
  std::mt19937 rng(3);
  for (const char* spec : specs)
    for (Layout l : {Layout::nchw, Layout::nhwc}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ckt::HostTensor x = filled(DType::f32, l, input_dims(p), rng, true);
      const ckt::HostTensor w = filled(DType::f32, l, weight_dims(p), rng, true);
      const ckt::HostTensor gz = filled(DType::f32, l, output_dims(p), rng, true);
      ckt::HostTensor y(DType::f32, l, output_dims(p));
      RunOptions o;
      o.algo = "cpu_ref";
      conv2d(p, x.view_const(), w.view_const(), y.view(), Epilogue{}, o);
      const Grads g = cpu_grads(p, x, w, gz);
      const double forward = dot(y, gz);
      EXPECT_EQ(dot(x, g.gx), forward) << spec << " " << to_string(l);
      EXPECT_EQ(dot(w, g.gw), forward) << spec << " " << to_string(l);
    }
}

TEST(Backward, BadRequestsGetAReason) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h5w5k4r3s3p1g4");
  ckt::HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      gz(DType::f32, Layout::nchw, output_dims(p)), wrong(DType::f32, Layout::nchw, {1, 4, 5, 6});
  try {
    conv2d_backward_data(p, gz.view(), w.view(), wrong.view());
    ADD_FAILURE() << "accepted a grad_in of the wrong shape";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
    EXPECT_NE(std::string(e.what()).find("grad_in"), std::string::npos) << e.what();
  }
  try {
    conv2d_backward_weight(p, x.view(), gz.view(), TensorView{x.view().data, DType::f32, Layout::nchw,
                                                              Device::cpu, weight_dims(p)});
    ADD_FAILURE() << "accepted a grad_wei aliasing the input";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
  }
  ckt::HostTensor xb(DType::bf16, Layout::nchw, input_dims(p)), wb(DType::bf16, Layout::nchw, weight_dims(p)),
      gzb(DType::bf16, Layout::nchw, output_dims(p));
  try {
    conv2d_backward_weight(p, xb.view(), gzb.view(), wb.view());
    ADD_FAILURE() << "the CPU accepted bf16";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("f32 only"), std::string::npos) << e.what();
  }
}

// ---- CUDA ------------------------------------------------------------------------------------------

// The shared depthwise shapes, and three of the gradients' own: a multiplier of 4 at stride 2, unequal
// strides, padding past the filter at stride 2 on a 3x3 image.
const char* kMoreSpecs[] = {"n4c64h16w16k256r3s3p1u2g64", "n1c12h9w9k12r3s3p1uh3uw2g12", "n5c8h3w3k8r3s3p2u2g8"};

std::vector<const char*> depthwise_specs() {
  std::vector<const char*> v(std::begin(ckt::kDepthwiseSpecs), std::end(ckt::kDepthwiseSpecs));
  v.insert(v.end(), std::begin(kMoreSpecs), std::end(kMoreSpecs));
  return v;
}

TEST(CudaBackward, DepthwiseBitEqualToTheReferenceOnSmallIntegersF32) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(21);
  int i = 0;
  for (const char* spec : depthwise_specs())
    for (Layout l : {Layout::nchw, Layout::nhwc}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ckt::HostTensor x = filled(DType::f32, l, input_dims(p), rng, true);
      const ckt::HostTensor w = filled(DType::f32, l, weight_dims(p), rng, true);
      const ckt::HostTensor gz = filled(DType::f32, l, output_dims(p), rng, true);
      const Grads want = cpu_grads(p, x, w, gz);
      // every third case on pointers one element off 16 bytes (the scalar kernels)
      const Grads got = gpu_grads(p, x, w, gz, (i++ % 3 == 2) ? 1 : 0);
      EXPECT_EQ(got.gx.bytes, want.gx.bytes) << spec << " " << to_string(l) << " data gradient";
      EXPECT_EQ(got.gw.bytes, want.gw.bytes) << spec << " " << to_string(l) << " weight gradient";
    }
}

TEST(CudaBackward, DepthwiseSixteenBitWithinBound) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(22);
  int i = 0;
  for (DType dt : {DType::f16, DType::bf16})
    for (const char* spec : depthwise_specs())
      for (Layout l : {Layout::nchw, Layout::nhwc}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ckt::HostTensor x = filled(dt, l, input_dims(p), rng, false);
        const ckt::HostTensor w = filled(dt, l, weight_dims(p), rng, false);
        const ckt::HostTensor gz = filled(dt, l, output_dims(p), rng, false);
        const Grads want = cpu_grads(p, as_f32(x), as_f32(w), as_f32(gz));
        const Grads got = gpu_grads(p, x, w, gz, (i++ % 4 == 3) ? 1 : 0);
        EXPECT_LE(rel_l2(got.gx, want.gx), 1e-2) << spec << " " << to_string(dt) << " " << to_string(l);
        EXPECT_LE(rel_l2(got.gw, want.gw), 1e-2) << spec << " " << to_string(dt) << " " << to_string(l);
      }
}

TEST(CudaBackward, DepthwiseWeightGradientIsTheSameBitsOnEveryCall) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(23);
  for (Layout l : {Layout::nhwc, Layout::nchw}) {
    const Conv2dProblem p = Conv2dProblem::parse("n8c96h28w28k96r3s3p1g96");
    const ckt::HostTensor x = filled(DType::bf16, l, input_dims(p), rng, false);
    const ckt::HostTensor gz = filled(DType::bf16, l, output_dims(p), rng, false);
    const ckt::HostTensor w = filled(DType::bf16, l, weight_dims(p), rng, false);
    const Grads a = gpu_grads(p, x, w, gz), b = gpu_grads(p, x, w, gz), c = gpu_grads(p, x, w, gz);
    EXPECT_EQ(a.gw.bytes, b.gw.bytes) << to_string(l);
    EXPECT_EQ(a.gw.bytes, c.gw.bytes) << to_string(l);
  }
}

TEST(CudaBackward, RefusesWhatItHasNoKernelFor) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  const Conv2dProblem p = Conv2dProblem::parse("n1c8h5w5k8r3s3p1g2");
  const ckt::HostTensor x(DType::f32, Layout::nhwc, input_dims(p)), w(DType::f32, Layout::nhwc, weight_dims(p)),
      gz(DType::f32, Layout::nhwc, output_dims(p));
  try {
    gpu_grads(p, x, w, gz);
    ADD_FAILURE() << "a grouped (not depthwise) problem was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("depthwise"), std::string::npos) << e.what();
  }
}

// Dense problems for the weight-gradient kernel: partial 64-channel and 128-column tiles, a 32-pixel chunk
// cut short, 1x1 strided, 7x7, 5x3 with dilation, padding past R/2, C = 8 (one piece a tap), K past 128,
// and one with thousands of pixels (many slices).
const char* kDenseSpecs[] = {
    "n1c8h5w5k8r3s3p1",        "n2c16h7w9k24r3s3p1",        "n3c24h11w13k72r3s3p1u2",
    "n1c32h9w9k16r1s1u2",      "n2c8h14w14k40r7s7p3u2",     "n1c16h10w12k8r5s3p2d2",
    "n2c8h6w6k16r3s3p3",       "n1c136h6w7k136r3s3p1",      "n4c64h32w32k64r3s3p1",
    "n1c8h1w1k8r3s3p1",        "n2c40h5w3k32r2s2p0u1",
};

TEST(CudaBackward, DenseWeightGradientBitEqualOnSmallIntegers) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(31);
  int i = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (const char* spec : kDenseSpecs) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ckt::HostTensor x = filled(dt, Layout::nhwc, input_dims(p), rng, true);
      const ckt::HostTensor gz = filled(dt, Layout::nhwc, output_dims(p), rng, true);
      ckt::HostTensor want(DType::f32, Layout::nhwc, weight_dims(p));
      conv2d_backward_weight(p, as_f32(x).view_const(), as_f32(gz).view_const(), want.view());
      // every third case with the weight gradient's own buffer misaligned (x and gz must be aligned)
      DeviceTensor dx(x, 0), dgz(gz, 0), dgw(dt, Layout::nhwc, weight_dims(p), (i++ % 3 == 2) ? 1 : 0);
      conv2d_backward_weight(p, dx.view, dgz.view, dgw.view);
      device_synchronize(Device::cuda);
      EXPECT_EQ(dgw.copy_out().bytes, rounded_to(dt, want).bytes) << spec << " " << to_string(dt);
    }
}

TEST(CudaBackward, DenseWeightGradientWithinBoundAndTheSameBitsOnEveryCall) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(32);
  for (DType dt : {DType::bf16, DType::f16})
    for (const char* spec : {"n2c16h7w9k24r3s3p1", "n4c64h32w32k64r3s3p1", "n2c8h14w14k40r7s7p3u2"}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ckt::HostTensor x = filled(dt, Layout::nhwc, input_dims(p), rng, false);
      const ckt::HostTensor gz = filled(dt, Layout::nhwc, output_dims(p), rng, false);
      ckt::HostTensor want(DType::f32, Layout::nhwc, weight_dims(p));
      conv2d_backward_weight(p, as_f32(x).view_const(), as_f32(gz).view_const(), want.view());
      DeviceTensor dx(x, 0), dgz(gz, 0), dgw(dt, Layout::nhwc, weight_dims(p), 0);
      std::vector<unsigned char> first;
      for (int call = 0; call < 3; ++call) {
        dgw.buf.fill_bytes(0xFF);
        conv2d_backward_weight(p, dx.view, dgz.view, dgw.view);
        device_synchronize(Device::cuda);
        const ckt::HostTensor got = dgw.copy_out();
        if (call == 0) {
          first = got.bytes;
          EXPECT_LE(rel_l2(got, want), 1e-2) << spec << " " << to_string(dt);
        } else {
          EXPECT_EQ(got.bytes, first) << spec << " " << to_string(dt) << " call " << call;
        }
      }
    }
}

TEST(CudaBackward, DenseWeightGradientRefusesWhatItCannotDo) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  auto refused = [](const char* spec, DType dt, Layout l, int64_t shift, const char* word) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    DeviceTensor dx(dt, l, input_dims(p), shift), dgz(dt, l, output_dims(p), 0), dgw(dt, l, weight_dims(p), 0);
    try {
      conv2d_backward_weight(p, dx.view, dgz.view, dgw.view);
      device_synchronize(Device::cuda);
      ADD_FAILURE() << spec << " " << to_string(dt) << " " << to_string(l) << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::unsupported) << spec;
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << spec << ": " << e.what();
    }
  };
  refused("n1c8h5w5k8r3s3p1", DType::f32, Layout::nhwc, 0, "f32");
  refused("n1c8h5w5k8r3s3p1", DType::bf16, Layout::nchw, 0, "NHWC");
  refused("n1c12h5w5k8r3s3p1", DType::bf16, Layout::nhwc, 0, "multiples of 8");
  refused("n1c16h5w5k16r3s3p1g2", DType::bf16, Layout::nhwc, 0, "ungrouped");
  refused("n1c8h5w5k8r3s3p1", DType::bf16, Layout::nhwc, 1, "aligned");
  // and a dense data gradient has no kernel (it is a convolution)
  const Conv2dProblem p = Conv2dProblem::parse("n1c8h5w5k8r3s3p1");
  DeviceTensor dgz(DType::bf16, Layout::nhwc, output_dims(p), 0), dw(DType::bf16, Layout::nhwc, weight_dims(p), 0),
      dgx(DType::bf16, Layout::nhwc, input_dims(p), 0);
  EXPECT_THROW(conv2d_backward_data(p, dgz.view, dw.view, dgx.view), Error);
}

// N*H*W past 2^31 pixels (the kernels' 64-bit pixel decode), bf16, one channel: sampled data-gradient
// elements exactly, the weight gradient's centre tap against a double sum on the host.
TEST(CudaBackward, DepthwisePast2To31Elements) {
  if (!gpu_here()) GTEST_SKIP() << "no CUDA device";
  const Conv2dProblem p = Conv2dProblem::parse("n2c1h32800w32800k1r3s3p1g1");  // 2,151,680,000 elements
  // Small integers from a hash of the memory index, as bf16 bits (one channel: both layouts hold (n, h, w)
  // in the same order, and the output has the input's shape).
  uint16_t bits[8];
  for (int v = 0; v < 8; ++v) {
    const float f = float(v - 3);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bits[v] = uint16_t(u >> 16);  // exact: small integers need no rounding
  }
  auto code = [](int64_t i, uint32_t salt) { return int(((uint64_t(i) * 2654435761u + salt) >> 7) & 7); };
  for (Layout l : {Layout::nhwc, Layout::nchw}) {
    ckt::HostTensor x(DType::bf16, l, input_dims(p)), gz(DType::bf16, l, output_dims(p)),
        w(DType::bf16, l, weight_dims(p));
    auto* xb = reinterpret_cast<uint16_t*>(x.bytes.data());
    auto* gb = reinterpret_cast<uint16_t*>(gz.bytes.data());
    double centre = 0.0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int a = code(i, 1), b = code(i, 2);
      xb[i] = bits[a], gb[i] = bits[b];
      centre += double((a - 3) * (b - 3));
    }
    for (int64_t i = 0; i < w.numel(); ++i) w.set(0, 0, i / 3, i % 3, double(i % 5 - 2));
    const Grads g = gpu_grads(p, x, w, gz);
    const int64_t H = p.h, W = p.w;
    for (int64_t n : {int64_t(0), int64_t(1)})
      for (int64_t h : {int64_t(0), H / 2, H - 1})
        for (int64_t w0 : {int64_t(0), W - 1, W / 3}) {
          double want = 0.0;
          for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s) {
              const int64_t pp = h + 1 - r, qq = w0 + 1 - s;
              if (pp < 0 || pp >= H || qq < 0 || qq >= W) continue;
              want += gz.at(n, 0, pp, qq) * w.at(0, 0, r, s);
            }
          EXPECT_EQ(g.gx.at(n, 0, h, w0), want) << to_string(l) << " " << n << "," << h << "," << w0;
        }
    // fp32 partial sums of ~2e9 products, then one bf16 rounding
    EXPECT_NEAR(g.gw.at(0, 0, 1, 1), centre, std::fabs(centre) * 1e-2 + 64.0) << to_string(l);
  }
}

}  // namespace

// ---- the CPU's fast weight gradients (BackwardOptions::cpu_fast) ---------------------------------------
// GEMMs and, for depthwise problems (multipliers 1 and 2), the direct loop. Bit-equal to the float64
// reference on small integers in f32 (float32 sums of them are exact): dense, grouped and depthwise problems, 1x1 to 7x7, strides 1 to 3, dilation, padding past R/2, odd sizes, batch 1
// to 3, both layouts; f16/bf16 (widened to SGEMM, or bfloat16 NHWC on the CPU's dot product: products exact,
// float32 sums, one rounding) the reference's values rounded once; the same bits on every call.
namespace {

const char* kCpuGemmSpecs[] = {"n2c5h9w11k7r3s3p1",        "n1c16h12w10k24r1s1",      "n3c8h7w7k8r3s3p1u2",
                               "n1c12h13w9k6r5s5p4d2",     "n2c16h8w8k32r3s3p1g4",    "n1c8h6w6k8r3s3p1g8",
                               "n1c3h17w15k16r7s7p3u2",    "n2c6h5w9k4r3s1ph1pw0u3",  "n1c32h4w4k64r1s1u2",
                               "n2c16h9w7k32r3s3p1u2g16",  "n1c24h11w11k24r5s5p4d2g24", "n3c5h6w6k5r3s3p1g5",
                               "n1c17h1w13k17r1s3ph0pw1g17"};

ckt::HostTensor gemm_wgrad(const Conv2dProblem& p, const ckt::HostTensor& x, const ckt::HostTensor& gz) {
  ckt::HostTensor gw(x.dtype, x.layout, weight_dims(p));
  gw.fill_logical(std::vector<double>(size_t(gw.numel()), std::nan("")));  // poisoned
  BackwardOptions o;
  o.cpu_fast = true;
  conv2d_backward_weight(p, x.view_const(), gz.view_const(), gw.view(), o);
  return gw;
}

TEST(CpuWeightGradientFast, BitEqualToTheReferenceOnSmallIntegers) {
  std::mt19937 rng(21);
  for (const char* spec : kCpuGemmSpecs)
    for (Layout l : {Layout::nchw, Layout::nhwc}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ckt::HostTensor x = filled(DType::f32, l, input_dims(p), rng, true);
      const ckt::HostTensor gz = filled(DType::f32, l, output_dims(p), rng, true);
      ckt::HostTensor want(DType::f32, l, weight_dims(p));
      conv2d_backward_weight(p, x.view_const(), gz.view_const(), want.view());
      const ckt::HostTensor got = gemm_wgrad(p, x, gz);
      EXPECT_EQ(got.logical(), want.logical()) << spec << " " << to_string(l);
      EXPECT_EQ(gemm_wgrad(p, x, gz).logical(), got.logical()) << spec << ": the same bits on every call";
      for (DType t : {DType::f16, DType::bf16}) {  // the exact sums rounded once
        const ckt::HostTensor g16 = gemm_wgrad(p, rounded_to(t, x), rounded_to(t, gz));
        EXPECT_EQ(g16.logical(), rounded_to(t, want).logical()) << spec << " " << to_string(l) << " " << to_string(t);
      }
    }
}

// Gaussian data in f16/bf16 (bfloat16 NHWC on the CPU's dot product where it has one, the rest widened to
// float32 SGEMM): within the 16-bit bound of the float64 reference on the same 16-bit values, and the same
// bits on every call. Reductions past one 32-column block, odd pixel counts, groups.
TEST(CpuWeightGradientFast, SixteenBitGaussianWithinBound) {
  std::mt19937 rng(22);
  for (const char* spec : {"n3c64h9w9k96r3s3p1", "n2c3h17w15k16r7s7p3u2", "n1c48h7w5k40r3s3p1g2", "n4c24h6w6k24r1s1"})
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (DType t : {DType::f16, DType::bf16}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ckt::HostTensor x = filled(t, l, input_dims(p), rng, false);
        const ckt::HostTensor gz = filled(t, l, output_dims(p), rng, false);
        ckt::HostTensor want(DType::f32, l, weight_dims(p));
        conv2d_backward_weight(p, as_f32(x).view_const(), as_f32(gz).view_const(), want.view());
        const ckt::HostTensor got = gemm_wgrad(p, x, gz);
        EXPECT_LE(rel_l2(as_f32(got), want), 1e-2) << spec << " " << to_string(l) << " " << to_string(t);
        EXPECT_EQ(gemm_wgrad(p, x, gz).logical(), got.logical()) << spec << ": the same bits on every call";
      }
}

}  // namespace
