// The planner (convkit/plan.hpp): from a request to the algorithm, variant, layout and workspace that run it,
// and execute(), which runs a plan. The one place where the choice is made; conv2d(), conv2d_per_sample(),
// the CLI and the PyTorch ops all call these two.
#include "convkit/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdint>

#include "convkit/convkit.hpp"
#include "convkit/per_sample.hpp"
#include "core/log.hpp"
#include "core/tune.hpp"

namespace convkit {

// ---- operands ---------------------------------------------------------------------------------------

unsigned Operands::alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a == 0) return 256;
  unsigned align = 1;
  while (align < 256 && a % (align * 2) == 0) align *= 2;
  return align;
}

Operands Operands::of(const TensorView& src, const TensorView& wei, const TensorView& dst, const Epilogue& epi,
                      bool per_sample) {
  Operands o;
  o.src_align = alignment_of(src.data);
  o.wei_align = alignment_of(wei.data);
  o.dst_align = alignment_of(dst.data);
  o.has_bias = epi.bias != nullptr;
  o.bias_align = alignment_of(epi.bias);
  o.has_residual = epi.residual != nullptr;
  o.residual_align = alignment_of(epi.residual);
  o.residual_is_dst = epi.residual != nullptr && epi.residual == dst.data;
  o.per_sample = per_sample;
  o.activation = epi.activation;
  return o;
}

std::string Operands::to_string() const {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  auto align = [&](const char* what, unsigned a) {
    if (a < 16) add(std::string(what) + " " + std::to_string(a) + "-byte aligned");
  };
  align("input", src_align);
  align("weight", wei_align);
  align("output", dst_align);
  if (has_bias) align("bias", bias_align);
  if (has_residual) align("residual", residual_align);
  if (residual_is_dst) add("residual is the output");
  if (per_sample) add("per-sample weights");
  return s.empty() ? "aligned" : s;
}

Support Algorithm::accepts(const Conv2dProblem&, const ConvConfig&, const Operands& ops) const {
  if (ops.per_sample) return Support::no("it has no per-sample-weights mode.");
  return Support::yes();
}

std::string Plan::label() const {
  if (algorithm == nullptr) return "autotune (on the first run)";
  return algorithm->name() + (variant.empty() ? std::string() : "[" + variant + "]");
}

namespace {

std::string ms_text(double ms) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g ms", ms);
  return b;
}

bool selects(const std::string& algo) { return algo.empty() || algo == "auto" || algo == "autotune"; }

// Pointers of buffers the caller allocates after planning (a layout transform's copies): aligned.
Operands fresh_buffers(Operands o) {
  o.src_align = o.wei_align = o.dst_align = o.residual_align = 256;
  o.residual_is_dst = false;
  return o;
}

// The registry position of the heuristic's choice, or the registry's size when nothing can.
size_t heuristic_rank(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) {
  const auto algos = detail::device_algorithms(cfg.device);
  for (size_t i = 0; i < algos.size(); ++i)
    if (detail::heuristic_usable(algos[i], p, cfg, ops)) return i;
  return algos.size();
}

// The layout policy (PlanOptions::any_layout): the one a CUDA request is computed in.
Layout planned_layout(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops, const PlanOptions& opt) {
  if (!opt.any_layout || cfg.device != Device::cuda || p.n <= 0) return cfg.layout;
  ConvConfig there = cfg;
  there.layout = cfg.layout == Layout::nchw ? Layout::nhwc : Layout::nchw;
  const Operands moved = fresh_buffers(ops);
  if (selects(opt.algo)) return heuristic_rank(p, there, moved) < heuristic_rank(p, cfg, ops) ? there.layout : cfg.layout;
  const Algorithm* a = find_algorithm(opt.algo);
  if (a == nullptr || a->device() != Device::cuda || !a->available()) return cfg.layout;
  const bool here_ok = a->can_implement(p, cfg) && a->accepts(p, cfg, ops);
  const bool there_ok = a->can_implement(p, there) && a->accepts(p, there, moved);
  return !here_ok && there_ok ? there.layout : cfg.layout;
}

bool offers_variant(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg, const std::string& v) {
  const auto vs = a->variants(p, cfg);
  return std::find(vs.begin(), vs.end(), v) != vs.end();
}

size_t workspace_of(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg, const std::string& v) {
  return v.empty() ? a->workspace_bytes(p, cfg) : a->variant_workspace_bytes(p, cfg, v);
}

// Every algorithm's verdict next to a choice that did not come from the heuristic's walk.
std::vector<PlanVerdict> verdicts_beside(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops,
                                         const Algorithm* chosen, const std::string& chosen_text) {
  std::vector<PlanVerdict> v;
  for (const Algorithm* a : detail::device_algorithms(cfg.device)) {
    if (a == chosen) {
      v.push_back({a->name(), chosen_text});
      continue;
    }
    const Support s = detail::usable(a, p, cfg, ops);
    v.push_back({a->name(), s ? "not used; it could run this problem" : detail::reject_text(s)});
  }
  return v;
}

[[noreturn]] void nothing_can(const Conv2dProblem& p, const ConvConfig& cfg, const std::vector<PlanVerdict>& v,
                              const Operands& ops) {
  std::string reasons;
  for (const PlanVerdict& x : v) {
    std::string why = x.answer;
    if (why.rfind("rejected: ", 0) == 0) why = why.substr(10);
    reasons += "  " + x.algorithm + ": " + why + "\n";
  }
  if (reasons.empty())
    reasons = cfg.device == Device::cuda ? "  no CUDA algorithms in this build.\n" : "  no algorithms registered.\n";
  throw Error(StatusCode::unsupported, "no algorithm can run " + p.to_string() + " " + cfg.to_string() +
                                           (ops.per_sample ? " with per-sample weights" : "") + ":\n" + reasons);
}

}  // namespace

Plan plan(const Conv2dProblem& problem, const ConvConfig& config, const Operands& ops, const PlanOptions& opt) {
  throw_if_error(problem.validate());
  if (config.math == MathMode::tf32 && config.dtype != DType::f32)
    throw Error(StatusCode::invalid_problem, "tf32 math applies to f32 tensors only.");
  const std::string algo = opt.algo.empty() ? "auto" : opt.algo;
  if (selects(algo) && !opt.variant.empty())
    throw Error(StatusCode::invalid_problem,
                "variant '" + opt.variant + "' needs a named algorithm; \"" + algo + "\" picks its own.");
  Plan pl;
  pl.problem = problem;
  pl.operands = ops;
  pl.request_layout = config.layout;
  pl.config = config;
  pl.config.layout = planned_layout(problem, config, ops, opt);
  const ConvConfig& cfg = pl.config;
  const Operands here = pl.transforms() ? fresh_buffers(ops) : ops;
  pl.operands = here;

  if (!selects(algo)) {
    const Algorithm* a = find_algorithm(algo);
    if (!a) throw Error(StatusCode::invalid_problem, "unknown algorithm '" + algo + "' (see `convkit list`)");
    if (a->device() != cfg.device)
      throw Error(StatusCode::unsupported, a->name() + " runs on " + to_string(a->device()) +
                                               " but the tensors are on " + to_string(cfg.device) + ".");
    if (Support av = a->available(); !av) throw Error(StatusCode::not_available, a->name() + ": " + av.reason);
    if (Support ok = a->can_implement(problem, cfg); !ok)
      throw Error(StatusCode::unsupported, a->name() + " cannot run " + problem.to_string() + ": " + ok.reason);
    if (Support ok = a->accepts(problem, cfg, here); !ok)
      throw Error(StatusCode::unsupported, a->name() + " cannot run " + problem.to_string() + " on these operands (" +
                                               here.to_string() + "): " + ok.reason);
    if (!opt.variant.empty() && !offers_variant(a, problem, cfg, opt.variant)) {
      std::string list;
      for (const auto& v : a->variants(problem, cfg)) list += (list.empty() ? "" : ", ") + v;
      throw Error(StatusCode::invalid_problem, a->name() + " has no variant '" + opt.variant + "' for " +
                                                   problem.to_string() + " (" +
                                                   (list.empty() ? "it has no variants" : "its variants: " + list) +
                                                   ").");
    }
    pl.algorithm = a;
    pl.variant = opt.variant;
    pl.source = "named";
    pl.source_detail = "named by the caller";
    pl.verdicts = verdicts_beside(problem, cfg, here, a, "chosen (named)");
    pl.workspace_bytes = workspace_of(a, problem, cfg, pl.variant);
    return pl;
  }

  detail::TuneCache& cache = *detail::tune_cache();
  const detail::TuneKey key = detail::make_tune_key(problem, cfg, ops.per_sample);
  if (const auto e = cache.lookup(key)) {
    const Algorithm* a = find_algorithm(e->algorithm);  // lookup() only returns known algorithms
    Support s = detail::usable(a, problem, cfg, here);
    if (s && !e->variant.empty() && !offers_variant(a, problem, cfg, e->variant))
      s = Support::no("it no longer offers the variant '" + e->variant + "' for this problem.");
    if (s) {
      pl.algorithm = a;
      pl.variant = e->variant;
      pl.source = "tune cache";
      pl.source_detail = "tune cache " + (cache.path().empty() ? std::string("(in memory)") : cache.path()) + ": " +
                         ms_text(e->ms) + " when tuned on " + e->date;
      pl.verdicts = verdicts_beside(problem, cfg, here, a, "chosen (tune cache)");
      pl.workspace_bytes = workspace_of(a, problem, cfg, pl.variant);
      return pl;
    }
    pl.warning = "its entry for " + key.request() + " names " + e->algorithm +
                 (e->variant.empty() ? "" : "[" + e->variant + "]") + ", which cannot run it any more (" + s.reason +
                 "); ignoring it";
    pl.notes.push_back("tune cache entry ignored: " + pl.warning);
  }
  const Algorithm* first = detail::first_usable(problem, cfg, here, &pl.verdicts);
  if (!first) nothing_can(problem, cfg, pl.verdicts, here);
  if (algo == "autotune") {
    pl.source = "autotune";
    pl.source_detail = "autotune: no tune cache entry yet; the first run times the candidates";
    for (PlanVerdict& v : pl.verdicts)
      if (v.answer == "chosen" || v.answer.rfind("not tried", 0) == 0)
        v.answer = detail::usable(find_algorithm(v.algorithm), problem, cfg, here) ? "a candidate" : v.answer;
    return pl;
  }
  pl.algorithm = first;
  pl.source = "heuristic";
  pl.source_detail = "heuristic: the first registered algorithm that can implement it (no tune cache entry; "
                     "algo \"autotune\" or `convkit tune` measures instead)";
  pl.workspace_bytes = workspace_of(first, problem, cfg, "");
  return pl;
}

void execute(const Plan& pl, const Conv2dProblem& problem, const TensorView& src, const TensorView& wei,
             const TensorView& dst, const Epilogue& epi, void* stream, void* workspace, size_t workspace_bytes) {
  const ConvConfig& cfg = pl.config;
  if (!(problem == pl.problem))
    throw Error(StatusCode::invalid_problem, "the plan is for " + pl.problem.to_string() + ", not " +
                                                 problem.to_string() + ".");
  const bool per_sample = pl.operands.per_sample;
  if (per_sample) {
    throw_if_error(validate_per_sample(problem, src, wei, dst, epi));
    if (src.layout != cfg.layout || src.dtype != cfg.dtype || src.device != cfg.device)
      throw Error(StatusCode::invalid_tensor, "the tensors are " + ConvConfig{src.dtype, src.layout, src.device,
                                                                              cfg.math}.to_string() +
                                                  " but the plan is for " + cfg.to_string() + ".");
  } else {
    throw_if_error(validate_tensors(problem, cfg, src, wei, dst, epi));
  }
  const Operands ops = Operands::of(src, wei, dst, epi, per_sample);
  detail::TuneCache& cache = *detail::tune_cache();
  if (!pl.warning.empty()) cache.warn_once("unusable " + detail::make_tune_key(problem, cfg, per_sample).request(),
                                           pl.warning + " (said once)");
  ConvCall call{problem, cfg, src, wei, dst, epi, workspace, workspace_bytes, stream, pl.variant, per_sample};
  const Algorithm* algo = pl.algorithm;
  if (algo == nullptr) {  // "autotune" with no entry: measure, store, run the winner
    const detail::TuneResult t = detail::autotune(call);
    detail::TuneEntry e;
    e.key = detail::make_tune_key(problem, cfg, per_sample);
    e.algorithm = t.algorithm->name();
    e.variant = t.variant;
    e.ms = t.ms;
    e.date = detail::utc_now();
    cache.store(e);
    detail::log_autotune(call, t, pl.notes);
    algo = t.algorithm;
    call.variant = t.variant;
  } else {
    if (Support ok = algo->accepts(problem, cfg, ops); !ok)
      throw Error(StatusCode::unsupported, algo->name() + " was planned for other operands; it cannot run these (" +
                                               ops.to_string() + "): " + ok.reason);
    if (detail::dispatch_log_pending(problem, cfg, per_sample)) {
      detail::DispatchReport r;
      r.chosen = algo->name();
      r.variant = pl.variant;
      r.source = pl.source_detail;
      r.notes = pl.notes;
      if (ops.to_string() != "aligned") r.notes.push_back("operands: " + ops.to_string());
      for (const PlanVerdict& v : pl.verdicts) r.algorithms.push_back({v.algorithm, v.answer});
      detail::log_dispatch(problem, cfg, r, per_sample);
    }
  }
  // The plan's own figure, unless tuning chose the algorithm just now (the op runs a remembered plan on every
  // call: asking the algorithm again would redo its planning each time).
  const size_t need = pl.algorithm != nullptr ? pl.workspace_bytes : workspace_of(algo, problem, cfg, call.variant);
  Buffer owned;
  if (need > 0 && (call.workspace == nullptr || call.workspace_bytes < need)) {
    if (call.workspace != nullptr)
      throw Error(StatusCode::invalid_tensor, algo->name() + " needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    owned = Buffer(cfg.device, need);
    call.workspace = owned.data();
    call.workspace_bytes = need;
  }
  algo->run(call);
  // An owned workspace is freed on return; on CUDA wait for the kernels that use it first.
  if (owned.data() != nullptr && cfg.device == Device::cuda) device_synchronize(cfg.device);
}

// ---- the older entry points, as plans -----------------------------------------------------------------

const Algorithm& select(const Conv2dProblem& problem, const ConvConfig& cfg) {
  throw_if_error(problem.validate());
  std::vector<PlanVerdict> v;
  const Algorithm* a = detail::first_usable(problem, cfg, Operands{}, &v);
  if (!a) nothing_can(problem, cfg, v, Operands{});
  return *a;
}

Selection select_auto(const Conv2dProblem& problem, const ConvConfig& config) {
  const Plan pl = plan(problem, config);
  return {pl.algorithm, pl.variant, pl.source};
}

void conv2d(const Conv2dProblem& problem, const TensorView& src, const TensorView& wei, const TensorView& dst,
            const Epilogue& epi, const RunOptions& opt) {
  const ConvConfig cfg{src.dtype, src.layout, src.device, opt.math};
  throw_if_error(validate_tensors(problem, cfg, src, wei, dst, epi));
  PlanOptions po;
  po.algo = opt.algo;
  po.variant = opt.variant;
  const Plan pl = plan(problem, cfg, Operands::of(src, wei, dst, epi), po);
  execute(pl, problem, src, wei, dst, epi, opt.stream, opt.workspace, opt.workspace_bytes);
}

void conv2d_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                       const Epilogue& epi, const RunOptions& opt) {
  throw_if_error(validate_per_sample(p, src, wei, dst, epi));
  const ConvConfig cfg{src.dtype, src.layout, src.device, opt.math};
  PlanOptions po;
  po.algo = opt.algo;
  po.variant = opt.variant;
  const Plan pl = plan(p, cfg, Operands::of(src, wei, dst, epi, true), po);
  execute(pl, p, src, wei, dst, epi, opt.stream, opt.workspace, opt.workspace_bytes);
}

}  // namespace convkit
