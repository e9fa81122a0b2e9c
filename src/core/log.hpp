// CONVKIT_LOG=dispatch: print, once per (problem, config), the chosen algorithm and every rejection.
#pragma once

#include <string>

#include "convkit/algorithm.hpp"

namespace convkit::detail {

bool log_enabled(const char* topic);
void log_dispatch(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& chosen,
                  const std::string& rejections);

}  // namespace convkit::detail
