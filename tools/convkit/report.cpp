#include "report.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common.hpp"

namespace convkit::cli {
namespace {

// Fixed-width number, "-" for NaN; precision adapts so that 4 significant digits show.
std::string num(double v, int width) {
  if (!std::isfinite(v)) return fmt::format("{:>{}}", std::isnan(v) ? "-" : "inf", width);
  const double a = std::fabs(v);
  const int prec = a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : a >= 0.1 ? 3 : 4;
  return fmt::format("{:>{}.{}f}", v, width, prec);
}
std::string sci(double v, int width) {
  if (!std::isfinite(v)) return fmt::format("{:>{}}", std::isnan(v) ? "-" : "inf", width);
  return fmt::format("{:>{}.1e}", v, width);
}
double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

}  // namespace

std::string Row::status_text() const {
  if (status == "ok" || status == "incorrect") return status;
  return reason.empty() ? status : status + ": " + reason;
}

TablePrinter::TablePrinter(const std::vector<NamedProblem>& problems, const std::vector<std::string>& algos,
                           Device device, int elem_size)
    : wprob_(7), walgo_(9), cuda_(device == Device::cuda), elem_(elem_size) {
  for (const auto& p : problems) wprob_ = std::max(wprob_, p.name.size());
  for (const auto& a : algos) walgo_ = std::max(walgo_, a.size());
}

void TablePrinter::header() const {
  fmt::print("{:<{}}  {:<{}}  {:>9}  {:>8}  {:>8}  {:>7}  {:>8}  {:>9}  {:>7}  {}\n", "problem", wprob_, "algorithm",
             walgo_, "median ms", cuda_ ? "TFLOP/s" : "GFLOP/s", "GB/s", "ws MiB", "max abs", "rel L2", "vs peer",
             "status");
  std::fflush(stdout);
}

void TablePrinter::row(const Row& r) {
  if (!last_problem_.empty() && last_problem_ != r.problem.name) fmt::print("\n");
  last_problem_ = r.problem.name;
  const double rate = cuda_ ? r.gflops() / 1000.0 : r.gflops();
  std::string rel = sci(r.rel_l2, 8);
  rel += r.verified && r.sampled ? "*" : " ";
  any_sampled_ = any_sampled_ || (r.verified && r.sampled);
  const double ratio = r.ratio();
  std::string status = r.status_text();
  if (!r.detail.empty()) status += " (" + r.detail + ")";
  if (std::isfinite(r.transform_ms))
    status += fmt::format(" [conv only; + layout transforms {:.4g} ms = {:.4g} ms total]", r.transform_ms, r.total_ms());
  fmt::print("{:<{}}  {:<{}}  {}  {}  {}  {}  {}  {}  {}  {}\n", r.problem.name, wprob_, r.algorithm, walgo_,
             num(r.median_ms, 9), num(rate, 8), num(r.gbytes_per_s(elem_), 8),
             r.workspace_bytes ? num(mib(r.workspace_bytes), 7) : fmt::format("{:>7}", "0"), sci(r.max_abs, 8), rel,
             r.is_peer ? fmt::format("{:>7}", r.spread > Row::kNoisy ? "noisy" : "peer")
             : std::isfinite(ratio)           ? fmt::format("{:>6.2f}x", ratio)
             : r.noisy() && r.status == "ok" ? fmt::format("{:>7}", "noisy")
                                              : fmt::format("{:>7}", "-"),
             status);
  std::fflush(stdout);
}

std::vector<Geomean> geomeans(const std::vector<Row>& rows, int problems) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, int>> acc;  // sum of logs, count
  std::map<std::string, const Row*> best;             // per problem: the fastest ok convkit row
  for (const Row& r : rows) {
    if (r.is_peer) continue;
    if (!acc.count(r.algorithm)) order.push_back(r.algorithm), acc[r.algorithm] = {0.0, 0};
    const double ratio = r.ratio();
    if (std::isfinite(ratio) && ratio > 0) acc[r.algorithm].first += std::log(ratio), ++acc[r.algorithm].second;
    if (r.status == "ok" && r.timed()) {
      const Row*& b = best[r.problem.name];
      if (!b || r.median_ms < b->median_ms) b = &r;
    }
  }
  std::vector<Geomean> out;
  for (const auto& a : order) {
    const auto& [logs, n] = acc[a];
    out.push_back({a, n ? std::exp(logs / n) : NAN, n, problems});
  }
  double logs = 0;
  int n = 0;
  for (const auto& [name, r] : best)
    if (const double ratio = r->ratio(); std::isfinite(ratio) && ratio > 0) logs += std::log(ratio), ++n;
  out.push_back({"best-convkit", n ? std::exp(logs / n) : NAN, n, problems});
  return out;
}

void TablePrinter::summary(const std::vector<Row>& rows, const std::string& peer) const {
  if (any_sampled_)
    fmt::print("\n* checked at up to 2048 random output points against a double-precision reference "
               "(the full reference is too slow at this size, or the algorithm is that reference)\n");
  fmt::print("\n");
  int problems = 0;
  std::string last, peer_reason;
  bool peer_ran = false;
  for (const Row& r : rows) {
    if (r.problem.name != last) ++problems, last = r.problem.name;
    if (r.is_peer) {
      peer_ran = peer_ran || (r.status == "ok" && r.timed());
      if (peer_reason.empty() && r.status != "ok") peer_reason = r.status_text();
    }
  }
  const auto bad = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.status == "incorrect"; });
  if (bad > 0) fmt::print("WARNING: {} result{} INCORRECT (rel L2 above the bound, or non-finite values)\n\n", bad,
                          bad == 1 ? " is" : "s are");
  if (peer.empty()) {
    fmt::print("no speed-up ratios: there is no peer for this device in this build\n");
    return;
  }
  if (!peer_ran) {
    fmt::print("no speed-up ratios: the peer {} did not run ok on any problem ({})\n", peer, peer_reason);
    return;
  }
  fmt::print("geomean speed-up over {} (peer ms / convkit ms; > 1 means convkit is faster), over the problems "
             "where both ran ok:\n",
             peer);
  const size_t w = std::max<size_t>(walgo_, 12);
  for (const Geomean& g : geomeans(rows, problems)) {
    if (g.problems == 0)
      fmt::print("  {:<{}}  {:>7}  (no problem ran ok)\n", g.algorithm, w, "-");
    else
      fmt::print("  {:<{}}  {:>6.2f}x  ({} of {} problems)\n", g.algorithm, w, g.ratio, g.problems, g.total);
  }
}

namespace {

// One value per column, for CSV and JSON alike (NaN -> null).
nlohmann::ordered_json row_json(const Row& r, const RunInfo& info) {
  const Conv2dProblem& p = r.problem.problem;
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); };
  const int elem = int(dtype_size(info.config.dtype));
  nlohmann::ordered_json j;
  j["suite"] = info.suite;
  j["problem"] = r.problem.name;
  j["spec"] = p.to_string();
  for (auto [key, v] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"n", p.n}, {"c", p.c}, {"h", p.h}, {"w", p.w}, {"k", p.k}, {"r", p.r}, {"s", p.s},
           {"p", p.p()}, {"q", p.q()}, {"pad_h", p.pad_h}, {"pad_w", p.pad_w}, {"stride_h", p.stride_h},
           {"stride_w", p.stride_w}, {"dilation_h", p.dilation_h}, {"dilation_w", p.dilation_w}, {"groups", p.groups}})
    j[key] = v;
  j["gflop"] = p.flops() / 1e9;
  j["min_bytes"] = p.min_bytes(elem);
  j["arithmetic_intensity"] = p.flops() / p.min_bytes(elem);
  j["algorithm"] = r.algorithm;
  j["is_peer"] = r.is_peer;
  j["device"] = to_string(info.config.device);
  j["dtype"] = to_string(info.config.dtype);
  j["layout"] = to_string(info.config.layout);
  j["math"] = to_string(info.config.math);
  j["config"] = info.config.to_string();
  j["status"] = r.status;
  j["reason"] = r.reason;
  j["detail"] = r.detail;
  j["median_ms"] = number(r.median_ms);
  j["min_ms"] = number(r.min_ms);
  j["runs"] = r.runs;
  j["transform_ms"] = number(r.transform_ms);
  j["total_ms"] = number(r.total_ms());
  j["gflops"] = number(r.gflops());
  j["tflops"] = number(r.gflops() / 1000.0);
  j["gbps"] = number(r.gbytes_per_s(elem));
  j["workspace_bytes"] = r.workspace_bytes;
  j["workspace_mib"] = mib(r.workspace_bytes);
  j["verification"] = !r.verified ? "none" : r.sampled ? "sampled" : "full";
  j["oracle"] = r.oracle;
  j["verified_points"] = r.verified_points;
  j["max_abs"] = number(r.max_abs);
  j["rel_l2"] = number(r.rel_l2);
  j["bound"] = number(r.bound);
  j["nonfinite"] = r.nonfinite;
  j["peer"] = r.peer;
  j["peer_ms"] = number(r.peer_ms);
  j["ratio_vs_peer"] = number(r.ratio());
  j["spread"] = number(r.spread);  // (p75 - p25) / median of the timed runs
  j["noisy"] = r.noisy();           // spread (this row's or the peer's) above 25%: no ratio
  j["date"] = info.date;
  j["convkit_version"] = version();
  return j;
}

std::string csv_field(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  return v.dump();
}

// Written to a temporary name beside `path` and renamed into place, so that a run stopped by a signal or
// an error leaves either the old file or the whole new one, never a partial one.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (f) f << text;
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw UsageError("cannot write '" + path + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw UsageError("cannot write '" + path + "' (renaming the temporary file failed)");
  }
}

}  // namespace

void write_csv(const std::string& path, const std::vector<Row>& rows, const RunInfo& info) {
  std::string out;
  bool first = true;
  for (const Row& r : rows) {
    const auto j = row_json(r, info);
    if (first) {
      bool f = true;
      for (const auto& item : j.items()) out += (f ? "" : ",") + item.key(), f = false;
      out += "\n";
      first = false;
    }
    bool f = true;
    for (const auto& item : j.items()) out += (f ? "" : ",") + csv_field(item.value()), f = false;
    out += "\n";
  }
  write_file(path, out);
}

void write_json(const std::string& path, const std::vector<Row>& rows, const RunInfo& info, const SystemInfo& sys,
                int problems) {
  nlohmann::ordered_json j;
  j["convkit_version"] = version();
  j["date"] = info.date;
  j["device"] = to_string(info.config.device);
  j["config"] = {{"dtype", to_string(info.config.dtype)},
                 {"layout", to_string(info.config.layout)},
                 {"device", to_string(info.config.device)},
                 {"math", to_string(info.config.math)},
                 {"string", info.config.to_string()}};
  j["suite"] = info.suite;
  j["runs"] = info.runs;
  j["seed"] = info.seed;
  j["verify"] = info.verify;
  j["batch_override"] = info.batch_override;
  j["note"] = info.note;
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const GpuInfo& g : sys.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                    {"sm_count", g.sm_count},
                    {"memory_bytes", g.memory_bytes},
                    {"l2_bytes", g.l2_bytes},
                    {"smem_per_block_optin", g.smem_per_block_optin},
                    {"binary_has_code", g.binary_has_code},
                    {"code_note", g.code_note}});
  j["system"] = {{"convkit_version", sys.convkit_version},
                 {"cuda_built", sys.cuda_built},
                 {"cuda_build_archs", sys.cuda_build_archs},
                 {"cuda_runtime_version", sys.cuda_runtime_version},
                 {"cuda_driver_version", sys.cuda_driver_version},
                 {"cuda_error", sys.cuda_error},
                 {"gpus", gpus},
                 {"cublas_version", sys.cublas_version},
                 {"cudnn_version", sys.cudnn_version},
                 {"openblas", sys.openblas},
                 {"onednn_version", sys.onednn_version},
                 {"cpu_threads", sys.cpu_threads},
                 {"cpu_bf16_native", sys.cpu_bf16_native},
                 {"cpu_vector_math", sys.cpu_vector_math}};
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const Row& r : rows) arr.push_back(row_json(r, info));
  j["rows"] = arr;
  nlohmann::ordered_json gm = nlohmann::ordered_json::array();
  for (const Geomean& g : geomeans(rows, problems))
    gm.push_back({{"algorithm", g.algorithm},
                  {"geomean_ratio_vs_peer", std::isfinite(g.ratio) ? nlohmann::ordered_json(g.ratio) : nullptr},
                  {"problems_with_ratio", g.problems},
                  {"problems", g.total}});
  j["geomean"] = gm;
  write_file(path, j.dump(2) + "\n");
}

}  // namespace convkit::cli
