#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {

using cascade_rl::group_layout;
using cascade_rl::grpo_options;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {1, 0, 0, 1}, {0.5, 0.5}, {2, 0, 1}.
const std::vector<double> rewards{1, 0, 0, 1, 0.5, 0.5, 2, 0, 1};
const std::vector<std::int64_t> offsets{0, 4, 6, 9};

std::vector<double> grpo(const std::vector<double>& r, const std::vector<std::int64_t>& o,
                         const grpo_options& options = {}) {
  std::vector<double> a(r.size());
  cascade_rl::grpo_advantages(exec::seq, std::span<const double>(r), group_layout(o),
                              std::span<double>(a), options);
  return a;
}

TEST(Grpo, NormalisesByTheUnbiasedGroupStd) {
  const auto a = grpo(rewards, offsets);
  const double s0 = std::sqrt(1.0 / 3.0);  // {1,0,0,1}: sum of squares 1, / 3
  EXPECT_DOUBLE_EQ(a[0], 0.5 / (s0 + 1e-6));
  EXPECT_DOUBLE_EQ(a[1], -0.5 / (s0 + 1e-6));
  EXPECT_DOUBLE_EQ(a[3], 0.5 / (s0 + 1e-6));
  EXPECT_EQ(a[4], 0.0);  // zero-variance group: exactly 0
  EXPECT_EQ(a[5], 0.0);
  EXPECT_DOUBLE_EQ(a[6], 1.0 / (1.0 + 1e-6));  // {2,0,1}: mean 1, std 1
  EXPECT_DOUBLE_EQ(a[7], -1.0 / (1.0 + 1e-6));
  EXPECT_EQ(a[8], 0.0);
}

TEST(Grpo, BiasedStdAndEpsilonInsideTheSqrt) {
  const auto biased = grpo(rewards, offsets, {.estimator = cascade_rl::std_estimator::biased});
  EXPECT_DOUBLE_EQ(biased[0], 0.5 / (0.5 + 1e-6));
  const auto inside = grpo(rewards, offsets,
                           {.epsilon = 1e-2, .epsilon_at = cascade_rl::epsilon_placement::inside_sqrt});
  EXPECT_DOUBLE_EQ(inside[0], 0.5 / std::sqrt(1.0 / 3.0 + 1e-2));
  EXPECT_DOUBLE_EQ(inside[6], 1.0 / std::sqrt(1.0 + 1e-2));
}

TEST(Grpo, DrGrpoOnlyCentres) {
  const auto a = grpo(rewards, offsets, {.scale_by_std = false});
  EXPECT_EQ(a, (std::vector<double>{0.5, -0.5, -0.5, 0.5, 0, 0, 1, -1, 0}));
}

TEST(Grpo, ZeroVarianceIsExactlyZeroEvenWithoutEpsilon) {
  const std::vector<double> constant{0.3, 0.3, 0.3};
  const std::vector<std::int64_t> one{0, 3};
  for (const auto& a : {grpo(constant, one, {.epsilon = 0.0}),
                        grpo(constant, one, {.epsilon = 0.0, .accumulation =
                                                 cascade_rl::mean_accumulation::float32_sequential})})
    for (double v : a) {
      EXPECT_EQ(v, 0.0);
      EXPECT_FALSE(std::signbit(v));
    }
}

TEST(Grpo, SingletonRules) {
  const std::vector<double> r{3, 1, 2};
  const std::vector<std::int64_t> o{0, 1, 3};  // {3}, {1, 2}
  expect_error_naming([&] { grpo(r, o); }, "groups[0]", "group of one");
  EXPECT_EQ(grpo(r, o, {.singleton = cascade_rl::singleton_rule::zero_advantage})[0], 0.0);
  // veRL: mean 0, std 1.
  EXPECT_DOUBLE_EQ(grpo(r, o, {.singleton = cascade_rl::singleton_rule::raw_score})[0],
                   3.0 / (1.0 + 1e-6));
  EXPECT_EQ(grpo(r, o, {.scale_by_std = false, .singleton = cascade_rl::singleton_rule::raw_score})[0],
            3.0);
  // Estimators that do not need two: a group of one is a zero-variance group.
  EXPECT_EQ(grpo(r, o, {.scale_by_std = false})[0], 0.0);
  EXPECT_EQ(grpo(r, o, {.estimator = cascade_rl::std_estimator::biased})[0], 0.0);
}

TEST(Grpo, NonfiniteRewards) {
  std::vector<double> r = rewards;
  r[7] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming([&] { grpo(r, offsets); }, "rewards[7]", "NaN");
  const auto a = grpo(r, offsets, {.nonfinite = cascade_rl::nonfinite_rule::zero_group});
  EXPECT_EQ(a[6], 0.0);
  EXPECT_EQ(a[7], 0.0);
  EXPECT_EQ(a[8], 0.0);
  EXPECT_DOUBLE_EQ(a[0], grpo(rewards, offsets)[0]);  // other groups untouched
}

TEST(Grpo, RefusesBadOptionsAndSizes) {
  expect_error_naming([&] { grpo(rewards, offsets, {.epsilon = -1e-6}); }, "epsilon");
  expect_error_naming([&] { grpo(rewards, offsets, {.epsilon = std::nan("")}); }, "epsilon");
  std::vector<double> short_out(8);
  expect_error_naming([&] {
    cascade_rl::grpo_advantages(exec::seq, std::span<const double>(rewards), group_layout(offsets),
                                std::span<double>(short_out));
  }, "advantages");
  const std::vector<double> r{1, 2};
  expect_error_naming([&] { grpo(r, offsets); }, "rewards");
}

TEST(Grpo, FloatRewardsAndUniformGroups) {
  const std::vector<float> r{1, 0, 0, 1, 2, 0, 1, 1};
  std::vector<float> a(8);
  cascade_rl::grpo_advantages(exec::seq, std::span<const float>(r), group_layout::uniform(2, 4),
                              std::span<float>(a));
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(0.5 / (std::sqrt(1.0 / 3.0) + 1e-6)));
  EXPECT_FLOAT_EQ(a[4], static_cast<float>(1.0 / (std::sqrt(2.0 / 3.0) + 1e-6)));
}

TEST(Broadcast, PerSequenceValueOnValidTokensZeroOnMasked) {
  const std::vector<std::int64_t> offsets3{0, 3, 3, 5};
  const std::vector<std::uint8_t> mask{1, 0, 1, 1, 1};
  const cascade_rl::token_layout tokens(offsets3, mask);
  const std::vector<float> values{2.5f, 7.0f, -1.0f};
  std::vector<float> out(5, 9.0f);
  cascade_rl::broadcast_to_tokens(exec::seq, std::span<const float>(values), tokens,
                                  std::span<float>(out));
  EXPECT_EQ(out, (std::vector<float>{2.5f, 0.0f, 2.5f, -1.0f, -1.0f}));
  std::vector<float> short_out(4);
  expect_error_naming([&] {
    cascade_rl::broadcast_to_tokens(exec::seq, std::span<const float>(values), tokens,
                                    std::span<float>(short_out));
  }, "per_token");
  const std::vector<float> two{1.0f, 2.0f};
  expect_error_naming([&] {
    cascade_rl::broadcast_to_tokens(exec::seq, std::span<const float>(two), tokens,
                                    std::span<float>(out));
  }, "per_sequence");
}

}  // namespace
