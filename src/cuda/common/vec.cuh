// Vectors of an element type for 16-byte (or narrower) global and shared-memory accesses: Vec<T, V>, one
// loaded and widened to fp32 (load_vec_f32), and the host's alignment test for the pointers a vector kernel
// is given. Device code only: the .cu files include it.
#pragma once

#include <cstdint>

#include "cuda/common/epilogue.cuh"

namespace convkit::detail {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// V elements at p (aligned to V * sizeof(T)) as fp32.
template <typename T, int V>
__device__ __forceinline__ void load_vec_f32(const T* p, float (&out)[V]) {
  const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = elem_to_float<T>(v.v[e]);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace convkit::detail
