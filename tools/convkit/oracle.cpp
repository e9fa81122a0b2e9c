#include "oracle.hpp"

#include <cmath>
#include <unordered_set>

#include "common/element.hpp"
#include "cpu/ref_conv.hpp"

namespace convkit::cli {
namespace {

constexpr int kSamplePoints = 2048;

struct Xoshiro256 {
  uint64_t s[4];
  explicit Xoshiro256(uint64_t seed) {
    for (auto& v : s) {  // splitmix64 expands the seed
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      v = z ^ (z >> 31);
    }
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return result;
  }
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1)
};

}  // namespace

uint64_t mix_seed(uint64_t seed, const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void fill_gaussian(void* data, DType dtype, int64_t count, uint64_t seed) {
  Xoshiro256 rng(seed);
  for (int64_t i = 0; i < count; i += 2) {
    const double rad = std::sqrt(-2.0 * std::log(rng.uniform())), ang = 2.0 * M_PI * rng.uniform();
    detail::store_from_double(data, dtype, i, rad * std::cos(ang));
    if (i + 1 < count) detail::store_from_double(data, dtype, i + 1, rad * std::sin(ang));
  }
}

double reference_at(const Conv2dProblem& pb, const TensorView& x, const TensorView& w, const TensorView& y,
                    int64_t off) {
  const int64_t P = pb.p(), Q = pb.q(), K = pb.k;
  int64_t n, k, p, q;
  if (y.layout == Layout::nchw) {
    q = off % Q, off /= Q, p = off % P, off /= P, k = off % K, n = off / K;
  } else {
    k = off % K, off /= K, q = off % Q, off /= Q, p = off % P, n = off / P;
  }
  return detail::reference_dot(pb, x, w, n, k, p, q);
}

detail::Comparison Oracle::check(const void* out, DType dtype, bool force_sampled) const {
  if (full && !force_sampled) return detail::compare(out, dtype, full_ref);
  std::vector<float> got(points.size());
  for (size_t i = 0; i < points.size(); ++i) got[i] = float(detail::load_as_double(out, dtype, points[i]));
  return detail::compare(got.data(), DType::f32, point_ref);
}

Oracle make_oracle(const Conv2dProblem& p, const ConvConfig& cfg, const TensorView& x, const TensorView& w,
                   const TensorView& dev_x, const TensorView& dev_w, bool want_full, uint64_t seed) {
  Oracle o;
  const int64_t count = p.output_elems();
  const TensorView yshape{nullptr, cfg.dtype, cfg.layout, Device::cpu, output_dims(p)};

  // Sampled points: all of them for a small output, else kSamplePoints distinct random ones.
  if (count <= kSamplePoints) {
    for (int64_t i = 0; i < count; ++i) o.points.push_back(i);
  } else {
    Xoshiro256 rng(seed ^ 0x5a3c9e1f00d2b7a1ull);
    std::unordered_set<int64_t> seen;
    while (int64_t(o.points.size()) < kSamplePoints) {
      const int64_t i = int64_t(rng.next() % uint64_t(count));
      if (seen.insert(i).second) o.points.push_back(i);
    }
  }
  o.point_ref.resize(o.points.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < int64_t(o.points.size()); ++i)
    o.point_ref[size_t(i)] = reference_at(p, x, w, yshape, o.points[size_t(i)]);
  o.source = "double at " + std::to_string(o.points.size()) + " sampled points";
  if (!want_full) return o;

  // The full reference: the oracle algorithm of the device, in strict math, on the same inputs.
  ConvConfig ref_cfg = cfg;
  ref_cfg.math = MathMode::strict;
  const Algorithm* ref = find_algorithm(cfg.device == Device::cuda ? "cuda_ref" : "cpu_ref");
  if (!ref || !ref->available() || !ref->can_implement(p, ref_cfg)) return o;
  try {
    const size_t bytes = size_t(count) * dtype_size(cfg.dtype);
    Buffer out(cfg.device, bytes), ws(cfg.device, ref->workspace_bytes(p, ref_cfg));
    ConvCall call{p, ref_cfg, dev_x, dev_w, TensorView{out.data(), cfg.dtype, cfg.layout, cfg.device, output_dims(p)},
                  Epilogue{}, ws.data(), ws.bytes(), nullptr, std::string()};
    ref->run(call);
    device_synchronize(cfg.device);
    std::vector<unsigned char> host(bytes);
    out.copy_to_host(host.data(), bytes);
    o.full_ref = detail::to_doubles(host.data(), cfg.dtype, count);
    o.full = true;
    o.source = ref->name();
  } catch (const Error&) {
    // Fall back to the sampled points (already computed).
  }
  return o;
}

}  // namespace convkit::cli
