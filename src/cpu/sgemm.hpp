// The row-major float32 GEMM of the CPU algorithms (cpu_im2col_gemm, cpu_winograd, the CPU weight gradient):
// OpenBLAS's cblas_sgemm, or oneDNN's dnnl_sgemm where OpenBLAS did not recognise the CPU.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU's model number when it loads;
// a CPU newer than its table gets the generic "Prescott" (SSE3) kernels. On a 2-vCPU Intel Xeon with AVX-512
// that OpenBLAS 0.3.21 did not know, cpu_im2col_gemm's 3x3 64 -> 64 at 32x32, batch 8, f32 NHWC took 19.5 ms
// against oneDNN's 1.8 (docs/perf.md, 2026-12-06). oneDNN chooses its code from the CPU's feature flags, so it
// is used instead where OpenBLAS's kernels are older than AVX2 on a CPU that has AVX2 and FMA, unless
// OPENBLAS_CORETYPE names a kernel set (the user's choice stands). CONVKIT_SGEMM=openblas or onednn in the
// environment forces one (read once).
#pragma once

#include <string>

namespace convkit::detail {

enum class SgemmBackend { none, openblas, onednn };

// Decides the GEMM (and makes oneDNN's first calls, see sgemm.cpp) outside any OpenMP parallel region: every
// algorithm calls it before its own (single_threaded_blas does).
void prepare_sgemm();
// Which GEMM sgemm() calls in this process (decided on the first call), and why, in a sentence.
SgemmBackend sgemm_backend();
std::string sgemm_backend_reason();
// Forces the backend (tests); one that this build lacks is refused with an Error.
void set_sgemm_backend(SgemmBackend b);

// C[M][N] = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or its transpose; single-threaded inside an
// OpenMP parallel region (both libraries run sequentially there). Throws Error if the build has neither.
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc);

}  // namespace convkit::detail
