// remax_advantages (algorithms/remax_advantages.hpp): hand-computed returns and
// advantages with mask holes, veRL's returns on masked tokens, and the refusals.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace remax_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Two sequences: 4 tokens (last masked: padding), 3 tokens (middle masked: a tool
// observation whose reward 2 must not count).
const std::vector<std::int64_t> offsets{0, 4, 7};
const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1, 0, 1};
const std::vector<double> rewards{0.5, 0, 1, 5, 0.25, 2, 3};
const std::vector<double> baselines{0.75, 1};

TEST(Remax, HandComputedWithMaskHoles) {
  std::vector<double> advantages(7), returns(7);
  cascade_rl::remax_advantages(exec::seq, token_layout(offsets, mask),
                               {.token_rewards = rewards, .reward_baselines = baselines},
                               advantages, returns);
  // Returns: the valid rewards from t on, on every token (the hole at 5 holds the 3 after
  // it, as veRL's reversed cumsum of rewards * mask does; the padding at 3 holds 0).
  EXPECT_EQ(returns, (std::vector<double>{1.5, 1, 1, 0, 3.25, 3, 3}));
  // Advantages: return - baseline on valid tokens, 0 on masked ones (veRL: 3 at the hole).
  EXPECT_EQ(advantages, (std::vector<double>{0.75, 0.25, 0.25, 0, 2.25, 0, 2}));
}

TEST(Remax, FloatSubtractsTheStoredReturnAndMaskedTokensAreNotRead) {
  std::vector<float> r{0.1f, 0.2f, 0.3f, 0, 1, 0, 1}, b{0.3f, 0};
  r[3] = r[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> advantages(7), returns(7);
  cascade_rl::remax_advantages(exec::seq, token_layout(offsets, mask),
                               {.token_rewards = r, .reward_baselines = b}, advantages, returns);
  EXPECT_EQ(returns[0],
            static_cast<float>(static_cast<double>(0.1f) +
                               (static_cast<double>(0.2f) + static_cast<double>(0.3f))));
  EXPECT_EQ(advantages[0], returns[0] - 0.3f);
  EXPECT_EQ(returns[5], 1.0f);
  EXPECT_EQ(advantages[5], 0.0f);
}

TEST(Remax, RefusesBadSizesAndNonFiniteInputs) {
  const token_layout tokens(offsets, mask);
  std::vector<double> advantages(7), returns(7);
  const std::vector<double> one_baseline{0.5};
  expect_error_naming(
      [&] {
        cascade_rl::remax_advantages(exec::seq, tokens,
                                     {.token_rewards = rewards, .reward_baselines = one_baseline},
                                     advantages, returns);
      },
      "reward_baselines", "one per sequence");
  std::vector<double> bad = baselines;
  bad[1] = std::numeric_limits<double>::infinity();
  expect_error_naming(
      [&] {
        cascade_rl::remax_advantages(exec::seq, tokens,
                                     {.token_rewards = rewards, .reward_baselines = bad},
                                     advantages, returns);
      },
      "reward_baselines", "1", "infinite");
  std::vector<double> bad_rewards = rewards;
  bad_rewards[6] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming(
      [&] {
        cascade_rl::remax_advantages(exec::seq, tokens,
                                     {.token_rewards = bad_rewards, .reward_baselines = baselines},
                                     advantages, returns);
      },
      "token_rewards", "6", "NaN");
}

}  // namespace remax_advantages_cases
}  // namespace
