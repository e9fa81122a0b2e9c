// NumPy .npy files, float32 ('<f4') and float16 ('<f2'), little-endian, C order: enough for `convkit run`.
// NumPy has no bfloat16: bf16 runs read float32 files and convert them (round to nearest even).
// Format: "\x93NUMPY", version (1.0, 2.0 or 3.0), header length (2 bytes in 1.0, 4 bytes after), an ASCII
// Python dict {'descr': '<f4', 'fortran_order': False, 'shape': (...), } padded with spaces to a multiple of
// 64 bytes and ended by '\n', then the raw data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convkit/tensor.hpp"

namespace convkit::cli {

struct NpyArray {
  std::vector<int64_t> shape;
  DType dtype = DType::f32;         // f32 ('<f4') or f16 ('<f2'), as stored in the file
  std::vector<unsigned char> bytes;  // the elements, packed, in `dtype`

  int64_t count() const;
  // The elements converted to `to` (f16/bf16 rounded to nearest even; f16 -> f32 exact).
  std::vector<unsigned char> as(DType to) const;
};

// Throws convkit::Error(io_error) with "<path>: <one sentence>" for a missing, truncated or malformed file,
// a dtype other than float32/float16, or fortran_order True.
NpyArray read_npy(const std::string& path);

// Writes `data` (packed, in `dtype`: f32 as '<f4', f16 as '<f2'; bf16 is widened to '<f4', exactly) atomically:
// a temporary file in the same folder, renamed over `path` on success; on failure no file is left behind.
// Throws convkit::Error(io_error).
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const void* data, DType dtype);

// "(2, 3, 4)"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace convkit::cli
