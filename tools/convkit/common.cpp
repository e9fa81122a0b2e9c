#include "common.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <sys/stat.h>

#include "core/cuda_hooks.hpp"
#include "core/log.hpp"

namespace convkit::cli {

int exit_code(StatusCode code) {
  switch (code) {
    case StatusCode::cuda_error:
    case StatusCode::internal: return 1;
    default: return 2;
  }
}

std::string one_line(const std::string& msg) {
  std::string out;
  out.reserve(msg.size());
  for (size_t i = 0; i < msg.size(); ++i) {
    if (msg[i] != '\n') {
      out += msg[i];
      continue;
    }
    while (i + 1 < msg.size() && msg[i + 1] == ' ') ++i;  // the indentation of the next line
    if (i + 1 < msg.size() && !out.empty()) out += out.back() == ':' ? " " : "; ";
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

int report_error(const std::string& msg, int code) {
  std::cout.flush();
  std::cerr << "convkit: error: " << one_line(msg) << std::endl;
  return code;
}

Device resolve_device(const std::string& name) {
  if (name == "auto") return cuda_device_available() ? Device::cuda : Device::cpu;
  Device d;
  try {
    d = parse_device(name);
  } catch (const Error&) {
    throw UsageError("unknown device '" + name + "' (expected cpu, cuda or auto)");
  }
  if (d == Device::cuda) {
    if (!detail::cuda_built())
      throw UsageError("no CUDA algorithms in this build (nvcc was not found when it was configured)");
    if (!cuda_device_available()) throw UsageError("--device cuda: no CUDA device is usable on this machine");
  }
  return d;
}

void apply_dtype_flags(const std::string& dtype, const std::string& math, ConvConfig& cfg) {
  const bool tf32_dtype = dtype == "tf32";
  if (tf32_dtype) {
    cfg.dtype = DType::f32;
  } else {
    try {
      cfg.dtype = parse_dtype(dtype);
    } catch (const Error&) {
      throw UsageError("--dtype: unknown dtype '" + dtype + "' (expected f32, f16, bf16 or tf32)");
    }
  }
  if (math.empty()) {
    cfg.math = tf32_dtype ? MathMode::tf32 : MathMode::strict;
  } else if (math == "strict") {
    if (tf32_dtype) throw UsageError("--dtype tf32 means f32 tensors with tf32 math: it contradicts --math strict");
    cfg.math = MathMode::strict;
  } else if (math == "tf32") {
    cfg.math = MathMode::tf32;
  } else {
    throw UsageError("--math: unknown mode '" + math + "' (expected strict or tf32)");
  }
  if (cfg.math == MathMode::tf32 && cfg.dtype != DType::f32)
    throw UsageError("tf32 math applies to f32 tensors only (--dtype tf32, or --dtype f32 --math tf32)");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string source_dir() {
#ifdef CONVKIT_SOURCE_DIR
  return CONVKIT_SOURCE_DIR;
#else
  return {};
#endif
}

std::string exe_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string p(buf, static_cast<size_t>(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? std::string() : p.substr(0, slash);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string utc_now() { return detail::utc_now(); }

void check_writable(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) {
    if (::access(path.c_str(), W_OK) != 0) throw UsageError("cannot write '" + path + "': " + std::strerror(errno));
    return;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK) != 0)
    throw UsageError("cannot write '" + path + "': folder '" + dir + "': " + std::strerror(errno));
}

}  // namespace convkit::cli
