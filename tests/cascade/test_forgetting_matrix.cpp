// Forgetting-matrix arithmetic: backward transfer per domain and overall, the
// regression report, JSON round trip, the printed table.

#include <gtest/gtest.h>

#include <sstream>

#include "cascade_rl/cascade/forgetting_matrix.hpp"
#include "support/expect_error.hpp"

namespace {

namespace cr = cascade_rl;

// Domains if, mcqa, chat; stages: if_rl (if), mdrl (mcqa), rlhf (chat).
cr::forgetting_matrix example() {
  cr::forgetting_matrix m({"if", "mcqa", "chat"});
  m.add_row("before", {}, {0.50, 0.40, 0.30});
  m.add_row("if_rl", {"if"}, {0.80, 0.42, 0.20});
  m.add_row("mdrl", {"mcqa"}, {0.78, 0.70, 0.21});
  m.add_row("rlhf", {"chat"}, {0.70, 0.69, 0.60});
  return m;
}

TEST(ForgettingMatrix, BackwardTransferPerDomain) {
  const auto m = example();
  EXPECT_DOUBLE_EQ(*m.backward_transfer("if"), 0.70 - 0.80);
  EXPECT_DOUBLE_EQ(*m.backward_transfer("mcqa"), 0.69 - 0.70);
  EXPECT_DOUBLE_EQ(*m.backward_transfer("chat"), 0.0);  // trained by the last stage
}

TEST(ForgettingMatrix, OverallBackwardTransferExcludesTheLastStagesDomains) {
  const auto m = example();
  EXPECT_DOUBLE_EQ(*m.backward_transfer(), ((0.70 - 0.80) + (0.69 - 0.70)) / 2);
}

TEST(ForgettingMatrix, UntrainedDomainsHaveNoBackwardTransfer) {
  cr::forgetting_matrix m({"a", "b"});
  m.add_row("before", {}, {0.1, 0.2});
  m.add_row("s1", {"a"}, {0.5, 0.1});
  EXPECT_FALSE(m.backward_transfer("b").has_value());
  EXPECT_FALSE(m.backward_transfer().has_value());  // "a" is trained by the last stage
  m.add_row("s2", {"b"}, {0.4, 0.6});
  EXPECT_DOUBLE_EQ(*m.backward_transfer(), 0.4 - 0.5);
}

TEST(ForgettingMatrix, DomainTrainedTwiceCountsFromItsLastTraining) {
  cr::forgetting_matrix m({"a", "b"});
  m.add_row("before", {}, {0.1, 0.1});
  m.add_row("s1", {"a"}, {0.6, 0.1});
  m.add_row("mopd", {"a", "b"}, {0.5, 0.5});
  m.add_row("s3", {"b"}, {0.45, 0.8});
  EXPECT_DOUBLE_EQ(*m.backward_transfer("a"), 0.45 - 0.5);
}

TEST(ForgettingMatrix, RegressionReportNamesDomainAndStage) {
  const auto m = example();
  const auto r = m.regressions(0.05);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].domain, "chat");
  EXPECT_EQ(r[0].stage, "if_rl");
  EXPECT_EQ(r[0].row, 1u);
  EXPECT_DOUBLE_EQ(r[0].drop(), 0.30 - 0.20);
  EXPECT_EQ(r[1].domain, "if");
  EXPECT_EQ(r[1].stage, "rlhf");
  EXPECT_DOUBLE_EQ(r[1].before, 0.78);
  EXPECT_DOUBLE_EQ(r[1].after, 0.70);
  EXPECT_EQ(m.regressions(0.2).size(), 0u);
  EXPECT_EQ(m.regressions(0.0).size(), 4u);  // also if after mdrl, mcqa after rlhf
}

TEST(ForgettingMatrix, JsonRoundTripAndTable) {
  const auto m = example();
  const auto back = cr::forgetting_matrix::from_json(m.to_json());
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_DOUBLE_EQ(*back.backward_transfer(), *m.backward_transfer());
  std::ostringstream out;
  m.print(out);
  EXPECT_NE(out.str().find("rlhf"), std::string::npos);
  EXPECT_NE(out.str().find("-0.1000"), std::string::npos);  // BWT of "if"
  cr::testing::expect_error_naming([] { (void)cr::forgetting_matrix::from_json({{"rows", 1}}); }, "forgetting matrix");
}

TEST(ForgettingMatrix, RefusesRowsOfTheWrongWidthAndUnknownDomains) {
  cr::forgetting_matrix m({"a", "b"});
  cr::testing::expect_error_naming([&] { m.add_row("x", {}, {1.0}); }, "row scores", "has 1");
  cr::testing::expect_error_naming([&] { (void)m.column("zz"); }, "'zz'");
}

}  // namespace
