// Conformance with veRL's advantage estimators (../shared/reference/verl_core_algos.json,
// produced by verl/trainer/ppo/core_algos.py in float32): every case, every output,
// with the presets::verl options, compared as [N][T] token advantages.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/presets/verl_advantages.hpp"
#include "support/reference.hpp"

namespace {

namespace verl = cascade_rl::presets::verl;
namespace ref = cascade_rl::testing;
using cascade_rl::group_layout;

struct verl_case {
  std::string name;
  ref::padded_batch batch;
  std::vector<float> scores;
  std::vector<float> token_level_rewards;
  std::vector<std::int64_t> group_offsets{0};
  nlohmann::json json;
};

std::vector<verl_case> load_cases() {
  const nlohmann::json reference = ref::load_reference("verl_core_algos.json");
  std::vector<verl_case> cases;
  for (const auto& c : reference.at("cases")) {
    verl_case v;
    v.name = c.at("name").get<std::string>();
    v.batch = ref::padded_from_mask(c.at("mask"));
    v.scores = c.at("scores").get<std::vector<float>>();
    v.token_level_rewards = ref::flatten<float>(c.at("token_level_rewards"));
    for (const auto& size : c.at("groups"))
      v.group_offsets.push_back(v.group_offsets.back() + size.get<std::int64_t>());
    // Rows of a group are contiguous in every case (group_of_row is sorted).
    const auto group_of_row = c.at("group_of_row").get<std::vector<std::int64_t>>();
    for (std::size_t g = 0; g + 1 < v.group_offsets.size(); ++g)
      for (auto r = v.group_offsets[g]; r < v.group_offsets[g + 1]; ++r)
        EXPECT_EQ(group_of_row[static_cast<std::size_t>(r)], static_cast<std::int64_t>(g)) << v.name;
    v.json = c;
    cases.push_back(std::move(v));
  }
  return cases;
}

// Per-sequence advantages on the [N][T] grid, 0 on masked tokens.
std::vector<float> on_tokens(const verl_case& c, const std::vector<float>& per_sequence) {
  std::vector<float> tokens(c.batch.mask.size());
  cascade_rl::broadcast_to_tokens(cascade_rl::exec::seq, std::span<const float>(per_sequence),
                                  c.batch.layout(), std::span<float>(tokens));
  return tokens;
}

void expect_matches(const verl_case& c, const std::vector<float>& tokens, const std::string& key) {
  ref::expect_all_close(std::span<const float>(tokens), ref::flatten<double>(c.json.at(key)),
                        c.name + " " + key);
}

TEST(VerlReference, HasTheFiveCases) {
  const auto cases = load_cases();
  ASSERT_EQ(cases.size(), 5u);
  EXPECT_EQ(cases[4].name, "near-identical");
}

TEST(VerlReference, TokenLevelRewardsAreTheScoreOnTheLastValidToken) {
  for (const auto& c : load_cases()) {
    std::vector<float> placed(c.batch.mask.size());
    cascade_rl::place_on_last_valid_token(cascade_rl::exec::seq, std::span<const float>(c.scores),
                                          c.batch.layout(), std::span<float>(placed));
    EXPECT_EQ(placed, c.token_level_rewards) << c.name;
  }
}

TEST(VerlReference, Grpo) {
  for (const auto& c : load_cases()) {
    std::vector<float> advantages(c.scores.size());
    cascade_rl::grpo_advantages(cascade_rl::exec::seq, std::span<const float>(c.scores),
                                group_layout(c.group_offsets), std::span<float>(advantages),
                                verl::grpo());
    expect_matches(c, on_tokens(c, advantages), "grpo_eps1e-06_normstd1");
  }
}

TEST(VerlReference, DrGrpo) {
  for (const auto& c : load_cases()) {
    std::vector<float> advantages(c.scores.size());
    cascade_rl::grpo_advantages(cascade_rl::exec::seq, std::span<const float>(c.scores),
                                group_layout(c.group_offsets), std::span<float>(advantages),
                                verl::dr_grpo());
    expect_matches(c, on_tokens(c, advantages), "grpo_eps1e-06_normstd0");
  }
}

TEST(VerlReference, Rloo) {
  for (const auto& c : load_cases()) {
    std::vector<float> advantages(c.scores.size());
    cascade_rl::rloo_advantages(cascade_rl::exec::seq, std::span<const float>(c.scores),
                                group_layout(c.group_offsets), std::span<float>(advantages),
                                verl::rloo());
    expect_matches(c, on_tokens(c, advantages), "rloo");
  }
}

std::vector<float> reinforce_pp(const verl_case& c) {
  std::vector<float> advantages(c.batch.mask.size());
  cascade_rl::reinforce_plus_plus_advantages(
      cascade_rl::exec::seq, std::span<const float>(c.token_level_rewards), c.batch.layout(),
      std::span<float>(advantages), verl::reinforce_plus_plus(1.0));
  return advantages;
}

TEST(VerlReference, ReinforcePlusPlus) {
  for (const auto& c : load_cases()) expect_matches(c, reinforce_pp(c), "reinforce_pp_gamma1");
}

// On 'near-identical' every return is 0.35f (29 valid tokens) or 0.35f + 1 ulp (7
// tokens); the variance (~1e-17) vanishes next to the 1e-8 guard, so whitening is
// (x - mean) * 1e4 and shows only where the mean rounds. veRL's float32 batch sum
// rounds up and its mean is 0.35f + 1 ulp: -2.98e-4 on the 29 tokens, 0 on the 7 (the
// preset reproduces it). The double default has mean 0.35f + 7/36 ulp: -5.79e-5 and
// +2.41e-4. Both are rounding noise amplified by 1e4.
TEST(VerlReference, DoubleWhiteningOnNearIdenticalIsRoundingNoise) {
  for (const auto& c : load_cases()) {
    if (c.name != "near-identical") continue;
    std::vector<float> ours(c.batch.mask.size());
    cascade_rl::reinforce_plus_plus_advantages(
        cascade_rl::exec::seq, std::span<const float>(c.token_level_rewards), c.batch.layout(),
        std::span<float>(ours), cascade_rl::reinforce_plus_plus_options{});
    const auto theirs = ref::flatten<double>(c.json.at("reinforce_pp_gamma1"));
    const double ulp = 0.3500000238418579 - 0.3499999940395355;
    const double scale = 1.0 / std::sqrt(1e-8);
    for (std::size_t t = 0; t < ours.size(); ++t) {
      if (c.batch.mask[t] == 0) {
        EXPECT_EQ(ours[t], 0.0f);
        continue;
      }
      const bool last_row = t / c.batch.width == 7;
      EXPECT_NEAR(ours[t], (last_row ? 29.0 / 36.0 : -7.0 / 36.0) * ulp * scale, 1e-9) << t;
      EXPECT_NEAR(theirs[t], last_row ? 0.0 : -ulp * scale, 1e-9) << t;
      EXPECT_LT(std::abs(ours[t] - theirs[t]), 3e-4) << t;
    }
  }
}

// The default options accumulate the group mean in double. On 'near-identical' veRL's
// float32 mean is 0.35f - 1 ulp, so it hands the seven equal rewards +1 ulp / (std +
// eps) = 0.0287 and the eighth 0.0575; in double the mean is 0.35f + ulp/8, the seven
// get -0.0037 and the eighth +0.0258 (which sum to 0, as advantages of a group should).
TEST(VerlReference, DoubleMeanGrpoDiffersOnNearIdentical) {
  for (const auto& c : load_cases()) {
    if (c.name != "near-identical") continue;
    auto options = verl::grpo();
    options.accumulation = cascade_rl::mean_accumulation::double_precision;
    std::vector<float> ours(c.scores.size());
    cascade_rl::grpo_advantages(cascade_rl::exec::seq, std::span<const float>(c.scores),
                                group_layout(c.group_offsets), std::span<float>(ours), options);
    const double ulp = 0.3500000238418579 - 0.3499999940395355;
    const double std = ulp * std::sqrt(1.0 / 8.0);  // sqrt((7/64 + 49/64) / 7) ulp
    for (std::size_t i = 0; i < 7; ++i) EXPECT_NEAR(ours[i], -ulp / 8 / (std + 1e-6), 1e-6);
    EXPECT_NEAR(ours[7], 7 * ulp / 8 / (std + 1e-6), 1e-6);
    EXPECT_NEAR(ours[0], -0.0036864, 1e-6);
    EXPECT_NEAR(ours[7], 0.0258051, 1e-6);
    double sum = 0;
    for (float a : ours) sum += a;
    EXPECT_NEAR(sum, 0.0, 1e-7);
    // veRL's, on the first token of rows 0 and 7:
    EXPECT_NEAR(c.json.at("grpo_eps1e-06_normstd1")[0][0].get<double>(), 0.0287290, 1e-6);
    EXPECT_NEAR(c.json.at("grpo_eps1e-06_normstd1")[7][0].get<double>(), 0.0574581, 1e-6);
  }
}

TEST(VerlReference, ReinforcePlusPlusBaseline) {
  for (const auto& c : load_cases()) {
    std::vector<float> advantages(c.batch.mask.size());
    cascade_rl::reinforce_plus_plus_baseline_advantages(
        cascade_rl::exec::seq, std::span<const float>(c.scores), group_layout(c.group_offsets),
        c.batch.layout(), std::span<float>(advantages), verl::reinforce_plus_plus_baseline());
    expect_matches(c, advantages, "reinforce_pp_baseline");
  }
}

}  // namespace
