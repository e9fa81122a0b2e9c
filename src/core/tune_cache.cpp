// The tune cache file: parse, look up, merge and write atomically (see tune_cache.hpp for the format).
#include "core/tune_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "convkit/convkit.hpp"
#include "core/log.hpp"

namespace convkit::detail {
namespace {

constexpr int kFields = 12;

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

// Tabs and line breaks would break the format: fields never hold them.
std::string clean(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

// Holds an exclusive flock on `path` while alive (best effort: without it the merge is still atomic, but two
// simultaneous writers may each drop the other's newest entry).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string TuneKey::request() const { return problem + " " + dtype + "/" + layout + "/" + math + "/" + device; }

std::string format_tune_line(const TuneEntry& e) {
  const TuneKey& k = e.key;
  char ms[32];
  std::snprintf(ms, sizeof(ms), "%.6g", e.ms);
  std::string line;
  for (const std::string& f : {k.problem, k.dtype, k.layout, k.math, k.device, k.device_name,
                               k.driver.empty() ? std::string("-") : k.driver, k.version, e.algorithm,
                               e.variant.empty() ? std::string("-") : e.variant, std::string(ms), e.date})
    line += (line.empty() ? "" : "\t") + clean(f);
  return line;
}

bool parse_tune_line(const std::string& line, TuneEntry* e, std::string* why) {
  const std::vector<std::string> f = split_tabs(line);
  if (f.size() != kFields) {
    *why = "expected " + std::to_string(kFields) + " tab-separated fields, found " + std::to_string(f.size());
    return false;
  }
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i].empty()) {
      *why = "field " + std::to_string(i + 1) + " is empty";
      return false;
    }
    // (found by tests/fuzz/fuzz_tune_cache: a field holding '\r' parsed, but format_tune_line writes it back
    // as a space, so the entry did not survive a rewrite of the file)
    for (const char ch : f[i])
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        *why = "field " + std::to_string(i + 1) + " holds a control character";
        return false;
      }
  }
  TuneKey& k = e->key;
  try {
    const Conv2dProblem p = Conv2dProblem::parse(f[0]);
    if (Status s = p.validate(); !s.ok()) {
      *why = "invalid problem '" + f[0] + "': " + s.message;
      return false;
    }
    k.problem = p.to_string();
    k.dtype = to_string(parse_dtype(f[1]));
    // A per-sample request (conv2d_per_sample) is keyed "<layout>+per_sample".
    const std::string suffix = "+per_sample";
    const size_t cut = f[2].size() > suffix.size() ? f[2].size() - suffix.size() : 0;
    const bool per_sample = cut > 0 && f[2].compare(cut, suffix.size(), suffix) == 0;
    k.layout = std::string(to_string(parse_layout(per_sample ? f[2].substr(0, cut) : f[2]))) + (per_sample ? suffix : "");
    k.device = to_string(parse_device(f[4]));
  } catch (const Error& err) {
    *why = err.what();
    return false;
  }
  if (f[3] != "strict" && f[3] != "tf32") {
    *why = "unknown math mode '" + f[3] + "'";
    return false;
  }
  k.math = f[3];
  k.device_name = f[5];
  k.driver = f[6];
  k.version = f[7];
  e->algorithm = f[8];
  e->variant = f[9] == "-" ? std::string() : f[9];
  char* end = nullptr;
  errno = 0;
  e->ms = std::strtod(f[10].c_str(), &end);
  if (errno != 0 || end == f[10].c_str() || *end != '\0' || !std::isfinite(e->ms) || e->ms < 0) {
    *why = "the time '" + f[10] + "' is not a non-negative number";
    return false;
  }
  e->date = f[11];
  return true;
}

namespace {
// Bumped whenever what a lookup can answer may change: a cache opened, a file read, an entry stored.
std::atomic<std::uint64_t> g_generation{1};
}  // namespace

TuneCache::TuneCache(std::string path) : path_(std::move(path)) { g_generation.fetch_add(1); }

TuneCache::Parsed TuneCache::read_file() const {
  Parsed p;
  if (path_.empty()) return p;
  std::ifstream in(path_);
  if (!in) return p;  // no file yet: an empty cache
  std::string line;
  if (!std::getline(in, line)) return p;  // an empty file: an empty cache
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line != kHeader) {
    p.header_ok = false;
    std::string shown = line.substr(0, 40);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    p.header_problem = "its first line is '" + shown + (line.size() > 40 ? "...'" : "'") + ", not '" + kHeader + "'";
    return p;
  }
  for (int n = 2; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    TuneEntry e;
    std::string why;
    if (!parse_tune_line(line, &e, &why)) {
      if (p.bad_lines++ == 0) p.first_bad = "line " + std::to_string(n) + ": " + why;
      continue;
    }
    p.entries[e.key] = e;  // a later line for the same key wins
  }
  if (in.bad() && p.bad_lines++ == 0) p.first_bad = "read error";
  return p;
}

void TuneCache::warn_once(const std::string& kind, const std::string& message) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(warned_mu_);
    first = warned_.insert(kind).second;
  }
  if (first) log_warning("tune cache " + path_ + ": " + message);
}

void TuneCache::report_parse(const Parsed& p) {
  if (!p.header_ok)
    warn_once("header", p.header_problem + "; ignoring the whole file (and never overwriting it: delete it, or "
                                           "point CONVKIT_TUNE_CACHE elsewhere)");
  if (p.bad_lines > 0)
    warn_once("corrupt", "ignoring " + std::to_string(p.bad_lines) +
                             (p.bad_lines == 1 ? " line that does not parse (" : " lines that do not parse (first: ") +
                             p.first_bad + "); " + (p.bad_lines == 1 ? "it is" : "they are") +
                             " dropped on the next write");
}

void TuneCache::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  g_generation.fetch_add(1);
  const Parsed p = read_file();
  report_parse(p);
  foreign_ = !p.header_ok;
  if (p.header_ok) entries_ = p.entries;
}

std::optional<TuneEntry> TuneCache::lookup(const TuneKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    // NOTE: the scan for a stale entry only matters until its one warning is given; after that a miss is a
    // plain map lookup (conv2d("auto") looks up on every call).
    bool stale_warned;
    {
      std::lock_guard<std::mutex> wl(warned_mu_);
      stale_warned = warned_.count("stale") > 0;
    }
    if (stale_warned) return std::nullopt;
    for (const auto& [k, e] : entries_) {
      if (!k.same_request(key)) continue;
      std::string diff;
      if (k.version != key.version) diff += "convkit " + k.version + " (this is " + key.version + ")";
      if (k.device_name != key.device_name)
        diff += (diff.empty() ? "" : ", ") + ("device '" + k.device_name + "' (this is '" + key.device_name + "')");
      if (k.driver != key.driver)
        diff += (diff.empty() ? "" : ", ") + ("driver " + k.driver + " (this is " + key.driver + ")");
      warn_once("stale", "ignoring a stale entry for " + key.request() + ": it was tuned with " + diff +
                             " (said once; such entries are never used)");
      break;
    }
    return std::nullopt;
  }
  const Algorithm* a = find_algorithm(it->second.algorithm);
  if (a == nullptr || a->is_peer() || to_string(a->device()) != key.device) {
    warn_once("unknown", "ignoring the entry for " + key.request() + ": '" + it->second.algorithm +
                             "' is not a " + key.device + " algorithm of this build (said once)");
    return std::nullopt;
  }
  return it->second;
}

bool TuneCache::store(const TuneEntry& e) {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  entries_[e.key] = e;
  stored_[e.key] = e;
  g_generation.fetch_add(1);
  const bool written = persistent() && !foreign_ && write_locked();
  g_generation.fetch_add(1);  // (the write merged the file's entries in)
  return written;
}

std::vector<TuneEntry> TuneCache::entries() {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  std::vector<TuneEntry> v;
  for (const auto& kv : entries_) v.push_back(kv.second);
  return v;
}

bool TuneCache::write_locked() {
  namespace fs = std::filesystem;
  auto fail = [&](const std::string& why) {
    warn_once("write", "cannot write it (" + why + "); tuning results stay in memory for this process");
    return false;
  };
  std::error_code ec;
  const fs::path file(path_);
  if (file.has_parent_path()) {
    fs::create_directories(file.parent_path(), ec);
    if (ec) return fail("cannot create " + file.parent_path().string() + ": " + ec.message());
  }
  FileLock lock(path_ + ".lock");
  // Merge: the file as it is now (other processes may have added entries), then what this process stored.
  const Parsed now = read_file();
  if (!now.header_ok) {
    report_parse(now);
    foreign_ = true;
    return false;
  }
  std::map<TuneKey, TuneEntry> merged = now.entries;
  for (const auto& kv : stored_) merged[kv.first] = kv.second;

  static std::atomic<unsigned> counter{0};
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return fail(std::string("cannot create ") + tmp + ": " + std::strerror(errno));
    out << kHeader << "\n"
        << "# problem\tdtype\tlayout\tmath\tdevice\tdevice_name\tdriver\tconvkit\talgorithm\tvariant\tms\tdate\n";
    for (const auto& kv : merged) out << format_tune_line(kv.second) << "\n";
    out.flush();
    if (!out) {
      const std::string why = std::strerror(errno);
      out.close();
      std::remove(tmp.c_str());
      return fail("write error: " + why);
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return fail("cannot rename the temporary file into place: " + why);
  }
  entries_ = std::move(merged);
  return true;
}

std::string tune_cache_path_from_env() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  const std::string explicit_path = env("CONVKIT_TUNE_CACHE");
  if (explicit_path == "off") return {};
  if (!explicit_path.empty()) return explicit_path;
  const std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg[0] == '/') return xdg + "/convkit/tune-v1.txt";
  const std::string home = env("HOME");
  if (!home.empty()) return home + "/.cache/convkit/tune-v1.txt";
  return {};
}

std::shared_ptr<TuneCache> tune_cache_at(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<TuneCache>> caches;
  std::lock_guard<std::mutex> lock(mu);
  auto& c = caches[path];
  if (!c) c = std::make_shared<TuneCache>(path);
  return c;
}

std::shared_ptr<TuneCache> tune_cache() { return tune_cache_at(tune_cache_path_from_env()); }

}  // namespace convkit::detail

namespace convkit {
std::uint64_t tune_cache_generation() { return detail::g_generation.load(); }
}  // namespace convkit
