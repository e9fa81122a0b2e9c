#include "core/log.hpp"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>

namespace convkit::detail {

bool log_enabled(const char* topic) {
  const char* env = std::getenv("CONVKIT_LOG");
  if (!env) return false;
  std::string s = std::string(",") + env + ",";
  return s.find(std::string(",") + topic + ",") != std::string::npos || s.find(",all,") != std::string::npos;
}

void log_dispatch(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& chosen,
                  const std::string& rejections) {
  if (!log_enabled("dispatch")) return;
  static std::mutex mu;
  static std::set<std::string> seen;
  const std::string key = p.to_string() + " " + cfg.to_string();
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(key).second) return;
  std::cerr << "[convkit dispatch] " << key << " -> " << chosen << "\n" << rejections;
}

}  // namespace convkit::detail
