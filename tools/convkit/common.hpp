// Shared bits of the convkit CLI: the error convention and small helpers.
//
// Every failure ends as ONE line on stderr, "convkit: error: ...", and exit code 2 for anything the user can
// fix (bad flags, files, problems, unsupported requests) or 1 for internal errors (CUDA failures, bugs).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"

namespace convkit::cli {

// A mistake the user can fix: exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Exit code for a library error: 2 for user errors, 1 for internal/CUDA errors.
int exit_code(StatusCode code);
// Newlines (e.g. select()'s list of rejections) folded into "; " so a message stays on one line.
std::string one_line(const std::string& msg);
// Prints "convkit: error: <msg>" on stderr and returns `code`.
int report_error(const std::string& msg, int code);

// "cpu", "cuda" or "auto" -> a device; auto = cuda when a CUDA device is usable, else cpu. A request for cuda
// that this build or machine cannot serve is a UsageError.
Device resolve_device(const std::string& name);

// --dtype and --math into cfg.dtype and cfg.math: dtype f32|f16|bf16, or tf32 (f32 tensors with tf32 math);
// math "" (not given), strict or tf32. `--dtype tf32 --math strict` and tf32 math on 16-bit tensors are
// UsageErrors.
void apply_dtype_flags(const std::string& dtype, const std::string& math, ConvConfig& cfg);

// Splits "a,b,c" (empty pieces dropped).
std::vector<std::string> split(const std::string& s, char sep);

// The source tree this binary was built from (CONVKIT_SOURCE_DIR), or "" when unknown.
std::string source_dir();
// The folder holding the running executable, or "".
std::string exe_dir();
bool file_exists(const std::string& path);

// Current UTC time as "2026-11-29T12:34:56Z".
std::string utc_now();

// Throws UsageError unless `path` can be written: an existing file that is writable, or a new one in a
// writable folder. Creates nothing.
void check_writable(const std::string& path);

}  // namespace convkit::cli
