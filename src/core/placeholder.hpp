// TEMPORARY scaffolding while the skeleton is filled in: an algorithm that is registered but not yet
// implemented. It must be gone before any issue is closed.
#pragma once
#include "convkit/algorithm.hpp"
#include "convkit/status.hpp"

namespace convkit::detail {
class Placeholder final : public Algorithm {
 public:
  Placeholder(const char* n, Device d, bool peer = false) : name_(n), dev_(d), peer_(peer) {}
  std::string name() const override { return name_; }
  Device device() const override { return dev_; }
  std::string description() const override { return "not implemented yet"; }
  bool is_peer() const override { return peer_; }
  Support available() const override { return Support::no("not implemented yet."); }
  Support can_implement(const Conv2dProblem&, const ConvConfig&) const override {
    return Support::no("not implemented yet.");
  }
  void run(const ConvCall&) const override { throw Error(StatusCode::not_available, name_ + ": not implemented"); }

 private:
  std::string name_;
  Device dev_;
  bool peer_;
};
}  // namespace convkit::detail
