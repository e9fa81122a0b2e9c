// A bfloat16 GEMM on the CPU's dot-product instruction (AVX512-BF16's vdpbf16ps), for cpu_im2col_gemm's
// bfloat16 NHWC convolutions: C[m][n] = alpha * sum_k A[m][k] * B[n][k] in float32.
//
// What it adds over widening to float32 and calling OpenBLAS's SGEMM (cpu_im2col_gemm's f16 path): the
// operands stay 16-bit (half the bytes; the weight is packed once a call instead of widened), and one
// instruction does 32 multiply-adds, twice SGEMM's; Debian's OpenBLAS is built without its bfloat16 GEMM.
// Arithmetic: each product of two bfloat16 values is exact in float32; vdpbf16ps adds a lane's two products
// to its accumulator with round-to-nearest-even and treats subnormal inputs and results as zero; sums in
// order of k pairs. So small integers are exact, and the rest is within the 16-bit bound of the tests.
//
// Layout: A rows of K elements at stride lda (K even: the caller pads a zero; 4-byte pairs broadcast to every
// lane), B packed once by gemm_bf16_pack into blocks of 32 columns: for each pair of k, the 32 columns'
// two values side by side (two 64-byte vectors), zeros past N.
// Tiles: 8 rows x 32 columns of C in 16 accumulators (one column block at a time, its rows in steps of 8,
// so that a packed block, at most 32 x K x 2 bytes, stays in L2 while A's rows pass).
#pragma once

#include <cstddef>
#include <cstdint>

namespace convkit::detail {

// Whether this build has the kernel (compiled for a CPU with AVX512-BF16: -march=native on one).
bool gemm_bf16_available();

constexpr int64_t kGemmBf16Cols = 32;  // columns a packed block

// bfloat16 elements of B's packing: ceil(N / 32) blocks of K * 32.
inline int64_t gemm_bf16_packed_elems(int64_t n, int64_t k) {
  return (n + kGemmBf16Cols - 1) / kGemmBf16Cols * kGemmBf16Cols * k;
}

// Packs column blocks [jb0, jb1) of B (N rows of K bfloat16 at stride ldb; K even, B's elements past the
// real reduction length zero or absent: `k_real` columns are read, the rest packed as zeros).
void gemm_bf16_pack(const uint16_t* b, int64_t ldb, int64_t n, int64_t k, int64_t k_real, uint16_t* packed,
                    int64_t jb0, int64_t jb1);

// C[m][n] = alpha * sum_k A[m][k] * B[n][k] for m < M, n < N (C float32 at stride ldc). A: M rows of K
// (even) bfloat16 at stride lda, 4-byte aligned pairs not needed.
void gemm_bf16(const uint16_t* a, int64_t lda, const uint16_t* packed, int64_t m, int64_t n, int64_t k, float alpha,
               float* c, int64_t ldc);

// The same product with the roles turned, for few rows of A and many of B (a deep layer's few pixels and many
// output channels): A packed by gemm_bf16_pack (its M rows as the packed "columns", at most a few blocks) and
// B's rows read as they are (k_real elements at stride ldb: no packing of the larger operand; an odd k_real's
// last pair read as one element). 8 rows of B x 32 rows of A a tile; C's tile stored transposed (a scatter
// by rows of C, masked past M). Rows [n0, n1) of B only, so that threads can share out B's rows.
void gemm_bf16_turned(const uint16_t* packed_a, const uint16_t* b, int64_t ldb, int64_t k_real, int64_t m, int64_t n0,
                      int64_t n1, int64_t k, float alpha, float* c, int64_t ldc);

}  // namespace convkit::detail
