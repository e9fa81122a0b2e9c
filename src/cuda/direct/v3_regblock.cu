#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cuda_direct_regblock() { static Placeholder a("cuda_direct_regblock", Device::cuda, false); return &a; }
}  // namespace convkit::detail
