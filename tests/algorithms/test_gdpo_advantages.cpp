// gdpo_advantages (algorithms/gdpo_advantages.hpp): per-component GRPO, the weighted sum
// on the valid tokens and the batch whitening, against the same steps done by hand with
// the library's own GRPO and whitening; refusals.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace gdpo_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Two groups of two sequences; sequence 1 has a masked token, sequence 3 none valid but one.
const std::vector<std::int64_t> group_offsets{0, 2, 4};
const std::vector<std::int64_t> offsets{0, 2, 5, 7, 9};
const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1, 1, 1, 0, 1};
// Component 0 (format) and component 1 (accuracy), component-major.
const std::vector<double> components{1, 0, 1, 1, 0.25, 0.75, 3.0, -1.0};

TEST(Gdpo, ComponentsNormalisedApartThenWeightedThenWhitened) {
  const std::vector<double> weights{0.5, 2.0};
  std::vector<double> advantages(mask.size());
  cascade_rl::gdpo_advantages(exec::seq, group_layout(group_offsets), token_layout(offsets, mask),
                              {.component_scores = components, .weights = weights}, advantages);
  // By hand: GRPO of each component (the default options), 0.5 a_0 + 2 a_1 per sequence,
  // on the valid tokens, whitened.
  std::vector<double> a0(4), a1(4), sum(4), tokens(mask.size()), want(mask.size());
  cascade_rl::grpo_advantages(exec::seq, group_layout(group_offsets),
                              std::span<const double>(components).subspan(0, 4), a0);
  cascade_rl::grpo_advantages(exec::seq, group_layout(group_offsets),
                              std::span<const double>(components).subspan(4, 4), a1);
  for (std::size_t s = 0; s < 4; ++s)  // each product rounded alone, as the library adds them
    sum[s] = cascade_rl::terms::add_weighted_component(
        cascade_rl::terms::add_weighted_component(0.0, 0.5, a0[s]), 2.0, a1[s]);
  cascade_rl::broadcast_to_tokens(exec::seq, token_layout(offsets, mask), sum, tokens);
  cascade_rl::masked_whiten(exec::seq, token_layout(offsets, mask), tokens, want);
  EXPECT_EQ(advantages, want);
  EXPECT_EQ(advantages[3], 0.0);
  EXPECT_EQ(advantages[7], 0.0);
  // Group 1's format component is constant: it adds exactly 0, not noise over eps.
  EXPECT_EQ(a0[2], 0.0);
  EXPECT_EQ(a0[3], 0.0);
}

TEST(Gdpo, RefusesMismatchedComponentsWeightsAndNonFiniteScores) {
  std::vector<double> advantages(mask.size());
  const std::vector<double> three{1.0, 1.0, 1.0};
  expect_error_naming(
      [&] {
        cascade_rl::gdpo_advantages(exec::seq, group_layout(group_offsets),
                                    token_layout(offsets, mask),
                                    {.component_scores = components, .weights = three}, advantages);
      },
      "component_scores", "one per sequence and component");
  const std::vector<double> none;
  expect_error_naming(
      [&] {
        cascade_rl::gdpo_advantages(exec::seq, group_layout(group_offsets),
                                    token_layout(offsets, mask),
                                    {.component_scores = components, .weights = none}, advantages);
      },
      "weights", "empty");
  std::vector<double> bad = components;
  bad[6] = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> weights{1.0, 1.0};
  expect_error_naming(
      [&] {
        cascade_rl::gdpo_advantages(exec::seq, group_layout(group_offsets),
                                    token_layout(offsets, mask),
                                    {.component_scores = bad, .weights = weights}, advantages);
      },
      "component_scores", "6", "NaN");
}

}  // namespace gdpo_advantages_cases
}  // namespace
