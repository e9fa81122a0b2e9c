#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cuda_direct_smem() { static Placeholder a("cuda_direct_smem", Device::cuda, false); return &a; }
}  // namespace convkit::detail
