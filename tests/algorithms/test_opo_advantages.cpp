// opo_advantages (algorithms/opo_advantages.hpp): the length-weighted group baseline by
// hand, the singleton, zero-variance and non-finite rules, and the refusals.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace opo_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::singleton_rule;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {0, 1, 2} and {3} (a singleton) and {4, 5} (equal scores). Sequence lengths in
// valid tokens: 1, 3 (one of 4 masked), 0 (fully masked), 2, 1, 2.
const std::vector<std::int64_t> group_offsets{0, 3, 4, 6};
const std::vector<std::int64_t> offsets{0, 1, 5, 7, 9, 10, 12};
const std::vector<std::uint8_t> mask{1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1};
const std::vector<double> scores{1.0, 0.0, 5.0, 2.0, 0.5, 0.5};

TEST(Opo, LengthWeightedBaselineByHand) {
  std::vector<double> advantages(mask.size(), 9.0);
  cascade_rl::opo_advantages(exec::seq, group_layout(group_offsets), token_layout(offsets, mask),
                             scores, advantages, {.singleton = singleton_rule::raw_score});
  // Group 0: (1 * 1 + 3 * 0 + 0 * 5) / 4 = 0.25; the empty sequence's 5 weighs nothing.
  // Group 1: a singleton under raw_score keeps its score (veRL's baseline 0).
  // Group 2: equal scores, exactly 0.
  EXPECT_EQ(advantages, (std::vector<double>{0.75, -0.25, 0, -0.25, -0.25, 0, 0, 2, 2, 0, 0, 0}));
  cascade_rl::opo_advantages(exec::seq, group_layout(group_offsets), token_layout(offsets, mask),
                             scores, advantages, {.singleton = singleton_rule::zero_advantage});
  EXPECT_EQ(advantages[7], 0.0);
  EXPECT_EQ(advantages[0], 0.75);
}

TEST(Opo, NonFiniteScoresZeroTheirGroupOnRequest) {
  std::vector<float> s{1.0f, 0.0f, 5.0f, 2.0f, 0.5f, 0.5f};
  s[1] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> advantages(mask.size(), 9.0f);
  cascade_rl::opo_advantages(exec::seq, group_layout(group_offsets), token_layout(offsets, mask), s,
                             advantages,
                             {.singleton = singleton_rule::raw_score,
                              .nonfinite = cascade_rl::nonfinite_rule::zero_group});
  for (std::size_t t = 0; t < 7; ++t) EXPECT_EQ(advantages[t], 0.0f) << t;
  EXPECT_EQ(advantages[7], 2.0f);
  expect_error_naming(
      [&] {
        cascade_rl::opo_advantages(exec::seq, group_layout(group_offsets),
                                   token_layout(offsets, mask), s, advantages,
                                   {.singleton = singleton_rule::raw_score});
      },
      "scores", "1", "NaN");
}

TEST(Opo, RefusesSingletonsByDefaultAndBadSizes) {
  std::vector<double> advantages(mask.size());
  expect_error_naming(
      [&] {
        cascade_rl::opo_advantages(exec::seq, group_layout(group_offsets),
                                   token_layout(offsets, mask), scores, advantages);
      },
      "groups", "1", "group of one", "OPO");
  std::vector<double> short_out(5);
  expect_error_naming(
      [&] {
        cascade_rl::opo_advantages(exec::seq, group_layout(group_offsets),
                                   token_layout(offsets, mask), scores, short_out,
                                   {.singleton = singleton_rule::raw_score});
      },
      "advantages", "one per token");
}

}  // namespace opo_advantages_cases
}  // namespace
