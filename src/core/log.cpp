#include "core/log.hpp"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

namespace convkit::detail {
namespace {

std::mutex& print_mutex() {
  static std::mutex mu;
  return mu;
}

std::string dispatch_key(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& kind) {
  return p.to_string() + " " + cfg.to_string() + (kind.empty() ? "" : " " + kind);
}

const char* kind_of(bool per_sample) { return per_sample ? "per-sample" : ""; }

std::set<std::string>& dispatch_seen() {
  static std::set<std::string> seen;
  return seen;
}

}  // namespace

bool log_enabled(const char* topic) {
  const char* env = std::getenv("CONVKIT_LOG");
  if (!env) return false;
  std::string s = std::string(",") + env + ",";
  return s.find(std::string(",") + topic + ",") != std::string::npos || s.find(",all,") != std::string::npos;
}

void log_warning(const std::string& message) {
  std::lock_guard<std::mutex> lock(print_mutex());
  std::cerr << "convkit: warning: " << message << std::endl;
}

bool log_warning_once(const std::string& key, const std::string& message) {
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(print_mutex());
    if (!seen.insert(key).second) return false;
  }
  log_warning(message);
  return true;
}

bool dispatch_log_pending(const Conv2dProblem& p, const ConvConfig& cfg, bool per_sample) {
  return dispatch_log_pending(p, cfg, std::string(kind_of(per_sample)));
}

bool dispatch_log_pending(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& kind) {
  if (!log_enabled("dispatch")) return false;
  std::lock_guard<std::mutex> lock(print_mutex());
  return dispatch_seen().count(dispatch_key(p, cfg, kind)) == 0;
}

void log_dispatch(const Conv2dProblem& p, const ConvConfig& cfg, const DispatchReport& r, bool per_sample) {
  log_dispatch(p, cfg, r, std::string(kind_of(per_sample)));
}

void log_dispatch(const Conv2dProblem& p, const ConvConfig& cfg, const DispatchReport& r, const std::string& kind) {
  if (!log_enabled("dispatch")) return;
  const std::string key = dispatch_key(p, cfg, kind);
  std::ostringstream o;
  o << "[convkit dispatch] " << key << " -> " << r.chosen;
  if (!r.variant.empty()) o << " [" << r.variant << "]";
  o << "\n  from " << r.source << "\n";
  for (const auto& n : r.notes) o << "  " << n << "\n";
  size_t w = 0;
  for (const auto& v : r.algorithms) w = std::max(w, v.algorithm.size());
  for (const auto& v : r.algorithms)
    o << "  " << v.algorithm << ":" << std::string(w - v.algorithm.size() + 1, ' ') << v.text << "\n";
  std::lock_guard<std::mutex> lock(print_mutex());
  if (!dispatch_seen().insert(key).second) return;
  std::cerr << o.str() << std::flush;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace convkit::detail
