// `convkit bench`: every problem x algorithm on one device, timed and verified, against the device's peer
// (oneDNN on the CPU, cuDNN on CUDA). The table streams to stdout; --csv/--json hold the same numbers.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include "commands.hpp"
#include "common.hpp"
#include "convkit/system.hpp"
#include "core/timing.hpp"
#include "oracle.hpp"
#include "report.hpp"

namespace convkit::cli {
namespace {

constexpr double kOracleSkipFlops = 0.5e9;  // cpu_ref is skipped above this (unless named in --algo)
constexpr double kFullOracleFlops = 0.3e9;  // the CPU oracle checks the full output below this
constexpr double kCpuEstimateFlops = 50e9;  // the CPU speed assumed when estimating a suite's time ...
constexpr double kCpuOracleFlops = 0.25e9;  // ... and that of the oracle, cpu_ref
constexpr double kCpuSuiteBudgetS = 180.0;  // above this estimate a CPU suite runs at batch 1

struct BenchSetup {
  std::vector<NamedProblem> problems;
  std::string suite;
  ConvConfig cfg;
  std::vector<const Algorithm*> algos;  // in registry order, without the peer
  bool all = true;                      // --algo all (cpu_ref may be skipped)
  const Algorithm* peer = nullptr;
  bool tuned = false;  // --tuned
};

const Algorithm* peer_for(Device d) {
  for (const Algorithm* p : peers())
    if (p->device() == d) return p;
  return nullptr;
}

// The rel-L2 bound of a path, with its reason: fp32 rounding over long sums (1e-5); tf32's 10-bit mantissa
// (1e-3); f16/bf16 storage (1e-2); an approximate algorithm's own declared bound (Winograd: 1e-4).
double error_bound(const ConvConfig& cfg, const Algorithm& a) {
  if (cfg.dtype != DType::f32) return 1e-2;
  if (cfg.math == MathMode::tf32) return 1e-3;
  if (a.approximate()) return a.approximate_rel_l2();
  return 1e-5;
}

bool skipped_oracle(const Algorithm* a, const Conv2dProblem& p, const BenchSetup& plan) {
  return plan.all && a->name() == "cpu_ref" && p.flops() > kOracleSkipFlops;
}

// NCHW asked on CUDA: an algorithm that only reads NHWC in this configuration (the tensor-core kernels for
// f16, bf16 and tf32) is benchmarked through explicit layout transforms, as row "<algo>+nhwc" (via_nhwc).
bool nhwc_detour_possible(const ConvConfig& cfg) {
  return cfg.device == Device::cuda && cfg.layout == Layout::nchw;
}

// Whether `a` runs this problem only through the NHWC detour: the planner, free to pick the layout as
// `convkit run` and the PyTorch ops are, computes it in NHWC.
bool via_nhwc(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg) {
  if (!nhwc_detour_possible(cfg) || a->is_peer() || !a->available()) return false;
  PlanOptions po;
  po.algo = a->name();
  po.any_layout = true;
  try {
    return plan(p, cfg, convkit::Operands{}, po).config.layout == Layout::nhwc;
  } catch (const Error&) {
    return false;
  }
}

bool will_run(const Algorithm* a, const Conv2dProblem& p, const BenchSetup& plan) {
  return a->available() && a->can_implement(p, plan.cfg) && a->accepts(p, plan.cfg, convkit::Operands{}) &&
         !skipped_oracle(a, p, plan);
}

// A progress line on stderr, only when it is a terminal; cleared before each table row.
class Progress {
 public:
  Progress() : on_(isatty(STDERR_FILENO) != 0) {}
  void show(size_t i, size_t n, const std::string& problem, const std::string& algo) {
    if (!on_) return;
    std::cerr << "\r\033[K[" << i << "/" << n << "] " << problem << ": " << algo << std::flush;
  }
  void clear() {
    if (on_) std::cerr << "\r\033[K" << std::flush;
  }

 private:
  bool on_;
};

// One problem's operands, allocated once and shared by every algorithm.
struct BenchOperands {
  Buffer hx, hw;      // host inputs (Gaussian)
  Buffer dx, dw, dy;  // on the device (dx/dw unused on the CPU: the host buffers serve)
  std::vector<unsigned char> hy;  // host copy of the output (CUDA only)
  TensorView host_x, host_w, x, w, y;
  Oracle oracle;
};

void setup(BenchOperands& o, const Conv2dProblem& p, const ConvConfig& cfg, uint64_t seed, bool verify) {
  const size_t es = dtype_size(cfg.dtype);
  const size_t xb = size_t(p.input_elems()) * es, wb = size_t(p.weight_elems()) * es,
               yb = size_t(p.output_elems()) * es;
  o.hx = Buffer(Device::cpu, xb);
  o.hw = Buffer(Device::cpu, wb);
  fill_gaussian(o.hx.data(), cfg.dtype, p.input_elems(), seed);
  fill_gaussian(o.hw.data(), cfg.dtype, p.weight_elems(), seed ^ 0x77ull);
  o.host_x = {o.hx.data(), cfg.dtype, cfg.layout, Device::cpu, input_dims(p)};
  o.host_w = {o.hw.data(), cfg.dtype, cfg.layout, Device::cpu, weight_dims(p)};
  o.x = o.host_x, o.w = o.host_w;
  if (cfg.device == Device::cuda) {
    o.dx = Buffer(cfg.device, xb);
    o.dw = Buffer(cfg.device, wb);
    o.dx.copy_from_host(o.hx.data(), xb);
    o.dw.copy_from_host(o.hw.data(), wb);
    o.x.data = o.dx.data(), o.x.device = cfg.device;
    o.w.data = o.dw.data(), o.w.device = cfg.device;
    o.hy.resize(yb);
  }
  o.dy = Buffer(cfg.device, yb);
  o.y = {o.dy.data(), cfg.dtype, cfg.layout, cfg.device, output_dims(p)};
  if (verify)
    o.oracle = make_oracle(p, cfg, o.host_x, o.host_w, o.x, o.w,
                           cfg.device == Device::cuda || p.flops() <= kFullOracleFlops, seed);
}

void set_failure(Row& r, const Error& e) {
  const bool unsupported = e.code() == StatusCode::unsupported || e.code() == StatusCode::not_available;
  r.status = unsupported ? "unsupported" : "error";
  r.reason = one_line(e.what());
}

// One algorithm on one problem. With `nhwc` (see via_nhwc) the NCHW operands are transformed to NHWC (the
// weights KCRS -> KRSC once, untimed, as a model load would), the convolution runs on NHWC, and its output is
// transformed back to NCHW for verification; the row's time is the convolution alone and transform_ms times
// x -> NHWC plus y -> NCHW the same way.
// `named_variant` (--variants): this one of the algorithm's variants, the row named <algo>/<variant>.
Row measure(const Algorithm* a, const NamedProblem& np, const BenchSetup& plan, BenchOperands& o,
            const detail::TimingOptions& topt, bool verify, bool nhwc, const std::string& named_variant = {}) {
  const Conv2dProblem& p = np.problem;
  ConvConfig cfg = plan.cfg;
  if (nhwc) cfg.layout = Layout::nhwc;
  Row r;
  r.problem = np;
  r.algorithm = a->name() + (nhwc ? "+nhwc" : "") + (named_variant.empty() ? "" : "/" + named_variant);
  r.is_peer = a->is_peer();
  if (Support av = a->available(); !av) {
    r.status = "unsupported", r.reason = av.reason;
    return r;
  }
  if (Support ok = a->can_implement(p, cfg); !ok) {
    r.status = "unsupported", r.reason = ok.reason;
    return r;
  }
  if (Support ok = a->accepts(p, cfg, convkit::Operands{}); !ok) {  // (bench's buffers are fresh: aligned)
    r.status = "unsupported", r.reason = ok.reason;
    return r;
  }
  if (skipped_oracle(a, p, plan)) {
    r.status = "skipped", r.reason = "the oracle is too slow at this size (name it in --algo to time it)";
    return r;
  }
  try {
    // The NHWC copies of the operands (nhwc only), allocated and filled outside any timed region.
    Buffer xn, wn, yn;
    TensorView x = o.x, w = o.w, y = o.y;
    if (nhwc) {
      xn = Buffer(cfg.device, o.x.bytes());
      wn = Buffer(cfg.device, o.w.bytes());
      yn = Buffer(cfg.device, o.y.bytes());
      x.data = xn.data(), w.data = wn.data(), y.data = yn.data();
      x.layout = w.layout = y.layout = Layout::nhwc;
      transform_layout(o.w, w);
      transform_layout(o.x, x);
      device_synchronize(cfg.device);
    }
    // --tuned: the variant `convkit tune` stored for this problem, when its winner is this algorithm.
    std::string variant = named_variant;
    if (variant.empty() && plan.tuned && !a->is_peer()) {
      const convkit::Plan s = convkit::plan(p, cfg);
      if (s.algorithm == a && s.source == "tune cache") variant = s.variant;
    }
    r.workspace_bytes = a->variant_workspace_bytes(p, cfg, variant);
    Buffer ws(cfg.device, r.workspace_bytes);
    const ConvCall call{p, cfg, x, w, y, Epilogue{}, ws.data(), ws.bytes(), nullptr, variant};
    a->prepare(call);
    if (verify) {
      o.dy.fill_bytes(0xFF);  // poison: an element never written shows as NaN
      if (nhwc) yn.fill_bytes(0xFF);
      a->run(call);
      if (nhwc) transform_layout(y, o.y);
      device_synchronize(cfg.device);
      const void* out = o.dy.data();
      if (cfg.device == Device::cuda) {
        o.dy.copy_to_host(o.hy.data(), o.hy.size());
        out = o.hy.data();
      }
      // The oracle algorithm is checked against the independent sampled points, not against itself.
      const bool self = o.oracle.full && o.oracle.source == a->name();
      const detail::Comparison c = o.oracle.check(out, cfg.dtype, self);
      r.verified = true;
      r.sampled = !o.oracle.full || self;
      r.verified_points = c.count;
      r.oracle = r.sampled ? "double at sampled points" : o.oracle.source;
      r.max_abs = c.max_abs, r.rel_l2 = c.rel_l2, r.nonfinite = c.nonfinite;
      r.bound = error_bound(cfg, *a);
      if (c.nonfinite > 0 || !(c.rel_l2 <= r.bound)) r.status = "incorrect";
    }
    const std::vector<double> ms = detail::time_runs(cfg.device, nullptr, [&] { a->run(call); }, topt);
    device_synchronize(cfg.device);
    r.median_ms = detail::median(ms);
    r.min_ms = ms.empty() ? NAN : *std::min_element(ms.begin(), ms.end());
    r.runs = int(ms.size());
    r.spread = detail::spread(ms);
    if (nhwc) {
      const std::vector<double> tms = detail::time_runs(cfg.device, nullptr, [&] {
        transform_layout(o.x, x);
        transform_layout(y, o.y);
      }, topt);
      device_synchronize(cfg.device);
      r.transform_ms = detail::median(tms);
    }
    r.detail = one_line(a->detail(p, cfg));
    if (!variant.empty())
      r.detail = (named_variant.empty() ? "tuned variant " : "variant ") + variant + " (the heuristic's: " + r.detail + ")";
  } catch (const Error& e) {
    set_failure(r, e);
    r.median_ms = NAN;
  } catch (const std::bad_alloc&) {
    r.status = "error", r.reason = "out of host memory";
  } catch (const std::exception& e) {
    r.status = "error", r.reason = one_line(e.what());
  }
  return r;
}

BenchSetup make_setup(const BenchOptions& o) {
  BenchSetup plan;
  plan.tuned = o.tuned;
  for (const auto& spec : o.problems) plan.problems.push_back(parse_problem_arg(spec));
  if (!o.suite.empty() || plan.problems.empty()) {
    plan.suite = o.suite.empty() ? "seeds" : o.suite;
    auto s = load_suite(plan.suite);
    plan.problems.insert(plan.problems.end(), s.begin(), s.end());
  }
  if (o.batch < 0) throw UsageError("--batch: must be positive");
  if (o.batch > 0) set_batch_all(plan.problems, o.batch);

  // --algo: "all", or names; with --device auto, names on one device pick that device.
  std::vector<const Algorithm*> named;
  plan.all = o.algo == "all";
  if (!plan.all) {
    const auto names = split(o.algo, ',');
    if (names.empty()) throw UsageError("--algo: expected algorithm names or all");
    for (const auto& n : names) {
      if (n == "all") throw UsageError("--algo: 'all' cannot be combined with names");
      const Algorithm* a = find_algorithm(n);
      if (!a) throw UsageError("unknown algorithm '" + n + "' (see `convkit list`)");
      if (std::find(named.begin(), named.end(), a) == named.end()) named.push_back(a);
    }
  }
  std::string device = o.device;
  if (device == "auto" && !named.empty() &&
      std::all_of(named.begin(), named.end(), [&](const Algorithm* a) { return a->device() == named[0]->device(); }))
    device = to_string(named[0]->device());
  apply_dtype_flags(o.dtype, o.math, plan.cfg);
  try {
    plan.cfg.layout = parse_layout(o.layout);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  plan.cfg.device = resolve_device(device);

  plan.peer = peer_for(plan.cfg.device);
  for (const Algorithm* a : named)
    if (a->device() != plan.cfg.device)
      throw UsageError(a->name() + " runs on " + to_string(a->device()) + ", but the device is " +
                       to_string(plan.cfg.device));
  for (const Algorithm* a : algorithms()) {
    if (a->device() != plan.cfg.device) continue;
    // (--algo all times ordinary convolutions: the algorithms that run per-sample weights only are left out.)
    const bool plain = bool(a->accepts(Conv2dProblem::parse("n1c1h1w1k1r1s1"), plan.cfg, convkit::Operands{}));
    if ((plan.all && plain) || std::find(named.begin(), named.end(), a) != named.end()) plan.algos.push_back(a);
  }
  if (plan.cfg.device == Device::cuda && plan.algos.empty() && plan.all)
    throw UsageError("no CUDA algorithms in this build");
  return plan;
}

// The suite's CPU time for --runs timed runs plus warm-up and verification of every algorithm that will run,
// at kCpuEstimateFlops (the oracle cpu_ref at kCpuOracleFlops, also for computing the full reference).
double estimate_cpu_seconds(const BenchSetup& plan, int runs, bool verify) {
  double s = 0;
  for (const auto& np : plan.problems) {
    const double f = np.problem.flops();
    if (verify && f <= kFullOracleFlops) s += f / kCpuOracleFlops;
    std::vector<const Algorithm*> all = plan.algos;
    if (plan.peer) all.push_back(plan.peer);
    for (const Algorithm* a : all)
      if (will_run(a, np.problem, plan))
        s += f / (a->name() == "cpu_ref" ? kCpuOracleFlops : kCpuEstimateFlops) * (runs + 2);
  }
  return s;
}

}  // namespace

CLI::App* add_bench(CLI::App& app, BenchOptions& o) {
  CLI::App* sub = app.add_subcommand("bench", "Time and verify every algorithm on a suite of problems, against the "
                                              "device's peer (oneDNN on the CPU, cuDNN on CUDA).");
  sub->add_option("--problem", o.problems, "a problem, e.g. n16c256h128w128k256r3s3p1 (repeatable)");
  sub->add_option("--suite", o.suite, "a suite name (seeds, resnet50, mobilenet_v2, edge) or a suite file; "
                                      "default seeds when no --problem is given");
  sub->add_option("--algo", o.algo, "comma-separated algorithm names, or all")->capture_default_str();
  sub->add_option("--device", o.device, "cpu|cuda|auto (auto: cuda when a GPU is usable)")->capture_default_str();
  sub->add_option("--dtype", o.dtype, "f32|f16|bf16|tf32 (tf32: f32 tensors with tf32 math)")->capture_default_str();
  sub->add_option("--layout", o.layout, "nchw|nhwc (nchw with f16/bf16/tf32 on cuda: NHWC-only algorithms also run "
                                        "through layout transforms, as <algo>+nhwc rows with their transform time)")
      ->capture_default_str();
  sub->add_option("--math", o.math, "strict|tf32 (default strict; tf32 only when asked)");
  sub->add_option("--batch", o.batch, "override every problem's batch size N")->check(positive_integer());
  sub->add_option("--csv", o.csv, "also write the rows as CSV");
  sub->add_option("--json", o.json, "also write the rows and the system facts as JSON");
  sub->add_option("--runs", o.runs, "timed runs (CPU: fewer when 2 s are spent, at least 5; CUDA: at least 50)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_flag("--no-verify", o.no_verify, "skip the check against the oracle");
  sub->add_flag("--tuned", o.tuned,
                "run each algorithm with the variant `convkit tune` stored for the problem (when the cache's "
                "winner is that algorithm; see docs/tuning.md)");
  sub->add_flag("--variants", o.variants,
                "time every variant of each algorithm (its tunable tiles or kernels) as its own row, "
                "<algo>/<variant>; an algorithm without variants keeps its one row");
  sub->add_option("--seed", o.seed, "seed of the Gaussian inputs")->capture_default_str();
  return sub;
}

int run_bench(const BenchOptions& o) {
  BenchSetup plan = make_setup(o);
  // Fail now, not after the whole suite, if an output file cannot be written (without creating it: a run
  // stopped later must not leave an empty file behind).
  for (const std::string* path : {&o.csv, &o.json})
    if (!path->empty()) check_writable(*path);
  const Device dev = plan.cfg.device;
  const bool verify = !o.no_verify;

  RunInfo info;
  info.suite = plan.suite;
  info.config = plan.cfg;
  info.date = utc_now();
  info.runs = o.runs;
  info.seed = o.seed;
  info.verify = verify;
  info.batch_override = o.batch;
  if (dev == Device::cpu && o.batch == 0) {
    const double est = estimate_cpu_seconds(plan, o.runs, verify);
    if (est > kCpuSuiteBudgetS) {
      for (auto& np : plan.problems) np.set_batch(1);
      info.batch_override = 1;
      info.note = fmt::format("this would take about {:.0f} min on the CPU at its own batch sizes; running every "
                              "problem at batch 1 (use --batch N to override)",
                              est / 60.0);
    }
  }

  detail::TimingOptions topt;
  if (dev == Device::cpu) {
    topt.warmup = 1, topt.min_runs = o.runs, topt.max_runs = o.runs, topt.cpu_min_runs = 5, topt.budget_s = 2.0;
  } else {
    topt.min_runs = std::max(o.runs, 50), topt.max_runs = std::max(topt.min_runs, 200);
  }

  std::vector<std::string> names;
  if (plan.peer) names.push_back(plan.peer->name());
  for (const Algorithm* a : plan.algos) {
    names.push_back(a->name() + (o.variants ? "/128x128x32/s3/k4" : ""));  // (the widest variant names)
    if (nhwc_detour_possible(plan.cfg)) names.push_back(names.back() + "+nhwc");
  }
  const SystemInfo sys = system_info();
  fmt::print("convkit {} bench: {} ({} problem{}), {}, {} OpenMP threads, peer {}, seed {}\n", version(),
             plan.suite.empty() ? std::string("--problem") : "suite " + plan.suite, plan.problems.size(),
             plan.problems.size() == 1 ? "" : "s", plan.cfg.to_string(), sys.cpu_threads,
             plan.peer ? plan.peer->name() : "none", o.seed);
  if (!info.note.empty()) fmt::print("note: {}\n", info.note);
  else if (o.batch > 0) fmt::print("note: every problem at batch {} (--batch)\n", o.batch);
  fmt::print("\n");

  TablePrinter table(plan.problems, names, dev, int(dtype_size(plan.cfg.dtype)));
  table.header();
  Progress progress;
  std::vector<Row> rows;
  for (size_t i = 0; i < plan.problems.size(); ++i) {
    const NamedProblem& np = plan.problems[i];
    std::vector<const Algorithm*> order;
    if (plan.peer) order.push_back(plan.peer);
    order.insert(order.end(), plan.algos.begin(), plan.algos.end());

    BenchOperands ops;
    std::string setup_error;
    try {
      progress.show(i + 1, plan.problems.size(), np.name, "allocating and computing the reference");
      setup(ops, np.problem, plan.cfg, mix_seed(o.seed, np.problem.to_string()), verify);
    } catch (const Error& e) {
      setup_error = one_line(e.what());
    } catch (const std::bad_alloc&) {
      setup_error = "out of host memory";
    }
    // The problem's rows are printed together once the peer has been timed (on the CPU twice: before the
    // algorithms and after them. NOTE: on a shared 2-core machine one pass of the peer could be 10x off;
    // the faster pass is kept, both are reported).
    std::vector<Row> prow;
    for (const Algorithm* a : order) {
      Row r;
      if (!setup_error.empty()) {
        r.problem = np, r.algorithm = a->name(), r.is_peer = a->is_peer();
        r.status = "error", r.reason = setup_error;
      } else {
        progress.show(i + 1, plan.problems.size(), np.name, a->name());
        const bool nhwc = via_nhwc(a, np.problem, plan.cfg);
        ConvConfig vcfg = plan.cfg;
        if (nhwc) vcfg.layout = Layout::nhwc;
        const std::vector<std::string> vs =
            o.variants && !a->is_peer() && a->can_implement(np.problem, vcfg) ? a->variants(np.problem, vcfg)
                                                                             : std::vector<std::string>{};
        if (!vs.empty()) {
          for (const std::string& v : vs) prow.push_back(measure(a, np, plan, ops, topt, verify, nhwc, v));
          continue;
        }
        r = measure(a, np, plan, ops, topt, verify, nhwc);
      }
      prow.push_back(std::move(r));
    }
    if (plan.peer && plan.cfg.device == Device::cpu && !prow.empty() && prow[0].status == "ok" && prow.size() > 1) {
      progress.show(i + 1, plan.problems.size(), np.name, plan.peer->name() + " (again)");
      const Row again = measure(plan.peer, np, plan, ops, topt, /*verify=*/false, false);
      Row& pr = prow[0];
      if (again.status == "ok") {
        const double first = pr.median_ms;
        if (again.median_ms < pr.median_ms) pr.median_ms = again.median_ms, pr.min_ms = again.min_ms, pr.spread = again.spread;
        pr.detail += (pr.detail.empty() ? "" : "; ") +
                     fmt::format("timed before and after the algorithms: {:.4g} / {:.4g} ms", first, again.median_ms);
      }
    }
    const double peer_ms = !prow.empty() && plan.peer && prow[0].status == "ok" ? prow[0].median_ms : NAN;
    const double peer_spread = !prow.empty() && plan.peer ? prow[0].spread : NAN;
    progress.clear();
    for (Row& r : prow) {
      if (plan.peer) r.peer = plan.peer->name(), r.peer_ms = peer_ms, r.peer_spread = r.is_peer ? NAN : peer_spread;
      table.row(r);
      rows.push_back(std::move(r));
    }
  }
  table.summary(rows, plan.peer ? plan.peer->name() : "");
  if (!o.csv.empty()) write_csv(o.csv, rows, info);
  if (!o.json.empty()) write_json(o.json, rows, info, sys, int(plan.problems.size()));
  // A wrong answer is never a success: exit 3; a row that failed with an error (out of memory, a CUDA
  // error, an exception) exits 4. The table and files are still written.
  const bool incorrect = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.status == "incorrect"; });
  const bool errored =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.status.rfind("error", 0) == 0; });
  return incorrect ? 3 : errored ? 4 : 0;
}

}  // namespace convkit::cli
