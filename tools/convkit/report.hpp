// The benchmark's results: one Row per problem x algorithm, printed as a table as they arrive, then the
// geomean summary; the same rows as CSV and JSON for machines (every number in the table is in both).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "convkit/system.hpp"
#include "suite.hpp"

namespace convkit::cli {

struct Row {
  NamedProblem problem;
  std::string algorithm;
  bool is_peer = false;
  std::string status = "ok";  // ok | incorrect | unsupported | skipped | error
  std::string reason;         // why, for every status but ok/incorrect
  std::string detail;         // the algorithm's detail() (e.g. the peer's engine)
  double median_ms = NAN, min_ms = NAN;
  double spread = NAN;       // (p75 - p25) / median of the timed runs (detail::spread)
  double peer_spread = NAN;  // the same of the peer's row on this problem
  int runs = 0;
  // "<algo>+nhwc" rows (NCHW asked, the algorithm reads NHWC only): median_ms is the convolution alone and
  // transform_ms the x -> NHWC and y -> NCHW transforms around it (NaN for every other row).
  double transform_ms = NAN;
  double total_ms() const { return std::isfinite(transform_ms) ? median_ms + transform_ms : median_ms; }
  size_t workspace_bytes = 0;
  // Verification (verify == false when --no-verify or the algorithm did not run).
  bool verified = false;
  bool sampled = false;
  int64_t verified_points = 0;
  std::string oracle;
  double max_abs = NAN, rel_l2 = NAN, bound = NAN;
  int64_t nonfinite = 0;
  // The peer on the same problem (NaN when it did not run).
  std::string peer;
  double peer_ms = NAN;

  bool timed() const { return std::isfinite(median_ms); }
  // A row or peer whose runs spread more than detail::kNoisySpread: its median is not compared.
  bool noisy() const { return spread > kNoisy || peer_spread > kNoisy; }
  double ratio() const {
    return status == "ok" && timed() && std::isfinite(peer_ms) && !noisy() ? peer_ms / median_ms : NAN;
  }
  static constexpr double kNoisy = 0.25;  // = detail::kNoisySpread
  double gflops() const { return timed() ? problem.problem.flops() / (median_ms * 1e6) : NAN; }
  double gbytes_per_s(int elem) const { return timed() ? problem.problem.min_bytes(elem) / (median_ms * 1e6) : NAN; }
  std::string status_text() const;  // "ok", "incorrect", "unsupported: <reason>", ...
};

struct RunInfo {  // facts about the whole run, for the JSON/CSV and the header line
  std::string suite;  // name or path, or "" for --problem only
  ConvConfig config;
  std::string date;
  int runs = 0;
  uint64_t seed = 0;
  bool verify = true;
  int64_t batch_override = 0;  // 0 = the suite's own
  std::string note;            // e.g. the automatic batch-1 note
};

// Streams the table to stdout: the header once, then each row as it is finished.
class TablePrinter {
 public:
  TablePrinter(const std::vector<NamedProblem>& problems, const std::vector<std::string>& algos, Device device,
               int elem_size);
  void header() const;
  void row(const Row& r);
  void summary(const std::vector<Row>& rows, const std::string& peer) const;

 private:
  size_t wprob_, walgo_;
  bool cuda_;
  int elem_;
  std::string last_problem_;
  bool any_sampled_ = false;
};

// Geomean of peer_ms / algo_ms per algorithm over the rows where both ran ok; "best-convkit" takes, per
// problem, the fastest ok convkit algorithm.
struct Geomean {
  std::string algorithm;
  double ratio = NAN;
  int problems = 0;  // with a ratio
  int total = 0;     // problems in the suite
};
std::vector<Geomean> geomeans(const std::vector<Row>& rows, int problems);

void write_csv(const std::string& path, const std::vector<Row>& rows, const RunInfo& info);
void write_json(const std::string& path, const std::vector<Row>& rows, const RunInfo& info, const SystemInfo& sys,
                int problems);

}  // namespace convkit::cli
