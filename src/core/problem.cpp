// Conv2dProblem: derived sizes, validation with one sentence per failure, and the string form.
#include "convkit/problem.hpp"

#include <cctype>
#include <limits>
#include <map>
#include <sstream>

namespace convkit {
namespace {

// In 128 bits: p() and q() are called on problems that have not been validated (found by
// tests/fuzz/fuzz_problem: a 2-row span with stride 2^63-1 overflowed the rounding of the old formula);
// clamped to the int64 range.
int64_t out_size(int64_t in, int64_t pad, int64_t dil, int64_t ker, int64_t stride) {
  if (stride <= 0) return 0;
  const __int128 span = __int128(in) + 2 * __int128(pad) - __int128(dil) * (__int128(ker) - 1) - 1;
  // floor division, also for a negative span (the kernel does not fit)
  const __int128 out = (span >= 0 ? span / stride : -((-span - 1) / stride) - 1) + 1;
  const __int128 lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  return int64_t(out < lo ? lo : out > hi ? hi : out);
}

// a*b*... without overflow; false if the product passes int64.
bool mul_ok(std::initializer_list<int64_t> xs, int64_t* out) {
  __int128 acc = 1;
  for (int64_t x : xs) {
    acc *= x;
    if (acc > std::numeric_limits<int64_t>::max()) return false;
  }
  *out = static_cast<int64_t>(acc);
  return true;
}

}  // namespace

int64_t Conv2dProblem::p() const { return out_size(h, pad_h, dilation_h, r, stride_h); }
int64_t Conv2dProblem::q() const { return out_size(w, pad_w, dilation_w, s, stride_w); }

double Conv2dProblem::flops() const {
  return 2.0 * double(n) * double(p()) * double(q()) * double(k) * double(c_per_group()) * double(r) *
         double(s);
}

double Conv2dProblem::min_bytes(int elem_size) const {
  return double(elem_size) *
         (double(input_elems()) + double(weight_elems()) + double(n) * double(k) * double(p()) * double(q()));
}

Status Conv2dProblem::validate() const {
  auto bad = [](std::string m) { return Status::Fail(StatusCode::invalid_problem, std::move(m)); };
  const std::pair<const char*, int64_t> positive[] = {
      {"batch size n", n},          {"input channels c", c},      {"input height h", h},
      {"input width w", w},         {"output channels k", k},     {"filter height r", r},
      {"filter width s", s},        {"stride_h", stride_h},       {"stride_w", stride_w},
      {"dilation_h", dilation_h},   {"dilation_w", dilation_w},   {"groups", groups}};
  for (const auto& [what, v] : positive)
    if (v <= 0) return bad(std::string(what) + " must be positive, got " + std::to_string(v) + ".");
  if (pad_h < 0 || pad_w < 0)
    return bad("padding must be non-negative, got " + std::to_string(pad_h) + "," + std::to_string(pad_w) + ".");
  if (c % groups != 0)
    return bad("input channels c=" + std::to_string(c) + " are not divisible by groups=" +
               std::to_string(groups) + ".");
  if (k % groups != 0)
    return bad("output channels k=" + std::to_string(k) + " are not divisible by groups=" +
               std::to_string(groups) + ".");
  int64_t tmp;
  if (!mul_ok({n, c, h, w}, &tmp)) return bad("the input has more than 2^63 elements.");
  if (!mul_ok({k, c / groups, r, s}, &tmp)) return bad("the filter has more than 2^63 elements.");
  if (pad_h > (std::numeric_limits<int64_t>::max() - h) / 2 || pad_w > (std::numeric_limits<int64_t>::max() - w) / 2)
    return bad("padded sizes overflow 64 bits.");
  if (!mul_ok({h + 2 * pad_h}, &tmp) || !mul_ok({dilation_h, r}, &tmp) || !mul_ok({dilation_w, s}, &tmp) ||
      !mul_ok({w + 2 * pad_w}, &tmp))
    return bad("padded sizes or dilated filter sizes overflow 64 bits.");
  const int64_t eff_r = dilation_h * (r - 1) + 1, eff_s = dilation_w * (s - 1) + 1;
  if (p() < 1)
    return bad("the dilated filter height " + std::to_string(eff_r) + " is larger than the padded input height " +
               std::to_string(h + 2 * pad_h) + ", so the output height P would be " + std::to_string(p()) + ".");
  if (q() < 1)
    return bad("the dilated filter width " + std::to_string(eff_s) + " is larger than the padded input width " +
               std::to_string(w + 2 * pad_w) + ", so the output width Q would be " + std::to_string(q()) + ".");
  if (!mul_ok({n, k, p(), q()}, &tmp)) return bad("the output has more than 2^63 elements.");
  // In bytes too, at the widest element (f32) and with the workspace factor of two the slowest algorithms
  // use (found by tests/fuzz/fuzz_problem: n=922337206854775807 with a 2x2 image validated, and every
  // byte count overflowed).
  if (!mul_ok({n, c, h, w, 8}, &tmp) || !mul_ok({k, c / groups, r, s, 8}, &tmp) || !mul_ok({n, k, p(), q(), 8}, &tmp))
    return bad("a tensor's size in bytes passes 2^63.");
  if (!mul_ok({n, p(), q(), k, c / groups, r, s}, &tmp))
    return bad("the multiply-add count N*P*Q*K*C/g*R*S passes 2^63.");
  return Status::Ok();
}

std::string Conv2dProblem::to_string() const {
  std::ostringstream o;
  o << 'n' << n << 'c' << c << 'h' << h << 'w' << w << 'k' << k << 'r' << r << 's' << s;
  auto pair = [&](const char* both, const char* a, const char* b, int64_t x, int64_t y) {
    if (x == y) o << both << x;
    else o << a << x << b << y;
  };
  pair("p", "ph", "pw", pad_h, pad_w);
  pair("u", "uh", "uw", stride_h, stride_w);
  pair("d", "dh", "dw", dilation_h, dilation_w);
  o << 'g' << groups;
  return o.str();
}

Conv2dProblem Conv2dProblem::parse(const std::string& spec) {
  auto fail = [&](const std::string& why) -> Error {
    return Error(StatusCode::invalid_problem,
                 "cannot parse problem '" + spec + "': " + why +
                     " (expected e.g. n16c256h128w128k256r3s3p1u1d1g1; keys n c h w k r s p u d g ph pw uh uw dh dw)");
  };
  Conv2dProblem pr;
  std::map<std::string, int64_t> seen;
  size_t i = 0;
  while (i < spec.size()) {
    size_t j = i;
    while (j < spec.size() && std::isalpha(static_cast<unsigned char>(spec[j]))) ++j;
    if (j == i) throw fail("expected a key at position " + std::to_string(i));
    std::string key = spec.substr(i, j - i);
    for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    size_t e = j;
    if (e < spec.size() && spec[e] == '-') ++e;
    while (e < spec.size() && std::isdigit(static_cast<unsigned char>(spec[e]))) ++e;
    if (e == j || (e == j + 1 && spec[j] == '-')) throw fail("key '" + key + "' has no number");
    int64_t v;
    try {
      v = std::stoll(spec.substr(j, e - j));
    } catch (const std::exception&) {
      throw fail("the number after '" + key + "' is out of range");
    }
    if (seen.count(key)) throw fail("key '" + key + "' given twice");
    seen[key] = v;
    i = e;
  }
  static const char* known[] = {"n", "c", "h", "w", "k", "r", "s", "p", "u", "d", "g",
                                "ph", "pw", "uh", "uw", "dh", "dw"};
  for (const auto& [key, v] : seen) {
    bool ok = false;
    for (const char* kk : known) ok = ok || key == kk;
    if (!ok) throw fail("unknown key '" + key + "'");
  }
  for (const char* req : {"c", "h", "w", "k", "r"})
    if (!seen.count(req)) throw fail(std::string("missing key '") + req + "'");
  auto get = [&](const char* key, int64_t def) { return seen.count(key) ? seen[key] : def; };
  auto both = [&](const char* b, const char* one, const char* two, int64_t def, int64_t* x, int64_t* y) {
    if (seen.count(b) && (seen.count(one) || seen.count(two)))
      throw fail(std::string("'") + b + "' conflicts with '" + one + "'/'" + two + "'");
    *x = get(one, get(b, def));
    *y = get(two, get(b, def));
  };
  pr.n = get("n", 1);
  pr.c = get("c", 1);
  pr.h = get("h", 1);
  pr.w = get("w", 1);
  pr.k = get("k", 1);
  pr.r = get("r", 1);
  pr.s = get("s", pr.r);
  both("p", "ph", "pw", 0, &pr.pad_h, &pr.pad_w);
  both("u", "uh", "uw", 1, &pr.stride_h, &pr.stride_w);
  both("d", "dh", "dw", 1, &pr.dilation_h, &pr.dilation_w);
  pr.groups = get("g", 1);
  return pr;
}

bool Conv2dProblem::operator==(const Conv2dProblem& o) const {
  return n == o.n && c == o.c && h == o.h && w == o.w && k == o.k && r == o.r && s == o.s &&
         pad_h == o.pad_h && pad_w == o.pad_w && stride_h == o.stride_h && stride_w == o.stride_w &&
         dilation_h == o.dilation_h && dilation_w == o.dilation_w && groups == o.groups;
}

}  // namespace convkit
