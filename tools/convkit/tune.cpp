// `convkit tune`: run the autotuner (the one conv2d("autotune") uses) on every problem of a suite or on
// --problem specs, print the winner, the runner-up and the number of candidates, and save the tune cache
// that conv2d("auto") reads (docs/tuning.md).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "commands.hpp"
#include "common.hpp"
#include "core/tune.hpp"
#include "oracle.hpp"
#include "suite.hpp"

namespace convkit::cli {
namespace {

struct TuneRow {
  std::string problem;
  std::string winner = "-", variant = "-", runner_up = "-";
  double ms = NAN, runner_up_ms = NAN;
  int candidates = 0;
  std::vector<std::string> timings;  // --verbose: "label: ms" for every candidate
  std::string status = "ok";  // ok, or the reason nothing was tuned
};

std::string ms_text(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : std::string("-"); }

// Gaussian operands for one problem on the device, and the autotuner on them.
TuneRow tune_one(const NamedProblem& np, const ConvConfig& cfg, uint64_t seed, detail::TuneCache& cache,
                 bool* saved) {
  const Conv2dProblem& p = np.problem;
  TuneRow row;
  row.problem = np.name;
  try {
    const size_t es = dtype_size(cfg.dtype);
    const size_t xb = size_t(p.input_elems()) * es, wb = size_t(p.weight_elems()) * es,
                 yb = size_t(p.output_elems()) * es;
    Buffer hx(Device::cpu, xb), hw(Device::cpu, wb);
    fill_gaussian(hx.data(), cfg.dtype, p.input_elems(), mix_seed(seed, p.to_string()));
    fill_gaussian(hw.data(), cfg.dtype, p.weight_elems(), mix_seed(seed ^ 0x77ull, p.to_string()));
    Buffer dx, dw;
    void* x = hx.data();
    void* w = hw.data();
    if (cfg.device == Device::cuda) {
      dx = Buffer(cfg.device, xb);
      dw = Buffer(cfg.device, wb);
      dx.copy_from_host(hx.data(), xb);
      dw.copy_from_host(hw.data(), wb);
      x = dx.data(), w = dw.data();
    }
    Buffer y(cfg.device, yb);
    ConvCall call;
    call.problem = p;
    call.config = cfg;
    call.src = {x, cfg.dtype, cfg.layout, cfg.device, input_dims(p)};
    call.wei = {w, cfg.dtype, cfg.layout, cfg.device, weight_dims(p)};
    call.dst = {y.data(), cfg.dtype, cfg.layout, cfg.device, output_dims(p)};
    // The planner first (what conv2d(algo = "autotune") asks): a request nothing can run fails with the same
    // list of reasons; then the autotuner that execute() runs for an "autotune" plan, here always (re-tuning).
    PlanOptions po;
    po.algo = "autotune";
    (void)convkit::plan(p, cfg, convkit::Operands::of(call.src, call.wei, call.dst, call.epilogue), po);
    const detail::TuneResult t = detail::autotune(call);
    row.winner = t.algorithm->name();
    row.variant = t.variant.empty() ? "-" : t.variant;
    row.ms = t.ms;
    row.candidates = int(t.candidates.size());
    if (const detail::TuneCandidate* r = t.runner_up()) row.runner_up = r->label(), row.runner_up_ms = r->ms;
    for (const detail::TuneCandidate& c : t.candidates)
      row.timings.push_back(c.label() + " " +
                            (!c.error.empty() ? "failed: " + one_line(c.error)
                                              : ms_text(c.ms) + (c.pruned ? " (one probe run: pruned)" : "")));
    detail::TuneEntry e;
    e.key = detail::make_tune_key(p, cfg);
    e.algorithm = row.winner;
    e.variant = t.variant;
    e.ms = t.ms;
    e.date = utc_now();
    if (!cache.store(e)) *saved = false;
  } catch (const Error& e) {
    row.status = one_line(e.what());
  } catch (const std::bad_alloc&) {
    row.status = "out of host memory";
  }
  return row;
}

}  // namespace

CLI::App* add_tune(CLI::App& app, TuneOptions& o) {
  CLI::App* sub = app.add_subcommand(
      "tune", "Time every algorithm (and variant) that can run each problem, print the winners and save them in "
              "the tune cache that conv2d(\"auto\") reads.");
  sub->add_option("--problem", o.problems, "a problem, e.g. n16c256h128w128k256r3s3p1 (repeatable)");
  sub->add_option("--suite", o.suite, "a suite name (seeds, resnet50, mobilenet_v2, edge) or a suite file, as in "
                                      "bench");
  sub->add_option("--dtype", o.dtype, "f32|f16|bf16|tf32 (tf32: f32 tensors with tf32 math)")->capture_default_str();
  sub->add_option("--layout", o.layout, "nchw|nhwc")->capture_default_str();
  sub->add_option("--device", o.device, "cpu|cuda|auto (auto: cuda when a GPU is usable)")->capture_default_str();
  sub->add_option("--batch", o.batch, "override every problem's batch size N")->check(positive_integer());
  sub->add_option("--cache", o.cache, "the tune cache file to update (default: $CONVKIT_TUNE_CACHE, else "
                                      "$XDG_CACHE_HOME/convkit/tune-v1.txt or ~/.cache/convkit/tune-v1.txt); off "
                                      "= do not save");
  sub->add_option("--seed", o.seed, "seed of the Gaussian inputs")->capture_default_str();
  sub->add_flag("--verbose", o.verbose, "also print every candidate's time (ms) under its problem");
  return sub;
}

int run_tune(const TuneOptions& o) {
  if (o.problems.empty() && o.suite.empty()) throw UsageError("tune: give --suite NAME or --problem SPEC");
  std::vector<NamedProblem> problems;
  for (const auto& spec : o.problems) problems.push_back(parse_problem_arg(spec));
  if (!o.suite.empty()) {
    auto s = load_suite(o.suite);
    problems.insert(problems.end(), s.begin(), s.end());
  }
  if (o.batch > 0) set_batch_all(problems, o.batch);
  ConvConfig cfg;
  apply_dtype_flags(o.dtype, "", cfg);
  try {
    cfg.layout = parse_layout(o.layout);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  cfg.device = resolve_device(o.device);

  const std::string path = o.cache.empty() ? detail::tune_cache_path_from_env() : o.cache == "off" ? "" : o.cache;
  const std::shared_ptr<detail::TuneCache> cache = detail::tune_cache_at(path);
  const detail::DeviceIdentity id = detail::device_identity(cfg.device);
  fmt::print("convkit {} tune: {} ({} problem{}), {}, on {}{}\ncache: {}\n\n", version(),
             o.suite.empty() ? std::string("--problem") : "suite " + o.suite, problems.size(),
             problems.size() == 1 ? "" : "s", cfg.to_string(), id.name,
             id.driver == "-" ? std::string() : ", driver " + id.driver,
             path.empty() ? std::string("none (results are not saved)") : path);

  size_t wp = 7, wa = 6, wv = 7, wr = 9;
  for (const auto& np : problems) wp = std::max(wp, np.name.size());
  for (const Algorithm* a : algorithms()) wa = std::max(wa, a->name().size()), wr = std::max(wr, a->name().size());
  const auto print_row = [&](const TuneRow& r) {
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>9}  {:<{}}  {:>9}  {:>10}  {}\n", r.problem, wp, r.winner, wa, r.variant, wv,
               ms_text(r.ms), r.runner_up, wr, ms_text(r.runner_up_ms), r.candidates, r.status);
    std::fflush(stdout);
  };
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>9}  {:<{}}  {:>9}  {:>10}  {}\n", "problem", wp, "winner", wa, "variant", wv,
             "ms", "runner-up", wr, "ms", "candidates", "status");
  const bool progress = isatty(STDERR_FILENO) != 0;
  int tuned = 0;
  bool saved = !path.empty();
  for (size_t i = 0; i < problems.size(); ++i) {
    if (progress) std::cerr << "\r\033[K[" << i + 1 << "/" << problems.size() << "] " << problems[i].name << std::flush;
    const TuneRow r = tune_one(problems[i], cfg, o.seed, *cache, &saved);
    if (progress) std::cerr << "\r\033[K" << std::flush;
    print_row(r);
    if (o.verbose)
      for (const std::string& t : r.timings) fmt::print("    {}  {}\n", r.problem, t);
    tuned += r.status == "ok";
  }
  fmt::print("\n{} of {} problem{} tuned; {}\n", tuned, problems.size(), problems.size() == 1 ? "" : "s",
             path.empty()  ? std::string("nothing saved (--cache off or CONVKIT_TUNE_CACHE=off)")
             : !saved      ? "NOT saved in " + path + " (see the warning above)"
             : tuned == 0  ? std::string("nothing to save")
                           : "saved in " + path);
  if (tuned == 0) throw UsageError("no problem could be tuned (see the status column)");
  if (!saved && !path.empty()) throw UsageError("the tune cache " + path + " could not be written (see the warning)");
  return 0;
}

}  // namespace convkit::cli
