#include "core/placeholder.hpp"
#include "core/registry.hpp"
namespace convkit::detail {
const Algorithm* make_cpu_direct() { static Placeholder a("cpu_direct", Device::cpu, false); return &a; }
}  // namespace convkit::detail
