// Benchmark suites: plain-text files of named problems (bench/shapes/NAME.txt), one `name spec` per line,
// `#` comments. Found by path, or by name in the source tree (CONVKIT_SOURCE_DIR/bench/shapes) or an
// installed share/convkit/shapes next to the executable.
#pragma once

#include <string>
#include <vector>

#include "convkit/problem.hpp"

namespace convkit::cli {

struct NamedProblem {
  std::string name;  // the suite's name, or the spec itself for --problem
  Conv2dProblem problem;
  bool named_by_spec = false;  // name is the spec: rewritten when the batch size is changed

  void set_batch(int64_t n) {
    problem.n = n;
    if (named_by_spec) name = problem.to_string();
  }
};

// Throws UsageError naming the file and line of any bad entry, or the folders searched for an unknown name.
std::vector<NamedProblem> load_suite(const std::string& name_or_path, std::string* resolved_path = nullptr);
// Parses one --problem SPEC and validates it (UsageError on failure).
NamedProblem parse_problem_arg(const std::string& spec);
// --batch N: every problem at batch n, validated again (UsageError naming the problem that n breaks).
void set_batch_all(std::vector<NamedProblem>& problems, int64_t n);

}  // namespace convkit::cli
