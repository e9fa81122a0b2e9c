// The tune cache and autotuning (src/core/tune_cache.*, src/core/tune.*): the file format round trip, merging
// writers, a corrupt or foreign file and stale or unknown entries ignored with ONE warning, CONVKIT_TUNE_CACHE
// (off, explicit, XDG, HOME), RunOptions::variant checks, and CPU autotune: it picks a candidate, writes the
// cache, gives the output auto gives (bit-equal on small integers), never corrupts an in-place residual, and
// conv2d("auto") then follows the cache (CONVKIT_LOG=dispatch says so).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/tune.hpp"
#include "core/tune_cache.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace convkit;
using ckt::HostTensor;
using ckt::slurp;

namespace {

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// A temporary folder, and the tune-related environment restored after each test.
class Tune : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "convkit_tune_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    for (const char* v : {"CONVKIT_TUNE_CACHE", "XDG_CACHE_HOME", "HOME", "CONVKIT_LOG"}) saved_.push_back({v, getenv_opt(v)});
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value.first) ::setenv(name.c_str(), value.second.c_str(), 1);
      else ::unsetenv(name.c_str());
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::pair<bool, std::string> getenv_opt(const char* n) {
    const char* v = std::getenv(n);
    return {v != nullptr, v ? v : ""};
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::vector<std::pair<std::string, std::pair<bool, std::string>>> saved_;
};

detail::TuneEntry entry(const std::string& problem, const std::string& algo, double ms = 1.5) {
  detail::TuneEntry e;
  e.key = detail::make_tune_key(Conv2dProblem::parse(problem), ConvConfig{});
  e.algorithm = algo;
  e.ms = ms;
  e.date = "2026-11-29T12:00:00Z";
  return e;
}

// The first CPU algorithm (not cpu_ref) that can run `p` in `cfg`, or cpu_ref.
const Algorithm* fast_cpu(const Conv2dProblem& p, const ConvConfig& cfg) {
  for (const Algorithm* a : algorithms())
    if (a->device() == Device::cpu && a->name() != "cpu_ref" && a->available() && a->can_implement(p, cfg) &&
        ckt::plain(*a))
      return a;
  return &ckt::cpu_ref();
}

}  // namespace

// ---- the file -----------------------------------------------------------------------------------

TEST_F(Tune, LineRoundTrip) {
  detail::TuneEntry e = entry("n2c8h9w9k4r3p1", "cpu_direct", 0.125);
  e.variant = "64x64/s2";
  e.key.device_name = "Some GPU (132 SMs)";
  e.key.driver = "13000";
  const std::string line = detail::format_tune_line(e);
  EXPECT_EQ(count_of(line, "\t"), 11u) << line;
  detail::TuneEntry back;
  std::string why;
  ASSERT_TRUE(detail::parse_tune_line(line, &back, &why)) << why;
  EXPECT_TRUE(back.key == e.key) << line;
  EXPECT_EQ(back.algorithm, e.algorithm);
  EXPECT_EQ(back.variant, e.variant);
  EXPECT_DOUBLE_EQ(back.ms, e.ms);
  EXPECT_EQ(back.date, e.date);
  e.variant.clear();  // written as "-"
  ASSERT_TRUE(detail::parse_tune_line(detail::format_tune_line(e), &back, &why)) << why;
  EXPECT_EQ(back.variant, "");
  for (const char* bad : {"", "a\tb", "n1c1h1w1k1\tf32\tnchw\tstrict\tcpu\tX\t-\t0.1.0\tcpu_ref\t-\tfast\tdate",
                          "n1c1h1w1k1\tf64\tnchw\tstrict\tcpu\tX\t-\t0.1.0\tcpu_ref\t-\t1\tdate",
                          "n1c1h1w1k1r3\tf32\tnchw\tstrict\tcpu\tX\t-\t0.1.0\tcpu_ref\t-\t1\tdate"})
    EXPECT_FALSE(detail::parse_tune_line(bad, &back, &why)) << "accepted: " << bad;
}

TEST_F(Tune, StoreThenANewProcessFindsIt) {
  const std::string file = path("sub/dir/cache.txt");  // the folders are created
  const detail::TuneEntry e = entry("n1c4h8w8k4r3p1", "cpu_direct", 0.25);
  {
    detail::TuneCache c(file);
    EXPECT_FALSE(c.lookup(e.key).has_value());
    c.store(e);
  }
  const std::string text = slurp(file);
  EXPECT_EQ(text.rfind(detail::TuneCache::kHeader, 0), 0u) << text;
  EXPECT_NE(text.find("cpu_direct"), std::string::npos) << text;
  for (const auto& f : fs::directory_iterator(fs::path(file).parent_path()))
    EXPECT_EQ(f.path().filename().string().find(".tmp"), std::string::npos) << "temporary file left: " << f.path();
  testing::internal::CaptureStderr();
  detail::TuneCache again(file);  // a fresh object reads the file, as another process would
  const auto got = again.lookup(e.key);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->algorithm, "cpu_direct");
  EXPECT_DOUBLE_EQ(got->ms, 0.25);
  EXPECT_EQ(got->date, e.date);
}

TEST_F(Tune, WritersMergeWithEachOther) {
  const std::string file = path("cache.txt");
  detail::TuneCache a(file), b(file);
  const detail::TuneEntry ea = entry("n1c4h8w8k4r3p1", "cpu_direct"), eb = entry("n1c8h8w8k8r1", "cpu_ref");
  EXPECT_FALSE(a.lookup(ea.key).has_value());  // both have loaded the (empty) file
  EXPECT_FALSE(b.lookup(eb.key).has_value());
  a.store(ea);
  b.store(eb);  // must keep a's entry, written after b loaded
  detail::TuneCache c(file);
  EXPECT_TRUE(c.lookup(ea.key).has_value()) << slurp(file);
  EXPECT_TRUE(c.lookup(eb.key).has_value()) << slurp(file);
  EXPECT_EQ(c.entries().size(), 2u);
  // Storing the same key again replaces the entry.
  detail::TuneEntry ea2 = ea;
  ea2.algorithm = "cpu_ref";
  a.store(ea2);
  detail::TuneCache d(file);
  EXPECT_EQ(d.lookup(ea.key)->algorithm, "cpu_ref");
  EXPECT_EQ(d.entries().size(), 2u);
}

TEST_F(Tune, ForeignFileIsIgnoredWithOneWarningAndNeverOverwritten) {
  const std::string file = path("notes.txt");
  { std::ofstream(file) << "my precious notes\nline two\n"; }
  const detail::TuneEntry e = entry("n1c4h8w8k4r3p1", "cpu_direct");
  testing::internal::CaptureStderr();
  {
    detail::TuneCache c(file);
    EXPECT_FALSE(c.lookup(e.key).has_value());
    EXPECT_FALSE(c.lookup(e.key).has_value());
    c.store(e);  // kept in memory only
    EXPECT_TRUE(c.lookup(e.key).has_value());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "warning"), 1u) << err;
  EXPECT_NE(err.find(file), std::string::npos) << "the warning names the file: " << err;
  EXPECT_NE(err.find("my precious notes"), std::string::npos) << "and says what is wrong: " << err;
  EXPECT_EQ(slurp(file), "my precious notes\nline two\n");
}

TEST_F(Tune, CorruptLinesAreIgnoredWithOneWarning) {
  const std::string file = path("cache.txt");
  const detail::TuneEntry good = entry("n1c4h8w8k4r3p1", "cpu_direct");
  {
    std::ofstream f(file);
    f << detail::TuneCache::kHeader << "\n# a comment\n"
      << detail::format_tune_line(good) << "\n"
      << "garbage that is not an entry\n"
      << "n1c1h1w1k1\tf32\tnchw\tstrict\tcpu\tX\t-\t0.1.0\tcpu_ref\t-\tNaN\tdate\n"
      << "\x01\x02\xff\xfe binary junk\n";
  }
  testing::internal::CaptureStderr();
  detail::TuneCache c(file);
  const auto got = c.lookup(good.key);
  c.lookup(good.key);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(got.has_value()) << "the good line is still used";
  EXPECT_EQ(got->algorithm, "cpu_direct");
  EXPECT_EQ(count_of(err, "warning"), 1u) << err;
  EXPECT_NE(err.find(file), std::string::npos) << err;
  EXPECT_NE(err.find("3 lines"), std::string::npos) << err;
  EXPECT_NE(err.find("line 4"), std::string::npos) << "the first bad line is named: " << err;
  // The next write drops the bad lines and keeps the good one.
  c.store(entry("n1c8h8w8k8r1", "cpu_ref"));
  const std::string text = slurp(file);
  EXPECT_EQ(text.find("garbage"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu_direct"), std::string::npos) << text;
}

TEST_F(Tune, StaleAndUnknownEntriesAreNeverTrusted) {
  const std::string file = path("cache.txt");
  const detail::TuneEntry current = entry("n1c4h8w8k4r3p1", "cpu_direct");
  detail::TuneEntry old_version = current, other_device = entry("n1c8h8w8k8r1", "cpu_direct"),
                    unknown = entry("n1c6h8w8k6r1", "cpu_turbo_9000"), peer = entry("n1c6h8w8k6r3p1", "onednn_cpu");
  old_version.key.version = "0.0.1";
  other_device.key.device_name = "Some Other CPU (96 threads)";
  {
    std::ofstream f(file);
    f << detail::TuneCache::kHeader << "\n";
    for (const auto* e : {&old_version, &other_device, &unknown, &peer}) f << detail::format_tune_line(*e) << "\n";
  }
  testing::internal::CaptureStderr();
  detail::TuneCache c(file);
  EXPECT_FALSE(c.lookup(current.key).has_value()) << "another convkit version's entry";
  EXPECT_FALSE(c.lookup(entry("n1c8h8w8k8r1", "x").key).has_value()) << "another device's entry";
  EXPECT_FALSE(c.lookup(unknown.key).has_value()) << "an unknown algorithm";
  EXPECT_FALSE(c.lookup(peer.key).has_value()) << "a peer is never selected";
  for (int i = 0; i < 3; ++i) c.lookup(current.key), c.lookup(unknown.key);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "warning"), 2u) << "one warning per kind (stale, unknown):\n" << err;
  EXPECT_NE(err.find("stale"), std::string::npos) << err;
  EXPECT_NE(err.find("0.0.1"), std::string::npos) << err;
  EXPECT_NE(err.find("cpu_turbo_9000"), std::string::npos) << err;
  EXPECT_EQ(count_of(err, file), 2u) << err;
}

TEST_F(Tune, PathFromTheEnvironment) {
  ::setenv("CONVKIT_TUNE_CACHE", "/some/where.txt", 1);
  EXPECT_EQ(detail::tune_cache_path_from_env(), "/some/where.txt");
  ::setenv("CONVKIT_TUNE_CACHE", "off", 1);
  EXPECT_EQ(detail::tune_cache_path_from_env(), "");
  ::unsetenv("CONVKIT_TUNE_CACHE");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(detail::tune_cache_path_from_env(), "/xdg/convkit/tune-v1.txt");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/me", 1);
  EXPECT_EQ(detail::tune_cache_path_from_env(), "/home/me/.cache/convkit/tune-v1.txt");
  ::unsetenv("HOME");
  EXPECT_EQ(detail::tune_cache_path_from_env(), "");
}

// ---- autotune through conv2d --------------------------------------------------------------------

TEST_F(Tune, CpuAutotunePicksACandidateMatchesAutoAndFillsTheCache) {
  const std::string file = path("cache.txt");
  ::setenv("CONVKIT_TUNE_CACHE", file.c_str(), 1);
  const Conv2dProblem p = Conv2dProblem::parse("n2c8h13w11k12r3s3p1");
  const ConvConfig cfg{};
  const ckt::Case c = ckt::make_case(p, cfg, {}, 21, ckt::Fill::small_ints);
  HostTensor y_auto(DType::f32, Layout::nchw, output_dims(p)), y_tuned = y_auto;
  ckt::Case cc = c;
  conv2d(p, cc.src.view(), cc.wei.view(), y_auto.view());
  EXPECT_FALSE(fs::exists(file)) << "auto never writes the cache";

  RunOptions o;
  o.algo = "autotune";
  std::vector<std::string> skipped;
  const auto cands = detail::tune_candidates(p, cfg, &skipped);
  ASSERT_FALSE(cands.empty());
  if (fast_cpu(p, cfg)->name() != "cpu_ref") {
    for (const auto& k : cands) EXPECT_NE(k.algorithm->name(), "cpu_ref") << "the reference is skipped when faster exist";
  }
  conv2d(p, cc.src.view(), cc.wei.view(), y_tuned.view(), {}, o);
  EXPECT_EQ(y_tuned.bytes, y_auto.bytes) << "small integers: every algorithm is exact";

  detail::TuneCache reread(file);
  const auto e = reread.lookup(detail::make_tune_key(p, cfg));
  ASSERT_TRUE(e.has_value()) << slurp(file);
  EXPECT_TRUE(std::any_of(cands.begin(), cands.end(), [&](const detail::TuneCandidate& k) {
    return k.algorithm->name() == e->algorithm;
  })) << e->algorithm;
  EXPECT_GT(e->ms, 0.0);

  // auto now follows the cache, and says so.
  const Selection s = select_auto(p, cfg);
  EXPECT_EQ(s.source, "tune cache");
  ASSERT_NE(s.algorithm, nullptr);
  EXPECT_EQ(s.algorithm->name(), e->algorithm);
}

TEST_F(Tune, AutotuneLogsItsTimingsAndEveryAlgorithm) {
  ::setenv("CONVKIT_TUNE_CACHE", path("cache.txt").c_str(), 1);
  ::setenv("CONVKIT_LOG", "dispatch", 1);
  const Conv2dProblem p = Conv2dProblem::parse("n1c5h10w9k7r3s3p1u1");  // used by no other test
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  RunOptions o;
  o.algo = "autotune";
  testing::internal::CaptureStderr();
  conv2d(p, x.view(), w.view(), y.view(), {}, o);
  conv2d(p, x.view(), w.view(), y.view(), {}, o);  // a cache hit now: no second log
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "[convkit dispatch]"), 1u) << err;
  EXPECT_NE(err.find("from autotune"), std::string::npos) << err;
  EXPECT_NE(err.find("median of 10"), std::string::npos) << err;
  for (const Algorithm* a : algorithms())
    if (a->device() == Device::cpu) {
      EXPECT_NE(err.find("  " + a->name() + ":"), std::string::npos) << a->name() << "\n" << err;
    }
}

TEST_F(Tune, AutotuneNeverCorruptsAnInPlaceResidual) {
  ::setenv("CONVKIT_TUNE_CACHE", "off", 1);
  const Conv2dProblem p = Conv2dProblem::parse("n1c6h9w8k6r3s3p1g2");
  const ConvConfig cfg{};
  ckt::EpilogueSpec spec;
  spec.bias = spec.residual = spec.residual_aliases_dst = true;
  spec.activation = Activation::relu;
  spec.beta = 2.0f;
  const ckt::Case c = ckt::make_case(p, cfg, spec, 8, ckt::Fill::small_ints);
  const auto ref = ckt::reference(c).memory_order();
  HostTensor y = c.residual;
  Epilogue e;
  e.bias = c.bias.data();
  e.residual = y.bytes.data();
  e.activation = spec.activation;
  e.beta = spec.beta;
  RunOptions o;
  o.algo = "autotune";
  ckt::Case cc = c;
  conv2d(p, cc.src.view(), cc.wei.view(), y.view(), e, o);
  const auto v = ckt::check_output(ckt::cpu_ref(), c, y, ref, 1e-5, true);
  EXPECT_TRUE(v.ok) << "the residual was added exactly once: " << v.message;
  EXPECT_EQ(cc.src.bytes, c.src.bytes) << "the input is untouched";
}

TEST_F(Tune, CacheOffWritesNothingButRemembersForTheProcess) {
  ::setenv("CONVKIT_TUNE_CACHE", "off", 1);
  ::setenv("HOME", dir_.c_str(), 1);
  ::unsetenv("XDG_CACHE_HOME");
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h7w7k4r3s3p1u2");
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  RunOptions o;
  o.algo = "autotune";
  conv2d(p, x.view(), w.view(), y.view(), {}, o);
  EXPECT_TRUE(fs::is_empty(dir_)) << "nothing is written with CONVKIT_TUNE_CACHE=off";
  EXPECT_EQ(select_auto(p, ConvConfig{}).source, "tune cache") << "the in-memory cache still answers";
}

TEST_F(Tune, AnEntryThatNoLongerAppliesFallsBackToTheHeuristic) {
  // An f16 entry naming an algorithm that only does f32: ignored (one warning), the heuristic picks.
  const std::string file = path("cache.txt");
  ::setenv("CONVKIT_TUNE_CACHE", file.c_str(), 1);
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w7k3r3s3");
  const ConvConfig cfg{DType::f16, Layout::nchw, Device::cpu, MathMode::strict};
  const Algorithm* f32_only = nullptr;
  for (const Algorithm* a : algorithms())
    if (a->device() == Device::cpu && !a->can_implement(p, cfg) && a->can_implement(p, ConvConfig{})) f32_only = a;
  if (!f32_only) GTEST_SKIP() << "every CPU algorithm does f16";
  detail::TuneEntry e;
  e.key = detail::make_tune_key(p, cfg);
  e.algorithm = f32_only->name();
  e.ms = 1;
  e.date = "2026-11-29T00:00:00Z";
  {
    std::ofstream f(file);
    f << detail::TuneCache::kHeader << "\n" << detail::format_tune_line(e) << "\n";
  }
  // The plan (pure) notes it; running the plan warns, once.
  testing::internal::CaptureStderr();
  const Plan pl = plan(p, cfg);
  const Selection s1 = select_auto(p, cfg), s2 = select_auto(p, cfg);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "plan() prints nothing";
  EXPECT_EQ(s1.source, "heuristic");
  EXPECT_EQ(s1.algorithm, &select(p, cfg));
  EXPECT_EQ(s2.algorithm, s1.algorithm);
  ASSERT_EQ(pl.notes.size(), 1u);
  EXPECT_NE(pl.notes[0].find(f32_only->name()), std::string::npos) << pl.notes[0];
  HostTensor x(DType::f16, Layout::nchw, input_dims(p)), w(DType::f16, Layout::nchw, weight_dims(p)),
      y(DType::f16, Layout::nchw, output_dims(p));
  testing::internal::CaptureStderr();
  conv2d(p, x.view(), w.view(), y.view());
  conv2d(p, x.view(), w.view(), y.view());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "warning"), 1u) << err;
  EXPECT_NE(err.find(f32_only->name()), std::string::npos) << err;
}

TEST_F(Tune, VariantNeedsANamedAlgorithmThatHasIt) {
  ::setenv("CONVKIT_TUNE_CACHE", "off", 1);
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w6k4r3s3p1");
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  RunOptions o;
  o.variant = "128x128";
  for (const char* algo : {"auto", "autotune"}) {
    o.algo = algo;
    try {
      conv2d(p, x.view(), w.view(), y.view(), {}, o);
      ADD_FAILURE() << algo << " with a variant did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::invalid_problem);
      EXPECT_NE(std::string(e.what()).find("named algorithm"), std::string::npos) << e.what();
    }
  }
  o.algo = "cpu_ref";
  try {
    conv2d(p, x.view(), w.view(), y.view(), {}, o);
    ADD_FAILURE() << "an unknown variant did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_problem);
    EXPECT_NE(std::string(e.what()).find("128x128"), std::string::npos) << e.what();
  }
}

TEST_F(Tune, CandidatesAreCappedAndSkipReferencesWhenFasterExist) {
  for (const char* r : {"cpu_ref", "cuda_ref", "cuda_direct_naive"}) EXPECT_TRUE(detail::is_reference_algorithm(r)) << r;
  for (const char* f : {"cpu_direct", "cpu_im2col_gemm", "cuda_igemm_simt", "refine"})
    EXPECT_FALSE(detail::is_reference_algorithm(f)) << f;
  // f16 on the CPU: cpu_im2col_gemm (widened to f32) and the reference can; the reference is skipped.
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w6k4r3s3p1");
  std::vector<std::string> skipped;
  const auto c16 = detail::tune_candidates(p, ConvConfig{DType::f16, Layout::nchw, Device::cpu, MathMode::strict}, &skipped);
  ASSERT_EQ(c16.size(), 1u);
  EXPECT_EQ(c16[0].algorithm->name(), "cpu_im2col_gemm");
  EXPECT_TRUE(std::any_of(skipped.begin(), skipped.end(),
                          [](const std::string& s) { return s.rfind("cpu_ref: not timed", 0) == 0; }));
  const auto c32 = detail::tune_candidates(p, ConvConfig{}, &skipped);
  EXPECT_LE(c32.size(), size_t(detail::kMaxTuneCandidates));
  for (const auto& k : c32) EXPECT_FALSE(k.algorithm->is_peer());
}

TEST_F(Tune, CudaAutotuneMatchesTheReference) {
  if (!cuda_device_available()) {
    if (ckt::require_gpu()) FAIL() << "no CUDA device, but CONVKIT_REQUIRE_GPU=1";
    GTEST_SKIP() << "no CUDA device on this machine (or a build without CUDA)";
  }
  ::setenv("CONVKIT_TUNE_CACHE", path("cache.txt").c_str(), 1);
  // Strict f32 NCHW (small integers: every candidate is exact), and f16 NHWC (the tensor-core variants).
  struct Cfg {
    ConvConfig cfg;
    double bound;
    bool exact;
  };
  const Cfg cfgs[] = {{ConvConfig{DType::f32, Layout::nchw, Device::cuda, MathMode::strict}, 1e-5, true},
                      {ConvConfig{DType::f16, Layout::nhwc, Device::cuda, MathMode::strict}, 1e-2, false}};
  const Conv2dProblem p = Conv2dProblem::parse("n2c32h14w14k64r3s3p1");
  for (const Cfg& k : cfgs) {
    ckt::EpilogueSpec spec;
    spec.bias = spec.residual = spec.residual_aliases_dst = true;
    const ckt::Case c = ckt::make_case(p, k.cfg, spec, 77, k.exact ? ckt::Fill::small_ints : ckt::Fill::gaussian);
    const auto ref = ckt::reference(c).memory_order();
    Buffer x(Device::cuda, c.src.bytes.size()), w(Device::cuda, c.wei.bytes.size()), b(Device::cuda, c.bias.size()),
        y(Device::cuda, c.residual.bytes.size());
    x.copy_from_host(c.src.bytes.data(), x.bytes());
    w.copy_from_host(c.wei.bytes.data(), w.bytes());
    b.copy_from_host(c.bias.data(), b.bytes());
    y.copy_from_host(c.residual.bytes.data(), y.bytes());  // the in-place residual
    Epilogue e;
    e.bias = b.data();
    e.residual = y.data();
    RunOptions o;
    o.algo = "autotune";
    const TensorView xv{x.data(), k.cfg.dtype, k.cfg.layout, Device::cuda, input_dims(p)},
        wv{w.data(), k.cfg.dtype, k.cfg.layout, Device::cuda, weight_dims(p)},
        yv{y.data(), k.cfg.dtype, k.cfg.layout, Device::cuda, output_dims(p)};
    conv2d(p, xv, wv, yv, e, o);
    device_synchronize(Device::cuda);
    HostTensor out(k.cfg.dtype, k.cfg.layout, output_dims(p));
    y.copy_to_host(out.bytes.data(), out.bytes.size());
    const Selection s = select_auto(p, k.cfg);
    ASSERT_NE(s.algorithm, nullptr);
    EXPECT_EQ(s.source, "tune cache") << k.cfg.to_string();
    const auto v = ckt::check_output(*s.algorithm, c, out, ref, k.bound, k.exact);
    EXPECT_TRUE(v.ok) << "autotune picked " << s.algorithm->name() << "[" << s.variant << "]: " << v.message;
    std::printf("  %s: autotune picked %s [%s]\n", k.cfg.to_string().c_str(), s.algorithm->name().c_str(),
                s.variant.c_str());
  }
}
