// gae_advantages (algorithms/gae_advantages.hpp): hand-computed recurrences with mask
// holes, the whitening over valid tokens, veRL's returns on masked tokens, the
// lambda = 0 and lambda = 1 limits, and the refusals.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace gae_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Two sequences: 4 tokens (last masked: padding), 3 tokens (middle masked: a tool
// observation). Every intermediate below is exact in binary.
const std::vector<std::int64_t> offsets{0, 4, 7};
const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1, 0, 1};
const std::vector<double> rewards{0, 0, 1, 5, 0, 2, 3};
const std::vector<double> values{0.5, 0.25, 0.5, 9, 1, 7, 0.5};

TEST(Gae, HandComputedWithMaskHoles) {
  const token_layout tokens(offsets, mask);
  std::vector<double> advantages(7), returns(7);
  cascade_rl::gae_advantages(exec::seq, tokens, {.token_rewards = rewards, .values = values},
                             advantages, returns, {.gamma = 0.5, .lambda = 0.5});
  // gamma lambda = 0.25. Sequence 0, backwards: t3 padding keeps (V, A) = (0, 0);
  // t2: delta = 1 + 0.5 * 0 - 0.5 = 0.5, A = 0.5; t1: delta = 0 + 0.5 * 0.5 - 0.25 = 0,
  // A = 0.25 * 0.5 = 0.125; t0: delta = 0.5 * 0.25 - 0.5 = -0.375, A = -0.375 + 0.25 *
  // 0.125 = -0.34375. Sequence 1: t6: delta = 3 - 0.5 = 2.5; t5 (observation) carries
  // (0.5, 2.5): its reward 2 and value 7 enter nothing; t4: delta = 0.5 * 0.5 - 1 = -0.75,
  // A = -0.75 + 0.25 * 2.5 = -0.125.
  const std::vector<double> raw{-0.34375, 0.125, 0.5, 0, -0.125, 2.5, 2.5};
  // Returns = A + V on every token, the masked ones holding the carried A plus their own
  // value (veRL's returns there).
  EXPECT_EQ(returns, (std::vector<double>{0.15625, 0.375, 1.0, 9.0, 0.875, 9.5, 3.0}));
  std::vector<double> whitened(7);
  cascade_rl::masked_whiten(exec::seq, tokens, raw, whitened);
  EXPECT_EQ(advantages, whitened);
  EXPECT_EQ(advantages[3], 0.0);  // veRL: the whitened carried value; here 0
  EXPECT_EQ(advantages[5], 0.0);
}

TEST(Gae, LambdaOneIsTheReturnMinusTheValueAndLambdaZeroTheTdError) {
  const token_layout tokens(offsets, mask);
  const cascade_rl::whitening_options off{
      .epsilon = 0.0, .estimator = cascade_rl::std_estimator::biased, .shift_mean = false};
  std::vector<double> advantages(7), returns(7);
  // gamma = 1, lambda = 1: returns are the sums of the valid rewards from t on (the mask
  // hole does not cut them, unlike REINFORCE++'s discounted_returns).
  cascade_rl::gae_advantages(exec::seq, tokens, {.token_rewards = rewards, .values = values},
                             advantages, returns, {.gamma = 1.0, .lambda = 1.0, .whitening = off});
  EXPECT_EQ(returns[0], 1.0);
  EXPECT_EQ(returns[1], 1.0);
  EXPECT_EQ(returns[2], 1.0);
  EXPECT_EQ(returns[4], 3.0);
  EXPECT_EQ(returns[6], 3.0);
  // lambda = 0: A_t = r_t + gamma V_next - V_t, V_next the next valid token's value.
  cascade_rl::gae_advantages(exec::seq, tokens, {.token_rewards = rewards, .values = values},
                             advantages, returns, {.gamma = 0.5, .lambda = 0.0, .whitening = off});
  EXPECT_EQ(returns[0] - values[0], 0.0 + 0.5 * 0.25 - 0.5);
  EXPECT_EQ(returns[4] - values[4], 0.0 + 0.5 * 0.5 - 1.0);
  EXPECT_EQ(returns[6] - values[6], 3.0 - 0.5);
}

TEST(Gae, MaskedTokensAreNotReadAndAdvantagesMayBeFloat) {
  std::vector<float> r{0, 0, 1, 5, 0, 2, 3}, v{0.5f, 0.25f, 0.5f, 9, 1, 7, 0.5f};
  r[3] = r[5] = std::numeric_limits<float>::quiet_NaN();
  v[3] = std::numeric_limits<float>::infinity();
  std::vector<float> advantages(7), returns(7);
  cascade_rl::gae_advantages(exec::par.with_threads(2), token_layout(offsets, mask),
                             {.token_rewards = r, .values = v}, advantages, returns,
                             {.gamma = 0.5, .lambda = 0.5});
  EXPECT_EQ(returns[1], 0.375f);
  EXPECT_EQ(returns[5], 9.5f);
  EXPECT_EQ(advantages[3], 0.0f);
}

TEST(Gae, RefusesBadOptionsSizesAndNonFiniteValidInputs) {
  const token_layout tokens(offsets, mask);
  std::vector<double> advantages(7), returns(7);
  const cascade_rl::gae_inputs<double> in{.token_rewards = rewards, .values = values};
  expect_error_naming(
      [&] {
        cascade_rl::gae_advantages(exec::seq, tokens, in, advantages, returns, {.gamma = 1.5});
      },
      "options.gamma", "[0, 1]");
  expect_error_naming(
      [&] {
        cascade_rl::gae_advantages(exec::seq, tokens, in, advantages, returns, {.lambda = -0.1});
      },
      "options.lambda", "[0, 1]");
  std::vector<double> short_returns(6);
  expect_error_naming(
      [&] { cascade_rl::gae_advantages(exec::seq, tokens, in, advantages, short_returns); },
      "returns");
  std::vector<double> bad = values;
  bad[4] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming(
      [&] {
        cascade_rl::gae_advantages(exec::seq, tokens, {.token_rewards = rewards, .values = bad},
                                   advantages, returns);
      },
      "values", "4", "NaN");
  const std::vector<std::uint8_t> one{1, 0, 0, 0, 0, 0, 0};
  expect_error_naming(
      [&] {
        cascade_rl::gae_advantages(exec::seq, token_layout(offsets, one), in, advantages, returns);
      },
      "tokens", "1 valid token");
}

}  // namespace gae_advantages_cases
}  // namespace
