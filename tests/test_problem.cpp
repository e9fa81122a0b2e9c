#include <gtest/gtest.h>
#include "convkit/convkit.hpp"
using namespace convkit;
TEST(Problem, RoundTrip) {
  auto p = Conv2dProblem::parse("n16c256h128w128k256r3s3p1u1d1g1");
  EXPECT_EQ(p.to_string(), "n16c256h128w128k256r3s3p1u1d1g1");
  EXPECT_EQ(p.p(), 128);
}
