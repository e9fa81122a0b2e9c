// convkit/system.hpp: what this build holds and what this machine offers (used by `convkit doctor`).
#pragma once

#include <string>
#include <vector>

namespace convkit {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;
  bool binary_has_code = false;  // this build carries SASS (or PTX the driver can JIT) for this GPU
  std::string code_note;         // e.g. "sm_90 SASS" or "no code: rebuild with -DCMAKE_CUDA_ARCHITECTURES=89"
};

struct SystemInfo {
  std::string convkit_version;
  bool cuda_built = false;
  std::string cuda_build_archs;  // CMAKE_CUDA_ARCHITECTURES of this build, e.g. "90"
  int cuda_runtime_version = 0;  // e.g. 13000
  int cuda_driver_version = 0;   // 0 when no driver
  std::string cuda_error;        // why no GPU is usable, if none is
  std::vector<GpuInfo> gpus;
  std::string cublas_version;    // empty when not built in
  std::string cudnn_version;     // "9.19.0 (header 9.19.0)" or empty
  std::string openblas;          // config string, or empty when not built in
  std::string openblas_core;     // the kernel set OpenBLAS chose when it loaded (its core name), or empty
  bool cpu_avx512 = false;       // AVX-512 F, DQ, BW and VL (what OpenBLAS's SkylakeX kernels use)
  std::string cpu_sgemm;         // the float32 GEMM of the CPU algorithms (OpenBLAS or oneDNN's) and why, or empty
  std::string onednn_version;    // or empty
  int cpu_threads = 0;           // OpenMP max threads
  bool cpu_bf16_native = false;  // cpu_bf16_native() below
  bool cpu_vector_math = false;  // the CPU epilogue's SiLU, sigmoid and GELU from glibc's libmvec
};

SystemInfo system_info();

// The float32 GEMM of the CPU algorithms (cpu_im2col_gemm, cpu_winograd, the weight gradient) and why, in a
// sentence: OpenBLAS's, or oneDNN's where OpenBLAS did not recognise the CPU (docs/environment.md); empty when
// the build has neither. Decided once a process, on the first call of this or of such a GEMM (no device query).
std::string cpu_float32_gemm();

// Whether bfloat16 NHWC convolutions on the CPU compute on the CPU's bfloat16 dot product (AVX512-BF16, in
// this build: cpu_im2col_gemm) rather than widened to float32. Cheap (no device query): the PyTorch
// extension's CPU autocast rule asks it on every call.
bool cpu_bf16_native();

// Whether convkit launches its CUDA kernels with programmatic dependent launch on the current device: compute
// capability 9.0 or later and CONVKIT_PDL not "0" (src/cuda/common/launch.cuh); false in a build without
// CUDA. Such a kernel may be scheduled while the kernel before it on the stream runs, and waits
// (griddepcontrol.wait) before it reads anything. Other code may launch its own kernels so on the same
// switch if each of them waits first (the PyTorch extension's do).
bool cuda_programmatic_launch();

}  // namespace convkit
