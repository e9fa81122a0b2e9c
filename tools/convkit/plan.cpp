// `convkit plan`: what would run for a problem, without running it: the library's plan (convkit::plan, the
// answer convkit.plan gives in Python): the algorithm `auto` picks (or the one named), its variant, the layout
// it computes in (on CUDA an NCHW request may be computed in NHWC, as `convkit run` and the PyTorch ops do),
// its workspace, where the choice came from (the tune cache or the heuristic), and every algorithm of the
// device with its answer, in registry order (the order `auto` asks them in). Exit 0 when the plan can run,
// 2 when nothing can (or the named algorithm cannot).
#include <fmt/format.h>

#include <algorithm>

#include "commands.hpp"
#include "common.hpp"
#include "convkit/convkit.hpp"
#include "suite.hpp"

namespace convkit::cli {

CLI::App* add_plan(CLI::App& app, PlanCmdOptions& o) {
  CLI::App* sub = app.add_subcommand("plan", "show what conv2d would run for a problem, and why");
  sub->add_option("--problem", o.problem, "the problem, e.g. n32c144h56w56k144r3s3p1g144")->required();
  sub->add_option("--dtype", o.dtype, "f32|f16|bf16|tf32 (tf32: f32 tensors with tf32 math)")->capture_default_str();
  sub->add_option("--layout", o.layout, "nchw|nhwc: the tensors' layout")->capture_default_str();
  sub->add_option("--device", o.device, "cpu|cuda|auto (auto: cuda when a GPU is usable)")->capture_default_str();
  sub->add_option("--algo", o.algo, "auto, autotune, or an algorithm name (is it possible, and why not)")
      ->capture_default_str();
  sub->add_option("--activation", o.activation,
                  "the epilogue's activation (none, relu, relu6, silu, gelu, hardswish, sigmoid, hardsigmoid): the "
                  "heuristic weighs its cost")
      ->capture_default_str();
  sub->add_flag("--per-sample", o.per_sample, "per-sample weights (conv2d_per_sample)");
  return sub;
}

int run_plan(const PlanCmdOptions& o) {
  const NamedProblem np = parse_problem_arg(o.problem);
  ConvConfig cfg;
  cfg.device = resolve_device(o.device);
  cfg.layout = parse_layout(o.layout);
  apply_dtype_flags(o.dtype, "", cfg);
  if (o.algo != "auto" && o.algo != "autotune" && find_algorithm(o.algo) == nullptr)
    throw UsageError("unknown algorithm '" + o.algo + "' (see `convkit list`)");
  const Conv2dProblem& p = np.problem;
  convkit::Operands ops;
  ops.per_sample = o.per_sample;
  try {
    ops.activation = parse_activation(o.activation);
  } catch (const Error& e) {
    throw UsageError(std::string("--activation: ") + e.what());
  }
  fmt::print("problem   {}\nconfig    {}{}{}\n", p.to_string(), cfg.to_string(), o.per_sample ? " per-sample" : "",
             ops.activation != Activation::none ? std::string(" activation ") + o.activation : std::string());
  convkit::PlanOptions po;
  po.algo = o.algo;
  po.any_layout = !o.per_sample;  // (conv2d_per_sample computes in the tensors' layout)
  std::vector<PlanVerdict> verdicts;
  bool possible = false;
  try {
    const convkit::Plan pl = plan(p, cfg, ops, po);
    possible = true;
    const std::vector<std::string> vs = pl.algorithm ? pl.algorithm->variants(p, pl.config) : std::vector<std::string>{};
    fmt::print("algorithm {}\n", pl.algorithm ? pl.algorithm->name() : "(autotune: decided on the first run)");
    fmt::print("variant   {}\n", !pl.variant.empty() ? pl.variant : vs.empty() ? "-" : vs.front() + " (its own choice)");
    fmt::print("layout    {}{}\n", to_string(pl.config.layout),
               pl.transforms() ? std::string(" (the ") + to_string(cfg.layout) + " tensors transformed in and out)" : "");
    fmt::print("workspace {} bytes\nsource    {}\nwhy       {}\n", pl.workspace_bytes, pl.source, pl.source_detail);
    for (const std::string& n : pl.notes) fmt::print("note      {}\n", n);
    verdicts = pl.verdicts;
  } catch (const Error& e) {
    if (e.code() == StatusCode::invalid_problem) throw;
    auto support = [&](const Algorithm* a) {
      Support s = a->available();
      if (s) s = a->can_implement(p, cfg);
      if (s) s = a->accepts(p, cfg, ops);
      return s;
    };
    const Algorithm* named = find_algorithm(o.algo);
    const Support why = named ? support(named) : Support::yes();
    if (!named) fmt::print("algorithm none: {}\n", one_line(e.what()));
    else fmt::print("algorithm {} (cannot: {})\n", o.algo, one_line(why ? std::string(e.what()) : why.reason));
    for (const Algorithm* a : algorithms()) {
      if (a->device() != cfg.device || a->is_peer()) continue;
      const Support s = support(a);
      verdicts.push_back({a->name(), s ? (a->approximate() ? "can (approximate: by name only)" : "can")
                                       : "rejected: " + s.reason});
    }
  }
  fmt::print("\nevery {} algorithm, in the order auto asks:\n", to_string(cfg.device));
  size_t w = 0;
  for (const PlanVerdict& v : verdicts) w = std::max(w, v.algorithm.size());
  for (const PlanVerdict& v : verdicts)
    fmt::print("  {:<{}}  {}{}\n", v.algorithm, w, v.answer, v.answer.rfind("chosen", 0) == 0 ? "  <- chosen" : "");
  return possible ? 0 : 2;  // nothing can run it (auto), or the named algorithm cannot
}

}  // namespace convkit::cli
