#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_onednn_cpu() { static Placeholder a("onednn_cpu", Device::cpu, true); return &a; }
}  // namespace convkit::detail
