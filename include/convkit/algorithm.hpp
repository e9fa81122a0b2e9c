// convkit/algorithm.hpp: the one interface every convolution algorithm (and every peer) implements.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "convkit/epilogue.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit {

// What a caller asks for besides the problem: element type, memory layout, device and fp32 math mode.
struct ConvConfig {
  DType dtype = DType::f32;
  Layout layout = Layout::nchw;
  Device device = Device::cpu;
  MathMode math = MathMode::strict;

  std::string to_string() const;  // e.g. "f32/nchw/cpu" or "f32/nhwc/cuda/tf32"
};

// "Yes", or "no" with one sentence saying why.
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// What the planner knows about a request's tensors beyond the problem and the configuration: what an
// algorithm may need to refuse a request that its problem alone would allow. A request without tensors
// (`convkit plan`, convkit.plan) uses the defaults: every pointer aligned for anything, no bias, no residual.
struct Operands {
  // Each pointer's alignment: the largest power of two dividing its address, at most 256.
  unsigned src_align = 256, wei_align = 256, dst_align = 256, bias_align = 256, residual_align = 256;
  bool has_bias = false, has_residual = false;
  bool residual_is_dst = false;  // the residual is the output itself (an in-place add)
  bool per_sample = false;       // one filter bank per sample (convkit/per_sample.hpp): wei {N*K, C/g, R, S}
  // The epilogue's activation: no algorithm refuses one, but its cost differs between kernels (an exp and a
  // division an element weigh on a kernel of few warps an SM), so the heuristic may weigh it.
  Activation activation = Activation::none;

  static Operands of(const TensorView& src, const TensorView& wei, const TensorView& dst, const Epilogue& epi,
                     bool per_sample = false);
  static unsigned alignment_of(const void* p);
  // The input's and the weight's alignment, the smaller one (what a vector or TMA load needs).
  unsigned operand_align() const { return src_align < wei_align ? src_align : wei_align; }
  std::string to_string() const;  // "aligned" or e.g. "input 4-byte aligned, per-sample weights"
  bool operator==(const Operands& o) const {
    return src_align == o.src_align && wei_align == o.wei_align && dst_align == o.dst_align &&
           bias_align == o.bias_align && residual_align == o.residual_align && has_bias == o.has_bias &&
           has_residual == o.has_residual && residual_is_dst == o.residual_is_dst && per_sample == o.per_sample &&
           activation == o.activation;
  }
};

// Everything one run needs. Tensors are already validated against the problem.
struct ConvCall {
  Conv2dProblem problem;
  ConvConfig config;
  TensorView src, wei, dst;  // dst may alias epilogue.residual
  Epilogue epilogue;
  void* workspace = nullptr;  // on config.device, at least workspace_bytes(problem, config)
  size_t workspace_bytes = 0;
  void* stream = nullptr;  // cudaStream_t for CUDA algorithms; null = default stream
  // One of the algorithm's variants() (a tile shape, a split count), or empty: its own heuristic choice.
  std::string variant;
  // Per-sample weights (convkit/per_sample.hpp): wei has N*K filter rows, the bias N*K values. Only an
  // algorithm whose accepts() takes Operands::per_sample sees this set.
  bool per_sample = false;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // One line: the idea of this algorithm.
  virtual std::string description() const = 0;
  // Peers (cuDNN, oneDNN) are measured against, never selected by conv2d().
  virtual bool is_peer() const { return false; }
  // An approximate algorithm (Winograd) declares the rel L2 error it stays within on fp32 data, above the
  // exact sum's fp32 rounding (~1e-5); 0 for an exact one. The planner and the autotuner never choose an
  // approximate algorithm; it runs when named. The tests check it against this bound.
  virtual double approximate_rel_l2() const { return 0.0; }
  bool approximate() const { return approximate_rel_l2() > 0.0; }
  // Whether this build and this machine can run it at all (library compiled in, device present).
  virtual Support available() const { return Support::yes(); }
  // Whether it can compute this problem in this configuration; the reason is one sentence.
  virtual Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const = 0;
  // Whether it can run this request's operands (asked after can_implement): pointer alignment, a residual
  // that is the output, per-sample weights. The default: any alignment, and no per-sample mode. An algorithm
  // that refuses here is skipped by the planner with this reason; no algorithm hands its work to another.
  virtual Support accepts(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) const;
  // Where the heuristic (auto without a tune cache entry) passes over it although it can run: another
  // algorithm measured faster there, and the reason says which. The autotuner and a request by name still
  // run it. The operands (their epilogue's activation, say) may weigh in. The default: never passed over.
  virtual Support heuristic_choice(const Conv2dProblem&, const ConvConfig&, const Operands&) const {
    return Support::yes();
  }
  virtual size_t workspace_bytes(const Conv2dProblem&, const ConvConfig&) const { return 0; }
  // Tunable variants for this problem (e.g. "128x128x32/s3/k4": tile, stages, k splits), the heuristic's
  // own choice first; empty when the algorithm has nothing to tune. An autotuner times each.
  virtual std::vector<std::string> variants(const Conv2dProblem&, const ConvConfig&) const { return {}; }
  // The workspace one variant needs (the default: workspace_bytes(), for algorithms without variants).
  virtual size_t variant_workspace_bytes(const Conv2dProblem& p, const ConvConfig& c, const std::string&) const {
    return workspace_bytes(p, c);
  }
  // Optional one-time work outside any timed region (autotuning, plan building). run() must also work
  // without it.
  virtual void prepare(const ConvCall&) const {}
  // Extra facts for reports after prepare()/run(), e.g. the cuDNN engine chosen. Empty if none.
  virtual std::string detail(const Conv2dProblem&, const ConvConfig&) const { return {}; }
  // Computes dst. Asynchronous on CUDA (enqueued on call.stream); throws convkit::Error on failure.
  virtual void run(const ConvCall& call) const = 0;
};

}  // namespace convkit
