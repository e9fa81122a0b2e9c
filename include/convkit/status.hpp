// convkit/status.hpp: status codes and the exception every C++ entry point throws.
#pragma once

#include <stdexcept>
#include <string>

namespace convkit {

enum class StatusCode {
  ok = 0,
  invalid_problem,   // the convolution itself is malformed (sizes, groups, P or Q < 1, overflow)
  invalid_tensor,    // a tensor disagrees with the problem (shape, dtype, layout, device, null)
  unsupported,       // a valid request an algorithm (or this build) cannot do
  not_available,     // the algorithm exists but is not built in / has no device to run on
  cuda_error,        // a CUDA, cuBLAS or cuDNN call failed
  io_error,          // a file could not be read or written, or is not what it claims to be
  internal,
};

const char* to_string(StatusCode code);

struct Status {
  StatusCode code = StatusCode::ok;
  std::string message;

  bool ok() const { return code == StatusCode::ok; }
  explicit operator bool() const { return ok(); }
  static Status Ok() { return {}; }
  static Status Fail(StatusCode c, std::string msg) { return {c, std::move(msg)}; }
};

class Error : public std::runtime_error {
 public:
  Error(StatusCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  explicit Error(const Status& s) : Error(s.code, s.message) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// Throws convkit::Error when `s` is not ok.
inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace convkit
