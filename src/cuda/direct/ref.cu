#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cuda_ref() { static Placeholder a("cuda_ref", Device::cuda, false); return &a; }
}  // namespace convkit::detail
