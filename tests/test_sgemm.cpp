// The CPU's float32 GEMM (src/cpu/sgemm.hpp) on each backend this build has (OpenBLAS, oneDNN's dnnl_sgemm):
// every transpose pair with leading dimensions past the matrices' widths and alpha/beta off 1, bit-equal to a
// plain loop on small integers; then cpu_im2col_gemm (both layouts, f32 and f16, the NHWC batch in GEMMs of
// several images, groups, 1x1 without a column matrix) and the fast CPU weight gradient bit-equal to cpu_ref
// on small integers on each backend; and the automatic choice named with its reason.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "convkit/backward.hpp"
#include "convkit/convkit.hpp"
#include "cpu/sgemm.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

std::vector<detail::SgemmBackend> backends_here() {
  std::vector<detail::SgemmBackend> out;
  for (detail::SgemmBackend b : {detail::SgemmBackend::openblas, detail::SgemmBackend::onednn}) {
    const detail::SgemmBackend before = detail::sgemm_backend();
    try {
      detail::set_sgemm_backend(b);
      out.push_back(b);
    } catch (const Error&) {
    }
    if (before != detail::SgemmBackend::none) detail::set_sgemm_backend(before);
  }
  return out;
}

const char* name_of(detail::SgemmBackend b) { return b == detail::SgemmBackend::onednn ? "onednn" : "openblas"; }

// Restores the process's backend when a test ends.
struct BackendGuard {
  detail::SgemmBackend before = detail::sgemm_backend();
  ~BackendGuard() {
    if (before != detail::SgemmBackend::none) detail::set_sgemm_backend(before);
  }
};

TEST(Sgemm, EveryTransposeBitEqualToALoopOnEachBackend) {
  const std::vector<detail::SgemmBackend> bs = backends_here();
  if (bs.empty()) GTEST_SKIP() << "no float32 GEMM in this build";
  BackendGuard guard;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(-3, 3);
  const int M = 13, N = 7, K = 19;
  for (detail::SgemmBackend b : bs) {
    detail::set_sgemm_backend(b);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        // row-major op(A) [M][K], op(B) [K][N]; stored with 3 spare columns a row
        const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        const int lda = ac + 3, ldb = bc + 3, ldc = N + 3;
        std::vector<float> A(size_t(ar * lda)), B(size_t(br * ldb)), C(size_t(M * ldc));
        for (float& v : A) v = float(d(rng));
        for (float& v : B) v = float(d(rng));
        for (float& v : C) v = float(d(rng));
        std::vector<float> want = C;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            float s = 0;
            for (int k = 0; k < K; ++k)
              s += (ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) * (tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
            want[size_t(i * ldc + j)] = 2.0f * s - 1.0f * C[size_t(i * ldc + j)];
          }
        detail::sgemm(ta, tb, M, N, K, 2.0f, A.data(), lda, B.data(), ldb, -1.0f, C.data(), ldc);
        EXPECT_EQ(C, want) << name_of(b) << " ta " << ta << " tb " << tb;
      }
  }
}

TEST(Sgemm, Im2colGemmAndTheWeightGradientBitEqualOnEachBackend) {
  const Algorithm* a = find_algorithm("cpu_im2col_gemm");
  const std::vector<detail::SgemmBackend> bs = backends_here();
  if (a == nullptr || !a->available() || bs.empty()) GTEST_SKIP() << "cpu_im2col_gemm is not in this build";
  BackendGuard guard;
  const char* specs[] = {"n1c64h5w5k128r3s3p1", "n3c32h12w12k16r3s3p1", "n2c24h8w8k48r1s1g2",
                         "n1c7h6w6k33r1s1",     "n2c16h9w9k72r3s3p1u2", "n1c16h12w10k24r5s5p4d2"};
  uint32_t seed = 40;
  for (detail::SgemmBackend b : bs) {
    detail::set_sgemm_backend(b);
    int act = 0;
    for (const char* spec : specs) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      for (Layout l : {Layout::nchw, Layout::nhwc})
        for (DType dt : {DType::f32, DType::f16}) {
          const ConvConfig cfg{dt, l, Device::cpu, MathMode::strict};
          ASSERT_TRUE(a->can_implement(p, cfg)) << spec;
          const ckt::EpilogueSpec es = ckt::varied_epilogue(seed, act++, true);
          const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::small_ints);
          const ckt::Verdict v = ckt::check_against_reference(*a, c, 1e-5, true);
          EXPECT_TRUE(v.ok) << name_of(b) << " " << spec << " " << to_string(l) << " " << to_string(dt) << ": " << v.message;
        }
      if (p.groups != 1) continue;
      for (Layout l : {Layout::nchw, Layout::nhwc}) {  // the weight gradient's GEMMs
        const ckt::Case c = ckt::make_case(p, ConvConfig{DType::f32, l, Device::cpu, MathMode::strict}, {}, ++seed,
                                           ckt::Fill::small_ints);
        ckt::HostTensor gz(DType::f32, l, output_dims(p));
        std::mt19937 rng(seed);
        gz.fill_logical(ckt::small_ints(size_t(gz.numel()), rng));
        ckt::HostTensor want(DType::f32, l, weight_dims(p)), got(DType::f32, l, weight_dims(p));
        conv2d_backward_weight(p, c.src.view_const(), gz.view_const(), want.view());
        BackwardOptions o;
        o.cpu_fast = true;
        conv2d_backward_weight(p, c.src.view_const(), gz.view_const(), got.view(), o);
        EXPECT_EQ(got.logical(), want.logical()) << name_of(b) << " weight gradient " << spec << " " << to_string(l);
      }
    }
  }
}

TEST(Sgemm, TheChoiceHasAReason) {
  if (backends_here().empty()) GTEST_SKIP() << "no float32 GEMM in this build";
  const std::string why = detail::sgemm_backend_reason();
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(why.find("OpenBLAS") != std::string::npos || why.find("oneDNN") != std::string::npos) << why;
}

}  // namespace
