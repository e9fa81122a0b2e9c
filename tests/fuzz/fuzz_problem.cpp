// Conv2dProblem::parse on any string, and two properties of what it accepts: a problem that validates
// round-trips through to_string() (parse(to_string(p)) == p), and validate() never accepts one whose tensor
// sizes, output sizes or byte counts overflow 64 bits.
#include <cstdint>
#include <exception>
#include <string>

#include "convkit/problem.hpp"
#include "fuzz_util.hpp"

namespace {

bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

bool product_fits(std::initializer_list<int64_t> v) {
  int64_t acc = 1;
  for (int64_t x : v)
    if (!mul_ok(acc, x, &acc)) return false;
  return mul_ok(acc, 4, &acc);  // in bytes, f32
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convkit;
  if (size > 256) return 0;
  const std::string s(reinterpret_cast<const char*>(data), size);
  Conv2dProblem p;
  try {
    p = Conv2dProblem::parse(s);
  } catch (const std::exception&) {
    return 0;
  }
  if (!p.validate().ok()) return 0;
  CKFUZZ_ASSERT(product_fits({p.n, p.c, p.h, p.w}));
  CKFUZZ_ASSERT(product_fits({p.k, p.c_per_group(), p.r, p.s}));
  CKFUZZ_ASSERT(p.p() > 0 && p.q() > 0);
  CKFUZZ_ASSERT(product_fits({p.n, p.k, p.p(), p.q()}));
  const Conv2dProblem back = Conv2dProblem::parse(p.to_string());
  CKFUZZ_ASSERT(back.to_string() == p.to_string());
  CKFUZZ_ASSERT(back.n == p.n && back.c == p.c && back.h == p.h && back.w == p.w && back.k == p.k &&
                back.r == p.r && back.s == p.s && back.pad_h == p.pad_h && back.pad_w == p.pad_w &&
                back.stride_h == p.stride_h && back.stride_w == p.stride_w && back.dilation_h == p.dilation_h &&
                back.dilation_w == p.dilation_w && back.groups == p.groups);
  return 0;
}
