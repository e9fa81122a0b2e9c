// `convkit list`: every algorithm and peer, whether it can run here, and its one-line idea.
#include <fmt/format.h>

#include <algorithm>

#include "commands.hpp"
#include "common.hpp"
#include "core/cuda_hooks.hpp"

namespace convkit::cli {

CLI::App* add_list(CLI::App& app, ListOptions& o) {
  CLI::App* sub = app.add_subcommand("list", "List every algorithm and peer, with availability and description.");
  sub->add_option("--device", o.device, "only cpu or cuda algorithms");
  return sub;
}

int run_list(const ListOptions& o) {
  bool filter = false;
  Device want = Device::cpu;
  if (!o.device.empty() && o.device != "all") {
    try {
      want = parse_device(o.device);
    } catch (const Error&) {
      throw UsageError("unknown device '" + o.device + "' (expected cpu or cuda)");
    }
    filter = true;
  }
  std::vector<const Algorithm*> all = algorithms();
  all.insert(all.end(), peers().begin(), peers().end());
  size_t wname = 9, wavail = 9;
  std::vector<std::string> avail;
  for (const Algorithm* a : all) {
    const Support s = a->available();
    avail.push_back(s ? "yes" : "no: " + s.reason);
    wname = std::max(wname, a->name().size());
  }
  for (const auto& s : avail) wavail = std::max(wavail, std::min<size_t>(s.size(), 40));
  fmt::print("{:<{}}  {:<6}  {:<5}  {:<{}}  {}\n", "algorithm", wname, "device", "peer", "available", wavail,
             "description");
  for (size_t i = 0; i < all.size(); ++i) {
    const Algorithm* a = all[i];
    if (filter && a->device() != want) continue;
    fmt::print("{:<{}}  {:<6}  {:<5}  {:<{}}  {}\n", a->name(), wname, to_string(a->device()),
               a->is_peer() ? "yes" : "no", avail[i], wavail, a->description());
  }
  if (!detail::cuda_built() && (!filter || want == Device::cuda))
    fmt::print("CUDA algorithms: not in this build (nvcc was not found when it was configured)\n");
  return 0;
}

}  // namespace convkit::cli
