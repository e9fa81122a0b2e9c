// The public API around the kernels: validate_tensors() and conv2d() errors (one reason each), the
// registry (order, names, find_algorithm, select), CONVKIT_LOG=dispatch, Buffer, and the enum names.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <utility>

#include "convkit/system.hpp"
#include "core/timing.hpp"
#include "test_util.hpp"

using namespace convkit;
using ckt::HostTensor;

namespace {

// A valid CPU f32 problem whose output has the input's dims (so "output aliases input" reaches the check).
struct Fixture {
  Conv2dProblem p = Conv2dProblem::parse("n2c4h6w6k4r3s3p1");
  ConvConfig cfg{};
  HostTensor x{DType::f32, Layout::nchw, input_dims(p)};
  HostTensor w{DType::f32, Layout::nchw, weight_dims(p)};
  HostTensor y{DType::f32, Layout::nchw, output_dims(p)};
  Fixture() {
    std::mt19937 rng(1);
    x.fill_logical(ckt::gaussian(size_t(x.numel()), rng));
    w.fill_logical(ckt::gaussian(size_t(w.numel()), rng));
  }
};

Status validate(const Fixture& f, const TensorView& x, const TensorView& w, const TensorView& y,
                const ConvConfig* cfg = nullptr) {
  return validate_tensors(f.p, cfg ? *cfg : f.cfg, x, w, y, Epilogue{});
}

// The Error conv2d throws (fails the test if it does not).
Error conv2d_error(const Conv2dProblem& p, const TensorView& x, const TensorView& w, const TensorView& y,
                   const Epilogue& e = {}, const RunOptions& o = {}) {
  try {
    conv2d(p, x, w, y, e, o);
  } catch (const Error& err) {
    return err;
  }
  ADD_FAILURE() << "conv2d(" << p.to_string() << ", algo=" << o.algo << ") did not throw";
  return Error(StatusCode::ok, "");
}

void expect_one_line(const std::string& m) {
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

// ---- validate_tensors ---------------------------------------------------------------------------

TEST(ValidateTensors, ValidTensorsAreOk) {
  Fixture f;
  const Status s = validate(f, f.x.view(), f.w.view(), f.y.view());
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST(ValidateTensors, InvalidProblemComesFirst) {
  Fixture f;
  f.p.groups = 3;
  const Status s = validate(f, f.x.view(), f.w.view(), f.y.view());
  EXPECT_EQ(s.code, StatusCode::invalid_problem) << s.message;
  EXPECT_TRUE(contains(s.message, "not divisible by groups")) << s.message;
}

TEST(ValidateTensors, NullPointerOfEachTensor) {
  Fixture f;
  const char* names[] = {"input", "weight", "output"};
  for (int which = 0; which < 3; ++which) {
    TensorView t[3] = {f.x.view(), f.w.view(), f.y.view()};
    t[which].data = nullptr;
    const Status s = validate(f, t[0], t[1], t[2]);
    EXPECT_EQ(s.code, StatusCode::invalid_tensor) << names[which];
    EXPECT_TRUE(contains(s.message, std::string(names[which]) + ": data pointer is null")) << s.message;
    expect_one_line(s.message);
  }
}

TEST(ValidateTensors, WrongDimsOfEachTensor) {
  Fixture f;
  const char* names[] = {"input", "weight", "output"};
  for (int which = 0; which < 3; ++which)
    for (int d = 0; d < 4; ++d) {
      TensorView t[3] = {f.x.view(), f.w.view(), f.y.view()};
      t[which].dims[size_t(d)] += 1;
      const Status s = validate(f, t[0], t[1], t[2]);
      EXPECT_EQ(s.code, StatusCode::invalid_tensor) << names[which] << " dim " << d;
      EXPECT_TRUE(contains(s.message, std::string(names[which]) + ": dims")) << s.message;
      expect_one_line(s.message);
    }
}

TEST(ValidateTensors, GroupedWeightHasCPerGroupChannels) {
  Fixture f;
  f.p = Conv2dProblem::parse("n2c4h6w6k4r3s3p1g2");
  TensorView w = f.w.view();  // dims [4,4,3,3]: wrong for groups=2, which wants [4,2,3,3]
  Status s = validate(f, f.x.view(), w, f.y.view());
  EXPECT_EQ(s.code, StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(s.message, "weight: dims [4,4,3,3] do not match the problem's [4,2,3,3]")) << s.message;
  w.dims = {4, 2, 3, 3};
  s = validate(f, f.x.view(), w, f.y.view());
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST(ValidateTensors, DtypeMismatch) {
  Fixture f;
  TensorView w = f.w.view();
  w.dtype = DType::f16;
  Status s = validate(f, f.x.view(), w, f.y.view());
  EXPECT_EQ(s.code, StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(s.message, "weight: dtype f16 differs from the requested f32")) << s.message;
  TensorView y = f.y.view();
  y.dtype = DType::bf16;
  s = validate(f, f.x.view(), f.w.view(), y);
  EXPECT_TRUE(contains(s.message, "output: dtype bf16")) << s.message;
  expect_one_line(s.message);
}

TEST(ValidateTensors, LayoutMismatch) {
  Fixture f;
  TensorView x = f.x.view();
  x.layout = Layout::nhwc;
  const Status s = validate(f, x, f.w.view(), f.y.view());
  EXPECT_EQ(s.code, StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(s.message, "input: layout nhwc differs from the requested nchw")) << s.message;
  expect_one_line(s.message);
}

TEST(ValidateTensors, DeviceMismatch) {
  Fixture f;
  TensorView y = f.y.view();
  y.device = Device::cuda;
  const Status s = validate(f, f.x.view(), f.w.view(), y);
  EXPECT_EQ(s.code, StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(s.message, "output: tensor is on cuda but the request is for cpu")) << s.message;
  expect_one_line(s.message);
}

TEST(ValidateTensors, Tf32OnlyForF32) {
  Fixture f;
  ConvConfig cfg{DType::f16, Layout::nchw, Device::cpu, MathMode::tf32};
  const Status s = validate(f, f.x.view(), f.w.view(), f.y.view(), &cfg);
  EXPECT_EQ(s.code, StatusCode::invalid_problem);
  EXPECT_TRUE(contains(s.message, "tf32")) << s.message;
  expect_one_line(s.message);
}

TEST(ValidateTensors, OutputAliasingInputOrWeight) {
  Fixture f;
  TensorView y = f.y.view();
  y.data = f.x.view().data;
  Status s = validate(f, f.x.view(), f.w.view(), y);
  EXPECT_EQ(s.code, StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(s.message, "alias")) << s.message;
  y.data = f.w.view().data;
  s = validate(f, f.x.view(), f.w.view(), y);
  EXPECT_EQ(s.code, StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(s.message, "alias")) << s.message;
}

// ---- conv2d -------------------------------------------------------------------------------------

TEST(Conv2d, ErrorsOfValidationReachTheCaller) {
  Fixture f;
  TensorView x = f.x.view();
  x.data = nullptr;
  Error e = conv2d_error(f.p, x, f.w.view(), f.y.view());
  EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(e.what(), "input: data pointer is null")) << e.what();
  TensorView w = f.w.view();
  w.layout = Layout::nhwc;
  e = conv2d_error(f.p, f.x.view(), w, f.y.view());
  EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
  TensorView y = f.y.view();
  y.data = f.x.view().data;
  e = conv2d_error(f.p, f.x.view(), f.w.view(), y);
  EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
  EXPECT_TRUE(contains(e.what(), "alias")) << e.what();
  RunOptions o;
  o.math = MathMode::tf32;
  HostTensor xh(DType::f16, Layout::nchw, input_dims(f.p)), wh(DType::f16, Layout::nchw, weight_dims(f.p)),
      yh(DType::f16, Layout::nchw, output_dims(f.p));
  e = conv2d_error(f.p, xh.view(), wh.view(), yh.view(), {}, o);
  EXPECT_EQ(e.code(), StatusCode::invalid_problem);
  EXPECT_TRUE(contains(e.what(), "tf32")) << e.what();
}

TEST(Conv2d, UnknownAlgorithmName) {
  Fixture f;
  RunOptions o;
  o.algo = "no_such_algorithm";
  const Error e = conv2d_error(f.p, f.x.view(), f.w.view(), f.y.view(), {}, o);
  EXPECT_EQ(e.code(), StatusCode::invalid_problem);
  EXPECT_TRUE(contains(e.what(), "unknown algorithm 'no_such_algorithm'")) << e.what();
}

TEST(Conv2d, AlgorithmThatCannotImplementGivesItsReason) {
  Fixture f;
  // cpu_ref has no tf32 mode: a guaranteed rejection in every build.
  RunOptions o;
  o.algo = "cpu_ref";
  o.math = MathMode::tf32;
  const std::string why = ckt::cpu_ref().can_implement(f.p, ConvConfig{DType::f32, Layout::nchw, Device::cpu,
                                                                       MathMode::tf32}).reason;
  ASSERT_FALSE(why.empty());
  Error e = conv2d_error(f.p, f.x.view(), f.w.view(), f.y.view(), {}, o);
  EXPECT_EQ(e.code(), StatusCode::unsupported);
  EXPECT_TRUE(contains(e.what(), why)) << e.what();
  EXPECT_TRUE(contains(e.what(), "cpu_ref")) << e.what();

  // Every available CPU algorithm that rejects one of these problems says the same through conv2d().
  const char* specs[] = {"n1c3h5w5k2r3", "n1c4h6w6k4r3p3", "n1c8h7w7k8r3p1g8", "n2c6h9w7k4r5s3ph2pw1uh2uw3dh2dw1g2",
                         "n1c1h1w1k1r1"};
  int checked = 0;
  for (const Algorithm* a : ckt::algorithms_and_peers()) {
    if (a->device() != Device::cpu || !a->available()) continue;
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (const char* s : specs) {
        const Conv2dProblem p = Conv2dProblem::parse(s);
        const ConvConfig cfg{DType::f32, l, Device::cpu, MathMode::strict};
        const Support sup = a->can_implement(p, cfg);
        if (sup) continue;
        HostTensor x(DType::f32, l, input_dims(p)), w(DType::f32, l, weight_dims(p)), y(DType::f32, l, output_dims(p));
        RunOptions ro;
        ro.algo = a->name();
        e = conv2d_error(p, x.view(), w.view(), y.view(), {}, ro);
        EXPECT_EQ(e.code(), StatusCode::unsupported) << a->name() << " " << s;
        EXPECT_TRUE(contains(e.what(), sup.reason)) << e.what();
        ++checked;
      }
  }
  std::printf("  %d (algorithm, problem) rejections checked through conv2d()\n", checked);
}

TEST(Conv2d, UnavailableAlgorithmIsNotAvailableError) {
  Fixture f;
  for (const Algorithm* a : ckt::algorithms_and_peers()) {
    if (a->device() != Device::cpu) continue;
    const Support av = a->available();
    if (av) continue;
    RunOptions o;
    o.algo = a->name();
    const Error e = conv2d_error(f.p, f.x.view(), f.w.view(), f.y.view(), {}, o);
    EXPECT_EQ(e.code(), StatusCode::not_available) << a->name();
    EXPECT_TRUE(contains(e.what(), av.reason)) << e.what();
  }
}

TEST(Conv2d, AlgorithmOnTheWrongDevice) {
  Fixture f;
  // Tensors that claim to be on the GPU (never dereferenced: the device check comes first), cpu algorithm.
  TensorView x = f.x.view(), w = f.w.view(), y = f.y.view();
  x.device = w.device = y.device = Device::cuda;
  RunOptions o;
  o.algo = "cpu_ref";
  Error e = conv2d_error(f.p, x, w, y, {}, o);
  EXPECT_EQ(e.code(), StatusCode::unsupported);
  EXPECT_TRUE(contains(e.what(), "cpu_ref runs on cpu but the tensors are on cuda")) << e.what();
  // And a CUDA algorithm on host tensors, where the build has one.
  for (const Algorithm* a : algorithms()) {
    if (a->device() != Device::cuda) continue;
    o.algo = a->name();
    e = conv2d_error(f.p, f.x.view(), f.w.view(), f.y.view(), {}, o);
    EXPECT_EQ(e.code(), StatusCode::unsupported) << a->name();
    EXPECT_TRUE(contains(e.what(), "runs on cuda but the tensors are on cpu")) << e.what();
  }
}

TEST(Conv2d, AutoOnAMachineWithoutGpuSaysWhy) {
  if (cuda_device_available()) GTEST_SKIP() << "a GPU is present; this checks the no-GPU message";
  Fixture f;
  TensorView x = f.x.view(), w = f.w.view(), y = f.y.view();
  x.device = w.device = y.device = Device::cuda;
  const Error e = conv2d_error(f.p, x, w, y);
  EXPECT_EQ(e.code(), StatusCode::unsupported);
  EXPECT_TRUE(contains(e.what(), "no algorithm can run " + f.p.to_string())) << e.what();
}

TEST(Conv2d, AutoMatchesTheReference) {
  Fixture f;
  conv2d(f.p, f.x.view(), f.w.view(), f.y.view());
  ckt::Case c = ckt::make_case(f.p, f.cfg, {}, 0, ckt::Fill::gaussian);
  c.src = f.x;
  c.wei = f.w;
  const auto ref = ckt::reference(c).memory_order();
  const auto v = ckt::check_output(select(f.p, f.cfg), c, f.y, ref, 1e-5, false);
  EXPECT_TRUE(v.ok) << v.message;
}

TEST(Conv2d, EveryNamedCpuAlgorithmThroughThePublicPath) {
  // conv2d(algo=name) with the epilogue, including the residual added in place (residual == dst).
  const Conv2dProblem p = Conv2dProblem::parse("n2c6h7w9k4r3s3p1u1g2");
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    const ConvConfig cfg{DType::f32, l, Device::cpu, MathMode::strict};
    ckt::EpilogueSpec spec;
    spec.bias = spec.residual = spec.residual_aliases_dst = true;
    spec.activation = Activation::relu;
    spec.alpha = 0.5f;
    spec.beta = 2.0f;
    const ckt::Case c = ckt::make_case(p, cfg, spec, 3, ckt::Fill::small_ints);
    const auto ref = ckt::reference(c).memory_order();
    for (const Algorithm* a : algorithms()) {
      if (a->device() != Device::cpu || !a->available() || !a->can_implement(p, cfg) || !ckt::plain(*a)) continue;
      HostTensor y = c.residual;  // the in-place residual
      Epilogue e;
      e.bias = c.bias.data();
      e.residual = y.bytes.data();
      e.activation = spec.activation;
      e.alpha = spec.alpha;
      e.beta = spec.beta;
      RunOptions o;
      o.algo = a->name();
      ckt::Case cc = c;
      conv2d(p, cc.src.view(), cc.wei.view(), y.view(), e, o);
      const auto v = ckt::check_output(*a, c, y, ref, 1e-5, ckt::held_to_exactness(*a));
      EXPECT_TRUE(v.ok) << v.message;
    }
  }
}

TEST(Conv2d, CallerWorkspaceTooSmallIsAnError) {
  int checked = 0;
  for (const Algorithm* a : algorithms()) {
    if (a->device() != Device::cpu || !a->available()) continue;
    for (const char* s : {"n1c4h9w9k4r3p1", "n1c4h9w9k4r3p1u2", "n2c8h9w9k8r5p2g2"}) {
      const Conv2dProblem p = Conv2dProblem::parse(s);
      const ConvConfig cfg{};
      if (!a->can_implement(p, cfg)) continue;
      const size_t need = a->workspace_bytes(p, cfg);
      if (need == 0) continue;
      HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
          y(DType::f32, Layout::nchw, output_dims(p));
      std::vector<unsigned char> ws(need - 1);
      RunOptions o;
      o.algo = a->name();
      o.workspace = ws.data();
      o.workspace_bytes = ws.size();
      const Error e = conv2d_error(p, x.view(), w.view(), y.view(), {}, o);
      EXPECT_EQ(e.code(), StatusCode::invalid_tensor) << a->name();
      EXPECT_TRUE(contains(e.what(), "workspace")) << e.what();
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no available CPU algorithm needs a workspace";
}

// ---- registry -----------------------------------------------------------------------------------

TEST(Registry, ReferenceIsLastAndNamesAreUnique) {
  const auto& algos = algorithms();
  ASSERT_FALSE(algos.empty());
  EXPECT_EQ(algos.back()->name(), "cpu_ref") << "the reference comes last in selection order";
  std::set<std::string> names;
  for (const Algorithm* a : ckt::algorithms_and_peers()) {
    EXPECT_TRUE(names.insert(a->name()).second) << "duplicate name " << a->name();
    for (char ch : a->name())
      EXPECT_TRUE(std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) ||
                  ch == '_')
          << "names are lowercase identifiers (used as test names and CLI values): " << a->name();
    EXPECT_FALSE(a->description().empty()) << a->name();
  }
  // Within each device, the reference of that device is last.
  const Algorithm* last_cuda = nullptr;
  for (const Algorithm* a : algos)
    if (a->device() == Device::cuda) last_cuda = a;
  if (last_cuda) {
    EXPECT_EQ(last_cuda->name(), "cuda_ref");
  }
}

TEST(Registry, PeersAreListedSeparately) {
  for (const Algorithm* a : algorithms()) EXPECT_FALSE(a->is_peer()) << a->name();
  for (const Algorithm* a : peers()) EXPECT_TRUE(a->is_peer()) << a->name();
  EXPECT_NE(find_algorithm("onednn_cpu"), nullptr);
}

TEST(Registry, FindAlgorithm) {
  for (const Algorithm* a : ckt::algorithms_and_peers()) EXPECT_EQ(find_algorithm(a->name()), a) << a->name();
  EXPECT_EQ(find_algorithm("no_such_algorithm"), nullptr);
  EXPECT_EQ(find_algorithm(""), nullptr);
  EXPECT_EQ(find_algorithm("CPU_REF"), nullptr) << "names are exact";
}

TEST(Registry, ExpectedCpuAlgorithmsAreRegistered) {
  for (const char* n : {"cpu_ref", "cpu_direct", "cpu_im2col_gemm"}) EXPECT_NE(find_algorithm(n), nullptr) << n;
}

TEST(Registry, SelectTakesTheFirstAlgorithmThatCanAndNeverAPeer) {
  for (const char* s : {"n1c3h9w9k4r3p1", "n2c8h8w8k8r1", "n1c8h9w9k8r3p1g8", "n1c4h9w9k4r3p1u2d2"})
    for (Layout l : {Layout::nchw, Layout::nhwc}) {
      const Conv2dProblem p = Conv2dProblem::parse(s);
      const ConvConfig cfg{DType::f32, l, Device::cpu, MathMode::strict};
      const Algorithm* want = nullptr;
      for (const Algorithm* a : algorithms())  // (the first whose heuristic also takes it: cpu_im2col_gemm
                                                // leaves the 3-4 channel stems to cpu_direct)
        if (a->device() == Device::cpu && a->available() && a->can_implement(p, cfg) && ckt::plain(*a) &&
            a->heuristic_choice(p, cfg, Operands{})) {
          want = a;
          break;
        }
      ASSERT_NE(want, nullptr) << "cpu_ref accepts every f32 problem";
      const Algorithm& got = select(p, cfg);
      EXPECT_EQ(&got, want) << s << " " << cfg.to_string() << ": got " << got.name() << ", want " << want->name();
      EXPECT_FALSE(got.is_peer());
    }
}

TEST(Registry, SelectWithNothingPossibleListsEveryRejection) {
  // tf32 on the CPU: cpu_ref rejects it, so does every other CPU algorithm that has no tf32 mode.
  const Conv2dProblem p = Conv2dProblem::parse("n1c3h9w9k4r3p1");
  const ConvConfig cfg{DType::f32, Layout::nchw, Device::cpu, MathMode::tf32};
  bool any = false;
  for (const Algorithm* a : algorithms())
    if (a->device() == Device::cpu && a->available() && a->can_implement(p, cfg) && ckt::plain(*a)) any = true;
  if (any) GTEST_SKIP() << "some CPU algorithm accepts tf32";
  try {
    select(p, cfg);
    FAIL() << "select did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::unsupported);
    for (const Algorithm* a : algorithms())
      if (a->device() == Device::cpu) {
        EXPECT_TRUE(contains(e.what(), a->name() + ": ")) << e.what();
      }
  }
}

TEST(Registry, ExpectedAlgorithmsAvailable) {
  const auto want = ckt::required_algos();
  if (want.empty())
    GTEST_SKIP() << "CONVKIT_REQUIRE_ALGOS is not set (CI sets it, e.g. CONVKIT_REQUIRE_ALGOS=cpu_ref,cpu_direct)";
  for (const auto& name : want) {
    const Algorithm* a = find_algorithm(name);
    if (!a) {
      ADD_FAILURE() << name << " is required by CONVKIT_REQUIRE_ALGOS but not registered in this build";
      continue;
    }
    const Support av = a->available();
    EXPECT_TRUE(av.ok) << name << " is required by CONVKIT_REQUIRE_ALGOS but not available: " << av.reason;
    if (a->device() == Device::cuda) {
      EXPECT_TRUE(cuda_device_available()) << name << " is required but no CUDA device is present";
    }
  }
}

TEST(Registry, GpuPresentWhenRequired) {
  if (!ckt::require_gpu()) GTEST_SKIP() << "CONVKIT_REQUIRE_GPU is not 1";
  EXPECT_TRUE(cuda_device_available()) << "CONVKIT_REQUIRE_GPU=1 but no usable CUDA device in this build/machine";
  bool any = false;
  for (const Algorithm* a : algorithms()) any = any || a->device() == Device::cuda;
  EXPECT_TRUE(any) << "CONVKIT_REQUIRE_GPU=1 but no CUDA algorithm is registered (built without CUDA?)";
}

TEST(Registry, UnavailableAlgorithmsSayWhy) {
  for (const Algorithm* a : ckt::algorithms_and_peers()) {
    const Support av = a->available();
    if (av) continue;
    EXPECT_FALSE(av.reason.empty()) << a->name();
    EXPECT_EQ(av.reason.find('\n'), std::string::npos) << a->name() << ": " << av.reason;
    std::printf("  %-22s unavailable: %s\n", a->name().c_str(), av.reason.c_str());
  }
}

// ---- CONVKIT_LOG=dispatch -----------------------------------------------------------------------

TEST(DispatchLog, PrintsTheChoiceOncePerProblem) {
  // A problem no other test uses: the log prints once per (problem, config) per process.
  const Conv2dProblem p = Conv2dProblem::parse("n1c3h13w11k5r3s2ph1pw0");
  const ConvConfig cfg{};
  const Algorithm* want = nullptr;
  std::vector<const Algorithm*> rejected;
  for (const Algorithm* a : algorithms()) {
    if (a->device() != Device::cpu) continue;
    if (a->available() && a->can_implement(p, cfg)) {
      want = a;
      break;
    }
    rejected.push_back(a);
  }
  ASSERT_NE(want, nullptr);
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  const std::string old = ckt::env_str("CONVKIT_LOG");
  ::setenv("CONVKIT_LOG", "dispatch", 1);
  testing::internal::CaptureStderr();
  conv2d(p, x.view(), w.view(), y.view());
  conv2d(p, x.view(), w.view(), y.view());
  const std::string err = testing::internal::GetCapturedStderr();
  if (old.empty()) ::unsetenv("CONVKIT_LOG");
  else ::setenv("CONVKIT_LOG", old.c_str(), 1);

  size_t count = 0;
  for (size_t at = err.find("[convkit dispatch]"); at != std::string::npos; at = err.find("[convkit dispatch]", at + 1))
    ++count;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_TRUE(contains(err, p.to_string())) << err;
  EXPECT_TRUE(contains(err, "-> " + want->name())) << err;
  for (const Algorithm* a : rejected) EXPECT_TRUE(contains(err, a->name() + ":")) << "rejection of " << a->name() << " missing:\n" << err;
}

TEST(DispatchLog, SilentWithoutTheVariable) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c2h11w13k3r3s2pw1");
  const std::string old = ckt::env_str("CONVKIT_LOG");
  ::unsetenv("CONVKIT_LOG");
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  testing::internal::CaptureStderr();
  conv2d(p, x.view(), w.view(), y.view());
  const std::string err = testing::internal::GetCapturedStderr();
  if (!old.empty()) ::setenv("CONVKIT_LOG", old.c_str(), 1);
  EXPECT_EQ(err.find("[convkit dispatch]"), std::string::npos) << err;
}

// ---- Buffer -------------------------------------------------------------------------------------

TEST(Buffer, DefaultIsEmpty) {
  Buffer b;
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_EQ(b.device(), Device::cpu);
  b.fill_bytes(0xFF);
  b.copy_from_host(nullptr, 0);
  b.copy_to_host(nullptr, 0);
}

TEST(Buffer, HostAllocationIsAlignedAndFillable) {
  Buffer b(Device::cpu, 100);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  b.fill_bytes(0xFF);
  std::vector<float> f(25);
  b.copy_to_host(f.data(), 100);
  for (float v : f) EXPECT_TRUE(std::isnan(v)) << "0xFF bytes are the NaN poison";
  std::vector<unsigned char> in(100), out(100);
  for (int i = 0; i < 100; ++i) in[size_t(i)] = static_cast<unsigned char>(i * 7);
  b.copy_from_host(in.data(), 100);
  b.copy_to_host(out.data(), 100);
  EXPECT_EQ(in, out);
  b.copy_from_host(in.data(), 10);  // a shorter copy is fine
}

TEST(Buffer, CopiesPastTheEndAreErrors) {
  Buffer b(Device::cpu, 16);
  std::vector<unsigned char> big(17);
  try {
    b.copy_from_host(big.data(), 17);
    FAIL() << "copy_from_host past the end did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
    EXPECT_TRUE(contains(e.what(), "17")) << e.what();
  }
  try {
    b.copy_to_host(big.data(), 17);
    FAIL() << "copy_to_host past the end did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_tensor);
  }
  Buffer empty;
  EXPECT_THROW(empty.copy_from_host(big.data(), 1), Error);
}

TEST(Buffer, MoveTransfersOwnership) {
  Buffer a(Device::cpu, 64);
  void* pa = a.data();
  Buffer b(std::move(a));
  EXPECT_EQ(b.data(), pa);
  EXPECT_EQ(b.bytes(), 64u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(a.bytes(), 0u);
  Buffer c(Device::cpu, 32);
  c = std::move(b);  // releases c's own memory (LeakSanitizer would notice otherwise)
  EXPECT_EQ(c.data(), pa);
  EXPECT_EQ(c.bytes(), 64u);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  Buffer& same = c;
  c = std::move(same);  // self-move keeps the buffer
  EXPECT_EQ(c.data(), pa);
  EXPECT_EQ(c.bytes(), 64u);
  std::vector<Buffer> v;
  for (int i = 0; i < 10; ++i) v.emplace_back(Device::cpu, size_t(8 + i));  // reallocation moves them
  for (int i = 0; i < 10; ++i) EXPECT_EQ(v[size_t(i)].bytes(), size_t(8 + i));
}

TEST(Buffer, DeviceBufferWithoutGpuIsNotAvailable) {
  if (cuda_device_available()) GTEST_SKIP() << "a GPU is present";
  try {
    Buffer b(Device::cuda, 1024);
    FAIL() << "a device buffer without a device did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::not_available) << e.what();
    expect_one_line(e.what());
  }
  Buffer zero(Device::cuda, 0);  // nothing to allocate: fine anywhere
  EXPECT_EQ(zero.data(), nullptr);
}

TEST(Buffer, DeviceRoundTrip) {
  if (!cuda_device_available()) {
    if (ckt::require_gpu()) FAIL() << "CONVKIT_REQUIRE_GPU=1 but no CUDA device";
    GTEST_SKIP() << "no CUDA device";
  }
  Buffer b(Device::cuda, 4096);
  EXPECT_EQ(b.device(), Device::cuda);
  std::vector<unsigned char> in(4096), out(4096);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 13 + 1);
  b.copy_from_host(in.data(), in.size());
  b.copy_to_host(out.data(), out.size());
  EXPECT_EQ(in, out);
  b.fill_bytes(0xFF);
  b.copy_to_host(out.data(), out.size());
  for (unsigned char c : out) ASSERT_EQ(c, 0xFF);
  EXPECT_THROW(b.copy_from_host(in.data(), 4097), Error);
  Buffer moved(std::move(b));
  EXPECT_EQ(moved.device(), Device::cuda);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}

// ---- names --------------------------------------------------------------------------------------

TEST(Names, EnumsRoundTripAndBadNamesListTheChoices) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(parse_dtype(to_string(d)), d);
  for (Layout l : {Layout::nchw, Layout::nhwc}) EXPECT_EQ(parse_layout(to_string(l)), l);
  for (Device d : {Device::cpu, Device::cuda}) EXPECT_EQ(parse_device(to_string(d)), d);
  for (Activation a : {Activation::none, Activation::relu, Activation::silu, Activation::gelu})
    EXPECT_EQ(parse_activation(to_string(a)), a);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_layout("NHWC"), Layout::nhwc);
  EXPECT_EQ(parse_device("gpu"), Device::cuda);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  auto bad = [](auto fn, const char* s, const char* lists) {
    try {
      fn(s);
      ADD_FAILURE() << s << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::invalid_problem);
      EXPECT_TRUE(contains(e.what(), lists)) << e.what();
      EXPECT_TRUE(contains(e.what(), s)) << e.what();
    }
  };
  bad(parse_dtype, "f64", "f32, f16 or bf16");
  bad(parse_layout, "nchw8c", "nchw or nhwc");
  bad(parse_device, "tpu", "cpu or cuda");
  bad(parse_activation, "tanh", "none, relu, silu, gelu, relu6, hardswish, sigmoid or hardsigmoid");
}

TEST(Names, ConfigAndStatusStrings) {
  EXPECT_EQ((ConvConfig{}).to_string(), "f32/nchw/cpu");
  EXPECT_EQ((ConvConfig{DType::f32, Layout::nhwc, Device::cuda, MathMode::tf32}).to_string(), "f32/nhwc/cuda/tf32");
  EXPECT_STREQ(to_string(StatusCode::invalid_tensor), "invalid tensor");
  EXPECT_STRNE(version(), "");
  const Error e(Status::Fail(StatusCode::io_error, "x"));
  EXPECT_EQ(e.code(), StatusCode::io_error);
  EXPECT_THROW(throw_if_error(Status::Fail(StatusCode::internal, "y")), Error);
  EXPECT_NO_THROW(throw_if_error(Status::Ok()));
}

TEST(Names, TensorViewOffsetsForBothLayouts) {
  TensorView t{nullptr, DType::f32, Layout::nchw, Device::cpu, {2, 3, 4, 5}};
  EXPECT_EQ(t.numel(), 120);
  EXPECT_EQ(t.bytes(), 480u);
  EXPECT_EQ(t.offset(1, 2, 3, 4), 119);
  EXPECT_EQ(t.offset(0, 1, 0, 0), 20);
  t.layout = Layout::nhwc;
  EXPECT_EQ(t.offset(1, 2, 3, 4), 119);
  EXPECT_EQ(t.offset(0, 1, 0, 0), 1);
  EXPECT_EQ(t.offset(0, 0, 0, 1), 3);
  EXPECT_EQ(t.offset(0, 0, 1, 0), 15);
  TensorView big{nullptr, DType::f32, Layout::nchw, Device::cpu, {2, 2, 23171, 23171}};
  EXPECT_EQ(big.offset(1, 1, 23170, 23170), big.numel() - 1) << "offsets are 64-bit";
  EXPECT_GT(big.numel(), int64_t(1) << 31);
}

TEST(Names, EpilogueIdentity) {
  Epilogue e;
  EXPECT_TRUE(e.is_identity());
  e.alpha = 2;
  EXPECT_FALSE(e.is_identity());
  e = {};
  e.activation = Activation::relu;
  EXPECT_FALSE(e.is_identity());
}

// ---- transform_layout ---------------------------------------------------------------------------

namespace {

// Logical values i*7919 mod 2039 (exact in f16/bf16/f32), in a host tensor of `layout`.
HostTensor numbered(DType t, Layout l, std::array<int64_t, 4> dims) {
  HostTensor h(t, l, dims);
  std::vector<double> v(size_t(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double((int64_t(i) * 7919) % 2039) - 1000.0;
  if (t == DType::bf16)
    for (auto& x : v) x = std::fmod(x, 256.0);  // bf16 holds integers up to 256 exactly
  h.fill_logical(v);
  return h;
}

}  // namespace

TEST(TransformLayout, CpuBothDirectionsEveryDtype) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const std::array<int64_t, 4> dims : {std::array<int64_t, 4>{2, 5, 3, 7}, {1, 40, 33, 35}, {3, 1, 1, 1},
                                              {1, 64, 1, 1}, {2, 3, 70, 1}})
      for (Layout from : {Layout::nchw, Layout::nhwc}) {
        const Layout to = from == Layout::nchw ? Layout::nhwc : Layout::nchw;
        const HostTensor src = numbered(t, from, dims);
        HostTensor dst(t, to, dims), same(t, from, dims);
        transform_layout(src.view_const(), dst.view());
        EXPECT_EQ(dst.logical(), src.logical()) << to_string(t) << " " << to_string(from) << " -> " << to_string(to)
                                                << " dims " << dims[0] << "," << dims[1] << "," << dims[2] << "," << dims[3];
        if (dims[1] > 1 && dims[2] * dims[3] > 1) {
          EXPECT_NE(dst.bytes, src.bytes) << "the memory order changes";
        }
        transform_layout(dst.view_const(), same.view());  // and back
        EXPECT_EQ(same.bytes, src.bytes);
      }
}

TEST(TransformLayout, SameLayoutIsACopyAndEmptyIsANoOp) {
  const HostTensor src = numbered(DType::f32, Layout::nhwc, {2, 3, 4, 5});
  HostTensor dst(DType::f32, Layout::nhwc, {2, 3, 4, 5});
  transform_layout(src.view_const(), dst.view());
  EXPECT_EQ(dst.bytes, src.bytes);
  TensorView e{nullptr, DType::f32, Layout::nchw, Device::cpu, {0, 3, 4, 5}};
  TensorView e2 = e;
  e2.layout = Layout::nhwc;
  EXPECT_NO_THROW(transform_layout(e, e2));
}

TEST(TransformLayout, MismatchedViewsAreErrors) {
  HostTensor a = numbered(DType::f32, Layout::nchw, {2, 3, 4, 5});
  HostTensor b(DType::f32, Layout::nhwc, {2, 3, 4, 5});
  auto expect_error = [](const TensorView& s, const TensorView& d, const std::string& says) {
    try {
      transform_layout(s, d);
      ADD_FAILURE() << "no error; expected one about " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::invalid_tensor) << e.what();
      EXPECT_TRUE(contains(e.what(), says)) << e.what();
      expect_one_line(e.what());
    }
  };
  TensorView d = b.view();
  d.dims = {2, 3, 5, 4};
  expect_error(a.view(), d, "dims");
  d = b.view();
  d.dtype = DType::f16;
  expect_error(a.view(), d, "f16");
  d = b.view();
  d.device = Device::cuda;
  expect_error(a.view(), d, "cuda");
  d = b.view();
  d.data = nullptr;
  expect_error(a.view(), d, "null");
  TensorView overlap = a.view();
  overlap.layout = Layout::nhwc;
  expect_error(a.view(), overlap, "overlap");
  overlap.data = a.bytes.data() + 4;
  expect_error(a.view(), overlap, "overlap");
  d = b.view();
  d.dims = {2, -3, 4, 5};
  TensorView s = a.view();
  s.dims = d.dims;
  expect_error(s, d, "negative");
}

TEST(TransformLayout, CudaMatchesTheCpu) {
  if (!cuda_device_available()) {
    if (ckt::require_gpu()) FAIL() << "no CUDA device, but CONVKIT_REQUIRE_GPU=1";
    GTEST_SKIP() << "no CUDA device on this machine (or a build without CUDA)";
  }
  for (DType t : {DType::f32, DType::f16})
    for (const std::array<int64_t, 4> dims : {std::array<int64_t, 4>{2, 5, 3, 7}, {3, 70, 33, 35}, {1, 1, 9, 9},
                                              {2, 256, 1, 1}, {1, 33, 1, 65}})
      for (Layout from : {Layout::nchw, Layout::nhwc}) {
        const Layout to = from == Layout::nchw ? Layout::nhwc : Layout::nchw;
        const HostTensor src = numbered(t, from, dims);
        HostTensor want(t, to, dims), got(t, to, dims);
        transform_layout(src.view_const(), want.view());
        Buffer ds(Device::cuda, src.bytes.size()), dd(Device::cuda, got.bytes.size());
        ds.copy_from_host(src.bytes.data(), src.bytes.size());
        dd.fill_bytes(0xFF);
        TensorView sv{ds.data(), t, from, Device::cuda, dims}, dv{dd.data(), t, to, Device::cuda, dims};
        transform_layout(sv, dv);
        device_synchronize(Device::cuda);
        dd.copy_to_host(got.bytes.data(), got.bytes.size());
        EXPECT_EQ(got.bytes, want.bytes) << to_string(t) << " " << to_string(from) << " dims " << dims[0] << ","
                                         << dims[1] << "," << dims[2] << "," << dims[3];
      }
}

// bench's "noisy" rule rests on this: (p75 - p25) / median, NaN under 4 runs.
TEST(Timing, SpreadIsTheInterquartileRangeOverTheMedian) {
  EXPECT_TRUE(std::isnan(detail::spread({1.0, 2.0, 3.0})));
  EXPECT_DOUBLE_EQ(detail::spread({1.0, 1.0, 1.0, 1.0}), 0.0);
  // 1..5: p25 = 2, p50 = 3, p75 = 4.
  EXPECT_DOUBLE_EQ(detail::spread({5.0, 1.0, 4.0, 2.0, 3.0}), 2.0 / 3.0);
  EXPECT_GT(detail::spread({1.0, 1.0, 10.0, 10.0, 1.0, 10.0}), detail::kNoisySpread);
}

// More device memory than the card has: Error(cuda_error) naming the bytes asked, the bytes free and the
// card's total (the GPU is left usable: a small allocation works afterwards).
TEST(Buffer, DeviceOutOfMemoryNamesTheBytes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const size_t huge = size_t(1) << 50;  // 1 PiB
  try {
    Buffer b(Device::cuda, huge);
    FAIL() << "a 1 PiB device buffer was allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::cuda_error) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(huge) + " bytes failed"), std::string::npos) << m;
    EXPECT_NE(m.find("bytes free of"), std::string::npos) << m;
    expect_one_line(m);
  }
  Buffer ok(Device::cuda, 4096);
  EXPECT_NE(ok.data(), nullptr);
}

// More host memory than the machine has: refused up front, whatever the kernel's overcommit policy.
TEST(Buffer, HostAllocationLargerThanTheMachineIsRefused) {
  try {
    Buffer b(Device::cpu, size_t(1) << 60);
    FAIL() << "an exabyte host buffer was allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host allocation of " + std::to_string(size_t(1) << 60) + " bytes failed"),
              std::string::npos)
        << e.what();
    expect_one_line(e.what());
  }
}

// convkit::cuda_programmatic_launch(): false without a device (and no throw: the CPU-only machines ask it
// too); with one, on from compute capability 9.0 unless CONVKIT_PDL=0 (src/cuda/common/launch.cuh).
TEST(ProgrammaticLaunch, FollowsTheDeviceAndTheSwitch) {
  if (!cuda_device_available()) {
    EXPECT_FALSE(cuda_programmatic_launch());
    return;
  }
  const SystemInfo info = system_info();
  ASSERT_FALSE(info.gpus.empty());
  const char* v = std::getenv("CONVKIT_PDL");
  const bool off = v != nullptr && std::string(v) == "0";
  EXPECT_EQ(cuda_programmatic_launch(), !off && info.gpus[0].cc_major >= 9);
}
