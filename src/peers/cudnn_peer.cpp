// cudnn: the GPU peer. cuDNN's forward convolution measured the way PyTorch's benchmark mode does, from
// every source cuDNN has, all timed by one clock (cuda_time_runs, L2 flushed) and the fastest kept:
//  - the graph (backend) API: the one-node operation graph, every engine configuration the heuristics
//    offer (modes A, B and the fallback list) plus every engine of the graph by global index with its
//    default knobs (what cudnn_frontend calls "all engines"), deduplicated, each finalized into a plan;
//  - the legacy API: cudnnFindConvolutionForwardAlgorithmEx's algorithms (IMPLICIT_GEMM ... FFT_TILING,
//    WINOGRAD_NONFUSED), each timed again here. Alone the legacy API understates cuDNN on the H200 (see
//    shared/ANCHORS.md, "Measuring cuDNN honestly"), but some of its FFT/Winograd algorithms win in
//    strict fp32 where the graph heuristics offer no such engine.
//
// NUMERICS: in strict fp32 any engine whose numerical notes say TENSOR_CORE (it would compute in TF32) is
// rejected; MathMode::tf32 allows tensor cores. Engines noted DOWN_CONVERT_INPUTS are rejected. This is
// PyTorch's own filter, so the peer is measured as PyTorch users run cuDNN. The legacy API gets PyTorch's
// math types (FMA for strict fp32, DEFAULT for tf32, TENSOR_OP for 16-bit types), and any algorithm it
// reports with a tensor-op math type in strict fp32 (or ALLOW_CONVERSION, ever) is rejected likewise.
//
// The epilogue (bias, activation, residual) runs as a separate elementwise kernel after the convolution
// (cudnn_epilogue.cu): the "conv, then bias, relu and add" that a framework runs. When the residual IS the
// output, the residual is folded into the convolution as y = alpha*conv + beta*y (cuDNN's own beta), and the
// kernel adds the bias and applies the activation.
//
// prepare() (the benchmark calls it) builds and times every candidate; run() without prepare() (the tests)
// takes the heuristics' first precompiled plan that builds, untimed, so a test suite does not autotune
// hundreds of shapes. CONVKIT_CUDNN_RTC=0 also keeps runtime-compiled (NVRTC) engines out of prepare()'s
// search. When a legacy algorithm wins, run() calls cudnnConvolutionForward with it (alpha/beta as the
// graph path's residual fold), and detail() names it ("legacy algo FFT_TILING (FMA math), ...").
//
// Plans, their workspaces and the chosen engine are cached per (device, problem, config, alignment,
// residual folding) in a mutex-protected map; everything is released at exit, before the CUDA runtime is.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/overrides.hpp"
#include "core/cuda_hooks.hpp"
#include "core/registry.hpp"
#include "core/timing.hpp"
#include "cuda/common/check.cuh"

#ifdef CONVKIT_HAVE_CUDNN
#include <cudnn_cnn.h>  // the legacy API (deprecated in cuDNN 9, still shipped)
#include <cudnn_graph.h>
#include <cudnn_version.h>

#include "peers/cudnn_descriptors.hpp"
#endif

namespace convkit::detail {

// In cudnn_epilogue.cu: y = act(alpha*y + bias[k] + beta*res) in place, on `stream`; res may equal y.
void cudnn_peer_epilogue(void* y, DType dtype, Layout layout, int64_t count, int64_t K, int64_t PQ,
                         const void* bias, const void* res, Activation act, float alpha, float beta,
                         void* stream);

namespace {

#ifdef CONVKIT_HAVE_CUDNN

// ---- per-device handles and the plan cache --------------------------------------------------------

struct Candidate {
  Desc cfg;                   // the engine configuration (kept alive with its plan)
  Desc plan;                  // finalized execution plan
  int64_t engine = -1;        // global engine index
  // A legacy-API algorithm instead of a plan (cfg and plan empty): run with cudnnConvolutionForward.
  bool legacy = false;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::string origin;         // "heur A #1"
  std::string notes;          // numerical notes, e.g. "winograd"
  int64_t ws_bytes = 0;
  double ms = -1.0;           // median, once timed
};

struct Entry {
  std::mutex mu;  // one run at a time per entry (variant-pack reuse)
  int device = 0;
  cudnnHandle_t handle = nullptr;
  std::vector<Desc> keep;  // tensors, conv, op, graph: alive as long as the plan
  std::unique_ptr<LegacyDescs> legacy;  // set when best is a legacy algorithm (its math type set on conv)
  Candidate best;
  bool timed = false;  // best was chosen by timing every plan (prepare()), not the heuristics' first pick
  void* ws = nullptr;
  // The last variant pack and the pointers it was built for (rebuilt when they change).
  Desc vpack;
  const void* vx = nullptr;
  const void* vw = nullptr;
  const void* vy = nullptr;
  std::string detail;
};

// Lock order: State::mu, then an Entry::mu, then State::handle_mu (never the other way round).
struct State {
  std::mutex mu;         // guards everything below
  std::mutex handle_mu;  // held while a handle's stream is set and a plan enqueued (handles are shared)
  std::map<int, cudnnHandle_t> handles;
  std::map<std::string, std::unique_ptr<Entry>> entries;
  std::map<std::string, std::string> details;  // "problem|config" -> the last chosen plan's detail
  bool atexit_registered = false;
  bool closed = false;
};

State& state() {
  static State* s = new State;  // never destroyed: release_all() runs from atexit instead
  return *s;
}

// Runs at exit, registered after the CUDA runtime was first used, hence before the runtime's own teardown.
void release_all() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  for (auto& kv : st.entries) {
    Entry& e = *kv.second;
    if (e.ws) cudaFree(e.ws);
    e.ws = nullptr;
  }
  st.entries.clear();  // destroys the descriptors
  for (auto& kv : st.handles) cudnnDestroy(kv.second);
  st.handles.clear();
  st.closed = true;
}

cudnnHandle_t handle_for_device_locked(State& st, int dev) {
  auto it = st.handles.find(dev);
  if (it != st.handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  CK_CUDNN(cudnnCreate(&h));
  st.handles[dev] = h;
  if (!st.atexit_registered) {
    std::atexit(release_all);
    st.atexit_registered = true;
  }
  return h;
}

// The largest power of two (<= 16) dividing every pointer; 16 when none is given.
int64_t alignment_of(std::initializer_list<const void*> ptrs) {
  int64_t a = 16;
  for (const void* p : ptrs) {
    if (!p) continue;
    const auto v = reinterpret_cast<uintptr_t>(p);
    while (a > 1 && (v % static_cast<uintptr_t>(a)) != 0) a /= 2;
  }
  return a;
}

std::string notes_text(const std::vector<cudnnBackendNumericalNote_t>& notes) {
  std::string s;
  for (cudnnBackendNumericalNote_t n : notes) {
    const char* t = nullptr;
    switch (n) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: t = "tensor_core"; break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: t = "down_convert"; break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: t = "reduced_precision"; break;
      case CUDNN_NUMERICAL_NOTE_FFT: t = "fft"; break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: t = "nondeterministic"; break;
      case CUDNN_NUMERICAL_NOTE_WINOGRAD: t = "winograd"; break;
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: t = "winograd4x4"; break;
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: t = "winograd6x6"; break;
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: t = "winograd13x13"; break;
      default: break;
    }
    if (!t) continue;
    if (!s.empty()) s += ",";
    s += t;
  }
  return s;
}

// Whether an engine's numerical notes are allowed for this configuration; if not, why.
const char* numerics_veto(const std::vector<cudnnBackendNumericalNote_t>& notes, const ConvConfig& cfg) {
  // Exactly as PyTorch filters them (down-converted inputs always; tensor cores in fp32 unless TF32 is
  // allowed). NOTE: an extra veto of REDUCED_PRECISION_REDUCTION left seed000 fp32 1.21x slower than
  // PyTorch's cuDNN on the H200 (2026-11-29), so the peer would have flattered us; the benchmark's error
  // column still shows what each chosen engine's numerics cost.
  for (cudnnBackendNumericalNote_t n : notes) {
    if (n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return "down-converted inputs";
    if (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && cfg.dtype == DType::f32 && cfg.math == MathMode::strict)
      return "tensor cores (TF32) in strict fp32";
  }
  return nullptr;
}

// What one (problem, config) needs beyond the problem: the pointers' alignment and the residual fold.
struct Variant {
  int64_t align = 16;
  bool fold = false;  // residual == dst: y = alpha*conv + beta*y inside cuDNN
  float alpha = 1.0f, beta = 0.0f;
};

Variant variant_of(const ConvCall& call) {
  Variant v;
  v.align = alignment_of({call.src.data, call.wei.data, call.dst.data});
  const Epilogue& e = call.epilogue;
  if (e.residual != nullptr && e.residual == call.dst.data) {
    v.fold = true;
    v.alpha = e.alpha;
    v.beta = e.beta;
  }
  return v;
}

std::string pc_key(const Conv2dProblem& p, const ConvConfig& c) { return p.to_string() + "|" + c.to_string(); }

std::string entry_key(int dev, const ConvCall& call, const Variant& v) {
  std::ostringstream os;
  os << "dev" << dev << "|" << pc_key(call.problem, call.config) << "|a" << v.align;
  if (v.fold) os << "|fold" << v.alpha << "," << v.beta;
  return os.str();
}

// Every tensor, the convolution, the operation and the graph; the graph is the last element of `keep`.
void build_graph(cudnnHandle_t handle, const ConvCall& call, const Variant& v, std::vector<Desc>& keep) {
  const Conv2dProblem& p = call.problem;
  const ConvConfig& cfg = call.config;
  keep.push_back(make_tensor(kUidX, cfg.dtype, cfg.layout, {p.n, p.c, p.h, p.w}, v.align));
  keep.push_back(make_tensor(kUidW, cfg.dtype, cfg.layout, {p.k, p.c_per_group(), p.r, p.s}, v.align));
  keep.push_back(make_tensor(kUidY, cfg.dtype, cfg.layout, {p.n, p.k, p.p(), p.q()}, v.align));
  const size_t ix = keep.size() - 3, iw = ix + 1, iy = ix + 2;

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t pads[2] = {p.pad_h, p.pad_w}, strides[2] = {p.stride_h, p.stride_w},
                dil[2] = {p.dilation_h, p.dilation_w};
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "convolution compute type");
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  conv.set_i64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2, "convolution spatial dims");
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads, "convolution pre-paddings");
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads, "convolution post-paddings");
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides, "convolution strides");
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "convolution dilations");
  conv.finalize("cudnnBackendFinalize(convolution)");

  // Groups need no attribute: w is [K, C/g, R, S] and cuDNN infers g from x's C.
  Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, keep[ix], "conv op x");
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, keep[iw], "conv op w");
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, keep[iy], "conv op y");
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, "conv op descriptor");
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &v.alpha, "conv op alpha");
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &v.beta, "conv op beta");
  const cudnnStatus_t s = op.try_finalize();
  if (s != CUDNN_STATUS_SUCCESS)
    throw Error(StatusCode::unsupported, "cuDNN rejects the convolution " + call.problem.to_string() + " (" +
                                             call.config.to_string() + "): " + cudnn_message(s) + ".");

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t ops[1] = {op.get()};
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ops, "graph ops");
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  graph.finalize("cudnnBackendFinalize(operation graph)");
  keep.push_back(std::move(conv));
  keep.push_back(std::move(op));
  keep.push_back(std::move(graph));
}

struct Harvest {
  std::vector<Candidate> plans;  // finalized, numerics allowed, deduplicated
  int offered = 0;               // configs the heuristics returned (with duplicates) and enumerated engines
  int enumerated = 0;            // of those, engines found by global index (default knobs)
  int engines_global = 0;        // the graph's global engine count (0: not enumerated)
  int vetoed = 0;                // rejected for their numerics
  int failed = 0;                // could not be finalized into a plan
  int duplicates = 0;            // the same engine and knobs offered again (another mode)
  int rtc_skipped = 0;           // runtime-compiled engines left out
  std::string last_veto;
  // The legacy API (prepare() only).
  int legacy_offered = 0;  // algorithms cudnnFindConvolutionForwardAlgorithmEx returned that ran there
  int legacy_timed = 0;
  int legacy_vetoed = 0;
  int legacy_failed = 0;      // failed at execute here, or needed more workspace than allowed
  std::string legacy_skipped;  // why the legacy API was not consulted, when it was not
};

bool skip_runtime_compiled() {
  const char* v = env_override("CONVKIT_CUDNN_RTC");
  return v && v[0] == '0';
}

// Engine configs from heuristics modes A, B and FALLBACK, then (without first_only) every engine of the
// graph by global index with default knobs; deduplicated by (engine, knob choices), filtered by numerics,
// each finalized into an execution plan (those that fail are counted and skipped).
// With first_only, stops at the first plan that finalizes (heuristics order: mode A's best guess first).
// Without allow_rtc, engines that compile kernels at run time (NVRTC, up to seconds each) are skipped.
Harvest harvest_plans(cudnnHandle_t handle, const Desc& graph, const ConvConfig& cfg, bool first_only,
                      bool allow_rtc) {
  Harvest out;
  std::set<std::string> seen;
  const bool no_rtc = !allow_rtc || skip_runtime_compiled();

  // One engine config: dedup, veto, finalize into a plan. True when a plan was added.
  const auto consider = [&](Desc ec, const std::string& origin) -> bool {
    ++out.offered;
    Desc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0;
    if (cudnnBackendGetAttribute(ec.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                 eng.addr()) != CUDNN_STATUS_SUCCESS) {
      ++out.failed;
      return false;
    }
    int64_t engine = -1;
    if (cudnnBackendGetAttribute(eng.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &engine) !=
        CUDNN_STATUS_SUCCESS)
      engine = -1;
    std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
    int64_t nn = 0;
    if (cudnnBackendGetAttribute(eng.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes.data()) != CUDNN_STATUS_SUCCESS)
      nn = 0;
    notes.resize(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(nn, CUDNN_NUMERICAL_NOTE_TYPE_COUNT))));
    std::vector<cudnnBackendBehaviorNote_t> behavior(CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
    int64_t nb = 0;
    if (cudnnBackendGetAttribute(eng.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, behavior.data()) != CUDNN_STATUS_SUCCESS)
      nb = 0;
    behavior.resize(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(nb, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT))));

    // Dedup key: the engine and its knob choices (none for an enumerated engine's default config).
    std::string key = std::to_string(engine);
    int64_t nk = 0;
    if (cudnnBackendGetAttribute(ec.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &nk, nullptr) == CUDNN_STATUS_SUCCESS && nk > 0) {
      std::vector<Desc> knobs;
      std::vector<cudnnBackendDescriptor_t> kraw;
      for (int64_t k = 0; k < nk; ++k) {
        knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        kraw.push_back(knobs.back().get());
      }
      int64_t kg = 0;
      if (cudnnBackendGetAttribute(ec.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, nk,
                                   &kg, kraw.data()) == CUDNN_STATUS_SUCCESS) {
        std::vector<std::pair<int64_t, int64_t>> kv;
        for (int64_t k = 0; k < std::min(kg, nk); ++k) {
          cudnnBackendKnobType_t type{};
          int64_t value = 0, c1 = 0, c2 = 0;
          cudnnBackendGetAttribute(kraw[static_cast<size_t>(k)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                   CUDNN_TYPE_KNOB_TYPE, 1, &c1, &type);
          cudnnBackendGetAttribute(kraw[static_cast<size_t>(k)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                   CUDNN_TYPE_INT64, 1, &c2, &value);
          kv.emplace_back(static_cast<int64_t>(type), value);
        }
        std::sort(kv.begin(), kv.end());
        for (const auto& [t, v] : kv) key += ";" + std::to_string(t) + "=" + std::to_string(v);
      } else {
        key += ";cfg" + std::to_string(out.offered);  // unknown knobs: treat as distinct
      }
    }
    if (!seen.insert(key).second) {
      ++out.duplicates;
      return false;
    }

    if (const char* why = numerics_veto(notes, cfg)) {
      ++out.vetoed;
      out.last_veto = why;
      return false;
    }
    if (no_rtc && std::find(behavior.begin(), behavior.end(), CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) !=
                      behavior.end()) {
      ++out.rtc_skipped;
      return false;
    }

    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t ecp = ec.get();
    if (cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ecp) != CUDNN_STATUS_SUCCESS ||
        plan.try_finalize() != CUDNN_STATUS_SUCCESS) {
      ++out.failed;
      return false;
    }
    Candidate c;
    int64_t nw = 0;
    if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &nw,
                                 &c.ws_bytes) != CUDNN_STATUS_SUCCESS) {
      ++out.failed;
      return false;
    }
    c.cfg = std::move(ec);
    c.plan = std::move(plan);
    c.engine = engine;
    c.origin = origin;
    c.notes = notes_text(notes);
    out.plans.push_back(std::move(c));
    return true;
  };

  const std::pair<cudnnBackendHeurMode_t, const char*> modes[] = {
      {CUDNN_HEUR_MODE_A, "A"}, {CUDNN_HEUR_MODE_B, "B"}, {CUDNN_HEUR_MODE_FALLBACK, "fallback"}};
  for (const auto& [mode, mode_name] : modes) {
    if (first_only && !out.plans.empty()) break;
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) continue;  // a mode may not apply to this graph
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr) != CUDNN_STATUS_SUCCESS || count <= 0)
      continue;
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &got, raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int64_t i = 0; i < std::min(got, count); ++i) {
      const bool added = consider(std::move(cfgs[static_cast<size_t>(i)]),
                                  std::string("heur ") + mode_name + " #" + std::to_string(i + 1));
      if (added && first_only) break;
    }
  }

  // Every engine of the graph by global index, default knobs: engines the heuristics do not rank (cudnn_frontend's
  // "all engines" source). An index that does not apply to this graph fails to finalize and is not counted.
  if (!first_only) {
    int64_t global = 0, n = 0;
    if (cudnnBackendGetAttribute(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1,
                                 &n, &global) != CUDNN_STATUS_SUCCESS)
      global = 0;
    out.engines_global = static_cast<int>(std::max<int64_t>(0, global));
    for (int64_t g = 0; g < global; ++g) {
      Desc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      eng.set_desc(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph, "engine graph");
      eng.set_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, g, "engine global index");
      if (eng.try_finalize() != CUDNN_STATUS_SUCCESS) continue;  // not an engine for this graph
      Desc ec(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      ec.set_desc(CUDNN_ATTR_ENGINECFG_ENGINE, eng, "engine config engine");
      if (ec.try_finalize() != CUDNN_STATUS_SUCCESS) {
        ++out.offered;
        ++out.enumerated;
        ++out.failed;
        continue;
      }
      ++out.enumerated;
      consider(std::move(ec), "all engines, default knobs");
    }
  }
  return out;
}

Desc make_variant_pack(const void* x, const void* w, void* y, void* ws) {
  Desc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), y};
  vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "variant pack uids");
  vp.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, "variant pack pointers");
  vp.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "variant pack workspace");
  vp.finalize("cudnnBackendFinalize(variant pack)");
  return vp;
}

// A device buffer owned for the length of one prepare().
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) {
    if (bytes) {
      p = cuda_alloc(bytes);
      CK_CUDA(cudaMemset(p, 0, bytes));
    }
  }
  ~Scratch() { cuda_free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string describe(const Candidate& c, int timed, const Harvest& h) {
  std::ostringstream d;
  if (c.legacy) {
    d << "legacy algo " << legacy_algo_name(c.algo) << " (" << legacy_math_name(c.math) << "), ";
  } else {
    d << "engine " << c.engine << " (" << c.origin;
    if (!c.notes.empty()) d << "; " << c.notes;
    d << "), ";
  }
  if (timed > 0 || h.legacy_timed > 0) {
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%.4f", c.ms);
    d << timed << " plans timed of " << h.offered << " configs offered (" << h.enumerated << " by enumerating "
      << h.engines_global << " engines, " << h.duplicates << " duplicates, " << h.vetoed
      << " vetoed for numerics, " << h.failed << " did not build, " << h.rtc_skipped
      << " runtime-compiled skipped), ";
    if (!h.legacy_skipped.empty())
      d << "legacy API not used (" << h.legacy_skipped << "), ";
    else
      d << h.legacy_timed << " legacy algos timed of " << h.legacy_offered << " found (" << h.legacy_vetoed
        << " vetoed for numerics, " << h.legacy_failed << " failed or too big), ";
    d << "best " << ms << " ms, ";
  } else {
    d << "heuristic pick, not timed (prepare() times every plan), ";
  }
  d << "ws " << mib(double(c.ws_bytes)) << ", cuDNN " << version_text(cudnnGetVersion());
  return d.str();
}

[[noreturn]] void throw_no_engine(const ConvCall& call, const Harvest& h) {
  std::string why = "cuDNN has no usable engine for " + call.problem.to_string() + " (" +
                    call.config.to_string() + "): " + std::to_string(h.offered) + " configurations offered, " +
                    std::to_string(h.vetoed) + " rejected for their numerics";
  if (!h.last_veto.empty()) why += " (" + h.last_veto + ")";
  why += ", " + std::to_string(h.failed) + " failed to build";
  if (!h.legacy_skipped.empty()) why += "; the legacy API was not usable (" + h.legacy_skipped + ")";
  throw Error(StatusCode::unsupported, why + ".");
}

// After a timing run threw: an engine that fails at execute is skipped, unless the failure broke the
// context (then the error is raised, naming `what`).
void check_context_after_failure(cudaStream_t stream, const char* what) {
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw_cuda_error(what, cudaGetErrorString(e), __FILE__, __LINE__);
  }
}

// Times every plan of `h` and, when `ld` is given, every algorithm cudnnFindConvolutionForwardAlgorithmEx
// finds, all on scratch buffers with the same clock, and returns the fastest (a plan moved out of h, or a
// legacy algorithm, with ld->conv's math type left set to the winner's). prepare() must not touch the
// caller's output, which may be the residual: the caller's inputs are used when given, zeros otherwise.
// The caller holds the handle's mutex. *timed_out is the number of graph plans timed; the legacy counts
// go into h.
Candidate time_candidates(cudnnHandle_t handle, const ConvCall& call, const Variant& v, Harvest& h,
                          LegacyDescs* ld, int* timed_out) {
  const Conv2dProblem& p = call.problem;
  const size_t esz = dtype_size(call.config.dtype);
  Scratch sx(call.src.data ? 0 : size_t(p.input_elems()) * esz);
  Scratch sw(call.wei.data ? 0 : size_t(p.weight_elems()) * esz);
  Scratch sy(size_t(p.output_elems()) * esz);
  const void* x = call.src.data ? call.src.data : sx.p;
  const void* w = call.wei.data ? call.wei.data : sw.p;

  size_t free_b = 0, total_b = 0;
  CK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const int64_t ws_cap = static_cast<int64_t>(std::min<size_t>(free_b / 2, size_t(8) << 30));
  int64_t ws_max = 0;
  for (const Candidate& c : h.plans)
    if (c.ws_bytes <= ws_cap) ws_max = std::max(ws_max, c.ws_bytes);
  // The legacy algorithms' largest workspace within the cap (an algorithm that does not apply to the
  // problem answers NOT_SUPPORTED here and is left out).
  size_t legacy_ws = 0;
  if (ld) {
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
      size_t bytes = 0;
      const cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(
          handle, ld->x, ld->w, ld->conv, ld->y, static_cast<cudnnConvolutionFwdAlgo_t>(a), &bytes);
      if (s == CUDNN_STATUS_SUCCESS && bytes <= static_cast<size_t>(ws_cap)) legacy_ws = std::max(legacy_ws, bytes);
    }
  }
  Scratch sws(std::max(static_cast<size_t>(ws_max), legacy_ws));

  cudaStream_t stream = as_stream(call.stream);
  CK_CUDNN(cudnnSetStream(handle, stream));
  TimingOptions quick;  // a screen: candidates more than twice slower than the best so far get no full timing
  quick.warmup = 1;
  quick.min_runs = quick.max_runs = 3;
  quick.budget_s = 0.0;
  TimingOptions full;  // L2 flushed before each run, as in the benchmark itself
  full.warmup = 3;
  full.min_runs = full.max_runs = 10;
  full.budget_s = 0.0;
  double best_ms = -1.0;  // the fastest so far, graph or legacy
  const auto time_one = [&](const std::function<void()>& fn) {
    const double screen = median(cuda_time_runs(call.stream, fn, quick));
    return (best_ms >= 0.0 && screen > 2.0 * best_ms) ? screen : median(cuda_time_runs(call.stream, fn, full));
  };

  int timed = 0, too_big = 0, exec_failed = 0;
  Candidate* best = nullptr;
  for (Candidate& c : h.plans) {
    if (c.ws_bytes > ws_cap) {
      ++too_big;
      continue;
    }
    try {
      Desc vp = make_variant_pack(x, w, sy.p, sws.p);
      cudnnBackendDescriptor_t plan = c.plan.get(), pack = vp.get();
      c.ms = time_one([&] { CK_CUDNN(cudnnBackendExecute(handle, plan, pack)); });
      ++timed;
      if (!best || c.ms < best->ms) best = &c;
      if (best_ms < 0.0 || c.ms < best_ms) best_ms = c.ms;
    } catch (const Error&) {
      check_context_after_failure(stream, "cudnn peer: timing a plan");
      ++exec_failed;
    }
  }

  Candidate lbest;  // the fastest legacy algorithm, when lbest.legacy
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf;
  int got = 0;
  if (ld) {
    // The legacy search failing leaves the graph plans to choose from; the detail says why.
    try {
      int max_algos = 0;
      CK_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_algos));
      perf.resize(static_cast<size_t>(std::max(1, max_algos)));
      CK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(handle, ld->x, x, ld->w, w, ld->conv, ld->y, sy.p,
                                                      static_cast<int>(perf.size()), &got, perf.data(), sws.p,
                                                      legacy_ws));
    } catch (const Error& e) {
      check_context_after_failure(stream, "cudnn peer: cudnnFindConvolutionForwardAlgorithmEx");
      h.legacy_skipped = std::string("cudnnFindConvolutionForwardAlgorithmEx failed: ") + e.what();
      got = 0;
    }
    std::set<std::pair<int, int>> seen;
    for (int i = 0; i < std::min(got, static_cast<int>(perf.size())); ++i) {
      const cudnnConvolutionFwdAlgoPerf_t& pr = perf[static_cast<size_t>(i)];
      if (pr.status != CUDNN_STATUS_SUCCESS) continue;  // does not apply to this problem
      if (!seen.insert({static_cast<int>(pr.algo), static_cast<int>(pr.mathType)}).second) continue;
      ++h.legacy_offered;
      if (const char* why = legacy_veto(pr.mathType, call.config)) {
        ++h.legacy_vetoed;
        h.last_veto = why;
        continue;
      }
      if (pr.memory > legacy_ws) {
        ++h.legacy_failed;
        continue;
      }
      try {
        CK_CUDNN(cudnnSetConvolutionMathType(ld->conv, pr.mathType));
        const cudnnConvolutionFwdAlgo_t algo = pr.algo;
        const size_t ws_bytes = pr.memory;
        Candidate c;
        c.ms = time_one([&] {
          CK_CUDNN(cudnnConvolutionForward(handle, &v.alpha, ld->x, x, ld->w, w, ld->conv, algo, sws.p, ws_bytes,
                                           &v.beta, ld->y, sy.p));
        });
        c.legacy = true;
        c.algo = algo;
        c.math = pr.mathType;
        c.ws_bytes = static_cast<int64_t>(ws_bytes);
        c.origin = std::string("legacy ") + legacy_algo_name(algo);
        ++h.legacy_timed;
        if (!lbest.legacy || c.ms < lbest.ms) lbest = std::move(c);
        if (best_ms < 0.0 || lbest.ms < best_ms) best_ms = lbest.ms;
      } catch (const Error&) {
        check_context_after_failure(stream, "cudnn peer: timing a legacy algorithm");
        ++h.legacy_failed;
      }
    }
  }

  if (!best && !lbest.legacy)
    throw Error(StatusCode::unsupported,
                "cuDNN built " + std::to_string(h.plans.size()) + " plans for " + call.problem.to_string() +
                    " but none ran (" + std::to_string(exec_failed) + " failed at execute, " +
                    std::to_string(too_big) + " needed more workspace than the " + mib(double(ws_cap)) +
                    " allowed), and the legacy API gave no usable algorithm (" +
                    (h.legacy_skipped.empty() ? std::to_string(h.legacy_offered) + " found, " +
                                                    std::to_string(h.legacy_vetoed) + " vetoed for numerics, " +
                                                    std::to_string(h.legacy_failed) + " failed or too big"
                                              : h.legacy_skipped) +
                    ").");
  *timed_out = timed;
  if (lbest.legacy && (!best || lbest.ms < best->ms)) {
    // run() uses the descriptor as timed: the winner's math type, and the workspace that math type needs.
    CK_CUDNN(cudnnSetConvolutionMathType(ld->conv, lbest.math));
    size_t need = 0;
    CK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(handle, ld->x, ld->w, ld->conv, ld->y, lbest.algo, &need));
    lbest.ws_bytes = std::max(lbest.ws_bytes, static_cast<int64_t>(need));
    return lbest;
  }
  return std::move(*best);
}

// The cache entry for this call's (device, problem, config, variant). Without `timed`, a new entry gets
// the heuristics' first plan that builds (cheap: what run() needs when nobody called prepare(), as in the
// tests); with `timed`, every plan and every legacy algorithm is timed and the fastest kept, upgrading an
// untimed entry. Entries are never removed before exit, so references to them stay valid.
Entry& prepare_entry(const ConvCall& call, bool timed) {
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  const Variant v = variant_of(call);
  const std::string key = entry_key(dev, call, v);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.closed) throw Error(StatusCode::not_available, "the cuDNN peer was already released (process exiting).");
  auto found = st.entries.find(key);
  if (found != st.entries.end() && (found->second->timed || !timed)) return *found->second;

  Entry* entry = found != st.entries.end() ? found->second.get() : nullptr;
  std::unique_ptr<Entry> fresh;
  if (!entry) {
    fresh = std::make_unique<Entry>();
    fresh->device = dev;
    fresh->handle = handle_for_device_locked(st, dev);
    build_graph(fresh->handle, call, v, fresh->keep);
    entry = fresh.get();
  }
  // Untimed, a precompiled engine is preferred: tests build hundreds of plans and must not wait for NVRTC.
  Harvest h = harvest_plans(entry->handle, entry->keep.back(), call.config, /*first_only=*/!timed,
                            /*allow_rtc=*/timed);
  if (h.plans.empty() && !timed)
    h = harvest_plans(entry->handle, entry->keep.back(), call.config, true, true);
  if (h.plans.empty() && !timed) throw_no_engine(call, h);

  Candidate chosen;
  std::unique_ptr<LegacyDescs> legacy;
  int n_timed = 0;
  if (timed) {
    try {
      legacy = build_legacy(call, &h.legacy_skipped);
    } catch (const Error& e) {  // the graph plans remain; the detail says why the legacy API was not used
      h.legacy_skipped = std::string("its descriptors were refused: ") + e.what();
    }
    if (h.plans.empty() && !legacy) throw_no_engine(call, h);
    std::lock_guard<std::mutex> hl(st.handle_mu);
    chosen = time_candidates(entry->handle, call, v, h, legacy.get(), &n_timed);
  } else {
    chosen = std::move(h.plans.front());
  }
  if (!chosen.legacy) legacy.reset();
  void* ws = chosen.ws_bytes > 0 ? cuda_alloc(static_cast<size_t>(chosen.ws_bytes)) : nullptr;
  const std::string detail = describe(chosen, n_timed, h);
  {
    std::lock_guard<std::mutex> el(entry->mu);  // no run() of this entry in between
    if (entry->ws) cudaFree(entry->ws);          // synchronizing: no kernel still uses it
    entry->ws = ws;
    entry->best = std::move(chosen);
    entry->legacy = std::move(legacy);
    entry->timed = timed;
    entry->vpack = Desc();  // built again for the new plan's workspace
    entry->detail = detail;
  }
  st.details[pc_key(call.problem, call.config)] = detail;
  if (fresh) st.entries.emplace(key, std::move(fresh));
  return *entry;
}

#endif  // CONVKIT_HAVE_CUDNN

class CudnnPeer final : public Algorithm {
 public:
  std::string name() const override { return "cudnn"; }
  Device device() const override { return Device::cuda; }
  std::string description() const override {
    return "peer: cuDNN, every graph-API engine (heuristics modes A, B, fallback, and all engines by index) "
           "and every legacy-API algorithm timed, the fastest kept; epilogue as a separate kernel";
  }
  bool is_peer() const override { return true; }

  Support available() const override {
#ifndef CONVKIT_HAVE_CUDNN
    return Support::no(
        "cuDNN was not found when convkit was configured: install it (pip install nvidia-cudnn-cu13, or the "
        "cudnn9-cuda-13 package) and reconfigure, pointing -DCONVKIT_CUDNN_ROOT at the folder holding its "
        "include/ and lib/.");
#else
    if (!cuda_present()) return Support::no("no CUDA device is present on this machine.");
    const size_t rt = cudnnGetVersion();
    if (rt / 10000 != CUDNN_MAJOR)
      return Support::no("the cuDNN library loaded (" + version_text(rt) + ") is not the major version of the "
                         "headers convkit was built with (" + version_text(CUDNN_VERSION) + ").");
    return Support::yes();
#endif
  }

  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.device != Device::cuda) return Support::no("the cuDNN peer runs on CUDA tensors only.");
    if (cfg.math == MathMode::tf32 && cfg.dtype != DType::f32)
      return Support::no("tf32 math applies to f32 tensors only.");
    const Status s = p.validate();
    if (!s.ok()) return Support::no(s.message);
    return Support::yes();
  }

  void prepare(const ConvCall& call) const override {
#ifdef CONVKIT_HAVE_CUDNN
    prepare_entry(call, /*timed=*/true);
#else
    (void)call;
    throw Error(StatusCode::not_available, available().reason);
#endif
  }

  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
#ifdef CONVKIT_HAVE_CUDNN
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.details.find(pc_key(p, cfg));
    return it == st.details.end() ? std::string() : it->second;
#else
    (void)p;
    (void)cfg;
    return {};
#endif
  }

  void run(const ConvCall& call) const override {
#ifdef CONVKIT_HAVE_CUDNN
    const Epilogue& e = call.epilogue;
    const void* res = e.residual;
    if (res && res != call.dst.data) {
      const auto* r = static_cast<const char*>(res);
      const auto* y = static_cast<const char*>(call.dst.data);
      const size_t bytes = call.dst.bytes();
      if (r < y + bytes && y < r + bytes)
        throw Error(StatusCode::invalid_tensor,
                    "the residual partially overlaps the output: it must be the output itself or disjoint from it.");
    }
    Entry& en = prepare_entry(call, /*timed=*/false);  // the timed plan if prepare() ran, else a heuristic one
    const Variant v = variant_of(call);
    {
      std::lock_guard<std::mutex> lock(en.mu);
      if (!en.best.legacy && (!en.vpack.get() || en.vx != call.src.data || en.vw != call.wei.data ||
                              en.vy != call.dst.data)) {
        en.vpack = make_variant_pack(call.src.data, call.wei.data, call.dst.data, en.ws);
        en.vx = call.src.data;
        en.vw = call.wei.data;
        en.vy = call.dst.data;
      }
      std::lock_guard<std::mutex> hlock(state().handle_mu);  // the handle's stream is shared state
      CK_CUDNN(cudnnSetStream(en.handle, as_stream(call.stream)));
      if (en.best.legacy) {
        const LegacyDescs& ld = *en.legacy;
        CK_CUDNN(cudnnConvolutionForward(en.handle, &v.alpha, ld.x, call.src.data, ld.w, call.wei.data, ld.conv,
                                         en.best.algo, en.ws, static_cast<size_t>(en.best.ws_bytes), &v.beta, ld.y,
                                         call.dst.data));
      } else {
        CK_CUDNN(cudnnBackendExecute(en.handle, en.best.plan.get(), en.vpack.get()));
      }
    }
    // The rest of the epilogue as its own kernel; with the residual folded into cuDNN's beta only the
    // bias and the activation remain.
    const bool has_res = res != nullptr && !v.fold;
    const float alpha = v.fold ? 1.0f : e.alpha;
    if (e.bias || has_res || e.activation != Activation::none || alpha != 1.0f) {
      const Conv2dProblem& p = call.problem;
      cudnn_peer_epilogue(call.dst.data, call.config.dtype, call.config.layout, p.output_elems(), p.k,
                          p.p() * p.q(), e.bias, has_res ? res : nullptr, e.activation, alpha, e.beta,
                          call.stream);
    }
#else
    (void)call;
    throw Error(StatusCode::not_available, available().reason);
#endif
  }
};

}  // namespace

const Algorithm* make_cudnn_peer() {
  static CudnnPeer algo;
  return &algo;
}

}  // namespace convkit::detail
