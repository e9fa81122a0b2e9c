#include "core/compare.hpp"

#include <cmath>

#include "common/element.hpp"

namespace convkit::detail {

std::vector<double> to_doubles(const void* data, DType dtype, int64_t count) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = load_as_double(data, dtype, i);
  return v;
}

Comparison compare(const void* out, DType dtype, const std::vector<double>& ref) {
  Comparison c;
  c.count = static_cast<int64_t>(ref.size());
  double err2 = 0.0, ref2 = 0.0, worst = -1.0;
  for (int64_t i = 0; i < c.count; ++i) {
    const double o = load_as_double(out, dtype, i), r = ref[size_t(i)];
    if (!std::isfinite(o) && std::isfinite(r)) {
      if (c.nonfinite++ == 0) c.first_bad = i;
      continue;
    }
    const double d = std::fabs(o - r);
    if (!(d == 0.0)) ++c.mismatches;
    if (d > worst && c.nonfinite == 0) {
      worst = d;
      c.first_bad = d > 0 ? i : c.first_bad;
    }
    c.max_abs = std::max(c.max_abs, d);
    err2 += d * d;
    ref2 += r * r;
  }
  c.ref_l2 = std::sqrt(ref2);
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (c.nonfinite > 0) {
    c.rel_l2 = INFINITY;
    c.max_abs = INFINITY;
  }
  return c;
}

Comparison compare(const void* out, DType dtype, const void* ref, DType ref_dtype, int64_t count) {
  return compare(out, dtype, to_doubles(ref, ref_dtype, count));
}

}  // namespace convkit::detail
