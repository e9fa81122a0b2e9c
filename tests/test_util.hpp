// Shared helpers for the convkit tests: seeded fills, host tensors for a problem, running one algorithm
// through ConvCall (device buffers, poisoned output, workspace), the cpu_ref oracle, an independent
// double-precision loop, comparisons that print everything needed to reproduce a failure, and a minimal
// .npy reader/writer for the CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/element.hpp"
#include "convkit/convkit.hpp"
#include "core/compare.hpp"

namespace ckt {

using namespace convkit;

// ---- environment --------------------------------------------------------------------------------

inline std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

inline bool require_gpu() { return env_str("CONVKIT_REQUIRE_GPU") == "1"; }

inline std::vector<std::string> split_list(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) {
    cur.erase(0, cur.find_first_not_of(" \t"));
    cur.erase(cur.find_last_not_of(" \t") + 1);
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

inline std::vector<std::string> required_algos() { return split_list(env_str("CONVKIT_REQUIRE_ALGOS")); }

inline bool is_required(const std::string& name) {
  for (const auto& r : required_algos())
    if (r == name) return true;
  return false;
}

// ---- which algorithms can run here --------------------------------------------------------------

enum class Use { ok, skip, fail };

// Whether `a` can run on this machine; `why` says why not. A CUDA algorithm without a GPU is a skip unless
// CONVKIT_REQUIRE_GPU=1; an unavailable algorithm is a skip unless CONVKIT_REQUIRE_ALGOS names it.
inline Use usability(const Algorithm& a, std::string* why) {
  if (a.device() == Device::cuda && !cuda_device_available()) {
    *why = a.name() + ": no CUDA device on this machine (or a build without CUDA)";
    if (require_gpu()) {
      *why += ", but CONVKIT_REQUIRE_GPU=1";
      return Use::fail;
    }
    return Use::skip;
  }
  const Support av = a.available();
  if (!av) {
    *why = a.name() + " is not available: " + av.reason;
    if (is_required(a.name())) {
      *why += " (but CONVKIT_REQUIRE_ALGOS requires it)";
      return Use::fail;
    }
    return Use::skip;
  }
  return Use::ok;
}

// In a test body: skip (or fail, when the environment demands it) if `algo` cannot run here.
#define CKT_REQUIRE_USABLE(algo)                         \
  do {                                                   \
    std::string ckt_why_;                                \
    switch (::ckt::usability((algo), &ckt_why_)) {       \
      case ::ckt::Use::ok: break;                        \
      case ::ckt::Use::skip: GTEST_SKIP() << ckt_why_;   \
      case ::ckt::Use::fail: FAIL() << ckt_why_;         \
    }                                                    \
  } while (0)

// In a test body: skip without a GPU, or fail where CONVKIT_REQUIRE_GPU=1.
#define CKT_REQUIRE_GPU()                                                                             \
  do {                                                                                                \
    if (!::convkit::cuda_device_available()) {                                                        \
      if (::ckt::require_gpu()) FAIL() << "no CUDA device (or a build without CUDA), but CONVKIT_REQUIRE_GPU=1"; \
      GTEST_SKIP() << "no CUDA device on this machine (or a build without CUDA)";                     \
    }                                                                                                 \
  } while (0)

// Whether `a` computes ordinary convolutions (one filter bank for the batch): false for the algorithms that
// run per-sample weights only (cpu_per_sample, cuda_per_sample: accepts() refuses plain operands), which
// test_per_sample.cpp covers.
inline bool plain(const Algorithm& a) {
  return bool(a.accepts(Conv2dProblem::parse("n1c1h1w1k1r1s1"),
                        ConvConfig{DType::f32, Layout::nchw, a.device(), MathMode::strict}, Operands{}));
}

// Every registered algorithm of ordinary convolutions followed by every peer: the parameter list of the sweeps.
inline std::vector<const Algorithm*> algorithms_and_peers() {
  std::vector<const Algorithm*> v;
  for (const auto* a : algorithms())
    if (plain(*a)) v.push_back(a);
  for (const auto* p : peers()) v.push_back(p);
  return v;
}

// Which algorithms must be bit-equal to cpu_ref on small-integer data: every convkit fp32 direct or GEMM
// algorithm (any summation order is exact there). Peers only have to meet the f32 bound; transforms that
// use fractions (Winograd, FFT) are not exact by construction.
inline bool held_to_exactness(const Algorithm& a) { return !a.is_peer() && !a.approximate(); }

// The rel-L2 bound of a path, with its reason (DESIGN.md "Correctness policy").
inline double rel_l2_bound(const Algorithm& a, const ConvConfig& cfg) {
  if (cfg.dtype == DType::f16 || cfg.dtype == DType::bf16) return 1e-2;  // 10/7-bit mantissas on output
  if (cfg.math == MathMode::tf32) return 1e-3;                             // 10-bit mantissa products
  if (a.approximate()) return a.approximate_rel_l2();                    // its declared bound (Winograd)
  return 1e-5;                                                             // fp32 sums, any order
}

// ---- random fills -------------------------------------------------------------------------------

inline std::vector<double> gaussian(size_t n, std::mt19937& rng, double stddev = 1.0) {
  std::normal_distribution<double> d(0.0, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<double> small_ints(size_t n, std::mt19937& rng, int lo = -3, int hi = 3) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ---- host tensors -------------------------------------------------------------------------------

// A CPU f32 view of `v` as a tensor of `dims` in `layout` (for tests that keep their tensors as vectors).
inline TensorView cpu_f32_view(std::vector<float>& v, Layout layout, std::array<int64_t, 4> dims) {
  return TensorView{v.data(), DType::f32, layout, Device::cpu, dims};
}

// A packed tensor in host memory, in any dtype and layout, filled from logical (N,C,H,W-ordered) values.
struct HostTensor {
  DType dtype = DType::f32;
  Layout layout = Layout::nchw;
  std::array<int64_t, 4> dims{0, 0, 0, 0};
  std::vector<unsigned char> bytes;

  HostTensor() = default;
  HostTensor(DType t, Layout l, std::array<int64_t, 4> d) : dtype(t), layout(l), dims(d) {
    bytes.assign(size_t(numel()) * dtype_size(t), 0);
  }
  int64_t numel() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
  TensorView view() { return TensorView{bytes.data(), dtype, layout, Device::cpu, dims}; }
  TensorView view_const() const {
    return TensorView{const_cast<unsigned char*>(bytes.data()), dtype, layout, Device::cpu, dims};
  }
  int64_t offset(int64_t a, int64_t b, int64_t c, int64_t d) const { return view_const().offset(a, b, c, d); }
  double at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return detail::load_as_double(bytes.data(), dtype, offset(a, b, c, d));
  }
  void set(int64_t a, int64_t b, int64_t c, int64_t d, double v) {
    detail::store_from_double(bytes.data(), dtype, offset(a, b, c, d), v);
  }
  // `logical` holds the values in logical row-major (dims[0], dims[1], dims[2], dims[3]) order.
  void fill_logical(const std::vector<double>& logical) {
    int64_t i = 0;
    for (int64_t a = 0; a < dims[0]; ++a)
      for (int64_t b = 0; b < dims[1]; ++b)
        for (int64_t c = 0; c < dims[2]; ++c)
          for (int64_t d = 0; d < dims[3]; ++d) set(a, b, c, d, logical[size_t(i++)]);
  }
  std::vector<double> logical() const {
    std::vector<double> v;
    v.reserve(size_t(numel()));
    for (int64_t a = 0; a < dims[0]; ++a)
      for (int64_t b = 0; b < dims[1]; ++b)
        for (int64_t c = 0; c < dims[2]; ++c)
          for (int64_t d = 0; d < dims[3]; ++d) v.push_back(at(a, b, c, d));
    return v;
  }
  // Values in memory order (what detail::compare wants).
  std::vector<double> memory_order() const { return detail::to_doubles(bytes.data(), dtype, numel()); }
};

// What the epilogue of a case does (pointers are made per run).
struct EpilogueSpec {
  bool bias = false;
  bool residual = false;
  bool residual_aliases_dst = false;  // in-place add: the residual is the output buffer's initial content
  Activation activation = Activation::none;
  float alpha = 1.0f, beta = 1.0f;

  std::string to_string() const {
    std::ostringstream o;
    o << "epilogue{bias=" << bias << " residual=" << (residual ? (residual_aliases_dst ? "in-place" : "yes") : "no")
      << " act=" << convkit::to_string(activation) << " alpha=" << alpha << " beta=" << beta << "}";
    return o.str();
  }
};

// The epilogue of the `act`-th case of a sweep seeded with `seed`: bias on three seeds of four, a residual on
// one of three (in place on every other one of those), the activations in turn: every one on Gaussian data,
// the exact ones (none, relu, relu6) on small integers.
inline EpilogueSpec varied_epilogue(uint32_t seed, int act, bool small_integers) {
  EpilogueSpec es;
  es.bias = (seed % 4) != 0;
  es.residual = (seed % 3) == 0;
  es.residual_aliases_dst = es.residual && (seed % 2 == 0);
  static const Activation exact[] = {Activation::none, Activation::relu, Activation::relu6};
  es.activation = small_integers ? exact[act % 3] : static_cast<Activation>(act % (int(Activation::hardsigmoid) + 1));
  return es;
}

// The e-th of the three epilogues an exact sweep runs each problem with (e = 0, 1, 2): none; bias and relu;
// bias, relu6 and a residual (in place when `seed` is even).
inline EpilogueSpec exact_epilogue(int e, uint32_t seed) {
  EpilogueSpec es;
  es.bias = e >= 1;
  es.activation = e == 1 ? Activation::relu : e == 2 ? Activation::relu6 : Activation::none;
  es.residual = e == 2;
  es.residual_aliases_dst = e == 2 && (seed % 2 == 0);
  return es;
}

enum class Fill { gaussian, small_ints };

// One fully specified test case with its host data.
struct Case {
  Conv2dProblem problem;
  ConvConfig config;
  EpilogueSpec epi;
  uint32_t seed = 0;
  Fill fill = Fill::gaussian;
  HostTensor src, wei, residual;
  std::vector<unsigned char> bias;  // K elements of config.dtype (empty when absent)

  // Everything needed to reproduce the case, including a CLI line for the problem.
  std::string describe() const {
    std::ostringstream o;
    o << problem.to_string() << " " << config.to_string() << " " << epi.to_string() << " seed=" << seed
      << (fill == Fill::small_ints ? " small-ints" : " gaussian") << "  [repro: convkit bench --problem "
      << problem.to_string() << " --layout " << convkit::to_string(config.layout) << "]";
    return o.str();
  }
};

inline Case make_case(const Conv2dProblem& p, const ConvConfig& cfg, const EpilogueSpec& epi, uint32_t seed,
                      Fill fill) {
  Case c;
  c.problem = p;
  c.config = cfg;
  c.config.device = Device::cpu;  // host data; the runner moves it to the algorithm's device
  c.epi = epi;
  c.seed = seed;
  c.fill = fill;
  std::mt19937 rng(seed);
  auto values = [&](size_t n) { return fill == Fill::gaussian ? gaussian(n, rng) : small_ints(n, rng); };
  c.src = HostTensor(cfg.dtype, cfg.layout, input_dims(p));
  c.src.fill_logical(values(size_t(c.src.numel())));
  c.wei = HostTensor(cfg.dtype, cfg.layout, weight_dims(p));
  c.wei.fill_logical(values(size_t(c.wei.numel())));
  if (epi.bias) {
    const auto b = values(size_t(p.k));
    c.bias.assign(size_t(p.k) * dtype_size(cfg.dtype), 0);
    for (int64_t i = 0; i < p.k; ++i) detail::store_from_double(c.bias.data(), cfg.dtype, i, b[size_t(i)]);
  }
  if (epi.residual) {
    c.residual = HostTensor(cfg.dtype, cfg.layout, output_dims(p));
    c.residual.fill_logical(values(size_t(c.residual.numel())));
  }
  return c;
}

// ---- running an algorithm -----------------------------------------------------------------------

struct RunOpts {
  bool prepare = false;          // call Algorithm::prepare() first
  unsigned char poison = 0xFF;   // the output's bytes before the run (NaN for every float type)
  std::string variant;           // one of the algorithm's variants(), or empty: its heuristic's
};

// Runs `a` on the case on a's device: device buffers for every operand, the output poisoned (or holding
// the residual when it aliases dst), a poisoned workspace of exactly workspace_bytes(). Returns the output
// in memory order as a host tensor. Throws whatever the algorithm throws.
inline HostTensor run_case(const Algorithm& a, const Case& c, const RunOpts& opt = {}) {
  const Device dev = a.device();
  ConvConfig cfg = c.config;
  cfg.device = dev;
  const Conv2dProblem& p = c.problem;
  HostTensor out(cfg.dtype, cfg.layout, output_dims(p));

  Buffer src(dev, c.src.bytes.size()), wei(dev, c.wei.bytes.size()), dst(dev, out.bytes.size());
  src.copy_from_host(c.src.bytes.data(), c.src.bytes.size());
  wei.copy_from_host(c.wei.bytes.data(), c.wei.bytes.size());
  Buffer bias, residual;
  if (!c.bias.empty()) {
    bias = Buffer(dev, c.bias.size());
    bias.copy_from_host(c.bias.data(), c.bias.size());
  }
  if (c.epi.residual && c.epi.residual_aliases_dst) {
    dst.copy_from_host(c.residual.bytes.data(), c.residual.bytes.size());
  } else {
    dst.fill_bytes(opt.poison);
    if (c.epi.residual) {
      residual = Buffer(dev, c.residual.bytes.size());
      residual.copy_from_host(c.residual.bytes.data(), c.residual.bytes.size());
    }
  }
  const size_t ws_bytes = a.workspace_bytes(p, cfg);
  Buffer ws(dev, ws_bytes);
  ws.fill_bytes(0xFF);

  ConvCall call;
  call.problem = p;
  call.config = cfg;
  call.src = TensorView{src.data(), cfg.dtype, cfg.layout, dev, input_dims(p)};
  call.wei = TensorView{wei.data(), cfg.dtype, cfg.layout, dev, weight_dims(p)};
  call.dst = TensorView{dst.data(), cfg.dtype, cfg.layout, dev, output_dims(p)};
  call.epilogue.bias = c.bias.empty() ? nullptr : bias.data();
  call.epilogue.residual =
      !c.epi.residual ? nullptr : (c.epi.residual_aliases_dst ? dst.data() : static_cast<const void*>(residual.data()));
  call.epilogue.activation = c.epi.activation;
  call.epilogue.alpha = c.epi.alpha;
  call.epilogue.beta = c.epi.beta;
  call.workspace = ws.data();
  call.workspace_bytes = ws_bytes;
  call.variant = opt.variant;
  if (opt.prepare) a.prepare(call);
  a.run(call);
  device_synchronize(dev);
  dst.copy_to_host(out.bytes.data(), out.bytes.size());
  return out;
}

inline const Algorithm& cpu_ref() {
  const Algorithm* a = find_algorithm("cpu_ref");
  if (!a) throw std::runtime_error("cpu_ref is not registered");
  return *a;
}

// The oracle's output for the case.
inline HostTensor reference(const Case& c) { return run_case(cpu_ref(), c); }

// A second, independent oracle written in the test: the plain definition, in double, by logical index.
inline std::vector<double> independent_reference_logical(const Case& c) {
  const Conv2dProblem& pb = c.problem;
  const int64_t P = pb.p(), Q = pb.q(), Cg = pb.c_per_group(), Kg = pb.k_per_group();
  std::vector<double> y;
  y.reserve(size_t(pb.output_elems()));
  for (int64_t n = 0; n < pb.n; ++n)
    for (int64_t k = 0; k < pb.k; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          double acc = 0;
          const int64_t g = k / Kg;
          for (int64_t cc = 0; cc < Cg; ++cc)
            for (int64_t r = 0; r < pb.r; ++r)
              for (int64_t s = 0; s < pb.s; ++s) {
                const int64_t h = p * pb.stride_h + r * pb.dilation_h - pb.pad_h;
                const int64_t w = q * pb.stride_w + s * pb.dilation_w - pb.pad_w;
                if (h >= 0 && h < pb.h && w >= 0 && w < pb.w) acc += c.src.at(n, g * Cg + cc, h, w) * c.wei.at(k, cc, r, s);
              }
          double v = double(c.epi.alpha) * acc;
          if (!c.bias.empty()) v += detail::load_as_double(c.bias.data(), c.config.dtype, k);
          if (c.epi.residual) v += double(c.epi.beta) * c.residual.at(n, k, p, q);
          switch (c.epi.activation) {
            case Activation::relu: v = v > 0 ? v : 0; break;
            case Activation::silu: v = v / (1 + std::exp(-v)); break;
            case Activation::gelu: v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); break;
            case Activation::relu6: v = std::min(std::max(v, 0.0), 6.0); break;
            case Activation::hardswish: v = v * std::min(std::max(v + 3, 0.0), 6.0) / 6; break;
            case Activation::sigmoid: v = 1 / (1 + std::exp(-v)); break;
            case Activation::hardsigmoid: v = std::min(std::max(v + 3, 0.0), 6.0) / 6; break;
            case Activation::none: break;
          }
          y.push_back(v);
        }
  return y;
}

// ---- checking -----------------------------------------------------------------------------------

inline int64_t count_nan(const HostTensor& t) {
  int64_t bad = 0;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(detail::load_as_double(t.bytes.data(), t.dtype, i))) ++bad;
  return bad;
}

inline double zero_fraction(const std::vector<double>& v) {
  if (v.empty()) return 0;
  int64_t z = 0;
  for (double x : v) z += (x == 0.0);
  return double(z) / double(v.size());
}

// Logical (n,k,p,q) of a memory-order index of the output.
inline std::string output_coords(const Case& c, int64_t i) {
  const Conv2dProblem& p = c.problem;
  const int64_t P = p.p(), Q = p.q();
  int64_t n, k, pp, qq;
  if (c.config.layout == Layout::nchw) {
    qq = i % Q; pp = (i / Q) % P; k = (i / (P * Q)) % p.k; n = i / (P * Q * p.k);
  } else {
    k = i % p.k; qq = (i / p.k) % Q; pp = (i / (p.k * Q)) % P; n = i / (p.k * Q * P);
  }
  std::ostringstream o;
  o << "(n=" << n << ",k=" << k << ",p=" << pp << ",q=" << qq << ")";
  return o.str();
}

struct Verdict {
  bool ok = true;
  std::string message;
};

// Compares `out` with the reference (memory order): no NaN left from the poison, no non-finite value,
// rel-L2 within `bound`, bit-equality when `exact`, and not "mostly zeros" when the reference is not.
inline Verdict check_output(const Algorithm& a, const Case& c, const HostTensor& out, const std::vector<double>& ref,
                            double bound, bool exact) {
  Verdict v;
  std::ostringstream why;
  const detail::Comparison cmp = detail::compare(out.bytes.data(), out.dtype, ref);
  const int64_t nan = count_nan(out);
  if (nan > 0) why << nan << " of " << out.numel() << " outputs are NaN (unwritten poison?); ";
  if (cmp.nonfinite > 0) why << cmp.nonfinite << " non-finite outputs; ";
  if (!(cmp.rel_l2 <= bound)) why << "rel L2 " << cmp.rel_l2 << " > bound " << bound << "; ";
  if (exact && cmp.mismatches > 0) why << cmp.mismatches << " of " << cmp.count << " elements not bit-equal; ";
  const std::vector<double> got = out.memory_order();
  const double zr = zero_fraction(ref), zo = zero_fraction(got);
  if (ref.size() >= 16 && zr < 0.5 && zo > 0.9)
    why << "output is " << zo * 100 << "% zeros but the reference only " << zr * 100 << "%; ";
  if (!why.str().empty()) {
    v.ok = false;
    std::ostringstream m;
    m << a.name() << " on " << c.describe() << ": " << why.str() << "max_abs=" << cmp.max_abs
      << " rel_l2=" << cmp.rel_l2;
    if (cmp.first_bad >= 0 && cmp.first_bad < int64_t(ref.size()))
      m << "; first bad element " << cmp.first_bad << " " << output_coords(c, cmp.first_bad)
        << ": got " << got[size_t(cmp.first_bad)] << ", want " << ref[size_t(cmp.first_bad)];
    v.message = m.str();
  }
  return v;
}

// ---- .npy files (for the CLI tests) -------------------------------------------------------------

// `a` on the case against cpu_ref on the same case (check_output's tests).
inline Verdict check_against_reference(const Algorithm& a, const Case& c, double bound, bool exact) {
  const HostTensor want = reference(c);
  return check_output(a, c, run_case(a, c), want.memory_order(), bound, exact);
}

// One variant of `a` (one of its variants()) on the case, against the reference's values in memory order
// (computed once for all the variants of a case).
inline Verdict check_variant(const Algorithm& a, const Case& c, const std::string& variant,
                             const std::vector<double>& want, double bound, bool exact) {
  RunOpts o;
  o.variant = variant;
  return check_output(a, c, run_case(a, c, o), want, bound, exact);
}

// The epilogue of the `turn`-th run of a sweep: varied_epilogue's bias, residual and activation, turned by
// `turn`, with alpha and beta off 1 on some turns (2 and -1 on small integers, so that sums stay exact; 0.75
// and 0.5 on Gaussian data).
inline EpilogueSpec rotating_epilogue(int turn, bool small_integers) {
  EpilogueSpec es = varied_epilogue(uint32_t(turn), turn, small_integers);
  es.alpha = turn % 5 == 4 ? (small_integers ? 2.0f : 0.75f) : 1.0f;
  es.beta = turn % 7 == 6 ? (small_integers ? -1.0f : 0.5f) : 1.0f;
  return es;
}

// Runs `a` on each spec in `dt`, NHWC on the GPU: every variant of it when `every_variant`, else the
// heuristic's; the epilogue turns run by run (rotating_epilogue). Every spec must be one `a` implements.
// Small integers: bit-equal to cpu_ref; Gaussian data: within `bound`. Returns how many runs there were.
template <size_t N>
int check_nhwc_sweep(const Algorithm& a, const char* const (&specs)[N], DType dt, Fill fill, double bound,
                     uint32_t seed, bool every_variant) {
  int ran = 0;
  const bool exact = fill == Fill::small_ints;
  const ConvConfig cfg{dt, Layout::nhwc, Device::cuda, MathMode::strict};
  for (const char* spec : specs) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const Support s = a.can_implement(p, cfg);
    EXPECT_TRUE(s) << spec << ": " << s.reason;
    if (!s) continue;
    for (const std::string& v : every_variant ? a.variants(p, cfg) : std::vector<std::string>{""}) {
      const Case c = make_case(p, cfg, rotating_epilogue(ran, exact), ++seed, fill);
      const Verdict verdict = check_variant(a, c, v, reference(c).memory_order(), bound, exact);
      EXPECT_TRUE(verdict.ok) << spec << (v.empty() ? "" : " variant " + v) << ": " << verdict.message;
      ++ran;
    }
  }
  return ran;
}

inline std::string npy_shape(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  // numpy writes "(3,)" for one dimension and "(2, 3)" style otherwise; both parse the same.
  return s + ")";
}

// Writes a version-1.0 .npy file: magic, version, little-endian header length, the header dict padded
// with spaces so that magic+header is a multiple of 64 bytes and ends in '\n', then the raw data.
// `data_bytes` may be shorter than the shape says (to make truncated files).
inline void write_npy_raw(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                          const void* data, size_t data_bytes, bool fortran_order = false) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                       ", 'shape': " + npy_shape(shape) + ", }";
  const size_t prefix = 10;  // magic(6) + version(2) + header length(2)
  size_t total = prefix + header.size() + 1;
  const size_t padded = (total + 63) / 64 * 64;
  header += std::string(padded - total, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(reinterpret_cast<const char*>(magic), 8);
  const uint16_t hl = uint16_t(header.size());
  const unsigned char len[2] = {static_cast<unsigned char>(hl & 0xff), static_cast<unsigned char>(hl >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  if (data_bytes) f.write(static_cast<const char*>(data), std::streamsize(data_bytes));
}

inline void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& v) {
  write_npy_raw(path, "<f4", shape, v.data(), v.size() * sizeof(float));
}

// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Reads a little-endian f32 C-order .npy file written by anyone (numpy or convkit). Fails the test on
// anything else.
inline bool read_npy_f32(const std::string& path, std::vector<int64_t>* shape, std::vector<float>* data,
                         std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return *err = "cannot open " + path, false;
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) return *err = "no .npy magic", false;
  const int major = static_cast<unsigned char>(all[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(all[8]) | (size_t(static_cast<unsigned char>(all[9])) << 8);
    hstart = 10;
  } else {
    if (all.size() < 12) return *err = "short header", false;
    hlen = 0;
    for (int i = 0; i < 4; ++i) hlen |= size_t(static_cast<unsigned char>(all[8 + i])) << (8 * i);
    hstart = 12;
  }
  if (all.size() < hstart + hlen) return *err = "header truncated", false;
  const std::string h = all.substr(hstart, hlen);
  if (h.find("'<f4'") == std::string::npos) return *err = "dtype is not <f4: " + h, false;
  if (h.find("'fortran_order': False") == std::string::npos) return *err = "not C order: " + h, false;
  const size_t sp = h.find("'shape':");
  const size_t open = h.find('(', sp), close = h.find(')', open);
  if (sp == std::string::npos || open == std::string::npos || close == std::string::npos)
    return *err = "no shape: " + h, false;
  shape->clear();
  for (const auto& tok : split_list(h.substr(open + 1, close - open - 1))) shape->push_back(std::stoll(tok));
  int64_t n = 1;
  for (auto d : *shape) n *= d;
  const size_t data_at = hstart + hlen;
  if (all.size() != data_at + size_t(n) * 4)
    return *err = "data size " + std::to_string(all.size() - data_at) + " != " + std::to_string(n * 4), false;
  data->resize(size_t(n));
  std::memcpy(data->data(), all.data() + data_at, size_t(n) * 4);
  return true;
}

}  // namespace ckt
