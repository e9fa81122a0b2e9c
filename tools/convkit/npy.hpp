// NumPy .npy files, float32 only (little-endian '<f4', C order): enough for `convkit run`.
// Format: "\x93NUMPY", version (1.0, 2.0 or 3.0), header length (2 bytes in 1.0, 4 bytes after), an ASCII
// Python dict {'descr': '<f4', 'fortran_order': False, 'shape': (...), } padded with spaces to a multiple of
// 64 bytes and ended by '\n', then the raw data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace convkit::cli {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Throws convkit::Error(io_error) with "<path>: <one sentence>" for a missing, truncated or malformed file,
// a dtype other than float32, or fortran_order True.
NpyArray read_npy(const std::string& path);

// Writes atomically: a temporary file in the same folder, renamed over `path` on success; on failure no file is
// left behind. Throws convkit::Error(io_error).
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

// "(2, 3, 4)"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace convkit::cli
