// Selection: the heuristic, the tune cache and the autotuner (see core/tune.hpp and docs/tuning.md).
#include "core/tune.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/cuda_hooks.hpp"
#include "core/log.hpp"
#include "core/timing.hpp"

namespace convkit::detail {
namespace {

std::string fmt_ms(double ms) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g ms", ms);
  return b;
}

std::string cpu_model() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      std::string m = line.substr(colon + 1);
      m.erase(0, m.find_first_not_of(" \t"));
      while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.pop_back();
      if (!m.empty()) return m;
    }
    return std::string("unknown CPU");
  }();
  return model;
}

}  // namespace

void log_autotune(const ConvCall& call, const TuneResult& t, const std::vector<std::string>& notes) {
  if (!dispatch_log_pending(call.problem, call.config, call.per_sample)) return;
  DispatchReport r;
  r.chosen = t.algorithm->name();
  r.variant = t.variant;
  r.source = "autotune: the fastest of " + std::to_string(t.candidates.size()) + " candidate" +
             (t.candidates.size() == 1 ? "" : "s") +
             (call.config.device == Device::cuda ? " (CUDA events, L2 flushed before each run)" : " (a steady clock)");
  r.notes = notes;
  for (const TuneCandidate& c : t.candidates) {
    std::string line = "timed " + c.label() + ": ";
    if (!c.error.empty()) line += "failed: " + c.error;
    else if (c.pruned) line += fmt_ms(c.ms) + " (one probe run, over 3x the best: not timed further)";
    else line += fmt_ms(c.ms) + " (median of " + std::to_string(c.runs) + ")";
    r.notes.push_back(line);
  }
  const Algorithm* chosen = t.algorithm;
  for (const Algorithm* a : device_algorithms(call.config.device)) {
    std::string text;
    if (a == chosen) {
      text = "chosen (autotune, " + fmt_ms(t.ms) + ")";
    } else if (std::any_of(t.candidates.begin(), t.candidates.end(),
                           [&](const TuneCandidate& c) { return c.algorithm == a; })) {
      text = "timed, slower (see above)";
    } else {
      text = "not timed";
      for (const std::string& s : t.skipped)
        if (s.rfind(a->name() + ": ", 0) == 0) text = s.substr(a->name().size() + 2);
    }
    r.algorithms.push_back({a->name(), text});
  }
  log_dispatch(call.problem, call.config, r, call.per_sample);
}


// ---- keys -------------------------------------------------------------------------------------------

DeviceIdentity device_identity(Device device) {
  if (device == Device::cuda) return cuda_device_identity();
  return {cpu_model() + " (" + std::to_string(omp_get_max_threads()) + " threads)", "-"};
}

#ifndef CONVKIT_WITH_CUDA
DeviceIdentity cuda_device_identity() { return {"no CUDA in this build", "-"}; }
#endif

TuneKey make_tune_key(const Conv2dProblem& p, const ConvConfig& cfg, bool per_sample) {
  TuneKey k;
  k.problem = p.to_string();
  k.dtype = to_string(cfg.dtype);
  k.layout = std::string(to_string(cfg.layout)) + (per_sample ? "+per_sample" : "");
  k.math = to_string(cfg.math);
  k.device = to_string(cfg.device);
  const DeviceIdentity id = device_identity(cfg.device);
  k.device_name = id.name;
  k.driver = id.driver;
  k.version = version();
  return k;
}

bool is_reference_algorithm(const std::string& name) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends("_ref") || ends("_naive");
}

// ---- the autotuner ----------------------------------------------------------------------------------

std::string TuneCandidate::label() const {
  return algorithm->name() + (variant.empty() ? std::string() : "[" + variant + "]");
}

const TuneCandidate* TuneResult::runner_up() const {
  const TuneCandidate* best = nullptr;
  for (const TuneCandidate& c : candidates) {
    if (!c.ok() || (c.algorithm == algorithm && c.variant == variant)) continue;
    if (!best || c.ms < best->ms) best = &c;
  }
  return best;
}

std::vector<TuneCandidate> tune_candidates(const Conv2dProblem& p, const ConvConfig& cfg,
                                           std::vector<std::string>* skipped, const Operands& ops) {
  struct Algo {
    const Algorithm* a;
    std::vector<std::string> variants;
  };
  std::vector<Algo> fast, refs;
  for (const Algorithm* a : device_algorithms(cfg.device)) {
    const Support s = usable(a, p, cfg, ops);
    if (!s) {
      if (skipped) skipped->push_back(a->name() + ": " + reject_text(s));
      continue;
    }
    std::vector<std::string> vs = a->variants(p, cfg);
    if (vs.empty()) vs.push_back(std::string());
    (is_reference_algorithm(a->name()) ? refs : fast).push_back({a, vs});
  }
  if (!fast.empty()) {
    for (const Algo& r : refs)
      if (skipped) skipped->push_back(r.a->name() + ": not timed (a reference; faster algorithms can run this)");
  } else {
    fast = refs;
  }
  // Every algorithm's first variant, then the second ones, and so on, up to the limit.
  std::vector<TuneCandidate> out;
  size_t most = 0;
  for (const Algo& a : fast) most = std::max(most, a.variants.size());
  std::vector<std::vector<std::string>> dropped(fast.size());
  for (size_t round = 0; round < most; ++round)
    for (size_t i = 0; i < fast.size(); ++i) {
      if (round >= fast[i].variants.size()) continue;
      if (static_cast<int>(out.size()) >= kMaxTuneCandidates) {
        dropped[i].push_back(fast[i].variants[round]);
        continue;
      }
      TuneCandidate c;
      c.algorithm = fast[i].a;
      c.variant = fast[i].variants[round];
      out.push_back(c);
    }
  // Keep the registry order (and each algorithm's variant order) for timing.
  std::stable_sort(out.begin(), out.end(), [&](const TuneCandidate& x, const TuneCandidate& y) {
    auto index = [&](const Algorithm* a) {
      for (size_t i = 0; i < fast.size(); ++i)
        if (fast[i].a == a) return i;
      return fast.size();
    };
    return index(x.algorithm) < index(y.algorithm);
  });
  for (size_t i = 0; i < fast.size(); ++i)
    if (!dropped[i].empty() && skipped)
      skipped->push_back(fast[i].a->name() + ": " + std::to_string(dropped[i].size()) + " of its variants not timed (" +
                         std::to_string(kMaxTuneCandidates) + " candidates at most)");
  return out;
}

TuneResult autotune(const ConvCall& call) {
  const Conv2dProblem& p = call.problem;
  const ConvConfig& cfg = call.config;
  TuneResult result;
  result.candidates = tune_candidates(
      p, cfg, &result.skipped, Operands::of(call.src, call.wei, call.dst, call.epilogue, call.per_sample));
  if (result.candidates.empty()) {
    std::string why;
    for (const std::string& s : result.skipped) why += "  " + s + "\n";
    if (why.empty()) why = "  no algorithms for this device in this build.\n";
    throw Error(StatusCode::unsupported, "autotune: no algorithm can run " + p.to_string() + " " + cfg.to_string() +
                                             ":\n" + why);
  }
  // The scratch output, and the epilogue without a residual that aliases the caller's output.
  Buffer scratch(cfg.device, call.dst.bytes());
  ConvCall base = call;
  base.dst.data = scratch.data();
  if (base.epilogue.residual != nullptr && base.epilogue.residual == call.dst.data) base.epilogue.residual = nullptr;

  const bool only_one = result.candidates.size() == 1;
  TimingOptions probe;
  probe.warmup = only_one ? 0 : 1;
  probe.min_runs = probe.max_runs = probe.cpu_min_runs = 1;
  probe.budget_s = 0;
  TimingOptions full;
  full.warmup = 0;
  full.min_runs = full.max_runs = full.cpu_min_runs = 10;
  full.budget_s = 1e9;  // exactly 10 runs

  double best = NAN;
  for (TuneCandidate& c : result.candidates) {
    try {
      ConvCall cc = base;
      cc.variant = c.variant;
      const size_t ws_bytes =
          c.variant.empty() ? c.algorithm->workspace_bytes(p, cfg) : c.algorithm->variant_workspace_bytes(p, cfg, c.variant);
      Buffer ws(cfg.device, ws_bytes);
      cc.workspace = ws.data();
      cc.workspace_bytes = ws_bytes;
      c.algorithm->prepare(cc);
      auto fn = [&] { c.algorithm->run(cc); };
      const std::vector<double> first = time_runs(cfg.device, cc.stream, fn, probe);
      c.ms = median(first);
      c.runs = static_cast<int>(first.size());
      if (!only_one) {
        if (std::isfinite(best) && c.ms > 3.0 * best) {
          c.pruned = true;
        } else {
          const std::vector<double> ms = time_runs(cfg.device, cc.stream, fn, full);
          c.ms = median(ms);
          c.runs = static_cast<int>(ms.size());
        }
      }
      if (!std::isfinite(c.ms)) c.error = "no time was measured";
      else if (!std::isfinite(best) || c.ms < best) best = c.ms;
    } catch (const Error& e) {
      c.error = e.what();
      c.ms = NAN;
    } catch (const std::bad_alloc&) {
      c.error = "out of host memory";
      c.ms = NAN;
    }
    if (!c.error.empty())
      for (char& ch : c.error)
        if (ch == '\n') ch = ' ';
  }
  for (const TuneCandidate& c : result.candidates)
    if (c.ok() && !c.pruned && (!result.algorithm || c.ms < result.ms)) {
      result.algorithm = c.algorithm;
      result.variant = c.variant;
      result.ms = c.ms;
    }
  if (!result.algorithm) {
    std::string why;
    for (const TuneCandidate& c : result.candidates) why += "  " + c.label() + ": " + c.error + "\n";
    throw Error(StatusCode::unsupported, "autotune: every candidate failed on " + p.to_string() + " " +
                                             cfg.to_string() + ":\n" + why);
  }
  return result;
}

// ---- the heuristic ---------------------------------------------------------------------------------

Support usable(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) {
  Support av = a->available();
  if (!av) return Support::no("unavailable: " + av.reason);
  if (a->approximate()) {
    char bound[32];
    std::snprintf(bound, sizeof(bound), "%.0e", a->approximate_rel_l2());
    return Support::no(std::string("approximate (rel L2 up to ") + bound +
                       "): never chosen automatically; name it to run it.");
  }
  if (Support s = a->can_implement(p, cfg); !s) return s;
  return a->accepts(p, cfg, ops);
}

Support heuristic_usable(const Algorithm* a, const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) {
  if (Support s = usable(a, p, cfg, ops); !s) return s;
  if (Support s = a->heuristic_choice(p, cfg, ops); !s) return Support::no("passed over by the heuristic: " + s.reason);
  return Support::yes();
}

std::vector<const Algorithm*> device_algorithms(Device d) {
  std::vector<const Algorithm*> v;
  for (const Algorithm* a : algorithms())
    if (a->device() == d && !a->is_peer()) v.push_back(a);
  return v;
}

std::string reject_text(const Support& s) {
  return s.reason.rfind("unavailable: ", 0) == 0 ? s.reason : "rejected: " + s.reason;
}

const Algorithm* first_usable(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops,
                              std::vector<PlanVerdict>* verdicts) {
  const Algorithm* chosen = nullptr;
  for (const Algorithm* a : device_algorithms(cfg.device)) {
    const Support s = heuristic_usable(a, p, cfg, ops);
    if (!chosen && s) {
      chosen = a;
      if (verdicts) verdicts->push_back({a->name(), "chosen"});
      continue;
    }
    if (!verdicts) {
      if (chosen) break;
      continue;
    }
    if (chosen)
      verdicts->push_back({a->name(), s ? "not tried (after the chosen one); it could run this problem"
                                        : "not tried (after the chosen one); it would reject: " + s.reason});
    else
      verdicts->push_back({a->name(), reject_text(s)});
  }
  return chosen;
}

}  // namespace convkit::detail
