#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cudnn_peer() { static Placeholder a("cudnn_peer", Device::cuda, true); return &a; }
}  // namespace convkit::detail
