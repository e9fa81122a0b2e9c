#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cuda_igemm_simt() { static Placeholder a("cuda_igemm_simt", Device::cuda, false); return &a; }
}  // namespace convkit::detail
