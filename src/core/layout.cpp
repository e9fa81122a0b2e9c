// convkit::transform_layout: NCHW <-> NHWC (KCRS <-> KRSC for weights). The checks and the CPU loop live
// here; CUDA tensors go to the tiled transpose of src/cuda/common/layout.cu.
#include "core/layout.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "convkit/convkit.hpp"

namespace convkit {
namespace detail {
namespace {

std::string dims_str(const std::array<int64_t, 4>& d) {
  return "[" + std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]) + "," +
         std::to_string(d[3]) + "]";
}

// One image at a time: out[j][i] = in[i][j], in 32x32 blocks so both sides are read/written in runs.
template <typename T>
void cpu_batched_transpose(const T* in, T* out, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 32;
  const int64_t rb = (rows + kBlock - 1) / kBlock, cb = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < rb * cb; ++t) {
      const int64_t i0 = (t / cb) * kBlock, j0 = (t % cb) * kBlock;
      const int64_t i1 = std::min(rows, i0 + kBlock), j1 = std::min(cols, j0 + kBlock);
      const T* src = in + b * rows * cols;
      T* dst = out + b * rows * cols;
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * cols + j];
    }
}

}  // namespace

#ifndef CONVKIT_WITH_CUDA
void cuda_batched_transpose(const void*, void*, int64_t, int64_t, int64_t, size_t, void*) {
  throw Error(StatusCode::not_available, "transform_layout: this convkit was built without CUDA.");
}
void cuda_copy_async(void*, const void*, size_t, void*) {
  throw Error(StatusCode::not_available, "transform_layout: this convkit was built without CUDA.");
}
#endif

}  // namespace detail

void transform_layout(const TensorView& src, const TensorView& dst, void* stream) {
  auto bad = [](const std::string& m) { throw Error(StatusCode::invalid_tensor, "transform_layout: " + m); };
  for (int i = 0; i < 4; ++i)
    if (src.dims[i] < 0 || dst.dims[i] < 0) bad("dims must not be negative.");
  if (src.dims != dst.dims)
    bad("the source dims " + detail::dims_str(src.dims) + " differ from the destination's " +
        detail::dims_str(dst.dims) + " (both are logical N,C,H,W whatever the layout).");
  if (src.dtype != dst.dtype)
    bad(std::string("the source is ") + to_string(src.dtype) + " but the destination " + to_string(dst.dtype) +
        " (it moves elements, it does not convert them).");
  if (src.device != dst.device)
    bad(std::string("the source is on ") + to_string(src.device) + " but the destination on " +
        to_string(dst.device) + ".");
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.data == nullptr || dst.data == nullptr) bad("a data pointer is null.");
  const size_t bytes = src.bytes();
  const auto* s0 = static_cast<const unsigned char*>(src.data);
  const auto* d0 = static_cast<const unsigned char*>(dst.data);
  if (s0 < d0 + bytes && d0 < s0 + bytes) bad("the source and destination overlap (it cannot work in place).");

  const size_t es = dtype_size(src.dtype);
  const int64_t batch = src.dims[0], c = src.dims[1], hw = src.dims[2] * src.dims[3];
  if (src.layout == dst.layout) {  // a plain copy
    if (src.device == Device::cuda) detail::cuda_copy_async(dst.data, src.data, bytes, stream);
    else std::memcpy(dst.data, src.data, bytes);
    return;
  }
  // NCHW -> NHWC transposes each image's [C][HW] matrix; NHWC -> NCHW its [HW][C] matrix.
  const int64_t rows = src.layout == Layout::nchw ? c : hw, cols = src.layout == Layout::nchw ? hw : c;
  if (src.device == Device::cuda) {
    detail::cuda_batched_transpose(src.data, dst.data, batch, rows, cols, es, stream);
    return;
  }
  if (es == 4)
    detail::cpu_batched_transpose(static_cast<const uint32_t*>(src.data), static_cast<uint32_t*>(dst.data), batch, rows,
                                  cols);
  else
    detail::cpu_batched_transpose(static_cast<const uint16_t*>(src.data), static_cast<uint16_t*>(dst.data), batch,
                                  rows, cols);
}

}  // namespace convkit
