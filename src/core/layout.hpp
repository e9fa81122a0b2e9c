// transform_layout's halves: the checks and the CPU loop in core/layout.cpp, the CUDA transpose in
// src/cuda/common/layout.cu (a stub in builds without CUDA).
#pragma once

#include <cstdint>

#include "convkit/tensor.hpp"

namespace convkit::detail {

// out[b][j][i] = in[b][i][j] for `batch` matrices of rows x cols elements of `elem_bytes` (2 or 4) bytes each,
// enqueued on `stream`. NCHW -> NHWC is rows = C, cols = H*W; NHWC -> NCHW is rows = H*W, cols = C.
void cuda_batched_transpose(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols, size_t elem_bytes,
                            void* stream);
// A device-to-device copy on `stream` (the same layout on both sides).
void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream);

}  // namespace convkit::detail
