// onednn_cpu: the CPU peer. oneDNN (2.x) f32 forward-inference convolution, measured the way oneDNN is
// meant to be used: the primitive is created with format_tag::any, so oneDNN picks its own blocked layouts
// (typically nChw16c / OIhw16i16o on AVX-512), and the weights are reordered once in prepare().
//
// What run() does, in order: (a) reorder src from the user layout into oneDNN's layout when they differ,
// (b) execute the convolution with bias and activation fused (bias through the primitive; relu /
// swish(alpha=1) / gelu_erf as a post-op), (c) reorder dst back into the user layout. A residual or
// alpha != 1 is applied on the way back instead (see the NOTE in build()). The timer around run() therefore sees all three;
// run() also times (b) alone and detail() reports both medians, so the honest peer figure ("oneDNN's own
// layouts, reorders not timed") is the "execute" one. If oneDNN rejects the fused post-ops it falls back
// to a plain convolution and applies the epilogue on the way back (detail() says "epilogue: unfused").
//
// Primitives and reordered weights are cached per (problem, layout, epilogue shape) in a mutex-protected
// map. The cached weights are used only while the weight pointer and a 256-element fingerprint of the
// weights match what was reordered; otherwise run() reorders them again, so new weights at a reused
// address are never missed. Parallelism is oneDNN's own (OpenMP, all cores).
// Measured 2026-11-29 on the 2-vCPU AMD EPYC (Zen 4, AVX-512), oneDNN 2.6.3, batch-1 ResNet-50 layers:
// 83-126 GFLOP/s per thread (best of 20, execute only, brgconv / brgconv_1x1), i.e. ~200-250 on 2 cores.
// KNOWN ISSUE: oneDNN 2.6.3 crashed on fused residuals (see build()); since the residual is applied
// unfused, the test suite's random and small-integer sweeps run clean (checked 2026-11-29).
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/activation.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"

#ifdef CONVKIT_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace convkit::detail {
namespace {

#ifdef CONVKIT_HAVE_ONEDNN

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// A cheap fingerprint of the weights: up to 256 elements spread over the tensor, as raw bits.
uint64_t fingerprint(const float* w, int64_t count) {
  uint64_t h = 1469598103934665603ull;
  const int64_t step = count > 256 ? count / 256 : 1;
  for (int64_t i = 0; i < count; i += step) {
    uint32_t u;
    std::memcpy(&u, w + i, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  uint32_t last;
  std::memcpy(&last, w + count - 1, 4);
  return (h ^ last) * 1099511628211ull;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Plan {
  std::mutex mu;  // one run at a time per plan: the internal buffers are shared
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward conv;
  bool fused = true;        // epilogue as post-ops (else applied on the way back)
  bool src_direct = false;  // oneDNN reads the caller's src in place (same layout)
  bool dst_direct = false;  // oneDNN writes the caller's dst in place (same layout, epilogue fused)
  bool bias_in_prim = false;
  int bias_arg = 0;         // DNNL_ARG_BIAS, a post-op binary argument, or 0
  // user-layout descriptors (data handles set per run) and oneDNN-layout buffers (owned)
  dnnl::memory user_src, user_wei, user_dst, user_bias;
  dnnl::memory src_mem, wei_mem, dst_mem;
  dnnl::reorder src_to, dst_from, wei_to;
  std::unordered_map<int, dnnl::memory> args;  // for conv.execute (handles updated per run)
  std::vector<float> plain;  // unfused epilogue: the conv result in the user layout
  const void* wei_ptr = nullptr;
  uint64_t wei_print = 0;
  std::vector<double> exec_ms, run_ms;  // the last runs, for detail()
};

dnnl::algorithm act_alg(Activation a) {
  switch (a) {
    case Activation::relu: return dnnl::algorithm::eltwise_relu;
    case Activation::silu: return dnnl::algorithm::eltwise_swish;
    case Activation::gelu: return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::relu6: return dnnl::algorithm::eltwise_clip;     // clip(x, 0, 6)
    case Activation::hardswish: return dnnl::algorithm::eltwise_hardswish;
    case Activation::sigmoid: return dnnl::algorithm::eltwise_logistic;
    default: return dnnl::algorithm::undef;
  }
}

#endif  // CONVKIT_HAVE_ONEDNN

class OneDnnCpu final : public Algorithm {
 public:
  std::string name() const override { return "onednn_cpu"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "oneDNN f32 inference convolution in its own blocked layouts, epilogue as post-ops (peer)";
  }
  bool is_peer() const override { return true; }
  Support available() const override {
#ifdef CONVKIT_HAVE_ONEDNN
    return Support::yes();
#else
#ifdef CONVKIT_ONEDNN_MISSING_REASON
    return Support::no(std::string("built without oneDNN: ") + CONVKIT_ONEDNN_MISSING_REASON +
                       " (apt-get install libdnnl-dev ocl-icd-opencl-dev, then reconfigure).");
#else
    return Support::no("built without oneDNN (apt-get install libdnnl-dev ocl-icd-opencl-dev, then reconfigure).");
#endif
#endif
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.device != Device::cpu) return Support::no("runs on the CPU only.");
    if (cfg.dtype != DType::f32) return Support::no("the oneDNN peer is measured in f32 only.");
    if (cfg.math == MathMode::tf32) return Support::no("the CPU has no tf32 mode; ask for strict f32.");
    if (Status s = p.validate(); !s.ok()) return Support::no(s.message);
    return Support::yes();
  }

#ifndef CONVKIT_HAVE_ONEDNN
  void run(const ConvCall&) const override {
    throw Error(StatusCode::not_available, "onednn_cpu: " + available().reason);
  }
#else
  void prepare(const ConvCall& call) const override {
    Plan& plan = get_plan(call);
    std::lock_guard<std::mutex> lk(plan.mu);
    reorder_weights(plan, call);
  }

  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    std::lock_guard<std::mutex> lk(mu_);
    // Every plan of this problem and layout (one per epilogue shape): report the last one used.
    const std::string prefix = p.to_string() + "/" + to_string(cfg.layout) + "/";
    Plan* best = nullptr;
    for (auto& kv : plans_)
      if (kv.first.compare(0, prefix.size(), prefix) == 0 && (!best || kv.second.get() == last_)) best = kv.second.get();
    if (!best) return {};
    std::lock_guard<std::mutex> pk(best->mu);
    std::ostringstream o;
    o << "impl " << best->pd.impl_info_str() << "; epilogue " << (best->fused ? "fused" : "unfused")
      << "; run() = " << (best->src_direct ? "" : "src reorder + ") << "execute"
      << (best->dst_direct ? "" : best->fused ? " + dst reorder" : " + dst reorder + epilogue");
    if (!best->exec_ms.empty())
      o << "; execute alone median " << median_of(best->exec_ms) << " ms (min "
        << *std::min_element(best->exec_ms.begin(), best->exec_ms.end()) << "), whole run() " << median_of(best->run_ms)
        << " ms (last " << best->exec_ms.size() << " runs)";
    return o.str();
  }

  void run(const ConvCall& call) const override {
    if (Support ok = can_implement(call.problem, call.config); !ok)
      throw Error(StatusCode::unsupported, "onednn_cpu: " + ok.reason);
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    Plan& plan = get_plan(call);
    std::lock_guard<std::mutex> lk(plan.mu);
    const Epilogue& e = call.epilogue;
    try {
      dnnl::stream strm(cpu_engine());
      const float* w = static_cast<const float*>(call.wei.data);
      if (plan.wei_ptr != call.wei.data || plan.wei_print != fingerprint(w, call.wei.numel()))
        reorder_weights(plan, call);

      // (a) src into oneDNN's layout
      plan.user_src.set_data_handle(call.src.data);
      if (!plan.src_direct) plan.src_to.execute(strm, plan.user_src, plan.src_mem);
      if (plan.bias_arg != 0)
        std::memcpy(plan.user_bias.get_data_handle(), e.bias, sizeof(float) * static_cast<size_t>(call.problem.k));
      strm.wait();

      if (plan.dst_direct) plan.user_dst.set_data_handle(call.dst.data);

      // (b) the convolution alone
      const auto t1 = clock::now();
      plan.conv.execute(strm, plan.args);
      strm.wait();
      const auto t2 = clock::now();

      // (c) back to the user layout (and the epilogue when it could not be fused)
      if (plan.dst_direct) {
        // written in place by the convolution
      } else if (plan.fused) {
        plan.user_dst.set_data_handle(call.dst.data);
        plan.dst_from.execute(strm, plan.dst_mem, plan.user_dst);
        strm.wait();
      } else {
        plan.user_dst.set_data_handle(plan.plain.data());
        plan.dst_from.execute(strm, plan.dst_mem, plan.user_dst);
        strm.wait();
        finish_unfused(plan, call);
      }
      const auto t3 = clock::now();
      record(plan.exec_ms, std::chrono::duration<double, std::milli>(t2 - t1).count());
      record(plan.run_ms, std::chrono::duration<double, std::milli>(t3 - t0).count());
    } catch (const dnnl::error& err) {
      throw Error(StatusCode::internal, std::string("onednn_cpu: oneDNN failed: ") + err.what());
    }
    std::lock_guard<std::mutex> g(mu_);
    last_ = &plan;
  }

 private:
  static void record(std::vector<double>& v, double ms) {
    if (v.size() >= 200) v.erase(v.begin());
    v.push_back(ms);
  }

  static std::string key(const ConvCall& c) {
    const Epilogue& e = c.epilogue;
    std::ostringstream o;
    uint32_t a, b;
    std::memcpy(&a, &e.alpha, 4);
    std::memcpy(&b, &e.beta, 4);
    o << c.problem.to_string() << "/" << to_string(c.config.layout) << "/" << (e.bias != nullptr)
      << (e.residual != nullptr) << int(e.activation) << "/" << a << "/" << b;
    return o.str();
  }

  Plan& get_plan(const ConvCall& call) const {
    const std::string k = key(call);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = plans_.find(k);
    if (it != plans_.end()) return *it->second;
    auto plan = std::make_unique<Plan>();
    try {
      build(*plan, call);
    } catch (const dnnl::error& err) {
      throw Error(StatusCode::unsupported,
                  "onednn_cpu: oneDNN cannot create this convolution (" + std::string(err.what()) + ").");
    }
    Plan& ref = *plan;
    plans_.emplace(k, std::move(plan));
    return ref;
  }

  // Creates the primitive (oneDNN picks the layouts), the buffers in its layouts and the reorders.
  static void build(Plan& plan, const ConvCall& call) {
    const Conv2dProblem& p = call.problem;
    const Epilogue& e = call.epilogue;
    const bool nhwc = call.config.layout == Layout::nhwc;
    const bool grouped = p.groups > 1;
    if (log_enabled("onednn"))
      std::fprintf(stderr, "[convkit onednn] building %s %s\n", p.to_string().c_str(), call.config.to_string().c_str());
    dnnl::engine& eng = cpu_engine();
    using dims = dnnl::memory::dims;
    const dims src_d{p.n, p.c, p.h, p.w}, dst_d{p.n, p.k, p.p(), p.q()};
    const dims wei_d = grouped ? dims{p.groups, p.k_per_group(), p.c_per_group(), p.r, p.s}
                               : dims{p.k, p.c, p.r, p.s};
    const dims strides{p.stride_h, p.stride_w}, dil{p.dilation_h - 1, p.dilation_w - 1};
    const dims pad{p.pad_h, p.pad_w};
    const tag act_tag = nhwc ? tag::nhwc : tag::nchw;
    const tag wei_tag = grouped ? (nhwc ? tag::gohwi : tag::goihw) : (nhwc ? tag::ohwi : tag::oihw);
    const dnnl::memory::desc user_src_md(src_d, dt::f32, act_tag), user_dst_md(dst_d, dt::f32, act_tag);
    const dnnl::memory::desc user_wei_md(wei_d, dt::f32, wei_tag), bias_md({p.k}, dt::f32, tag::x);
    // NOTE: channels-last activations are handed to oneDNN as they are (its brgconv kernels work on nhwc
    // natively, as for PyTorch's channels_last), so an NHWC run has no reorder at all and the timed run()
    // is oneDNN's own time; NCHW lets oneDNN pick its blocked layout (nChw16c) and pays the reorders.
    const dnnl::memory::desc any_src(src_d, dt::f32, nhwc ? tag::nhwc : tag::any),
        any_dst(dst_d, dt::f32, nhwc ? tag::nhwc : tag::any),
        any_wei(wei_d, dt::f32, tag::any);

    auto make = [&](bool fuse) {
      dnnl::primitive_attr attr;
      dnnl::post_ops ops;
      const bool has_bias = e.bias != nullptr;
      plan.bias_in_prim = fuse && has_bias && e.alpha == 1.0f;
      plan.bias_arg = 0;
      if (fuse) {
        if (e.alpha != 1.0f) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, e.alpha, 0.0f);
        if (has_bias && !plan.bias_in_prim) {
          ops.append_binary(dnnl::algorithm::binary_add, dnnl::memory::desc({1, p.k, 1, 1}, dt::f32, tag::nchw));
          plan.bias_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(ops.len() - 1) | DNNL_ARG_SRC_1;
        }
        if (e.activation == Activation::hardsigmoid) {
          // relu6(x + 3) / 6 = clip(x / 6 + 1/2, 0, 1) (this oneDNN has no hardsigmoid of its own)
          ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f / 6.0f, 0.5f);
          ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 1.0f);
        } else if (e.activation != Activation::none) {
          // swish(x) = x * sigmoid(alpha x): alpha = 1 is silu; clip(x, alpha, beta) with 0 and 6 is relu6.
          const float a = e.activation == Activation::silu ? 1.0f : 0.0f;
          const float b = e.activation == Activation::relu6 ? 6.0f : 0.0f;
          ops.append_eltwise(1.0f, act_alg(e.activation), a, b);
        }
        attr.set_post_ops(ops);
      }
      if (plan.bias_in_prim) plan.bias_arg = DNNL_ARG_BIAS;
      dnnl::convolution_forward::desc d =
          plan.bias_in_prim
              ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                any_src, any_wei, bias_md, any_dst, strides, dil, pad, pad)
              : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                any_src, any_wei, any_dst, strides, dil, pad, pad);
      return dnnl::convolution_forward::primitive_desc(d, attr, eng);
    };
    // NOTE: alpha != 1 and the residual are not fused. oneDNN 2.6.3 on this machine's AVX-512 (Zen 4):
    // brgconv crashes (SIGSEGV in its JIT code) on eltwise_linear + binary_add(bias) + sum, mishandles the
    // sum post-op (SIGSEGVs and wrong answers where a window lies wholly in the padding), and skipping past
    // brgconv with next_impl() recursed without end inside dnnl_primitive_desc_iterator_next (a stack
    // overflow even with a 1 GiB stack; e.g. n1c32h5w5k3r2s7p1u3 nchw and n2c3h10w17k33r3s3p0d3 nhwc).
    // With either, the plain convolution runs and the epilogue is applied on the way back.
    try {
      if (e.alpha != 1.0f) throw dnnl::error(dnnl_unimplemented, "alpha != 1 is applied unfused");
      if (e.residual != nullptr) throw dnnl::error(dnnl_unimplemented, "the residual is applied unfused");
      plan.pd = make(true);
      plan.fused = true;
    } catch (const dnnl::error&) {
      plan.pd = make(false);
      plan.fused = false;
    }
    plan.conv = dnnl::convolution_forward(plan.pd);

    plan.user_src = dnnl::memory(user_src_md, eng, DNNL_MEMORY_NONE);
    plan.user_wei = dnnl::memory(user_wei_md, eng, DNNL_MEMORY_NONE);
    plan.user_dst = dnnl::memory(user_dst_md, eng, DNNL_MEMORY_NONE);
    plan.user_bias = dnnl::memory(plan.bias_in_prim ? bias_md : dnnl::memory::desc({1, p.k, 1, 1}, dt::f32, tag::nchw),
                                  eng);
    // oneDNN-layout buffers for the reorder path; where the layouts agree (src_direct / dst_direct below)
    // the caller's buffers are used as they are. (Rare SIGSEGVs once blamed on that were oneDNN's endless
    // recursion on fused residuals: see the NOTE above.)
    plan.src_mem = dnnl::memory(plan.pd.src_desc(), eng);
    plan.wei_mem = dnnl::memory(plan.pd.weights_desc(), eng);
    plan.dst_mem = dnnl::memory(plan.pd.dst_desc(), eng);
    plan.src_to = dnnl::reorder(plan.user_src, plan.src_mem);
    plan.wei_to = dnnl::reorder(plan.user_wei, plan.wei_mem);
    plan.dst_from = dnnl::reorder(plan.dst_mem, plan.user_dst);
    // Where oneDNN's layout is the user's, it reads src / writes dst in place: no copy, no reorder.
    plan.src_direct = plan.pd.src_desc() == user_src_md;
    plan.dst_direct = plan.fused && plan.pd.dst_desc() == user_dst_md;
    plan.args = {{DNNL_ARG_SRC, plan.src_direct ? plan.user_src : plan.src_mem},
                 {DNNL_ARG_WEIGHTS, plan.wei_mem},
                 {DNNL_ARG_DST, plan.dst_direct ? plan.user_dst : plan.dst_mem}};
    if (plan.bias_arg != 0) plan.args.emplace(plan.bias_arg, plan.user_bias);
    if (!plan.fused) plan.plain.resize(static_cast<size_t>(p.output_elems()));
  }

  static void reorder_weights(Plan& plan, const ConvCall& call) {
    dnnl::stream strm(cpu_engine());
    plan.user_wei.set_data_handle(call.wei.data);
    plan.wei_to.execute(strm, plan.user_wei, plan.wei_mem);
    strm.wait();
    plan.wei_ptr = call.wei.data;
    plan.wei_print = fingerprint(static_cast<const float*>(call.wei.data), call.wei.numel());
  }

  // y = act(alpha*conv + bias + beta*res) in the user layout, conv taken from plan.plain. Reads each
  // residual element before writing the same dst element, so an aliased residual is fine.
  static void finish_unfused(const Plan& plan, const ConvCall& call) {
    const Conv2dProblem& p = call.problem;
    const Epilogue& e = call.epilogue;
    const float* bias = static_cast<const float*>(e.bias);
    const float* res = static_cast<const float*>(e.residual);
    float* y = static_cast<float*>(call.dst.data);
    const int64_t total = p.output_elems(), PQ = p.p() * p.q();
    const bool nhwc = call.config.layout == Layout::nhwc;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) {
      const int64_t k = nhwc ? i % p.k : (i / PQ) % p.k;
      y[i] = apply_epilogue<float>(e.activation, e.alpha, e.beta, plan.plain[i], bias != nullptr, bias ? bias[k] : 0.0f,
                                   res != nullptr, res ? res[i] : 0.0f);
    }
  }

  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<Plan>> plans_;
  mutable const Plan* last_ = nullptr;
#endif  // CONVKIT_HAVE_ONEDNN
};

}  // namespace

const Algorithm* make_onednn_cpu() {
  static OneDnnCpu algo;
  return &algo;
}

}  // namespace convkit::detail
