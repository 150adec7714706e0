#include "common/fault.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(Fault, OffByDefault) {
  EXPECT_FALSE(WEFT_FAULT("test.never_armed"));
}

TEST(Fault, ScopeArmsAndLimitsHits) {
  {
    fault::Scope scope("test.point", {.probability = 1.0, .hits_max = 2});
    EXPECT_TRUE(WEFT_FAULT("test.point"));
    EXPECT_TRUE(WEFT_FAULT("test.point"));
    EXPECT_FALSE(WEFT_FAULT("test.point"));
    EXPECT_FALSE(WEFT_FAULT("test.other"));
    EXPECT_EQ(scope.triggered(), 2);
  }
  EXPECT_FALSE(WEFT_FAULT("test.point"));
}

TEST(Fault, SkipAndProbability) {
  fault::Scope skip("test.skip", {.probability = 1.0, .hits_max = -1, .skip = 3});
  int hits = 0;
  for (int i = 0; i < 5; ++i) hits += WEFT_FAULT("test.skip") ? 1 : 0;
  EXPECT_EQ(hits, 2);

  fault::Scope half("test.half", {.probability = 0.5});
  hits = 0;
  for (int i = 0; i < 10000; ++i) hits += WEFT_FAULT("test.half") ? 1 : 0;
  EXPECT_GT(hits, 4000);
  EXPECT_LT(hits, 6000);
}

TEST(Fault, ParsesEnvironmentSyntax) {
  EXPECT_EQ(fault::parse_and_arm("a.b=1:1,c.d"), "");
  EXPECT_TRUE(WEFT_FAULT("a.b"));
  EXPECT_FALSE(WEFT_FAULT("a.b"));
  EXPECT_TRUE(WEFT_FAULT("c.d"));
  EXPECT_NE(fault::parse_and_arm("x=2.5"), "");
  EXPECT_NE(fault::parse_and_arm("x=1:z"), "");
  fault::disarm_all();
  EXPECT_FALSE(WEFT_FAULT("c.d"));
}

}  // namespace
}  // namespace weft
