// `convkit doctor`: what this build holds and what this machine offers.
#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "commands.hpp"
#include "common.hpp"
#include "convkit/system.hpp"

namespace convkit::cli {
namespace {

std::string cuda_version(int v) {  // 13000 -> "13.0"
  return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "none";
}

std::string mib(size_t bytes) { return fmt::format("{:.0f} MiB", double(bytes) / (1024.0 * 1024.0)); }

}  // namespace

CLI::App* add_doctor(CLI::App& app) {
  return app.add_subcommand("doctor", "Show the build (CUDA archs, libraries) and this machine's GPUs and CPUs.");
}

int run_doctor() {
  const SystemInfo s = system_info();
  fmt::print("convkit {}\n", s.convkit_version);
  fmt::print("CPU: {} OpenMP threads; bfloat16 {}; SiLU/sigmoid/GELU epilogue {}\n", s.cpu_threads,
             s.cpu_bf16_native ? "on the CPU's dot product (AVX512-BF16)" : "widened to float32",
             s.cpu_vector_math ? "on libmvec's vector expf/erff" : "one value at a time");
  fmt::print("OpenBLAS: {}\n", s.openblas.empty() ? "not in this build (cpu_im2col_gemm unavailable)" : s.openblas);
  if (!s.openblas.empty()) {
    // OpenBLAS picks its kernels when it loads, from OPENBLAS_CORETYPE if set, else from the CPU (0.3.21 gives
    // AMD Zen 4 its AVX-512 "Cooperlake" ones). A variable that names AVX2 kernels on an AVX-512 CPU holds
    // cpu_im2col_gemm's SGEMMs to about half their speed there.
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::string core = s.openblas_core;
    for (char& ch : core) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const bool avx2_core = core == "haswell" || core == "zen" || core == "sandybridge" || core == "excavator";
    fmt::print("OpenBLAS kernels: {}{}{}\n", s.openblas_core.empty() ? "unknown" : s.openblas_core,
               env ? fmt::format(" (OPENBLAS_CORETYPE={})", env) : "",
               s.cpu_avx512 && avx2_core
                   ? "; this CPU has AVX-512: without OPENBLAS_CORETYPE (or with SkylakeX) OpenBLAS runs its "
                     "AVX-512 kernels"
                   : "");
  }
  fmt::print("float32 GEMM (cpu_im2col_gemm, cpu_winograd, weight gradients): {}\n",
             s.cpu_sgemm.empty() ? "none in this build" : s.cpu_sgemm);
  fmt::print("oneDNN: {}\n", s.onednn_version.empty() ? "not in this build (the onednn_cpu peer is unavailable)"
                                                       : s.onednn_version);
  if (!s.cuda_built) {
    fmt::print("CUDA: not in this build{}\n", s.cuda_error.empty() ? "" : " (" + s.cuda_error + ")");
    fmt::print("GPU: none usable by this build\n");
    return 0;
  }
  fmt::print("CUDA: built for CMAKE_CUDA_ARCHITECTURES={}; runtime {}, driver {}\n",
             s.cuda_build_archs.empty() ? "?" : s.cuda_build_archs, cuda_version(s.cuda_runtime_version),
             s.cuda_driver_version > 0 ? cuda_version(s.cuda_driver_version) : "none");
  fmt::print("cuBLAS: {}\n", s.cublas_version.empty() ? "unknown" : s.cublas_version);
  fmt::print("cuDNN: {}\n", s.cudnn_version.empty() ? "not in this build (the cudnn_peer is unavailable)"
                                                    : s.cudnn_version);
  if (s.gpus.empty()) {
    fmt::print("GPU: none found{}\n", s.cuda_error.empty() ? "" : " (" + s.cuda_error + ")");
    return 0;
  }
  for (const GpuInfo& g : s.gpus) {
    fmt::print("GPU {}: {}, compute capability {}.{}, {} SMs, {:.1f} GiB, L2 {}, shared memory per block {} KiB\n",
               g.index, g.name, g.cc_major, g.cc_minor, g.sm_count,
               double(g.memory_bytes) / (1024.0 * 1024.0 * 1024.0), mib(g.l2_bytes), g.smem_per_block_optin / 1024);
    if (g.binary_has_code)
      fmt::print("  code for it: yes{}\n", g.code_note.empty() ? "" : " (" + g.code_note + ")");
    else
      fmt::print("  code for it: NO: {}\n", g.code_note.empty()
                                                 ? fmt::format("rebuild with -DCMAKE_CUDA_ARCHITECTURES={}{}",
                                                               g.cc_major, g.cc_minor)
                                                 : g.code_note);
  }
  fmt::print("kernel launches on the current GPU: {}\n",
             cuda_programmatic_launch()
                 ? "programmatic dependent launch (CONVKIT_PDL=0 turns it off)"
                 : "plain (programmatic dependent launch needs compute capability 9.0 and CONVKIT_PDL unset or not 0)");
  if (!s.cuda_error.empty()) fmt::print("note: {}\n", s.cuda_error);
  return 0;
}

}  // namespace convkit::cli
