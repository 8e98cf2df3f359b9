#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace reinforce_plus_plus_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Two sequences: 4 tokens (last masked), 3 tokens (middle masked).
const std::vector<std::int64_t> offsets{0, 4, 7};
const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1, 0, 1};
const std::vector<double> token_rewards{0, 0, 1, 5, 0, 2, 3};

// Carry (the default, veRL since 1dda039): a masked token passes the return through
// unchanged, its own reward ignored, and gets 0.
TEST(DiscountedReturns, MaskedTokensCarryTheReturnAcross) {
  const token_layout tokens(offsets, mask);
  std::vector<double> returns(7);
  cascade_rl::discounted_returns(exec::seq, tokens, token_rewards, returns, 0.5);
  // Sequence 0: the masked 5 is ignored; 1 discounts to 0.5, 0.25.
  // Sequence 1: 3 stays on its token, the hole gets 0 and passes 3 on undiscounted, so
  // token 4 gets 0 + 0.5 * 3.
  EXPECT_EQ(returns, (std::vector<double>{0.25, 0.5, 1, 0, 1.5, 0, 3}));
  cascade_rl::discounted_returns(exec::seq, tokens, token_rewards, returns, 1.0);
  EXPECT_EQ(returns, (std::vector<double>{1, 1, 1, 0, 3, 0, 3}));
}

// Cut (veRL's earlier loop): the masked token holds r + gamma * run and resets the run.
TEST(DiscountedReturns, MaskedTokensCutTheReturnWhenAsked) {
  const token_layout tokens(offsets, mask);
  std::vector<double> returns(7);
  cascade_rl::discounted_returns(exec::seq, tokens, token_rewards, returns, 0.5,
                                 cascade_rl::masked_token_return::cut);
  // Sequence 0: the masked 5 does not flow back; 1 discounts to 0.5, 0.25.
  // Sequence 1: the masked token holds 2 + 0.5 * 3 and cuts the return: token 4 gets 0.
  EXPECT_EQ(returns, (std::vector<double>{0.25, 0.5, 1, 5, 0, 3.5, 3}));
  cascade_rl::discounted_returns(exec::seq, tokens, token_rewards, returns, 1.0,
                                 cascade_rl::masked_token_return::cut);
  EXPECT_EQ(returns, (std::vector<double>{1, 1, 1, 5, 0, 5, 3}));
}

TEST(MaskedWhiten, UnbiasedVarianceOverValidTokens) {
  const std::vector<std::int64_t> o{0, 4};
  const std::vector<std::uint8_t> m{1, 1, 1, 0};
  const token_layout tokens(o, m);
  const std::vector<double> values{1, 2, 3, 100};
  std::vector<double> out(4);
  cascade_rl::masked_whiten(exec::seq, tokens, values, out);
  const double s = std::sqrt(1.0 + 1e-8);  // mean 2, unbiased var 1
  EXPECT_DOUBLE_EQ(out[0], -1.0 / s);
  EXPECT_EQ(out[1], 0.0);
  EXPECT_DOUBLE_EQ(out[2], 1.0 / s);
  EXPECT_EQ(out[3], 0.0);
  cascade_rl::masked_whiten(
      exec::seq, tokens, values, out,
      {.epsilon = 0.0, .estimator = cascade_rl::std_estimator::biased, .shift_mean = false});
  EXPECT_DOUBLE_EQ(out[0], -1.0 / std::sqrt(2.0 / 3.0) + 2.0);
  // In place.
  std::vector<double> inplace = values;
  cascade_rl::masked_whiten(exec::seq, tokens, inplace, inplace);
  EXPECT_DOUBLE_EQ(inplace[2], 1.0 / s);
}

TEST(ReinforcePlusPlus, ReturnsWhitenedOverTheBatch) {
  const token_layout tokens(offsets, mask);
  std::vector<double> a(7);
  cascade_rl::reinforce_plus_plus_advantages(
      exec::seq, tokens, token_rewards, a,
      {.gamma = 0.5, .masked = cascade_rl::masked_token_return::cut});
  // Valid returns {0.25, 0.5, 1, 0, 3}: mean 0.95, unbiased var 5.8 / 4 = 1.45.
  const double s = std::sqrt(1.45 + 1e-8);
  const std::vector<double> expected{(0.25 - 0.95) / s, (0.5 - 0.95) / s, (1 - 0.95) / s, 0,
                                     (0 - 0.95) / s,    0,                (3 - 0.95) / s};
  for (std::size_t t = 0; t < 7; ++t) EXPECT_NEAR(a[t], expected[t], 1e-14) << t;
  // Carried: valid returns {0.25, 0.5, 1, 1.5, 3}: mean 1.25, unbiased var 4.75 / 4.
  cascade_rl::reinforce_plus_plus_advantages(exec::seq, tokens, token_rewards, a, {.gamma = 0.5});
  const double c = std::sqrt(4.75 / 4 + 1e-8);
  const std::vector<double> carried{
      (0.25 - 1.25) / c, (0.5 - 1.25) / c, (1 - 1.25) / c, 0, (1.5 - 1.25) / c, 0, (3 - 1.25) / c};
  for (std::size_t t = 0; t < 7; ++t) EXPECT_NEAR(a[t], carried[t], 1e-14) << t;
}

TEST(ReinforcePlusPlus, OutcomeScoreOnTheLastValidToken) {
  const std::vector<std::int64_t> o{0, 3, 5, 8};
  const std::vector<std::uint8_t> m{1, 1, 0, 1, 1, 0, 1, 0};
  const token_layout tokens(o, m);
  const std::vector<float> scores{0.5f, -1.0f, 2.0f};
  std::vector<float> placed(8, 9.0f);
  cascade_rl::place_on_last_valid_token(exec::seq, tokens, scores, placed);
  EXPECT_EQ(placed, (std::vector<float>{0, 0.5f, 0, 0, -1.0f, 0, 2.0f, 0}));
  const std::vector<std::uint8_t> empty_row{1, 1, 0, 0, 0, 1, 1, 1};
  const token_layout with_empty(o, empty_row);
  expect_error_naming(
      [&] { cascade_rl::place_on_last_valid_token(exec::seq, with_empty, scores, placed); },
      "per_sequence[1]", "no valid token");
}

TEST(ReinforcePlusPlusBaseline, GroupCentredScoresWhitened) {
  // Groups {1, 0}, {3, 3}; sequences of 2, 3 (one masked), 1 and 2 tokens.
  const std::vector<std::int64_t> o{0, 2, 5, 6, 8};
  const std::vector<std::uint8_t> m{1, 1, 1, 0, 1, 1, 1, 1};
  const token_layout tokens(o, m);
  const std::vector<double> scores{1, 0, 3, 3};
  std::vector<double> a(8);
  cascade_rl::reinforce_plus_plus_baseline_advantages(
      exec::seq, group_layout::uniform({.groups = 2, .size = 2}), tokens, scores, a);
  // Valid values {.5, .5, -.5, -.5, 0, 0, 0}: mean 0, unbiased var 1 / 6.
  const double s = std::sqrt(1.0 / 6.0 + 1e-8);
  const std::vector<double> expected{0.5 / s, 0.5 / s, -0.5 / s, 0, -0.5 / s, 0, 0, 0};
  for (std::size_t t = 0; t < 8; ++t) EXPECT_NEAR(a[t], expected[t], 1e-14) << t;
}

TEST(ReinforcePlusPlusBaseline, SingletonAndNonfiniteRules) {
  const std::vector<std::int64_t> o{0, 1, 2, 3};
  const token_layout tokens(o);
  const std::vector<double> scores{2, 0, 1};
  const std::vector<std::int64_t> groups_offsets{0, 2, 3};  // {2, 0}, {1}
  const group_layout groups(groups_offsets);
  std::vector<double> a(3);
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_plus_plus_baseline_advantages(exec::seq, groups, tokens, scores, a);
      },
      "groups[1]", "REINFORCE++-baseline");
  // raw_score: values {1, -1, 1}, mean 1/3, unbiased var 4/3.
  cascade_rl::reinforce_plus_plus_baseline_advantages(
      exec::seq, groups, tokens, scores, a, {.singleton = cascade_rl::singleton_rule::raw_score});
  const double s = std::sqrt(4.0 / 3.0 + 1e-8);
  EXPECT_NEAR(a[0], (1 - 1.0 / 3) / s, 1e-14);
  EXPECT_NEAR(a[1], (-1 - 1.0 / 3) / s, 1e-14);
  EXPECT_NEAR(a[2], (1 - 1.0 / 3) / s, 1e-14);
  std::vector<double> bad{2, std::nan(""), 1};
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_plus_plus_baseline_advantages(
            exec::seq, groups, tokens, bad, a,
            {.singleton = cascade_rl::singleton_rule::raw_score});
      },
      "scores[1]", "NaN");
  // zero_group: values {0, 0, 1}: mean 1/3, var 1/3.
  cascade_rl::reinforce_plus_plus_baseline_advantages(
      exec::seq, groups, tokens, bad, a,
      {.singleton = cascade_rl::singleton_rule::raw_score,
       .nonfinite = cascade_rl::nonfinite_rule::zero_group});
  EXPECT_NEAR(a[0], (0 - 1.0 / 3) / std::sqrt(1.0 / 3 + 1e-8), 1e-14);
  EXPECT_NEAR(a[2], (1 - 1.0 / 3) / std::sqrt(1.0 / 3 + 1e-8), 1e-14);
}

TEST(ReinforcePlusPlus, EdgeCounts) {
  // No valid token: all zeros. One valid token: the unbiased variance is undefined.
  const std::vector<std::int64_t> o{0, 3};
  const std::vector<std::uint8_t> none{0, 0, 0};
  const std::vector<std::uint8_t> one{0, 1, 0};
  const std::vector<double> r{1, 2, 3};
  std::vector<double> a(3, 7.0);
  cascade_rl::reinforce_plus_plus_advantages(exec::seq, token_layout(o, none), r, a);
  EXPECT_EQ(a, (std::vector<double>{0, 0, 0}));
  expect_error_naming(
      [&] { cascade_rl::reinforce_plus_plus_advantages(exec::seq, token_layout(o, one), r, a); },
      "tokens", "1 valid token");
}

TEST(ReinforcePlusPlus, RefusesBadInput) {
  const token_layout tokens(offsets, mask);
  std::vector<double> a(7);
  for (double gamma : {-0.1, 1.5, std::nan("")})
    expect_error_naming(
        [&] {
          cascade_rl::reinforce_plus_plus_advantages(exec::seq, tokens, token_rewards, a,
                                                     {.gamma = gamma});
        },
        "gamma");
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_plus_plus_advantages(exec::seq, tokens, token_rewards, a,
                                                   {.whitening = {.epsilon = -1.0}});
      },
      "whitening.epsilon");
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_plus_plus_advantages(
            exec::seq, tokens, token_rewards, a,
            {.whitening = {.accumulation = cascade_rl::mean_accumulation::float32_sequential}});
      },
      "whitening.accumulation");
  std::vector<double> bad = token_rewards;
  bad[3] = std::nan("");  // masked: ignored
  EXPECT_NO_THROW(cascade_rl::reinforce_plus_plus_advantages(exec::seq, tokens, bad, a));
  EXPECT_EQ(a[3], 0.0);
  bad[6] = std::numeric_limits<double>::infinity();
  expect_error_naming(
      [&] { cascade_rl::reinforce_plus_plus_advantages(exec::seq, tokens, bad, a); },
      "token_rewards[6]", "infinite");
  std::vector<double> short_a(6);
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_plus_plus_advantages(exec::seq, tokens, token_rewards, short_a);
      },
      "advantages");
  const std::vector<double> three_scores{1, 2, 3};
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_plus_plus_baseline_advantages(
            exec::seq, group_layout::uniform({.groups = 1, .size = 3}), tokens, three_scores, a);
      },
      "tokens");
}

}  // namespace reinforce_plus_plus_cases
}  // namespace
