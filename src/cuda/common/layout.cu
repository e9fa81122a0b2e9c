// The CUDA half of convkit::transform_layout (src/core/layout.cpp): NCHW <-> NHWC as a batched transpose of
// each image's [C][H*W] (or [H*W][C]) matrix, plus the same-layout copy.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/layout.hpp"
#include "cuda/common/check.cuh"

namespace convkit::detail {
namespace {

constexpr int kTile = 32;        // a kTile x kTile tile per block
constexpr int kRowsPerPass = 8;  // blockDim = (kTile, kRowsPerPass): each thread moves kTile/kRowsPerPass elements

// Work mapping: blockIdx.x walks the tiles of one matrix (row-tile major), blockIdx.y the matrices (a grid-stride
// loop when there are more than gridDim.y); threadIdx.x runs along a tile row, threadIdx.y over its rows.
// Reads are coalesced along `cols`; the tile goes through shared memory so the writes are coalesced along
// `rows` too.
template <typename T>
__global__ void batched_transpose_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t batch, int64_t rows,
                                         int64_t cols, int64_t col_tiles) {
  // NOTE: the padding makes a tile row an odd number of 4-byte words (33 for 4-byte T, 17 for 2-byte T), so the
  // column-wise read of the second phase touches 32 different banks.
  constexpr int kPad = sizeof(T) == 2 ? 2 : 1;
  __shared__ T tile[kTile][kTile + kPad];
  const int64_t i0 = (int64_t(blockIdx.x) / col_tiles) * kTile;
  const int64_t j0 = (int64_t(blockIdx.x) % col_tiles) * kTile;
  const int64_t image = rows * cols;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const T* src = in + b * image;
    T* dst = out + b * image;
    for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {
      const int64_t i = i0 + r, j = j0 + threadIdx.x;
      if (i < rows && j < cols) tile[r][threadIdx.x] = src[i * cols + j];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {
      const int64_t j = j0 + r, i = i0 + threadIdx.x;
      if (i < rows && j < cols) dst[j * rows + i] = tile[threadIdx.x][r];
    }
    // NOTE: the next image reuses the tile: every thread must have read it first.
    __syncthreads();
  }
}

template <typename T>
void launch(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tiles = row_tiles * col_tiles;
  if (tiles > int64_t(0x7fffffff))
    throw Error(StatusCode::unsupported, "transform_layout: an image of " + std::to_string(rows * cols) +
                                             " elements has more tiles than one grid dimension holds.");
  const dim3 block(kTile, kRowsPerPass);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  batched_transpose_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), batch,
                                                          rows, cols, col_tiles);
  CK_LAUNCH("batched_transpose_kernel");
}

}  // namespace

void cuda_batched_transpose(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols, size_t elem_bytes,
                            void* stream) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  if (elem_bytes == 4) launch<uint32_t>(in, out, batch, rows, cols, as_stream(stream));
  else if (elem_bytes == 2) launch<uint16_t>(in, out, batch, rows, cols, as_stream(stream));
  else throw Error(StatusCode::unsupported, "transform_layout: elements of " + std::to_string(elem_bytes) +
                                                " bytes are not supported (2 or 4).");
}

void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  CK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)));
}

}  // namespace convkit::detail
