// convkit/problem.hpp: the 2-D convolution problem as a plain struct.
//
// String form (round-trips through to_string()/parse(), accepted everywhere a problem is asked for):
//   n16c256h128w128k256r3s3p1u1d1g1
// keys: n batch, c input channels, h/w input height/width, k output channels, r/s filter height/width,
//       p padding, u stride, d dilation, g groups.
// p, u and d set both directions; ph/pw, uh/uw, dh/dw set one. Keys may come in any order; missing
// keys take their defaults (n1 p0 u1 d1 g1, and s = r when only r is given). to_string() writes
// p/u/d when both directions agree and the split keys otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "convkit/status.hpp"

namespace convkit {

struct Conv2dProblem {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input N, C, H, W
  int64_t k = 1, r = 1, s = 1;         // output channels, filter height, filter width
  int64_t pad_h = 0, pad_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  // Output height/width: floor((H + 2p - d(R-1) - 1) / stride) + 1 (may be < 1 for invalid problems).
  int64_t p() const;
  int64_t q() const;
  int64_t c_per_group() const { return c / groups; }
  int64_t k_per_group() const { return k / groups; }
  bool is_depthwise() const { return groups == c && groups == k && groups > 1; }

  int64_t input_elems() const { return n * c * h * w; }
  int64_t weight_elems() const { return k * c_per_group() * r * s; }
  int64_t output_elems() const { return n * k * p() * q(); }

  // 2 * N*P*Q * K * (C/groups)*R*S: multiply-adds counted as two operations.
  double flops() const;
  // Fewest bytes any implementation must move: input, weights and output, each once.
  double min_bytes(int elem_size = 4) const;

  // The implicit-GEMM view of one group: M = N*P*Q, N = K/groups, K = C/groups*R*S.
  int64_t gemm_m() const { return n * p() * q(); }
  int64_t gemm_n() const { return k_per_group(); }
  int64_t gemm_k() const { return c_per_group() * r * s; }

  // One sentence per failure; ok() when the problem is a valid convolution.
  Status validate() const;

  std::string to_string() const;
  // Throws convkit::Error(invalid_problem) on a malformed string; does not validate().
  static Conv2dProblem parse(const std::string& spec);

  bool operator==(const Conv2dProblem& o) const;
  bool operator!=(const Conv2dProblem& o) const { return !(*this == o); }
};

}  // namespace convkit
