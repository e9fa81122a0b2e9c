// The subcommands: each adds itself to the CLI11 app (filling an options struct) and runs after parsing.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace convkit::cli {

// A flag's value as a positive integer written in plain digits (at most 12: no overflow, no "1e3" or "+5").
inline CLI::Validator positive_integer() {
  return CLI::Validator(
      [](std::string& v) {
        return !v.empty() && v.size() < 13 && v.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoll(v) > 0
                   ? std::string()
                   : "must be a positive integer, got '" + v + "'";
      },
      "POSITIVE");
}

struct BenchOptions {
  std::vector<std::string> problems;  // --problem SPEC (repeatable)
  std::string suite;                  // --suite NAME|FILE
  std::string algo = "all";
  std::string device = "auto";
  std::string dtype = "f32";  // f32|f16|bf16|tf32 (tf32: f32 tensors, tf32 math)
  std::string layout = "nchw";
  std::string math;  // "" = not given: strict, or tf32 with --dtype tf32
  int64_t batch = 0;  // 0 = the suite's own
  std::string csv, json;
  int runs = 50;
  bool no_verify = false;
  bool tuned = false;  // use the tune cache's variant where it names the algorithm
  bool variants = false;  // one row per variant of each algorithm
  uint64_t seed = 1;
};
CLI::App* add_bench(CLI::App& app, BenchOptions& o);
int run_bench(const BenchOptions& o);

struct RunCmdOptions {
  std::string input, weight, bias, residual, output;
  std::string stride = "1", padding = "0", dilation = "1";
  int64_t groups = 1;
  std::string activation = "none";
  std::string algo = "auto";
  std::string variant;
  std::string device = "cpu";
  std::string dtype = "auto";  // auto (the input file's) | f32 | f16 | bf16 | tf32
};
CLI::App* add_run(CLI::App& app, RunCmdOptions& o);
int run_run(const RunCmdOptions& o);

struct TuneOptions {
  std::vector<std::string> problems;  // --problem SPEC (repeatable)
  std::string suite;                  // --suite NAME|FILE
  std::string dtype = "f32";
  std::string layout = "nchw";
  std::string device = "auto";
  int64_t batch = 0;  // 0 = the suite's own
  std::string cache;  // "" = the library's default ($CONVKIT_TUNE_CACHE, ~/.cache/convkit/tune-v1.txt); "off"
  uint64_t seed = 1;
  bool verbose = false;  // --verbose: every candidate's time
};
CLI::App* add_tune(CLI::App& app, TuneOptions& o);
int run_tune(const TuneOptions& o);

struct ListOptions {
  std::string device;  // empty = all
};
CLI::App* add_list(CLI::App& app, ListOptions& o);
int run_list(const ListOptions& o);

struct FilterOptions {
  std::string image;  // empty = assets/astronaut.png
  std::string kernels = "all";
  std::string out = "filter_out";
  std::string device = "auto";
};
CLI::App* add_filter(CLI::App& app, FilterOptions& o);
int run_filter(const FilterOptions& o);

struct PlanCmdOptions {
  std::string problem;
  std::string dtype = "f32";
  std::string layout = "nchw";
  std::string device = "auto";
  std::string algo = "auto";
  std::string activation = "none";
  bool per_sample = false;
};
CLI::App* add_plan(CLI::App& app, PlanCmdOptions& o);
int run_plan(const PlanCmdOptions& o);

CLI::App* add_doctor(CLI::App& app);
int run_doctor();

}  // namespace convkit::cli
