// The pieces the Hopper kernels share (cuda_igemm_wgmma and cuda_conv_wgmma_halo, both sm_90a objects): the
// 128-byte-swizzled stage layout, the PTX wrappers (wgmma, and the mbarrier and TMA ones that go beyond
// cuda/common/tma.cuh's), one stage's multiply, the epilogue that takes a warpgroup tile's accumulators to
// the output, and the host side's weight map and device check. Include only from sm_90a translation units.
#pragma once

#include <cuda.h>  // CUtensorMap (the driver's encoder is reached through the runtime: no -lcuda)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/tma.cuh"
#include "cuda/tc/igemm_tc.cuh"

namespace convkit::detail {
namespace {

constexpr int kRowBytes = 128;           // one stage's k depth per row: one swizzle row
constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks per row
constexpr int kAtomBytes = 1024;         // 8 rows: the 128-byte swizzle's period
// k elements per stage: 64 16-bit elements, 32 fp32 (tf32) ones; a chunk holds 8 or 4.
constexpr int bke_of(int elem_bytes) { return kRowBytes / elem_bytes; }

// ---- PTX wrappers (sm_90a) -----------------------------------------------------------------------

// The shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle: start address >> 4
// (bits 0-13), leading byte offset (bits 16-29: unused for swizzled K-major, 1 by convention), stride byte
// offset = one 8-row atom (bits 32-45, >> 4), swizzle mode 1 = 128 bytes (bits 62-63).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(kAtomBytes >> 4) << 32) |
         (uint64_t(1) << 62);
}

// D[64 x N] += A[64 x 16] * B[16 x N], both from shared memory (K-major, no transpose), fp32 accumulators in
// the register layout of mma.sync's m16n8 C fragments: warp w of the warpgroup holds rows 16w..16w+15,
// d[4j..4j+3] = (row g, cols 8j+2t, +1) and (row g+8, the same cols), g = lane/4, t = lane%4.
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db);
// Inline asm names every accumulator register: the operand lists of the shapes (64, 128 and 256 each extend
// the one before), and one definition per (type, shape) built from them.
// The narrow shapes n32 and n48 (the persistent kernel's tiles of 32, 96 and 144 columns; 16-bit types), each
// extending a 16-column list.
#define CK_WGMMA_D16 "%0, %1, %2, %3, %4, %5, %6, %7"
#define CK_WGMMA_OPS16 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), \
  "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define CK_WGMMA_DESC16 "%8, %9"
#define CK_WGMMA_SCALE16 "%10"
#define CK_WGMMA_D32 CK_WGMMA_D16 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define CK_WGMMA_OPS32 \
  CK_WGMMA_OPS16, \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define CK_WGMMA_DESC32 "%16, %17"
#define CK_WGMMA_SCALE32 "%18"
#define CK_WGMMA_D48 CK_WGMMA_D32 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define CK_WGMMA_OPS48 \
  CK_WGMMA_OPS32, \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
  "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define CK_WGMMA_DESC48 "%24, %25"
#define CK_WGMMA_SCALE48 "%26"
#define CK_WGMMA_D64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CK_WGMMA_OPS64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define CK_WGMMA_DESC64 "%32, %33"
#define CK_WGMMA_SCALE64 "%34"
#define CK_WGMMA_D128 \
  CK_WGMMA_D64 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define CK_WGMMA_OPS128 \
  CK_WGMMA_OPS64, \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define CK_WGMMA_DESC128 "%64, %65"
#define CK_WGMMA_SCALE128 "%66"
#define CK_WGMMA_D256 \
  CK_WGMMA_D128 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define CK_WGMMA_OPS256 \
  CK_WGMMA_OPS128, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define CK_WGMMA_DESC256 "%128, %129"
#define CK_WGMMA_SCALE256 "%130"
#define CK_WGMMA_SS(T, TYPE, N)                                                                            \
  template <>                                                                                            \
  __device__ __forceinline__ void wgmma_ss<T, N>(float(&d)[N / 2], uint64_t da, uint64_t db) {           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " CK_WGMMA_SCALE##N ", 0;\n"                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" CK_WGMMA_D##N "}, " \
                 CK_WGMMA_DESC##N ", p, 1, 1, 0, 0;\n}\n"                                                  \
                 : CK_WGMMA_OPS##N                                                                      \
                 : "l"(da), "l"(db), "r"(1));                                                           \
  }
// tf32 (fp32 tensors): k8 per instruction (the same 32 bytes of k as k16 in 16-bit types); no transpose
// operands (K-major is the only layout for tf32).
#define CK_WGMMA_SS_TF32(N)                                                                                \
  template <>                                                                                            \
  __device__ __forceinline__ void wgmma_ss<float, N>(float(&d)[N / 2], uint64_t da, uint64_t db) {       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " CK_WGMMA_SCALE##N ", 0;\n"                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" CK_WGMMA_D##N "}, "            \
                 CK_WGMMA_DESC##N ", p, 1, 1;\n}\n"                                                        \
                 : CK_WGMMA_OPS##N                                                                      \
                 : "l"(da), "l"(db), "r"(1));                                                           \
  }
// tf32 with A from registers (the warp-specialized kernel: the activations rounded to tf32 on their way from
// shared memory to the tensor cores): a[0..3] = (row g, k t), (row g+8, k t), (row g, k t+4), (row g+8, k t+4)
// of warp w's 16 rows (as mma.sync's m16n8k8 A fragment), g = lane/4, t = lane%4; B from shared memory.
template <int N>
__device__ __forceinline__ void wgmma_rs_tf32(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);
#define CK_WGMMA_RS_A64 "%32, %33, %34, %35"
#define CK_WGMMA_RS_B64 "%36"
#define CK_WGMMA_RS_SCALE64 "%37"
#define CK_WGMMA_RS_A128 "%64, %65, %66, %67"
#define CK_WGMMA_RS_B128 "%68"
#define CK_WGMMA_RS_SCALE128 "%69"
#define CK_WGMMA_RS_A256 "%128, %129, %130, %131"
#define CK_WGMMA_RS_B256 "%132"
#define CK_WGMMA_RS_SCALE256 "%133"
#define CK_WGMMA_RS_TF32(N)                                                                                 \
  template <>                                                                                             \
  __device__ __forceinline__ void wgmma_rs_tf32<N>(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t db) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " CK_WGMMA_RS_SCALE##N ", 0;\n"                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" CK_WGMMA_D##N "}, "             \
                 "{" CK_WGMMA_RS_A##N "}, " CK_WGMMA_RS_B##N ", p, 1, 1;\n}\n"                                \
                 : CK_WGMMA_OPS##N                                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                         \
  }
CK_WGMMA_RS_TF32(64)
CK_WGMMA_RS_TF32(128)
CK_WGMMA_RS_TF32(256)

CK_WGMMA_SS(__half, "f16", 16)
CK_WGMMA_SS(__nv_bfloat16, "bf16", 16)
CK_WGMMA_SS(__half, "f16", 32)
CK_WGMMA_SS(__nv_bfloat16, "bf16", 32)
CK_WGMMA_SS(__half, "f16", 48)
CK_WGMMA_SS(__nv_bfloat16, "bf16", 48)
CK_WGMMA_SS(__half, "f16", 64)
CK_WGMMA_SS(__nv_bfloat16, "bf16", 64)
CK_WGMMA_SS(__half, "f16", 128)
CK_WGMMA_SS(__nv_bfloat16, "bf16", 128)
CK_WGMMA_SS(__half, "f16", 256)
CK_WGMMA_SS(__nv_bfloat16, "bf16", 256)
CK_WGMMA_SS_TF32(64)
CK_WGMMA_SS_TF32(128)
CK_WGMMA_SS_TF32(256)

// The 4 fp32 values of a 16-byte chunk of shared memory rounded to tf32 in place (6 instructions: the load,
// 4 cvt.rn, the store).
__device__ __forceinline__ void round_chunk_tf32(uint32_t addr) {
  uint32_t v[4];
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = tf32_rne_bits(v[i]);
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ordinary (generic-proxy) writes to shared memory, cp.async included, made visible to wgmma's reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// ---- mbarriers and the tensor-memory-access (TMA) copies (the rest in cuda/common/tma.cuh) ----
// One arrival if `pred`, predicated inside the asm (no branch in the k loop while a wgmma is in flight).
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
               "r"(int(pred))
               : "memory");
}
// A barrier of `threads` threads (whole warps) under id (1..15; 0 is __syncthreads'): a warpgroup's, or the
// consumers' of the warp-specialized kernel (whose producer warpgroup never joins).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// A 2-D box of the weight matrix [K rows][Kg] (coordinates: k element, row) into shared memory, in the
// tensor map's 128-byte swizzle (the layout wgmma reads); rows or k past the matrix arrive as zeros.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int k, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(bar)
      : "memory");
}

// The same for a 3-D tensor (coordinates: column, row, batch entry): cuda_igemm_wgmma's persistent tiles load
// the residual tile with it.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int col, int row, int b, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(b), "r"(bar)
      : "memory");
}

// A box of BM output pixels x one stage's 128 bytes of channels in the TMA's im2col mode: the pixels of the
// traversal that starts at input position (w, h) of image n (one output pixel's window origin; the tensor
// map's pixel box and element strides give the convolution's padding and stride), each read at that
// position plus the filter tap's offset (off_w, off_h), channels c..; positions outside the image (the
// padding) and images past N arrive as zeros. Same 128-byte swizzle as the 2-D boxes.
__device__ __forceinline__ void tma_load_im2col(uint32_t dst, const CUtensorMap* map, int c, int w, int h, int n,
                                                uint16_t off_w, uint16_t off_h, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6], {%7, %8};\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(off_w), "h"(off_h)
      : "memory");
}

// The other direction (cuda_igemm_wgmma's persistent tiles): a 3-D box of shared memory, in the tensor map's
// layout, to global memory (coordinates: column, row, batch entry); elements past the tensor's edges are not
// written. The copies one thread issues form bulk groups: commit closes one; wait_read<N> returns when at
// most N groups still read shared memory (their source may be overwritten), wait_all<N> when at most N are
// incomplete. The writes that filled the box must be made visible to the async proxy first
// (fence_proxy_async).
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, uint32_t src, int col, int row, int b) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(col), "r"(row), "r"(b), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// 32 bits of shared memory by address, and two 16-bit values packed (round to nearest even) or unpacked.
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&u, &v, 4);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &v, 4);
  }
  return u;
}
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t u) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 v;
    memcpy(&v, &u, 4);
    return __half22float2(v);
  } else {
    __nv_bfloat162 v;
    memcpy(&v, &u, 4);
    return __bfloat1622float2(v);
  }
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma that is in flight.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// One stage of the k loop for a warpgroup: D[64 x NB*WN] += A[64 x 128 bytes of k] * B, as kRowBytes / 32
// wgmma instructions per n block committed as one group, then the wait for every group but this one (the
// previous stage's multiply has retired when it returns; this one may still run).
template <typename T, int WN, int NB>
__device__ __forceinline__ void multiply_stage(float (&acc)[NB][WN / 2], uint64_t da, uint64_t db) {
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) fence_accumulators(acc[nb]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kRowBytes / 32; ++kk)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
      wgmma_ss<T, WN>(acc[nb], da + 2 * kk, db + uint64_t(nb * WN * kRowBytes / 16) + 2 * kk);
  wgmma_commit();
  wgmma_wait<1>();
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) fence_accumulators(acc[nb]);
}

// The same for tf32 in the warp-specialized kernel, with the activations rounded to tf32 in registers on their
// way to the tensor cores (A from registers; no pass over shared memory, no barrier): per 8 k, this warp's 16
// rows of A by one ldmatrix.x4 (8x8 matrices of b16 pairs: one fp32 value per lane, in wgmma's A fragment
// order), rounded, and one wgmma committed as its own group. At most 3 groups stay in flight (1 for the
// 256-wide tile: with 3, ptxas ran out of registers and serialized the wgmmas, C7512), so a k step's
// registers are free again when a later step loads them, and the previous stage's multiply has retired
// when this returns. sa_rows: this warp's 16 rows of the stage's A (the swizzle's row phase: lane % 8).
template <int WN, int NB>
__device__ __forceinline__ void multiply_stage_tf32_rs(float (&acc)[NB][WN / 2], uint32_t sa_rows, uint64_t db,
                                                       int lane) {
  const int i = lane & 7, m = lane >> 3;  // ldmatrix: lane feeds row i of matrix m (rows +8 for m odd, k +4 for m >= 2)
  const uint32_t row_addr = sa_rows + uint32_t((m & 1) * 8 + i) * kRowBytes;
#pragma unroll
  for (int kk = 0; kk < kRowBytes / 32; ++kk) {
    uint32_t x[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                 : "r"(row_addr + uint32_t(((2 * kk + (m >> 1)) ^ i) * 16))
                 : "memory");
#pragma unroll
    for (int e = 0; e < 4; ++e) x[e] = tf32_rne_bits(x[e]);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) fence_accumulators(acc[nb]);
    wgmma_fence();
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) wgmma_rs_tf32<WN>(acc[nb], x, db + uint64_t(nb * WN * kRowBytes / 16) + 2 * kk);
    wgmma_commit();
    wgmma_wait<(WN * NB >= 256 ? 1 : 3)>();
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) fence_accumulators(acc[nb]);
  }
}

// The TMA's im2col mode: the window origin (w, h) and image n of GEMM row mg (an output pixel), where a
// block's traversal starts.
__device__ __forceinline__ void im2col_origin(const TcArgs& a, int64_t mg, int& w, int& h, int& n) {
  const int64_t img = mg / a.PQ;
  const int pq = int(mg - img * a.PQ), p = pq / a.Q, q = pq - p * a.Q;
  h = p * a.stride_h - a.pad_h;
  w = q * a.stride_w - a.pad_w;
  n = int(img);
}

// ---- the epilogue (the consumer threads: tid < kThreads; sync() is their barrier) -------------------------
// The accumulators of the BM x BN tile out to dst (or, with split-K, to the fp32 partials), through the
// pipeline's shared memory (kSmemBytes of it, free again when this runs).
template <typename T, int BM, int BN, int kSmemBytes, int kThreads, typename Sync>
__device__ __forceinline__ void wgmma_epilogue(const TcArgs& a, float (&acc)[BN / (BN < 256 ? BN : 256)][(BN < 256 ? BN : 256) / 2],
                                               unsigned char* smem, int64_t m_block, int n_block, int b, int g,
                                               int split, int tid, Sync sync) {
  constexpr bool kTf32 = std::is_same_v<T, float>;
  constexpr int WN = BN < 256 ? BN : 256, NB = BN / WN;
  const int wg = tid / 128;
  const int lane = tid & 31, wq = (tid >> 5) & 3, gq = lane >> 2, tq = lane & 3;
  const int row = wg * 64 + wq * 16 + gq;  // this thread's rows: row and row + 8; columns 8j + 2tq, +1
  if constexpr (!kTf32) {
  if (a.ws == nullptr && a.residual == nullptr && a.alpha == 1.0f &&
      (a.act == Activation::none || a.act == Activation::relu)) {
    // The common fused forms (conv, + bias, + relu; not a split-K partial): bias and relu are applied in
    // registers and the tile is staged in the output type (half the shared-memory traffic of fp32), then
    // copied out in 16-byte pieces.
    // NOTE: only these forms: with every activation inlined at each of the 64-128 accumulator pairs (the
    // first version) the code outgrew the instruction cache and the 128x256 tile ran 3.5x slower on
    // 1x1 64->256 at 56x56 (H200).
    // (16-bit outputs only: fp32 ones take the general path below, staging them in T would save nothing.)
    constexpr int CS = BN + 8;  // T row stride: (BN + 8) * 2 bytes puts a warp's 8 rows on distinct banks
    static_assert(BM * CS * 2 <= kSmemBytes, "the output tile fits in the pipeline's shared memory");
    T* otile = reinterpret_cast<T*>(smem);
    const T* bias = static_cast<const T*>(a.bias);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int j = 0; j < WN / 8; ++j) {
        const int col = nb * WN + j * 8 + tq * 2;
        const int n = n_block + col;
        const bool hb = bias != nullptr;
        const int64_t bk = int64_t(b) * a.bias_b_stride + g * a.Kpg + n;
        const float b0 = hb && n < a.Kpg ? elem_to_float<T>(bias[bk]) : 0.0f;
        const float b1 = hb && n + 1 < a.Kpg ? elem_to_float<T>(bias[bk + 1]) : 0.0f;
        const bool relu = a.act == Activation::relu;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float y0 = acc[nb][4 * j + 2 * h] + b0, y1 = acc[nb][4 * j + 2 * h + 1] + b1;
          if (relu) y0 = fmaxf(y0, 0.0f), y1 = fmaxf(y1, 0.0f);  // (as store_output_tile's short form)
          T pair[2] = {float_to_elem<T>(y0), float_to_elem<T>(y1)};
          *reinterpret_cast<uint32_t*>(&otile[(row + 8 * h) * CS + col]) = *reinterpret_cast<const uint32_t*>(pair);
        }
      }
    sync();
    T* dst = static_cast<T*>(a.dst);
    constexpr int kCpr = BN / 8;  // 8-element (16-byte) pieces per tile row
    for (int idx = tid; idx < BM * kCpr; idx += kThreads) {
      const int r = idx / kCpr, cc = idx - r * kCpr;
      const int64_t m = m_block + r;
      const int n0 = n_block + cc * 8;
      if (m >= a.Mb || n0 >= a.Kpg) continue;
      const int64_t o = (int64_t(b) * a.Mb + m) * a.K + g * a.Kpg + n0;
      const T* v = &otile[r * CS + cc * 8];
      if (a.vec_ok && n0 + 8 <= a.Kpg) {
        *reinterpret_cast<uint4*>(dst + o) = *reinterpret_cast<const uint4*>(v);
      } else {
        for (int e = 0; e < min(8, a.Kpg - n0); ++e) dst[o + e] = v[e];
      }
    }
    return;
  }
  }
  // The general epilogue (residual, split-K partials): an fp32 BM x BN tile, then store_output_tile.
  constexpr int CS = BN + 8;  // fp32 row stride of the staged tile (padded: fewer conflicts)
  static_assert(BM * CS * 4 <= kSmemBytes, "the output tile fits in the pipeline's shared memory");
  float* ctile = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int j = 0; j < WN / 8; ++j) {
      const int col = nb * WN + j * 8 + tq * 2;
      *reinterpret_cast<float2*>(&ctile[row * CS + col]) = make_float2(acc[nb][4 * j], acc[nb][4 * j + 1]);
      *reinterpret_cast<float2*>(&ctile[(row + 8) * CS + col]) = make_float2(acc[nb][4 * j + 2], acc[nb][4 * j + 3]);
    }
  sync();
  store_output_tile<T, BM, BN, kThreads>(a, ctile, CS, m_block, n_block, b, g, split, tid, a.ws != nullptr);
  if (a.tile_counts != nullptr) {
    int r_begin = 0, r_end = 0;
    split_rows_summed<BM, BN, kThreads>(a, ctile, CS, m_block, n_block, b, g, split, tid, r_begin, r_end, sync);
    store_output_tile<T, BM, BN, kThreads>(a, ctile, CS, m_block, n_block, b, g, split, tid, false, r_begin, r_end);
  }
}

// ---- host side (the tensor-map encoder is in cuda/common/tma.cuh) ------------------------------

// The weights as a 2-D tensor [K*nb][Kg] (KRSC flattened; nb = N with per-sample weights), boxes of one
// stage's k (128 bytes) x box_rows rows, 128-byte swizzle. (No allocation: run() calls this on every launch.)
CUtensorMap weight_map(const TcArgs& a, DType dt, int box_rows) {
  CUtensorMap map;
  const int es = int(dtype_size(dt));
  const cuuint64_t dims[2] = {cuuint64_t(a.Kg), cuuint64_t(int64_t(a.K) * a.nb)};
  const cuuint64_t strides[1] = {cuuint64_t(a.Kg) * es};  // bytes between rows (Kg*es % 16 == 0, see can_implement)
  const cuuint32_t box[2] = {cuuint32_t(bke_of(es)), cuuint32_t(box_rows)};
  const cuuint32_t estrides[2] = {1, 1};
  const CUtensorMapDataType type = dt == DType::f16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = tensor_map_encoder()(
      &map, type, 2,
      const_cast<void*>(a.wei), dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_igemm_wgmma: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) +
                                            ") for the weights [" + std::to_string(a.K) + "][" + std::to_string(a.Kg) + "].");
  return map;
}

// The activations of a 1x1, stride-1, unpadded, one-group convolution as the 2-D tensor [N*H*W][C], boxes

// Whether the current device runs sm_90a code: compute capability 9.0 exactly.
Support require_sm90() {
  static const Support s = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      cudaGetLastError();
      return Support::no("no usable CUDA device.");
    }
    if (major != 9 || minor != 0)
      return Support::no("wgmma is sm_90a code (Hopper, compute capability 9.0); this GPU is compute capability " +
                         std::to_string(major) + "." + std::to_string(minor) + ".");
    return Support::yes();
  }();
  return s;
}

}  // namespace
}  // namespace convkit::detail
