#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace rloo_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::rloo_options;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

const std::vector<double> rewards{1, 0, 0, 1, 0.5, 0.5, 2, 0, 1};
const std::vector<std::int64_t> offsets{0, 4, 6, 9};

std::vector<double> rloo(const std::vector<double>& r, const std::vector<std::int64_t>& o,
                         const rloo_options& options = {}) {
  std::vector<double> a(r.size());
  cascade_rl::rloo_advantages(exec::seq, group_layout(o), r, a, options);
  return a;
}

TEST(Rloo, RewardMinusMeanOfTheOthers) {
  const auto a = rloo(rewards, offsets);
  EXPECT_DOUBLE_EQ(a[0], 2.0 / 3.0);   // 1 - mean{0, 0, 1}
  EXPECT_DOUBLE_EQ(a[1], -2.0 / 3.0);  // 0 - mean{1, 0, 1}
  EXPECT_EQ(a[4], 0.0);                // zero-variance group: exactly 0
  EXPECT_EQ(a[5], 0.0);
  EXPECT_DOUBLE_EQ(a[6], 1.5);  // 2 - mean{0, 1}
  EXPECT_DOUBLE_EQ(a[7], -1.5);
  EXPECT_EQ(a[8], 0.0);
}

TEST(Rloo, AgreesWithLeaveOneOutStatistics) {
  const std::vector<double> r{0.3, -1.2, 2.7, 0.9, 4.1, -0.4};
  const std::vector<std::int64_t> o{0, 4, 6};
  std::vector<double> loo_mean(6);
  cascade_rl::leave_one_out_statistics(exec::seq, group_layout(o), r, loo_mean,
                                       std::span<double>());
  const auto a = rloo(r, o);
  for (std::size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(a[i], r[i] - loo_mean[i], 1e-14) << i;
}

TEST(Rloo, SingletonRules) {
  const std::vector<double> r{1, 2, 3};
  const std::vector<std::int64_t> o{0, 2, 3};  // {1, 2}, {3}
  expect_error_naming([&] { rloo(r, o); }, "groups[1]", "RLOO");
  EXPECT_EQ(rloo(r, o, {.singleton = cascade_rl::singleton_rule::zero_advantage})[2], 0.0);
  EXPECT_EQ(rloo(r, o, {.singleton = cascade_rl::singleton_rule::raw_score})[2], 3.0);
}

TEST(Rloo, NonfiniteRewards) {
  std::vector<double> r = rewards;
  r[1] = -std::numeric_limits<double>::infinity();
  expect_error_naming([&] { rloo(r, offsets); }, "rewards[1]", "infinite");
  const auto a = rloo(r, offsets, {.nonfinite = cascade_rl::nonfinite_rule::zero_group});
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(a[i], 0.0);
  EXPECT_DOUBLE_EQ(a[6], 1.5);
}

TEST(Rloo, RefusesMismatchedSizes) {
  std::vector<double> a(3);
  expect_error_naming(
      [&] { cascade_rl::rloo_advantages(exec::seq, group_layout(offsets), rewards, a); },
      "advantages");
}

}  // namespace rloo_advantages_cases
}  // namespace
