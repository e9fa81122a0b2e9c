// Conv2dProblem: the string form (round trip, split keys, key order, defaults, parse errors), the output
// size formula, flops()/min_bytes(), and one distinct sentence per validate() failure.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>

#include "convkit/convkit.hpp"

using namespace convkit;

namespace {

Conv2dProblem make(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s) {
  Conv2dProblem p;
  p.n = n; p.c = c; p.h = h; p.w = w; p.k = k; p.r = r; p.s = s;
  return p;
}

// The error a malformed spec gives; fails the test if parse() does not throw Error(invalid_problem).
std::string parse_error(const std::string& spec) {
  try {
    Conv2dProblem::parse(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_problem) << spec;
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "parse('" << spec << "') threw a non-convkit exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "parse('" << spec << "') did not throw";
  return {};
}

// Output size by counting window positions that fit inside the padded input (the definition).
int64_t count_positions(int64_t in, int64_t pad, int64_t dil, int64_t ker, int64_t stride) {
  int64_t n = 0;
  for (int64_t o = 0;; ++o) {
    if (o * stride + dil * (ker - 1) > in + 2 * pad - 1) break;
    ++n;
  }
  return n;
}

}  // namespace

// ---- string form --------------------------------------------------------------------------------

TEST(ProblemString, CompactFormRoundTrips) {
  const auto p = Conv2dProblem::parse("n16c256h128w128k256r3s3p1u1d1g1");
  EXPECT_EQ(p.n, 16);
  EXPECT_EQ(p.c, 256);
  EXPECT_EQ(p.h, 128);
  EXPECT_EQ(p.w, 128);
  EXPECT_EQ(p.k, 256);
  EXPECT_EQ(p.r, 3);
  EXPECT_EQ(p.s, 3);
  EXPECT_EQ(p.pad_h, 1);
  EXPECT_EQ(p.pad_w, 1);
  EXPECT_EQ(p.stride_h, 1);
  EXPECT_EQ(p.dilation_w, 1);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.to_string(), "n16c256h128w128k256r3s3p1u1d1g1");
  EXPECT_EQ(Conv2dProblem::parse(p.to_string()), p);
}

TEST(ProblemString, SplitKeysRoundTrip) {
  const auto p = Conv2dProblem::parse("n2c4h9w11k8r3s5ph1pw2uh2uw1dh1dw3g2");
  EXPECT_EQ(p.pad_h, 1);
  EXPECT_EQ(p.pad_w, 2);
  EXPECT_EQ(p.stride_h, 2);
  EXPECT_EQ(p.stride_w, 1);
  EXPECT_EQ(p.dilation_h, 1);
  EXPECT_EQ(p.dilation_w, 3);
  EXPECT_EQ(p.groups, 2);
  EXPECT_EQ(p.to_string(), "n2c4h9w11k8r3s5ph1pw2uh2uw1dh1dw3g2");
  EXPECT_EQ(Conv2dProblem::parse(p.to_string()), p);
}

TEST(ProblemString, SplitKeysThatAgreeAreWrittenCompactly) {
  const auto p = Conv2dProblem::parse("c3h5w5k2r3ph1pw1uh2uw2dh1dw1");
  EXPECT_EQ(p.to_string(), "n1c3h5w5k2r3s3p1u2d1g1");
}

TEST(ProblemString, OnlyOneSplitKeyGivenTakesTheDefaultForTheOther) {
  const auto p = Conv2dProblem::parse("c3h5w5k2r3pw2uh3dw2");
  EXPECT_EQ(p.pad_h, 0);
  EXPECT_EQ(p.pad_w, 2);
  EXPECT_EQ(p.stride_h, 3);
  EXPECT_EQ(p.stride_w, 1);
  EXPECT_EQ(p.dilation_h, 1);
  EXPECT_EQ(p.dilation_w, 2);
}

TEST(ProblemString, KeysInAnyOrderAndAnyCase) {
  const auto a = Conv2dProblem::parse("n2c8h10w12k4r3s3p1u2d1g2");
  EXPECT_EQ(Conv2dProblem::parse("g2d1u2p1s3r3k4w12h10c8n2"), a);
  EXPECT_EQ(Conv2dProblem::parse("k4n2r3w12c8g2h10p1u2"), a);
  EXPECT_EQ(Conv2dProblem::parse("N2C8H10W12K4R3S3P1U2D1G2"), a);
}

TEST(ProblemString, DefaultsForMissingKeys) {
  const auto p = Conv2dProblem::parse("c3h7w9k5r3");
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.s, 3) << "s defaults to r";
  EXPECT_EQ(p.pad_h, 0);
  EXPECT_EQ(p.pad_w, 0);
  EXPECT_EQ(p.stride_h, 1);
  EXPECT_EQ(p.stride_w, 1);
  EXPECT_EQ(p.dilation_h, 1);
  EXPECT_EQ(p.dilation_w, 1);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(Conv2dProblem::parse("c3h7w9k5r3s1").s, 1);
  EXPECT_EQ(p.to_string(), "n1c3h7w9k5r3s3p0u1d1g1");
}

TEST(ProblemString, RandomProblemsRoundTrip) {
  std::mt19937 rng(7);
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 500; ++i) {
    Conv2dProblem p;
    p.n = u(1, 64);
    p.groups = u(1, 4);
    p.c = p.groups * u(1, 100);
    p.k = p.groups * u(1, 100);
    p.h = u(1, 300);
    p.w = u(1, 300);
    p.r = u(1, 11);
    p.s = u(1, 11);
    p.pad_h = u(0, 5);
    p.pad_w = u(0, 5);
    p.stride_h = u(1, 4);
    p.stride_w = u(1, 4);
    p.dilation_h = u(1, 4);
    p.dilation_w = u(1, 4);
    const std::string s = p.to_string();
    EXPECT_EQ(Conv2dProblem::parse(s), p) << s;
    EXPECT_EQ(Conv2dProblem::parse(s).to_string(), s);
  }
}

TEST(ProblemString, LargeValuesRoundTrip) {
  Conv2dProblem p = make(1, 1, 1, 1, 1, 1, 1);
  p.n = int64_t(1) << 40;
  p.h = 46341;
  EXPECT_EQ(Conv2dProblem::parse(p.to_string()), p);
}

TEST(ProblemParseErrors, EachMalformedFormSaysWhatIsWrong) {
  struct Bad {
    const char* spec;
    const char* says;  // a fragment the message must contain
  };
  const Bad cases[] = {
      {"", "missing key 'c'"},
      {"n1c3h5w5k2", "missing key 'r'"},
      {"c3w5k2r3", "missing key 'h'"},
      {"c3h5w5k2r3x4", "unknown key 'x'"},
      {"c3h5w5k2r3pp1", "unknown key 'pp'"},
      {"c3h5w5k2r", "key 'r' has no number"},
      {"c3h5w5k2r3p-", "key 'p' has no number"},
      {"c3h5w5k2r3c4", "key 'c' given twice"},
      {"c3h5w5k2r3p1ph2", "'p' conflicts with 'ph'/'pw'"},
      {"c3h5w5k2r3u2uw1", "'u' conflicts with 'uh'/'uw'"},
      {"c3h5w5k2r3d2dh1", "'d' conflicts with 'dh'/'dw'"},
      {"3c3h5w5k2r3", "expected a key at position 0"},
      {"c3 h5w5k2r3", "expected a key at position 2"},
      {"c3h5w5k2r3,", "expected a key at position 10"},
      {"c3h5w5k2r99999999999999999999999", "out of range"},
  };
  for (const auto& b : cases) {
    const std::string msg = parse_error(b.spec);
    EXPECT_NE(msg.find(b.says), std::string::npos) << "parse('" << b.spec << "') said: " << msg;
    EXPECT_NE(msg.find(std::string("'") + b.spec + "'"), std::string::npos)
        << "the message should quote the spec: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(ProblemParseErrors, NegativeNumbersParseButDoNotValidate) {
  // parse() is syntax only; validate() says what is wrong with the values.
  const auto p = Conv2dProblem::parse("c3h5w5k2r3p-1");
  EXPECT_EQ(p.pad_h, -1);
  EXPECT_FALSE(p.validate().ok());
}

// ---- derived sizes ------------------------------------------------------------------------------

TEST(ProblemSizes, OutputSizeFormula) {
  auto p = make(1, 1, 7, 9, 1, 3, 3);
  EXPECT_EQ(p.p(), 5);
  EXPECT_EQ(p.q(), 7);
  p.pad_h = p.pad_w = 1;
  EXPECT_EQ(p.p(), 7);
  EXPECT_EQ(p.q(), 9);
  p.stride_h = 2;  // (7 + 2 - 2 - 1) / 2 + 1
  EXPECT_EQ(p.p(), 4);
  p.stride_h = 1;
  p.h = 10;
  p.pad_h = 0;
  p.dilation_h = 2;  // effective 5: 10 - 5 + 1
  EXPECT_EQ(p.p(), 6);
  p.h = 11;
  p.pad_h = 2;
  p.dilation_h = 3;
  p.stride_h = 2;  // (11 + 4 - 6 - 1) / 2 + 1
  EXPECT_EQ(p.p(), 5);
  p.w = 4;
  p.s = 5;
  p.pad_w = 0;
  EXPECT_EQ(p.q(), 0) << "a filter wider than the input gives Q < 1";
  p.w = 4;
  p.s = 7;
  p.dilation_w = 2;
  EXPECT_LT(p.q(), 1);
}

TEST(ProblemSizes, OutputSizeMatchesCountingWindowPositions) {
  for (int64_t in = 1; in <= 13; ++in)
    for (int64_t pad = 0; pad <= 3; ++pad)
      for (int64_t dil = 1; dil <= 3; ++dil)
        for (int64_t ker = 1; ker <= 5; ++ker)
          for (int64_t stride = 1; stride <= 3; ++stride) {
            auto p = make(1, 1, in, in + 1, 1, ker, ker);
            p.pad_h = pad;
            p.dilation_h = dil;
            p.stride_h = stride;
            p.pad_w = pad;
            p.dilation_w = dil;
            p.stride_w = stride;
            const int64_t want_p = count_positions(in, pad, dil, ker, stride);
            const int64_t want_q = count_positions(in + 1, pad, dil, ker, stride);
            if (want_p >= 1) EXPECT_EQ(p.p(), want_p) << p.to_string();
            else EXPECT_LT(p.p(), 1) << p.to_string();
            if (want_q >= 1) EXPECT_EQ(p.q(), want_q) << p.to_string();
            else EXPECT_LT(p.q(), 1) << p.to_string();
            EXPECT_EQ(p.validate().ok(), want_p >= 1 && want_q >= 1) << p.to_string() << ": " << p.validate().message;
          }
}

TEST(ProblemSizes, FlopsAndMinBytes) {
  auto p = Conv2dProblem::parse("n2c8h10w12k6r3s3p1g2");
  // P=10, Q=12; 2 * N*P*Q * K * C/g*R*S
  EXPECT_DOUBLE_EQ(p.flops(), 2.0 * 2 * 10 * 12 * 6 * 4 * 3 * 3);
  const double elems = 2 * 8 * 10 * 12 + 6 * 4 * 3 * 3 + 2 * 6 * 10 * 12;
  EXPECT_DOUBLE_EQ(p.min_bytes(), 4 * elems);
  EXPECT_DOUBLE_EQ(p.min_bytes(2), 2 * elems);
  EXPECT_EQ(p.input_elems(), 2 * 8 * 10 * 12);
  EXPECT_EQ(p.weight_elems(), 6 * 4 * 3 * 3);
  EXPECT_EQ(p.output_elems(), 2 * 6 * 10 * 12);
  EXPECT_EQ(p.gemm_m(), 2 * 10 * 12);
  EXPECT_EQ(p.gemm_n(), 3);
  EXPECT_EQ(p.gemm_k(), 4 * 3 * 3);
  // The seed problem of ANCHORS.md: 309.24 GFLOP.
  EXPECT_NEAR(Conv2dProblem::parse("n16c256h128w128k256r3s3p1").flops() / 1e9, 309.24, 0.01);
  // Strided: flops follow the output size.
  auto q = Conv2dProblem::parse("n1c3h224w224k64r7p3u2");
  EXPECT_EQ(q.p(), 112);
  EXPECT_DOUBLE_EQ(q.flops(), 2.0 * 112 * 112 * 64 * 3 * 49);
}

TEST(ProblemSizes, DepthwiseAndGroups) {
  EXPECT_TRUE(Conv2dProblem::parse("c8h5w5k8r3g8").is_depthwise());
  EXPECT_FALSE(Conv2dProblem::parse("c8h5w5k16r3g8").is_depthwise());
  EXPECT_FALSE(Conv2dProblem::parse("c1h5w5k1r3g1").is_depthwise());
  const auto p = Conv2dProblem::parse("c12h5w5k18r3g3");
  EXPECT_EQ(p.c_per_group(), 4);
  EXPECT_EQ(p.k_per_group(), 6);
}

// ---- validate() ---------------------------------------------------------------------------------

namespace {
std::string invalid(const Conv2dProblem& p) {
  const Status s = p.validate();
  EXPECT_FALSE(s.ok()) << p.to_string() << " should be invalid";
  EXPECT_EQ(s.code, StatusCode::invalid_problem) << p.to_string();
  EXPECT_FALSE(s.message.empty());
  EXPECT_EQ(s.message.find('\n'), std::string::npos) << s.message;
  EXPECT_EQ(s.message.back(), '.') << "one sentence: " << s.message;
  return s.message;
}
}  // namespace

TEST(ProblemValidate, ValidProblemsAreOk) {
  for (const char* s : {"n1c1h1w1k1r1", "n16c256h128w128k256r3s3p1", "n1c3h224w224k64r7p3u2", "c8h5w5k8r3p1g8",
                        "c4h5w5k4r5p2", "c4h2w2k4r5p2", "c4h9w9k4r3d4"}) {
    const auto p = Conv2dProblem::parse(s);
    EXPECT_TRUE(p.validate().ok()) << s << ": " << p.validate().message;
  }
}

TEST(ProblemValidate, EachFailureHasItsOwnSentence) {
  std::set<std::string> messages;
  auto expect = [&](Conv2dProblem p, const std::string& fragment) {
    const std::string m = invalid(p);
    EXPECT_NE(m.find(fragment), std::string::npos) << p.to_string() << ": " << m;
    messages.insert(m);
  };
  const auto ok = Conv2dProblem::parse("n2c8h10w10k8r3p1g2");
  ASSERT_TRUE(ok.validate().ok());
  struct Field {
    int64_t Conv2dProblem::*member;
    const char* name;
  };
  const Field positive[] = {{&Conv2dProblem::n, "batch size n"},       {&Conv2dProblem::c, "input channels c"},
                            {&Conv2dProblem::h, "input height h"},     {&Conv2dProblem::w, "input width w"},
                            {&Conv2dProblem::k, "output channels k"},  {&Conv2dProblem::r, "filter height r"},
                            {&Conv2dProblem::s, "filter width s"},     {&Conv2dProblem::stride_h, "stride_h"},
                            {&Conv2dProblem::stride_w, "stride_w"},    {&Conv2dProblem::dilation_h, "dilation_h"},
                            {&Conv2dProblem::dilation_w, "dilation_w"}, {&Conv2dProblem::groups, "groups"}};
  for (const auto& f : positive)
    for (int64_t v : {int64_t(0), int64_t(-3)}) {
      Conv2dProblem p = ok;
      p.*f.member = v;
      expect(p, std::string(f.name) + " must be positive, got " + std::to_string(v));
    }
  {
    Conv2dProblem p = ok;
    p.pad_h = -1;
    expect(p, "padding must be non-negative");
    p = ok;
    p.pad_w = -2;
    expect(p, "padding must be non-negative");
  }
  {
    Conv2dProblem p = ok;
    p.groups = 3;
    p.k = 9;
    expect(p, "input channels c=8 are not divisible by groups=3");
    p = ok;
    p.k = 9;
    expect(p, "output channels k=9 are not divisible by groups=2");
  }
  {
    Conv2dProblem p = ok;
    p.pad_h = 0;
    p.r = 11;
    expect(p, "output height P");
    p = ok;
    p.pad_w = 0;
    p.s = 5;
    p.dilation_w = 3;  // effective 13 > 10
    expect(p, "output width Q");
  }
  const int64_t big = int64_t(1) << 40;
  {
    Conv2dProblem p = make(big, big, 1, 1, 1, 1, 1);
    expect(p, "the input has more than 2^63 elements");
  }
  {
    Conv2dProblem p = make(1, int64_t(1) << 30, 1, 1, big, 1, 1);
    expect(p, "the filter has more than 2^63 elements");
  }
  {
    Conv2dProblem p = make(1, 1, 8, 8, 1, int64_t(1) << 30, 1);
    p.dilation_h = big;
    expect(p, "overflow 64 bits");
  }
  {
    Conv2dProblem p = make(int64_t(1) << 20, 1, int64_t(1) << 12, int64_t(1) << 12, int64_t(1) << 20, 1, 1);
    expect(p, "the output has more than 2^63 elements");
  }
  {
    Conv2dProblem p = make(1, int64_t(1) << 22, int64_t(1) << 10, int64_t(1) << 10, int64_t(1) << 22, 1, 1);
    expect(p, "N*P*Q*K*C/g*R*S passes 2^63");
  }
  // Distinct failures give distinct sentences (the count covers the kinds above, not the values).
  EXPECT_GE(messages.size(), 20u);
}

TEST(ProblemValidate, HugePaddingIsAnErrorNotAnOverflow) {
  // h + 2*pad itself would overflow int64 here; validate() must say so rather than compute it.
  Conv2dProblem p = make(1, 1, 8, 8, 1, 3, 3);
  p.pad_h = int64_t(1) << 62;
  invalid(p);
  p = make(1, 1, std::numeric_limits<int64_t>::max() / 2, 1, 1, 1, 1);
  p.pad_h = (int64_t(1) << 61) + 1;
  invalid(p);
}

TEST(ProblemValidate, ParseThenValidateGivesTheSameSentenceAsTheStruct) {
  const auto p = Conv2dProblem::parse("c6h8w8k4r3g4");
  const std::string m = invalid(p);
  EXPECT_NE(m.find("input channels c=6 are not divisible by groups=4"), std::string::npos) << m;
}
