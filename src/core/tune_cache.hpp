// The on-disk tune cache: which algorithm (and variant) autotuning found fastest for a problem on a device.
//
// Where: $CONVKIT_TUNE_CACHE (a file path; "off" = no file), else $XDG_CACHE_HOME/convkit/tune-v1.txt, else
// $HOME/.cache/convkit/tune-v1.txt. Without a file the cache still remembers entries for the process.
//
// Format (text, no library needed): the header line `convkit-tune-cache v1`, `#` comment lines, then one
// entry per line, 12 tab-separated fields:
//   problem dtype layout math device device_name driver convkit_version | algorithm variant ms date
// The first eight are the key; variant "-" means the algorithm's own choice; a per-sample request
// (conv2d_per_sample) has the layout "nchw+per_sample" or "nhwc+per_sample". docs/tuning.md has the details.
//
// Trust: a file with another header, a line that does not parse, an entry naming an unknown algorithm, or a
// stale entry (the same request tuned by another convkit version, GPU or driver) is never used; each kind
// gives ONE warning per file and process on stderr (naming the file and the reason), never an error.
// Writes take a lock file, merge with what other processes wrote since, write a temporary file and rename it
// over the cache (atomic). Every method is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace convkit::detail {

struct TuneKey {
  std::string problem;                       // Conv2dProblem::to_string()
  std::string dtype, layout, math, device;   // to_string() of each
  std::string device_name;  // "NVIDIA H200 (132 SMs)" or the CPU model and its thread count
  std::string driver;       // the CUDA driver version, "-" on the CPU
  std::string version;      // convkit::version()

  auto tie() const { return std::tie(problem, dtype, layout, math, device, device_name, driver, version); }
  bool operator<(const TuneKey& o) const { return tie() < o.tie(); }
  bool operator==(const TuneKey& o) const { return tie() == o.tie(); }
  // The same problem and configuration (the first five fields), whoever tuned it.
  bool same_request(const TuneKey& o) const {
    return std::tie(problem, dtype, layout, math, device) == std::tie(o.problem, o.dtype, o.layout, o.math, o.device);
  }
  std::string request() const;  // "n1c3...g1 f32/nchw/strict/cpu", for messages
};

struct TuneEntry {
  TuneKey key;
  std::string algorithm;
  std::string variant;  // empty: the algorithm's own choice
  double ms = 0;        // the winner's median time when it was tuned
  std::string date;     // UTC, e.g. 2026-11-29T12:34:56Z
};

class TuneCache {
 public:
  static constexpr const char* kHeader = "convkit-tune-cache v1";

  // `path` empty: entries live in memory only.
  explicit TuneCache(std::string path);

  const std::string& path() const { return path_; }
  bool persistent() const { return !path_.empty(); }

  // The usable entry for exactly this key (the file is read on first use), or nothing. A stale entry for the
  // same request, or an exact one naming an algorithm this build does not have, is ignored with a warning.
  std::optional<TuneEntry> lookup(const TuneKey& key);
  // Records `e` (replacing the entry of the same key) and, when persistent, writes the file. A write that
  // fails is a warning (the entry stays in memory), never an error. Returns whether the file now holds it.
  bool store(const TuneEntry& e);
  // Every entry held now (after loading the file), in key order.
  std::vector<TuneEntry> entries();
  // A warning about this cache, once per process for each `kind` (e.g. "stale", "unusable").
  void warn_once(const std::string& kind, const std::string& message);

 private:
  struct Parsed {
    bool header_ok = true;        // false: the file is not ours (or not v1); nothing in it is trusted
    std::string header_problem;   // what is wrong with the header
    std::map<TuneKey, TuneEntry> entries;
    int bad_lines = 0;
    std::string first_bad;        // "line N: reason"
  };
  Parsed read_file() const;  // a missing file is an empty, valid one
  void load_locked();
  void report_parse(const Parsed& p);
  bool write_locked();  // merge with the file and replace it; false (with a warning) on failure

  std::string path_;
  std::mutex mu_;
  bool loaded_ = false;
  bool foreign_ = false;  // the file has a wrong header: never overwritten
  std::map<TuneKey, TuneEntry> entries_;
  std::map<TuneKey, TuneEntry> stored_;  // what this process stored (wins over the file when merging)
  std::mutex warned_mu_;  // warn_once() is called with or without mu_ held
  std::set<std::string> warned_;
};

// The cache file the environment names now ("" = none: CONVKIT_TUNE_CACHE=off, or no home folder).
std::string tune_cache_path_from_env();
// The process-wide cache object for a path ("" = the memory-only one); the same object for the same path.
std::shared_ptr<TuneCache> tune_cache_at(const std::string& path);
// tune_cache_at(tune_cache_path_from_env()).
std::shared_ptr<TuneCache> tune_cache();

// Serialization of one entry (the file's line, without the newline) and its inverse; parse returns the reason
// on failure (and leaves `e` unspecified).
std::string format_tune_line(const TuneEntry& e);
bool parse_tune_line(const std::string& line, TuneEntry* e, std::string* why);

}  // namespace convkit::detail
