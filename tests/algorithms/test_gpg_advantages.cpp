// gpg_advantages (algorithms/gpg_advantages.hpp): the batch scale alpha / f_norm and the
// group centring by hand, the singleton, zero-variance and non-finite rules, refusals.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace gpg_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::singleton_rule;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {0, 1, 2}, {3} (a singleton), {4, 5} (equal scores). Three of six scores are
// non-zero: alpha = 6 / 3 = 2.
const std::vector<std::int64_t> group_offsets{0, 3, 4, 6};
const std::vector<double> scores{1.0, 0.0, 0.5, 2.0, 0.0, 0.0};

TEST(Gpg, BatchScaleAndGroupMeanByHand) {
  std::vector<double> a(6);
  cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), scores, a,
                             {.singleton = singleton_rule::raw_score});
  // Group 0: mean 0.5, so 2 * (0.5, -0.5, 0); the singleton keeps 2 * 2 (veRL's mean 0).
  EXPECT_EQ(a, (std::vector<double>{1.0, -1.0, 0.0, 4.0, 0.0, 0.0}));
  cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), scores, a,
                             {.f_norm = 2.0, .singleton = singleton_rule::zero_advantage});
  EXPECT_EQ(a, (std::vector<double>{0.5, -0.5, 0.0, 0.0, 0.0, 0.0}));
  // No non-zero score at all: alpha = N / 1.
  const std::vector<double> zeros(6, 0.0);
  cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), zeros, a,
                             {.singleton = singleton_rule::raw_score});
  EXPECT_EQ(a, std::vector<double>(6, 0.0));
}

TEST(Gpg, NonFiniteScoresZeroTheirGroupAndCountInAlpha) {
  std::vector<float> s{1.0f, 0.0f, 0.5f, 2.0f, 0.0f, 0.0f};
  s[4] = std::numeric_limits<float>::quiet_NaN();  // group 2 zeroed; 4 non-zero: alpha 1.5
  std::vector<float> a(6);
  cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), s, a,
                             {.singleton = singleton_rule::raw_score,
                              .nonfinite = cascade_rl::nonfinite_rule::zero_group});
  EXPECT_EQ(a, (std::vector<float>{0.75f, -0.75f, 0.0f, 3.0f, 0.0f, 0.0f}));
  expect_error_naming(
      [&] {
        cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), s, a,
                                   {.singleton = singleton_rule::raw_score});
      },
      "scores", "4", "NaN");
}

TEST(Gpg, RefusesSingletonsByDefaultAndBadOptions) {
  std::vector<double> a(6);
  expect_error_naming(
      [&] { cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), scores, a); },
      "groups", "1", "group of one", "GPG");
  expect_error_naming(
      [&] {
        cascade_rl::gpg_advantages(exec::seq, group_layout(group_offsets), scores, a,
                                   {.f_norm = 0.0, .singleton = singleton_rule::raw_score});
      },
      "options.f_norm");
}

}  // namespace gpg_advantages_cases
}  // namespace
