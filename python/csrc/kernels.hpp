// The extension's own small CUDA kernels (the seed's example ops, and the max pooling, channel means, channel
// scaling and LayerNorm convkit.fuse puts in models; not convolutions): plain pointers, no torch types, so kernels.cu
// compiles quickly with nvcc.
#pragma once

#include <cstdint>

namespace convkit_ext {

enum class Kind { f32, f64, f16, bf16, i32, i64 };

// out[i] = a[i] + b[i]
void cuda_vector_add(Kind kind, const void* a, const void* b, void* out, int64_t n, void* stream);
// out[i] = x[i] / (1 + exp(-x[i])) (floating kinds only)
void cuda_silu(Kind kind, const void* x, void* out, int64_t n, void* stream);
// out[row] = sum over row_ptr[row] <= j < row_ptr[row+1] of values[j] * dense[col_idx[j]]; one warp per row.
// `index` is i32 or i64; values/dense/out have the floating kind `kind`. Indices are already validated.
void cuda_csr_matvec(Kind kind, Kind index, const void* values, const void* row_ptr, const void* col_idx,
                     const void* dense, void* out, int64_t rows, void* stream);

// Max pooling of a channels-last (NHWC) tensor, no indices: y[n][p][q][c] = the max over the window (NaN if
// any element is NaN, as torch's), windows clipped to the image. f32, f16 or bf16; C * element size a
// multiple of 16 and x, y 16-byte aligned (one thread a 16-byte vector of channels). `g` holds N, H, W, C, P,
// Q, then kh, kw, sh, sw, ph, pw, dh, dw.
void cuda_max_pool_nhwc(Kind kind, const void* x, void* y, const int64_t (&g)[14], void* stream);

// The mean over H and W of a channels-last (NHWC) tensor, y[n][c] (f32, f16 or bf16; C * element size a
// multiple of 16, x 16-byte aligned, n <= 65535). Deterministic: `splits` partial sums an image in `partial`
// (splits * n * c floats; channel_mean_splits() says how many), then added in a fixed order.
int64_t channel_mean_splits(Kind kind, int64_t n, int64_t hw, int64_t c);
void cuda_channel_mean_nhwc(Kind kind, const void* x, float* partial, void* y, int64_t n, int64_t hw, int64_t c,
                            int64_t splits, void* stream);
// Squeeze-excitation's gate, y[n][c] = act2(sum_j W2[c][j] act1(sum_k W1[j][k] mean(x[n])[k] + b1[j]) + b2[c]),
// for a channels-last x (the channel-mean rules above), W1 [r, c] and W2 [c, r] contiguous, b1 [r] and b2 [c] or
// null, all of x's kind; act1 and act2 are convkit::Activation values. One kernel, a cluster of blocks an image;
// deterministic. se_gate_takes says which sizes it holds in shared memory, on a device with cluster launches
// (compute capability 9.0 and later; built for an older target too, where the kernel is a trap it never runs).
bool se_gate_takes(Kind kind, int64_t n, int64_t c, int64_t r);
void cuda_se_gate_nhwc(Kind kind, const void* x, const void* w1, const void* b1, const void* w2, const void* b2,
                       void* y, int64_t n, int64_t hw, int64_t c, int64_t r, int act1, int act2, void* stream);
// y[n][p][c] = x[n][p][c] * s[n][c] for a channels-last x and s of shape (N, C, 1, 1) (f32, f16 or bf16; the
// same alignment rules).
void cuda_scale_channels_nhwc(Kind kind, const void* x, const void* s, void* y, int64_t n, int64_t hw, int64_t c,
                              void* stream);

// torch's layer_norm(x, {c}, w, b, eps) over the last dimension of a contiguous [rows, c] x (f32, f16 or bf16;
// w and b of x's type, each null or c values; every pointer 16-byte aligned). layer_norm_rows_takes says which c
// the kernel holds in registers: c * element size a multiple of 16, at most 2048 16-bit or 1024 f32 channels.
bool layer_norm_rows_takes(Kind kind, int64_t c);
void cuda_layer_norm_rows(Kind kind, const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t c,
                          float eps, void* stream);

}  // namespace convkit_ext
