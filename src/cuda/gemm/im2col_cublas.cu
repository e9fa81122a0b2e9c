#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cuda_im2col_cublas() { static Placeholder a("cuda_im2col_cublas", Device::cuda, false); return &a; }
}  // namespace convkit::detail
