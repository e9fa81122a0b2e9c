#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cpu_im2col_gemm() { static Placeholder a("cpu_im2col_gemm", Device::cpu, false); return &a; }
}  // namespace convkit::detail
