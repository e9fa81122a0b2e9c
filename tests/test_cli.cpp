// The convkit CLI, run as a separate process in a temporary folder: --help and bad flags of every
// subcommand, `convkit run` end to end on .npy files written here (compared with cpu_ref), its error paths
// (exit 2, one line on stderr, no output file left behind), `list`, `doctor`, and `bench --json/--csv`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "convkit/system.hpp"
#include "core/tune.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace convkit;
using ckt::HostTensor;
using ckt::slurp;

#ifndef CONVKIT_CLI_PATH
TEST(Cli, NotBuilt) { GTEST_SKIP() << "the CLI is not built (CONVKIT_BUILD_TOOLS=OFF)"; }
#else

namespace {

struct Result {
  int code = -1;
  std::string out, err;
  // The non-empty lines of stderr.
  std::vector<std::string> err_lines() const {
    std::vector<std::string> v;
    std::istringstream in(err);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) v.push_back(l);
    return v;
  }
};

// A temporary folder: `work` holds the files the CLI sees, the captured stdout/stderr live beside it.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "convkit_cli_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    work_ = root_ / "work";
    fs::create_directories(work_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string path(const std::string& name) const { return (work_ / name).string(); }

  // Runs `convkit <args>` in the work folder (CONVKIT_LOG unset so stderr holds only what the CLI says).
  Result cli(const std::string& args, const std::string& env = "") const {
    const std::string cmd = "cd '" + work_.string() + "' && env -u CONVKIT_LOG " + env + " '" CONVKIT_CLI_PATH "' " + args +
                            " >'" + (root_ / "stdout").string() + "' 2>'" + (root_ / "stderr").string() + "'";
    const int st = std::system(cmd.c_str());
    Result r;
    r.code = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = slurp(root_ / "stdout");
    r.err = slurp(root_ / "stderr");
    return r;
  }

  std::set<std::string> files() const {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(work_)) s.insert(e.path().filename().string());
    return s;
  }

  // A user error: exit 2, exactly one line on stderr, and no file created in the work folder.
  void expect_user_error(const std::string& args, const std::string& says = "") const {
    const auto before = files();
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2) << "convkit " << args << "\nstderr: " << r.err;
    const auto lines = r.err_lines();
    EXPECT_EQ(lines.size(), 1u) << "convkit " << args << ": want one line on stderr, got:\n" << r.err;
    if (!says.empty()) {
      EXPECT_NE(r.err.find(says), std::string::npos) << "convkit " << args << ": " << r.err;
    }
    const auto after = files();
    for (const auto& f : after)
      EXPECT_TRUE(before.count(f)) << "convkit " << args << " left '" << f << "' behind after failing";
  }

  fs::path root_, work_;
};

// Host data for `convkit run`, written as .npy files, plus the same data as a test case for cpu_ref.
struct RunFiles {
  ckt::Case c;
  std::string args;  // --input ... --weight ... [--bias ...] [--residual ...]
};

RunFiles write_run_files(const std::function<std::string(const std::string&)>& path, const Conv2dProblem& p,
                         bool bias, bool residual, Activation act, uint32_t seed) {
  ckt::EpilogueSpec e;
  e.bias = bias;
  e.residual = residual;
  e.activation = act;
  RunFiles f;
  f.c = ckt::make_case(p, ConvConfig{}, e, seed, ckt::Fill::gaussian);
  auto to_f = [](const HostTensor& h) {
    std::vector<float> v(size_t(h.numel()));
    std::memcpy(v.data(), h.bytes.data(), v.size() * 4);
    return v;
  };
  auto shape = [](const std::array<int64_t, 4>& d) { return std::vector<int64_t>{d[0], d[1], d[2], d[3]}; };
  ckt::write_npy_f32(path("x.npy"), shape(input_dims(p)), to_f(f.c.src));
  ckt::write_npy_f32(path("w.npy"), shape(weight_dims(p)), to_f(f.c.wei));
  f.args = "--input x.npy --weight w.npy";
  if (bias) {
    std::vector<float> b(size_t(p.k));
    std::memcpy(b.data(), f.c.bias.data(), b.size() * 4);
    ckt::write_npy_f32(path("b.npy"), {p.k}, b);
    f.args += " --bias b.npy";
  }
  if (residual) {
    ckt::write_npy_f32(path("r.npy"), shape(output_dims(p)), to_f(f.c.residual));
    f.args += " --residual r.npy";
  }
  return f;
}

std::string pair_flag(int64_t a, int64_t b) { return a == b ? std::to_string(a) : std::to_string(a) + "," + std::to_string(b); }

}  // namespace

TEST_F(Cli, HelpOfEverySubcommandExitsZero) {
  for (const char* args : {"--help", "run --help", "bench --help", "tune --help", "list --help", "filter --help",
                           "doctor --help", "plan --help"}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 0) << "convkit " << args << "\n" << r.err;
    EXPECT_FALSE(r.out.empty()) << "convkit " << args << " printed no help";
  }
  const Result r = cli("run --help");
  for (const char* flag : {"--input", "--weight", "--bias", "--residual", "--stride", "--padding", "--dilation",
                           "--groups", "--activation", "--algo", "--device", "--output"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << "`convkit run --help` does not mention " << flag;
  const Result b = cli("bench --help");
  for (const char* flag : {"--problem", "--suite", "--algo", "--device", "--dtype", "--layout", "--csv", "--json", "--runs"})
    EXPECT_NE(b.out.find(flag), std::string::npos) << "`convkit bench --help` does not mention " << flag;
}

// `convkit plan` names what conv2d("auto") runs (the same answer as select_auto) and every algorithm's reason.
TEST_F(Cli, PlanNamesTheChoiceAndEveryRejection) {
  for (const char* spec : {"n1c32h56w56k32r3s3p1g32", "n2c3h9w9k4r3s3p1", "n1c8h7w7k16r1s1"}) {
    const Result r = cli(std::string("plan --device cpu --problem ") + spec);
    ASSERT_EQ(r.code, 0) << spec << r.err;
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const Selection s = select_auto(p, ConvConfig{DType::f32, Layout::nchw, Device::cpu, MathMode::strict});
    EXPECT_NE(r.out.find("algorithm " + s.algorithm->name() + "\n"), std::string::npos) << r.out;
    const size_t mark = r.out.find("  <- chosen");
    ASSERT_NE(mark, std::string::npos) << r.out;
    const size_t bol = r.out.rfind('\n', mark) + 1;
    EXPECT_EQ(r.out.compare(bol, s.algorithm->name().size() + 3, "  " + s.algorithm->name() + " "), 0) << r.out;
    for (const Algorithm* a : algorithms()) {
      if (a->device() == Device::cpu) {
        EXPECT_NE(r.out.find("  " + a->name() + " "), std::string::npos) << a->name();
      }
    }
  }
  const Result no = cli("plan --device cpu --problem n1c32h56w56k64r3s3p1 --algo cpu_depthwise");
  EXPECT_EQ(no.code, 2) << no.out;
  EXPECT_NE(no.out.find("cannot: depthwise with channel multiplier 1 only"), std::string::npos) << no.out;
  expect_user_error("plan --device cpu --problem n1c3", "n1c3");
  expect_user_error("plan --device cpu --problem n1c3h5w5k2r3s3p1 --algo nope", "nope");
}

TEST_F(Cli, BadFlagsExitTwoWithOneLine) {
  for (const char* args : {"run --bogus", "bench --bogus", "list --bogus", "doctor --bogus", "filter --bogus",
                           "frobnicate", "", "run --input x.npy", "bench --runs abc"})
    expect_user_error(args);
}

TEST_F(Cli, ListAndDoctorExitZero) {
  const Result l = cli("list");
  EXPECT_EQ(l.code, 0) << l.err;
  for (const Algorithm* a : ckt::algorithms_and_peers())
    EXPECT_NE(l.out.find(a->name()), std::string::npos) << "`convkit list` does not show " << a->name();
  const Result d = cli("doctor");
  EXPECT_EQ(d.code, 0) << d.err;
  EXPECT_FALSE(d.out.empty());
  EXPECT_NE(d.out.find(version()), std::string::npos) << "doctor should print the version:\n" << d.out;
  if (!system_info().openblas.empty()) {  // the kernels OpenBLAS chose, and the variable that chose them
    EXPECT_NE(d.out.find("OpenBLAS kernels: " + system_info().openblas_core), std::string::npos) << d.out;
    if (const char* env = std::getenv("OPENBLAS_CORETYPE")) {
      EXPECT_NE(d.out.find(std::string("(OPENBLAS_CORETYPE=") + env + ")"), std::string::npos) << d.out;
    }
  }
}

// ---- convkit run end to end ---------------------------------------------------------------------

TEST_F(Cli, RunMatchesTheReference) {
  struct Variant {
    const char* spec;
    bool bias, residual;
    Activation act;
    const char* algo;  // nullptr: leave the default (auto)
    const char* device;
  };
  std::vector<Variant> variants = {
      {"n1c3h9w9k4r3s3", false, false, Activation::none, nullptr, nullptr},
      {"n2c4h11w10k6r3s5ph1pw2uh2uw1dh1dw2g2", true, true, Activation::relu, "cpu_ref", "cpu"},
      {"n1c4h8w8k4r3s3p3", true, false, Activation::gelu, "auto", "cpu"},
      {"n2c6h7w7k6r3s3p1g6", false, true, Activation::silu, nullptr, "cpu"},
      {"n1c2h6w6k3r1s1u2", true, false, Activation::none, nullptr, nullptr},
  };
  if (cuda_device_available()) {
    variants.push_back({"n2c4h11w10k6r3s3p1", true, true, Activation::relu, nullptr, "cuda"});
    variants.push_back({"n1c3h9w9k4r3s3p1u2", false, false, Activation::none, "auto", "cuda"});
  }
  uint32_t seed = 11;
  for (const auto& v : variants) {
    const Conv2dProblem p = Conv2dProblem::parse(v.spec);
    const RunFiles f = write_run_files([&](const std::string& n) { return path(n); }, p, v.bias, v.residual,
                                       v.act, seed++);
    std::string args = "run " + f.args + " --output y.npy";
    args += " --stride " + pair_flag(p.stride_h, p.stride_w) + " --padding " + pair_flag(p.pad_h, p.pad_w) +
            " --dilation " + pair_flag(p.dilation_h, p.dilation_w) + " --groups " + std::to_string(p.groups);
    if (v.act != Activation::none) args += std::string(" --activation ") + to_string(v.act);
    if (v.algo) args += std::string(" --algo ") + v.algo;
    if (v.device) args += std::string(" --device ") + v.device;
    const Result r = cli(args);
    ASSERT_EQ(r.code, 0) << "convkit " << args << "\n" << r.err;
    std::vector<int64_t> shape;
    std::vector<float> y;
    std::string err;
    ASSERT_TRUE(ckt::read_npy_f32(path("y.npy"), &shape, &y, &err)) << err;
    EXPECT_EQ(shape, (std::vector<int64_t>{p.n, p.k, p.p(), p.q()})) << v.spec;
    const std::vector<double> ref = ckt::reference(f.c).memory_order();
    ASSERT_EQ(y.size(), ref.size());
    HostTensor out(DType::f32, Layout::nchw, output_dims(p));
    std::memcpy(out.bytes.data(), y.data(), y.size() * 4);
    const bool exact = v.algo && std::string(v.algo) == "cpu_ref";
    const auto verdict = ckt::check_output(ckt::cpu_ref(), f.c, out, ref, 1e-5, exact);
    EXPECT_TRUE(verdict.ok) << "convkit " << args << ": " << verdict.message;
    fs::remove(path("y.npy"));
  }
}

// The planner picks the layout for `convkit run` too: NCHW files in bf16 on a GPU run a tensor-core kernel
// (through layout transforms), not the reference, and match the reference within bf16's bound.
TEST_F(Cli, RunBf16OnCudaTakesATensorCoreKernel) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Conv2dProblem p = Conv2dProblem::parse("n2c16h12w12k32r3s3p1");
  const RunFiles f = write_run_files([&](const std::string& n) { return path(n); }, p, true, true,
                                     Activation::relu, 23);
  const std::string args = "run " + f.args + " --output y.npy --padding 1 --activation relu --dtype bf16 --device cuda";
  const Result r = cli(args, "CONVKIT_LOG=dispatch");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("bf16/nhwc/cuda -> cuda_igemm_"), std::string::npos) << r.err;
  std::vector<int64_t> shape;
  std::vector<float> y;
  std::string err;
  ASSERT_TRUE(ckt::read_npy_f32(path("y.npy"), &shape, &y, &err)) << err;
  const std::vector<double> ref = ckt::reference(f.c).memory_order();
  ASSERT_EQ(y.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) num += (y[i] - ref[i]) * (y[i] - ref[i]), den += ref[i] * ref[i];
  EXPECT_LT(std::sqrt(num / den), 1e-2) << "rel L2 against the fp32 reference";
}

// ---- convkit run error paths --------------------------------------------------------------------

TEST_F(Cli, RunErrorsExitTwoAndLeaveNoOutput) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c2h5w5k3r3s3p1");
  write_run_files([&](const std::string& n) { return path(n); }, p, true, true, Activation::none, 5);
  const std::string ok = " --output y.npy";
  // Sanity: the good files work.
  ASSERT_EQ(cli("run --input x.npy --weight w.npy --bias b.npy --residual r.npy --padding 1" + ok).code, 0);
  fs::remove(path("y.npy"));

  std::vector<float> data(50, 1.0f);
  {  // not a .npy file
    std::ofstream(path("text.npy")) << "hello, this is not numpy\n";
  }
  ckt::write_npy_raw(path("trunc.npy"), "<f4", {1, 2, 5, 5}, data.data(), 10 * 4);
  std::vector<double> d8(50, 1.0);
  ckt::write_npy_raw(path("f8.npy"), "<f8", {1, 2, 5, 5}, d8.data(), 50 * 8);
  std::vector<int32_t> i4(50, 1);
  ckt::write_npy_raw(path("i4.npy"), "<i4", {1, 2, 5, 5}, i4.data(), 50 * 4);
  ckt::write_npy_raw(path("fortran.npy"), "<f4", {1, 2, 5, 5}, data.data(), 50 * 4, true);
  ckt::write_npy_f32(path("ndim3.npy"), {2, 5, 5}, data);
  ckt::write_npy_f32(path("c3.npy"), {1, 3, 5, 5}, std::vector<float>(75, 1.0f));
  ckt::write_npy_f32(path("bias_wrong.npy"), {4}, std::vector<float>(4, 1.0f));
  ckt::write_npy_f32(path("res_wrong.npy"), {1, 3, 4, 4}, std::vector<float>(48, 1.0f));
  {  // the header says more bytes than there are in the file header itself
    std::ofstream f(path("badheader.npy"), std::ios::binary);
    f.write("\x93NUMPY\x01\x00\xff\x00{'descr'", 18);
  }

  const std::string w = " --weight w.npy", x = " --input x.npy";
  expect_user_error("run --input missing.npy" + w + ok, "missing.npy");
  expect_user_error("run --input text.npy" + w + ok, "text.npy");
  expect_user_error("run --input trunc.npy" + w + ok, "trunc.npy");
  expect_user_error("run --input f8.npy" + w + ok, "f8.npy");
  expect_user_error("run --input i4.npy" + w + ok, "i4.npy");
  expect_user_error("run --input fortran.npy" + w + ok, "fortran.npy");
  expect_user_error("run --input badheader.npy" + w + ok, "badheader.npy");
  expect_user_error("run --input ndim3.npy" + w + ok, "ndim3.npy");
  expect_user_error("run --input c3.npy" + w + ok);                  // C=3 vs a weight made for C=2
  expect_user_error("run" + x + " --weight f8.npy" + ok, "f8.npy");
  expect_user_error("run" + x + w + " --bias bias_wrong.npy" + ok, "bias_wrong.npy");
  expect_user_error("run" + x + w + " --residual res_wrong.npy --padding 1" + ok, "res_wrong.npy");
  for (const char* s : {"2,x", "0", "1,2,3", "-1", ",2", "abc", ""})
    expect_user_error("run" + x + w + " --stride '" + s + "'" + ok, "--stride");
  expect_user_error("run" + x + w + " --padding -1" + ok);
  expect_user_error("run" + x + w + " --dilation 0" + ok);
  expect_user_error("run" + x + w + " --groups 0" + ok);
  expect_user_error("run" + x + w + " --groups 3" + ok);  // C=2 not divisible by 3
  expect_user_error("run" + x + w + " --activation tanh" + ok, "tanh");
  expect_user_error("run" + x + w + " --algo no_such_algorithm" + ok, "no_such_algorithm");
  expect_user_error("run" + x + w + " --stride 1 --padding 0 --dilation 3" + ok);  // dilated filter 7 > 5
  expect_user_error("run" + x + w + " --device tpu" + ok, "tpu");
  expect_user_error("run" + x + w + " --output nodir/sub/y.npy");
  if (!cuda_device_available()) expect_user_error("run" + x + w + " --device cuda" + ok);

  // An algorithm that cannot do this problem: the first (available, rejecting) one, else an unavailable one.
  std::string rejecting, why;
  for (const Algorithm* a : ckt::algorithms_and_peers()) {
    if (a->device() != Device::cpu) continue;
    const Support av = a->available();
    const Support s = av ? a->can_implement(p, ConvConfig{}) : av;
    if (!s && (rejecting.empty() || av)) {
      rejecting = a->name();
      why = s.reason;
      if (av) break;
    }
  }
  if (!rejecting.empty()) expect_user_error("run" + x + w + " --algo " + rejecting + ok, rejecting);
  else std::printf("  every CPU algorithm can do %s: the 'algorithm cannot' path is untested here\n", p.to_string().c_str());
  // A CUDA algorithm asked to run on host tensors.
  for (const Algorithm* a : algorithms())
    if (a->device() == Device::cuda) {
      expect_user_error("run" + x + w + " --device cpu --algo " + a->name() + ok, a->name());
      break;
    }
}

TEST_F(Cli, RunDoesNotClobberAnExistingOutputOnFailure) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c2h5w5k3r3s3");
  write_run_files([&](const std::string& n) { return path(n); }, p, false, false, Activation::none, 6);
  { std::ofstream(path("y.npy")) << "previous contents"; }
  const Result r = cli("run --input x.npy --weight w.npy --stride 2,x --output y.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(slurp(path("y.npy")), "previous contents") << "a failed run must not touch an existing output";
}

// ---- convkit bench ------------------------------------------------------------------------------

TEST_F(Cli, BenchWritesValidJsonAndCsv) {
  const Result r = cli("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --json out.json --csv out.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(slurp(path("out.json")));
  } catch (const std::exception& e) {
    FAIL() << "out.json is not valid JSON: " << e.what() << "\n" << slurp(path("out.json"));
  }
  ASSERT_TRUE(j.contains("rows") && j["rows"].is_array()) << j.dump(2);
  bool found = false;
  for (const auto& row : j["rows"]) {
    if (row.value("algorithm", "") != "cpu_ref") continue;
    found = true;
    EXPECT_EQ(row.value("status", ""), "ok") << row.dump(2);
    EXPECT_EQ(row.value("spec", ""), "n1c3h9w9k4r3s3p1u1d1g1") << row.dump(2);
    EXPECT_TRUE(row.contains("median_ms") && row["median_ms"].is_number()) << row.dump(2);
  }
  EXPECT_TRUE(found) << "no cpu_ref row in the JSON:\n" << j.dump(2);
  const std::string csv = slurp(path("out.csv"));
  std::istringstream in(csv);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  ASSERT_GE(lines.size(), 2u) << "CSV wants a header and a row:\n" << csv;
  EXPECT_NE(lines[0].find("algorithm"), std::string::npos) << lines[0];
  EXPECT_NE(csv.find("cpu_ref"), std::string::npos) << csv;
}

TEST_F(Cli, BenchLeavesNoPartialFilesAndErrorRowsExitFour) {
  // An unwritable --json folder is refused before the run, and no file is created.
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --json no_such_dir/out.json",
                    "no_such_dir");
  EXPECT_FALSE(fs::exists(path("no_such_dir")));
  // A successful run leaves the files and no temporary ones beside them.
  Result r = cli("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --json out.json --csv out.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& e : fs::directory_iterator(path(".")))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  // A problem whose host buffers cannot be allocated (a 64 TiB input) is an error row: exit 4, the files still
  // written.
  // (ASan's allocator would abort on the size instead of failing the allocation.)
  r = cli("bench --problem n1c1048576h1048576w16k1r1s1 --algo cpu_ref --device cpu --no-verify --json big.json",
          "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0");
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(path("big.json")));
}

// docs/errors.md's CLI table, row by row: the fixtures it names, each command's exit code, its message, and
// no output file left behind (an exit-4 bench still writes its complete --json).
TEST_F(Cli, EveryRowOfTheBadInputTableHolds) {
  std::vector<float> x(50, 1.0f), w(54, 1.0f);
  ckt::write_npy_f32(path("x.npy"), {1, 2, 5, 5}, x);
  ckt::write_npy_f32(path("w.npy"), {3, 2, 3, 3}, w);
  std::vector<double> d8(50, 1.0);
  ckt::write_npy_raw(path("f8.npy"), "<f8", {1, 2, 5, 5}, d8.data(), 50 * 8);
  std::vector<int32_t> i4(50, 1);
  ckt::write_npy_raw(path("i4.npy"), "<i4", {1, 2, 5, 5}, i4.data(), 50 * 4);
  ckt::write_npy_raw(path("fortran.npy"), "<f4", {1, 2, 5, 5}, x.data(), 50 * 4, true);
  ckt::write_npy_raw(path("trunc.npy"), "<f4", {1, 2, 5, 5}, x.data(), 10 * 4);
  ckt::write_npy_f32(path("nd3.npy"), {2, 5, 5}, x);
  ckt::write_npy_f32(path("bias_wrong.npy"), {4}, std::vector<float>(4, 1.0f));
  std::ofstream(path("text.npy")) << "hello, this is not numpy\n";
  std::ofstream(path("cache.txt")) << "convkit-tune-cache v9\nfoo\n";

  std::ifstream doc(std::string(CONVKIT_SOURCE_DIR) + "/docs/errors.md");
  ASSERT_TRUE(doc) << "docs/errors.md";
  auto between = [](const std::string& s, size_t from, size_t* end) {
    const size_t a = s.find("`` ", from);
    if (a == std::string::npos) return std::string();
    const size_t b = s.find(" ``", a + 3);
    *end = b + 3;
    return s.substr(a + 3, b - a - 3);
  };
  bool in_cli = false;
  int rows = 0;
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("## ", 0) == 0) in_cli = line == "## The CLI";
    if (!in_cli || line.rfind("| ", 0) != 0 || line.find("`` convkit ") == std::string::npos) continue;
    size_t end = 0;
    const std::string cmd = between(line, 0, &end);
    const size_t bar = line.find('|', end), bar2 = line.find('|', bar + 1);
    const int want_code = std::stoi(line.substr(bar + 1, bar2 - bar - 1));
    const std::string msg = between(line, bar2, &end);
    ASSERT_EQ(cmd.rfind("convkit ", 0), 0u) << line;
    for (const char* f : {"y.npy", "o.json"}) fs::remove(path(f));
    const Result r = cli(cmd.substr(8), "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0");
    ++rows;
    // A build without stb (libstb-dev is a Debian package; the GPU machine has none) has no `convkit filter`.
    if (cmd.rfind("convkit filter", 0) == 0 && r.err.find("built without stb") != std::string::npos) {
      std::printf("  (row not checked: this convkit has no image reader) %s\n", cmd.c_str());
      continue;
    }
    EXPECT_EQ(r.code, want_code) << cmd << "\n" << r.out << r.err;
    const std::string& said = want_code == 4 ? r.out : r.err;
    EXPECT_NE(said.find(msg), std::string::npos) << cmd << "\nwant: " << msg << "\ngot: " << said;
    EXPECT_FALSE(fs::exists(path("y.npy"))) << cmd;
    if (want_code == 2) {
      EXPECT_FALSE(fs::exists(path("o.json"))) << cmd;
    }
  }
  EXPECT_GE(rows, 20) << "the table in docs/errors.md was not found";
}

TEST_F(Cli, BenchErrorsExitTwo) {
  expect_user_error("bench --problem n1c3 --algo cpu_ref --device cpu", "n1c3");
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo no_such_algorithm --device cpu", "no_such_algorithm");
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --layout nchw8c", "nchw8c");
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --dtype f64", "f64");
  expect_user_error("bench --suite no_such_suite --algo cpu_ref --device cpu", "no_such_suite");
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --dtype tf32 --math strict", "tf32");
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --dtype f16 --math tf32", "tf32");
  expect_user_error("bench --problem n1c3h9w9k4r3s3p1 --algo cpu_ref --device cpu --math fast", "fast");
}

// ---- float16 / bfloat16 .npy files --------------------------------------------------------------

namespace {

// Reads any little-endian .npy file written by convkit: its descr, shape and raw data.
bool read_npy_raw(const std::string& path, std::string* descr, std::vector<int64_t>* shape,
                  std::vector<unsigned char>* data, std::string* err) {
  const std::string all = slurp(path);
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) return *err = "no .npy magic in " + path, false;
  const size_t hlen = static_cast<unsigned char>(all[8]) | (size_t(static_cast<unsigned char>(all[9])) << 8);
  if (all.size() < 10 + hlen) return *err = "truncated header", false;
  const std::string h = all.substr(10, hlen);
  const size_t d = h.find("'descr': '");
  if (d == std::string::npos) return *err = "no descr: " + h, false;
  *descr = h.substr(d + 10, 3);
  const size_t open = h.find('(', h.find("'shape':")), close = h.find(')', open);
  if (open == std::string::npos || close == std::string::npos) return *err = "no shape: " + h, false;
  shape->clear();
  for (const auto& tok : ckt::split_list(h.substr(open + 1, close - open - 1))) shape->push_back(std::stoll(tok));
  data->assign(all.begin() + std::ptrdiff_t(10 + hlen), all.end());
  return true;
}

std::vector<int64_t> dims_of(const std::array<int64_t, 4>& d) { return {d[0], d[1], d[2], d[3]}; }

}  // namespace

TEST_F(Cli, RunFloat16FilesRoundTrip) {
  // f16 files in, f16 tensors, an f16 file out: bit-equal to cpu_ref (named: auto would take cpu_im2col_gemm,
  // whose float32 sums round differently).
  const Conv2dProblem p = Conv2dProblem::parse("n2c3h7w6k4r3s3p1");
  const ConvConfig cfg{DType::f16, Layout::nchw, Device::cpu, MathMode::strict};
  ckt::EpilogueSpec e;
  e.bias = e.residual = true;
  e.activation = Activation::relu;
  const ckt::Case c = ckt::make_case(p, cfg, e, 31, ckt::Fill::gaussian);
  ckt::write_npy_raw(path("x.npy"), "<f2", dims_of(input_dims(p)), c.src.bytes.data(), c.src.bytes.size());
  ckt::write_npy_raw(path("w.npy"), "<f2", dims_of(weight_dims(p)), c.wei.bytes.data(), c.wei.bytes.size());
  ckt::write_npy_raw(path("b.npy"), "<f2", {p.k}, c.bias.data(), c.bias.size());
  ckt::write_npy_raw(path("r.npy"), "<f2", dims_of(output_dims(p)), c.residual.bytes.data(), c.residual.bytes.size());
  const std::string args = "run --input x.npy --weight w.npy --bias b.npy --residual r.npy --padding 1 --activation "
                           "relu --device cpu --algo cpu_ref --output y.npy";
  const Result r = cli(args);
  ASSERT_EQ(r.code, 0) << "convkit " << args << "\n" << r.err;
  std::string descr, err;
  std::vector<int64_t> shape;
  std::vector<unsigned char> y;
  ASSERT_TRUE(read_npy_raw(path("y.npy"), &descr, &shape, &y, &err)) << err;
  EXPECT_EQ(descr, "<f2") << "an f16 run writes float16";
  EXPECT_EQ(shape, dims_of(output_dims(p)));
  EXPECT_EQ(y, ckt::reference(c).bytes) << "bit-equal to cpu_ref in f16";
  // --dtype f32 on the same f16 files widens them (exactly) and writes float32.
  fs::remove(path("y.npy"));
  ASSERT_EQ(cli(args + " --dtype f32").code, 0);
  ASSERT_TRUE(read_npy_raw(path("y.npy"), &descr, &shape, &y, &err)) << err;
  EXPECT_EQ(descr, "<f4");
  EXPECT_EQ(y.size(), size_t(p.output_elems()) * 4);
}

TEST_F(Cli, RunBf16ConvertsFloat32Files) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w6k3r3s3");
  const RunFiles f = write_run_files([&](const std::string& n) { return path(n); }, p, true, false, Activation::none, 9);
  const Result r = cli("run " + f.args + " --dtype bf16 --device cpu --output y.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  // The same conversion done here: bf16 of every float32 value, then cpu_ref in bf16, widened to float32.
  const ConvConfig cfg{DType::bf16, Layout::nchw, Device::cpu, MathMode::strict};
  ckt::Case c = ckt::make_case(p, cfg, f.c.epi, 9, ckt::Fill::gaussian);
  c.src.fill_logical(f.c.src.logical());
  c.wei.fill_logical(f.c.wei.logical());
  for (int64_t k = 0; k < p.k; ++k)
    detail::store_from_double(c.bias.data(), DType::bf16, k, detail::load_as_double(f.c.bias.data(), DType::f32, k));
  const HostTensor want = ckt::reference(c);
  std::vector<int64_t> shape;
  std::vector<float> y;
  std::string err;
  ASSERT_TRUE(ckt::read_npy_f32(path("y.npy"), &shape, &y, &err)) << "bf16 results are written as float32: " << err;
  ASSERT_EQ(y.size(), size_t(want.numel()));
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(double(y[i]), detail::load_as_double(want.bytes.data(), DType::bf16, int64_t(i))) << "element " << i;
}

TEST_F(Cli, RunFloat16ErrorsExitTwo) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c2h5w5k3r3s3p1");
  write_run_files([&](const std::string& n) { return path(n); }, p, false, false, Activation::none, 4);
  std::vector<uint16_t> h(50, 0x3c00);  // 1.0 in f16
  {  // a header dict cut short
    std::ofstream f(path("badheader.npy"), std::ios::binary);
    std::string head = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2";
    head += std::string(128 - 10 - head.size() - 1, ' ') + "\n";
    f.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {char(head.size()), 0};
    f.write(len, 2);
    f.write(head.data(), std::streamsize(head.size()));
    f.write(reinterpret_cast<const char*>(h.data()), 100);
  }
  ckt::write_npy_raw(path("trunc16.npy"), "<f2", {1, 2, 5, 5}, h.data(), 60);
  ckt::write_npy_raw(path("big16.npy"), ">f2", {1, 2, 5, 5}, h.data(), 100);
  const std::string w = " --weight w.npy", ok = " --output y.npy";
  expect_user_error("run --input badheader.npy" + w + ok, "badheader.npy");
  expect_user_error("run --input trunc16.npy" + w + ok, "trunc16.npy");
  expect_user_error("run --input big16.npy" + w + ok, "big16.npy");
  // The message for an unsupported dtype says what is read and how to get bf16.
  std::vector<int32_t> i4(50, 1);
  ckt::write_npy_raw(path("i4.npy"), "<i4", {1, 2, 5, 5}, i4.data(), 200);
  const Result r = cli("run --input i4.npy" + w + ok);
  EXPECT_EQ(r.code, 2);
  for (const char* says : {"'<f2'", "'<f4'", "--dtype bf16"}) EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  expect_user_error("run --input x.npy" + w + " --dtype f64" + ok, "f64");
  expect_user_error("run --input x.npy" + w + " --dtype tf32 --device cpu" + ok, "tf32");  // no CPU tf32 algorithm
  expect_user_error("run --input x.npy" + w + " --variant v1" + ok, "--variant");
}

// ---- convkit tune -------------------------------------------------------------------------------

TEST_F(Cli, TuneWritesTheCacheAndPrintsTheTable) {
  const Result r = cli("tune --problem n1c4h9w9k4r3s3p1 --problem n1c3h8w8k2r1 --device cpu --cache c.txt");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* col : {"problem", "winner", "variant", "runner-up", "candidates"})
    EXPECT_NE(r.out.find(col), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("n1c4h9w9k4r3s3p1 "), std::string::npos) << r.out;
  const std::string cache = slurp(path("c.txt"));
  EXPECT_EQ(cache.rfind("convkit-tune-cache v1\n", 0), 0u) << cache;
  EXPECT_NE(cache.find("n1c4h9w9k4r3s3p1u1d1g1\tf32\tnchw\tstrict\tcpu\t"), std::string::npos) << cache;
  EXPECT_NE(cache.find("n1c3h8w8k2r1s1p0u1d1g1\tf32"), std::string::npos) << cache;
  // The winner printed is the one saved.
  detail::TuneCache c(path("c.txt"));
  const auto e = c.lookup(detail::make_tune_key(Conv2dProblem::parse("n1c4h9w9k4r3s3p1"), ConvConfig{}));
  ASSERT_TRUE(e.has_value()) << cache;
  EXPECT_NE(r.out.find(e->algorithm), std::string::npos);
  // A second run merges: both entries and a new f16 one.
  ASSERT_EQ(cli("tune --problem n1c4h9w9k4r3s3p1 --dtype f16 --device cpu --cache c.txt").code, 0);
  detail::TuneCache c2(path("c.txt"));
  EXPECT_EQ(c2.entries().size(), 3u) << slurp(path("c.txt"));
}

TEST_F(Cli, TuneErrorsExitTwo) {
  expect_user_error("tune --device cpu --cache c.txt", "--suite");
  expect_user_error("tune --problem n1c3 --device cpu --cache c.txt", "n1c3");
  expect_user_error("tune --problem n1c3h9w9k4r3 --device cpu --dtype f64 --cache c.txt", "f64");
  expect_user_error("tune --problem n1c3h9w9k4r3 --device cpu --layout nc --cache c.txt", "nc");
  expect_user_error("tune --suite no_such_suite --device cpu --cache c.txt", "no_such_suite");
  // tf32 on the CPU: nothing can run it, nothing is saved.
  expect_user_error("tune --problem n1c3h9w9k4r3 --device cpu --dtype tf32 --cache c.txt", "tuned");
  // A cache that cannot be written: the library's warning, then the error (exit 2).
  fs::create_directories(path("adir"));
  const Result r = cli("tune --problem n1c3h9w9k4r3 --device cpu --cache adir");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("could not be written"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("warning: tune cache adir"), std::string::npos) << r.err;
}

#endif  // CONVKIT_CLI_PATH
