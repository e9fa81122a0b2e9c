// `convkit plan`: what conv2d would run for a problem, without running it: the algorithm `auto` picks (or the
// one named), its variant and workspace, where the choice came from (the tune cache or the heuristic), and
// every algorithm of the device with its answer, in registry order (the order `auto` asks them in). Exit 0
// when the plan can run, 2 when nothing can (or the named algorithm cannot).
#include <fmt/format.h>

#include <algorithm>

#include "commands.hpp"
#include "common.hpp"
#include "convkit/convkit.hpp"
#include "suite.hpp"

namespace convkit::cli {

CLI::App* add_plan(CLI::App& app, PlanOptions& o) {
  CLI::App* sub = app.add_subcommand("plan", "show what conv2d would run for a problem, and why");
  sub->add_option("--problem", o.problem, "the problem, e.g. n32c144h56w56k144r3s3p1g144")->required();
  sub->add_option("--dtype", o.dtype, "f32|f16|bf16|tf32 (tf32: f32 tensors with tf32 math)")->capture_default_str();
  sub->add_option("--layout", o.layout, "nchw|nhwc")->capture_default_str();
  sub->add_option("--device", o.device, "cpu|cuda|auto (auto: cuda when a GPU is usable)")->capture_default_str();
  sub->add_option("--algo", o.algo, "auto, or an algorithm name (is it possible, and why not)")->capture_default_str();
  return sub;
}

int run_plan(const PlanOptions& o) {
  const NamedProblem np = parse_problem_arg(o.problem);
  ConvConfig cfg;
  cfg.device = resolve_device(o.device);
  cfg.layout = parse_layout(o.layout);
  apply_dtype_flags(o.dtype, "", cfg);
  const Conv2dProblem& p = np.problem;
  fmt::print("problem   {}\nconfig    {}\n", p.to_string(), cfg.to_string());
  const Algorithm* chosen = nullptr;
  bool possible = false;
  std::string variant, source;
  if (o.algo.empty() || o.algo == "auto") {
    try {
      const Selection s = select_auto(p, cfg);
      chosen = s.algorithm, variant = s.variant, source = s.source;
    } catch (const Error& e) {
      fmt::print("algorithm none: {}\n", one_line(e.what()));
    }
  } else {
    chosen = find_algorithm(o.algo);
    if (!chosen) throw UsageError("unknown algorithm '" + o.algo + "' (see `convkit list`)");
    source = "named";
  }
  if (chosen) {
    const Support av = chosen->available();
    const Support ok = av ? chosen->can_implement(p, cfg) : av;
    fmt::print("algorithm {}{}\n", chosen->name(), ok ? "" : " (cannot: " + ok.reason + ")");
    possible = bool(ok);
    if (ok) {
      const size_t ws = variant.empty() ? chosen->workspace_bytes(p, cfg) : chosen->variant_workspace_bytes(p, cfg, variant);
      const std::vector<std::string> vs = chosen->variants(p, cfg);
      fmt::print("variant   {}\nworkspace {} bytes\nsource    {}\n",
                 variant.empty() ? (vs.empty() ? "-" : vs.front() + " (its own choice)") : variant, ws, source);
    }
  }
  fmt::print("\nevery {} algorithm, in the order auto asks:\n", to_string(cfg.device));
  size_t w = 0;
  for (const Algorithm* a : algorithms())
    if (a->device() == cfg.device) w = std::max(w, a->name().size());
  for (const Algorithm* a : algorithms()) {
    if (a->device() != cfg.device) continue;
    const Support av = a->available();
    const Support ok = av ? a->can_implement(p, cfg) : av;
    std::string note = ok ? (a->approximate() ? "can (approximate: by name only)" : "can") : "no: " + ok.reason;
    if (a == chosen) note += "  <- chosen";
    fmt::print("  {:<{}}  {}\n", a->name(), w, note);
  }
  return possible ? 0 : 2;  // nothing can run it (auto), or the named algorithm cannot
}

}  // namespace convkit::cli
