// Vectors of an element type for 16-byte (or narrower) global and shared-memory accesses: Vec<T, V>, one
// loaded and widened to fp32 (load_vec_f32), the 16-byte cp.async with zero fill that every staging kernel
// uses (by pointer or by shared-memory address) with its commit and wait, the epilogue's store of a pair of
// output channels (store_pair), and the host's alignment test for the pointers a vector kernel is given.
// Device code only: the .cu files include it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/epilogue.cuh"

namespace convkit::detail {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// V elements at p (aligned to V * sizeof(T)) as fp32.
// bf16 pairs are widened from their 32-bit word: a bf16 is the top half of an fp32, so the low element is
// the word shifted up 16 bits and the high one the word with its low half cleared (exact). Element by element
// the compiler spends a byte permute more on each high half.
template <typename T, int V>
__device__ __forceinline__ void load_vec_f32(const T* p, float (&out)[V]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && V % 2 == 0) {
    const Vec<uint32_t, V / 2> w = *reinterpret_cast<const Vec<uint32_t, V / 2>*>(p);
#pragma unroll
    for (int e = 0; e < V / 2; ++e) {
      out[2 * e] = __uint_as_float(w.v[e] << 16);
      out[2 * e + 1] = __uint_as_float(w.v[e] & 0xffff0000u);
    }
  } else {
    const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = elem_to_float<T>(v.v[e]);
  }
}

// 16 bytes from global g to shared s without a register round trip (cp.async, L2 only); zeros instead when
// pred is false (g is then not read, but must still be a valid address). Complete with cp.async.wait_group.
__device__ __forceinline__ void cp_async16_zfill(void* s, const void* g, bool pred) {
  const uint32_t sa = uint32_t(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(pred ? 16 : 0));
}

// The same by shared-memory address (the tensor-core kernels keep their stages' addresses so), with a
// "memory" clobber: the compiler does not move shared-memory accesses across it.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Output channels k and k + 1 (k < K) of the output pixel at offset o (its channel 0) through the epilogue:
// one 4-byte word where `paired` (K even and dst 4-byte aligned), else element by element, k + 1 only where it
// is < K. The residual elements are read (inside epi) before the word holding them is written.
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, const DeviceEpilogue<T>& epi, int64_t o, int k, int K, float a0,
                                           float a1, bool paired) {
  const float v0 = epi(a0, k, o + k);
  if (paired) {
    Vec<T, 2> w;
    w.v[0] = float_to_elem<T>(v0);
    w.v[1] = float_to_elem<T>(epi(a1, k + 1, o + k + 1));
    *reinterpret_cast<Vec<T, 2>*>(dst + o + k) = w;
  } else {
    dst[o + k] = float_to_elem<T>(v0);
    if (k + 1 < K) dst[o + k + 1] = float_to_elem<T>(epi(a1, k + 1, o + k + 1));
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace convkit::detail
