// grpo_passk_advantages (algorithms/grpo_passk_advantages.hpp): only the best response
// of a group learns, by hand; ties, constant groups, singletons and refusals.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace grpo_passk_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::singleton_rule;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {0, 1, 2, 3} (unique best 3.0 at index 1, second 1.0), {4, 5, 6} (tied best),
// {7, 8} (constant).
const std::vector<std::int64_t> offsets{0, 4, 7, 9};
const std::vector<double> scores{0.0, 3.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 0.5};

TEST(GrpoPassk, OnlyTheUniqueBestLearns) {
  std::vector<double> a(9, 9.0);
  cascade_rl::grpo_passk_advantages(exec::seq, group_layout(offsets), scores, a,
                                    {.scale_by_std = false});
  EXPECT_EQ(a, (std::vector<double>{0, 2.0, 0, 0, 0, 0, 0, 0, 0}));
  cascade_rl::grpo_passk_advantages(exec::seq, group_layout(offsets), scores, a);
  // Group 0: mean 1, squared deviations 1 + 4 + 0 + 1 = 6, unbiased std sqrt(2).
  EXPECT_DOUBLE_EQ(a[1], 2.0 / (std::sqrt(2.0) + 1e-6));
  EXPECT_EQ(a[0], 0.0);
  EXPECT_EQ(a[4], 0.0);  // a tied maximum: the gap is 0
}

TEST(GrpoPassk, SingletonsAreRefusedOrZeroedAndRawScoreIsMeaningless) {
  const std::vector<std::int64_t> with_one{0, 4, 5};
  const std::vector<double> s{0.0, 3.0, 1.0, 0.0, 7.0};
  std::vector<double> a(5, 9.0);
  expect_error_naming(
      [&] { cascade_rl::grpo_passk_advantages(exec::seq, group_layout(with_one), s, a); }, "groups",
      "1", "group of one", "pass@k");
  cascade_rl::grpo_passk_advantages(
      exec::seq, group_layout(with_one), s, a,
      {.scale_by_std = false, .singleton = singleton_rule::zero_advantage});
  EXPECT_EQ(a, (std::vector<double>{0, 2.0, 0, 0, 0}));
  expect_error_naming(
      [&] {
        cascade_rl::grpo_passk_advantages(exec::seq, group_layout(with_one), s, a,
                                          {.singleton = singleton_rule::raw_score});
      },
      "options.singleton");
}

TEST(GrpoPassk, NonFiniteScoresAreRefusedOrZeroTheirGroup) {
  std::vector<float> s{0.0f, 3.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.5f, 0.5f};
  s[2] = std::numeric_limits<float>::infinity();
  std::vector<float> a(9, 9.0f);
  expect_error_naming(
      [&] { cascade_rl::grpo_passk_advantages(exec::seq, group_layout(offsets), s, a); }, "scores",
      "2", "infinite");
  cascade_rl::grpo_passk_advantages(exec::seq, group_layout(offsets), s, a,
                                    {.nonfinite = cascade_rl::nonfinite_rule::zero_group});
  EXPECT_EQ(a, std::vector<float>(9, 0.0f));
}

}  // namespace grpo_passk_advantages_cases
}  // namespace
