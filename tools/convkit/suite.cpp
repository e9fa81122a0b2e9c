#include "suite.hpp"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common.hpp"

namespace convkit::cli {
namespace {

std::vector<std::string> shape_dirs() {
  std::vector<std::string> dirs;
  if (!source_dir().empty()) dirs.push_back(source_dir() + "/bench/shapes");
  if (!exe_dir().empty()) dirs.push_back(exe_dir() + "/../share/convkit/shapes");
  return dirs;
}

std::vector<std::string> known_suites(const std::vector<std::string>& dirs) {
  std::set<std::string> names;
  for (const auto& d : dirs) {
    DIR* dir = opendir(d.c_str());
    if (!dir) continue;
    while (dirent* e = readdir(dir)) {
      std::string f = e->d_name;
      if (f.size() > 4 && f.compare(f.size() - 4, 4, ".txt") == 0) names.insert(f.substr(0, f.size() - 4));
    }
    closedir(dir);
  }
  return {names.begin(), names.end()};
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

NamedProblem parse_problem_arg(const std::string& spec) {
  NamedProblem np;
  try {
    np.problem = Conv2dProblem::parse(spec);
  } catch (const Error& e) {
    throw UsageError(std::string("--problem: ") + e.what());
  }
  if (Status s = np.problem.validate(); !s.ok())
    throw UsageError("--problem " + spec + ": invalid convolution: " + s.message);
  np.name = spec;
  np.named_by_spec = true;
  return np;
}

std::vector<NamedProblem> load_suite(const std::string& name_or_path, std::string* resolved_path) {
  std::string path;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               (name_or_path.size() > 4 && name_or_path.rfind(".txt") == name_or_path.size() - 4);
  const auto dirs = shape_dirs();
  if (file_exists(name_or_path)) {
    path = name_or_path;
  } else if (!looks_like_path) {
    for (const auto& d : dirs)
      if (file_exists(d + "/" + name_or_path + ".txt")) {
        path = d + "/" + name_or_path + ".txt";
        break;
      }
  }
  if (path.empty()) {
    if (looks_like_path) throw UsageError("suite file '" + name_or_path + "' does not exist");
    const auto names = known_suites(dirs);
    throw UsageError("unknown suite '" + name_or_path + "': no such file, and no " + name_or_path + ".txt in " +
                     (dirs.empty() ? std::string("any shapes folder") : join(dirs, " or ")) +
                     (names.empty() ? std::string() : " (suites there: " + join(names, ", ") + ")"));
  }
  if (resolved_path) *resolved_path = path;

  std::ifstream f(path);
  if (!f) throw UsageError("cannot read suite file '" + path + "'");
  std::vector<NamedProblem> out;
  std::set<std::string> seen;
  std::string line;
  for (int lineno = 1; std::getline(f, line); ++lineno) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream in(line);
    std::vector<std::string> tok;
    for (std::string t; in >> t;) tok.push_back(t);
    if (tok.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (tok.size() > 2) throw UsageError(where + "expected `name spec`, got " + std::to_string(tok.size()) + " fields");
    NamedProblem np;
    np.name = tok[0];
    const std::string& spec = tok.back();
    try {
      np.problem = Conv2dProblem::parse(spec);
    } catch (const Error& e) {
      throw UsageError(where + e.what());
    }
    if (Status s = np.problem.validate(); !s.ok())
      throw UsageError(where + np.name + " is not a valid convolution: " + s.message);
    if (!seen.insert(np.name).second) throw UsageError(where + "the name '" + np.name + "' is used twice");
    out.push_back(std::move(np));
  }
  if (out.empty()) throw UsageError("suite file '" + path + "' holds no problems");
  return out;
}

void set_batch_all(std::vector<NamedProblem>& problems, int64_t n) {
  for (auto& np : problems) {
    np.set_batch(n);
    if (Status s = np.problem.validate(); !s.ok()) throw UsageError(np.name + " at --batch: " + s.message);
  }
}

}  // namespace convkit::cli
