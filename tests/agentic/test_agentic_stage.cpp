// The agentic stage (cascade/agentic_stage.hpp) on a guessing game: each prompt hides a
// digit, the agent guesses over up to three turns and the environment answers "higher",
// "lower" or "right"; the outcome is 1 for a right guess. A small tabular policy whose
// action depends on (prompt, turn, last answer) learns to use the answers. Checked: the
// stage trains (greedy evaluation before and after), observations carry no gradient,
// the episode metrics (end reasons, turns, drift exactly 0, lengths of the actions
// only), both update rules, episodes masked or dropped by their end reason, the same
// bits from the same seed, and its config in JSON with refusals by path.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentic/guessing_game.hpp"
#include "cascade_rl/cascade/agentic_stage.hpp"
#include "cascade_rl/cascade/grpo_stage.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/stage_config_difference.hpp"
#include "cascade_rl/cascade/stage_config_json.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"
#include "support/expect_error.hpp"

namespace {
namespace agentic_stage_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;

using namespace cr::testing::guessing;

template <class Stage>
cr::step_metrics run_step(Stage& stage, guessing_policy& policy, cr::rng_type& rng,
                          std::size_t step) {
  const cr::teacher_registry<guess_snapshot> none;
  const cr::stage_config& c = stage.config();
  cr::step_context<guess_snapshot> context{step, c.lr.at(step, c.steps), rng, none};
  return stage.step(policy, context);
}

TEST(AgenticStage, LearnsToUseTheEnvironmentsAnswers) {
  auto stage = cr::make_agentic_stage(game_config(), cr::prompt_pool(game_prompts()), make_game);
  stage.validate();
  guessing_policy policy;
  // Greedy with equal logits guesses 1 every turn: only a secret of 1 is found.
  const double before = stage.evaluate(policy, 7)[0].score;
  cr::rng_type rng(3);
  double first_reward = 0, last_reward = 0;
  for (std::size_t s = 0; s < 40; ++s) {
    const auto m = run_step(stage, policy, rng, s);
    if (s == 0) first_reward = m.reward_mean;
    last_reward = m.reward_mean;
  }
  const double after = stage.evaluate(policy, 7)[0].score;
  EXPECT_LE(before, 0.25);
  EXPECT_EQ(after, 1.0) << "before " << before;
  EXPECT_GT(last_reward, first_reward);
  EXPECT_EQ(policy.updates, 40u);
}

TEST(AgenticStage, ObservationsCarryNoGradientAndEpisodesAreReported) {
  for (const cr::update_options& update :
       {cr::update_options{}, cr::update_options{.rule = cr::ppo_clip_update{
                                                     .epochs = 2, .mini_batches = 2}}}) {
    auto config = game_config();
    config.update = update;
    auto stage = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
    guessing_policy policy;
    cr::rng_type rng(5);
    const auto m = run_step(stage, policy, rng, 0);
    ASSERT_TRUE(m.episodes.has_value());
    const cr::episode_metrics& e = *m.episodes;
    EXPECT_EQ(m.responses, 32u);
    std::size_t ended = 0;
    for (const std::size_t n : e.end_reasons) ended += n;
    EXPECT_EQ(ended, 32u);
    // Only found (done) or three wrong guesses (max_turns) end this game.
    EXPECT_EQ(e.end_reasons[static_cast<std::size_t>(cr::end_reason::done)] +
                  e.end_reasons[static_cast<std::size_t>(cr::end_reason::max_turns)],
              32u);
    EXPECT_GT(e.end_reasons[static_cast<std::size_t>(cr::end_reason::max_turns)], 0u);
    EXPECT_GE(e.turns_mean, 1.0);
    EXPECT_LE(e.turns_mean, 3.0);
    EXPECT_EQ(e.log_prob_drift, 0.0);  // the trainer scores the sampler's own ids
    // Lengths count the actions (one token a turn), not the answers between them.
    EXPECT_EQ(m.length_min, 1);
    EXPECT_EQ(m.length_max, 3);
    EXPECT_EQ(m.length_mean, e.turns_mean);
    EXPECT_GT(m.tokens, 0u);
    ASSERT_FALSE(policy.observation_dlogp.empty());
    for (const float g : policy.observation_dlogp) EXPECT_EQ(g, 0.0f);
    EXPECT_EQ(policy.turn_calls, 3u);  // one batched call per turn
  }
}

TEST(AgenticStage, SameSeedSameBits) {
  const auto run = [] {
    auto stage = cr::make_agentic_stage(game_config(), cr::prompt_pool(game_prompts()), make_game);
    guessing_policy policy;
    cr::rng_type rng(11);
    std::vector<double> losses;
    for (std::size_t s = 0; s < 5; ++s) losses.push_back(run_step(stage, policy, rng, s).loss);
    return std::pair{policy.snapshot(), losses};
  };
  const auto [a, la] = run();
  const auto [b, lb] = run();
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
  EXPECT_NE(a, guessing_policy().snapshot());
}

TEST(AgenticStage, EpisodeSettingsInJsonAndRefusedByPath) {
  auto config = game_config();
  config.episodes.episode_time_budget_ms = 2500;
  const auto json = cr::stage_config_to_json(config);
  EXPECT_EQ(json.at("episodes").dump(),
            R"({"max_turns":3,"context_budget":16,"max_turn_tokens":1,"observation_token_cap":1,)"
            R"("observation_text_cap":16,"episode_time_budget_ms":2500})");
  EXPECT_EQ(cr::stage_config_difference(
                config, cr::stage_config_from_json(nlohmann::json::parse(json.dump()))),
            "");
  EXPECT_EQ(cr::episode_options_of(config).episode_time_budget.count(), 2500);
  EXPECT_EQ(cr::episode_options_of(config).workers, config.reward_workers);

  config.episodes.max_turns = 0;
  auto zero_turns = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
  cr::testing::expect_error_naming([&] { zero_turns.validate(); },
                                   "stage 'swe'.episodes.max_turns", "must be positive");
  config = game_config();
  config.episodes.max_turn_tokens = 17;
  auto too_long = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
  cr::testing::expect_error_naming([&] { too_long.validate(); },
                                   "stage 'swe'.episodes.max_turn_tokens", "context_budget");
}

TEST(AgenticStage, EndReasonFilterMasksOrDropsEpisodes) {
  const auto max_turns = static_cast<std::size_t>(cr::end_reason::max_turns);
  for (const cr::episode_treatment treatment : {cr::episode_treatment::mask, cr::episode_treatment::drop}) {
    auto config = game_config();
    config.filters.end_reasons.max_turns = treatment;
    auto stage = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
    stage.validate();
    guessing_policy policy;
    cr::rng_type rng(5);
    const auto m = run_step(stage, policy, rng, 0);
    ASSERT_TRUE(m.episodes.has_value());
    const std::size_t unfound = m.episodes->end_reasons[max_turns];
    ASSERT_GT(unfound, 0u);
    ASSERT_LT(unfound, 32u);
    const auto trained_unfound = static_cast<std::size_t>(
        std::count(policy.trained_reasons.begin(), policy.trained_reasons.end(), cr::end_reason::max_turns));
    if (treatment == cr::episode_treatment::mask) {
      // Masked: still in the batch (and in its group's baseline), no token of theirs gets
      // a gradient: three guesses each, plus their two answers.
      EXPECT_EQ(m.episodes->masked, unfound);
      EXPECT_EQ(m.episodes->dropped, 0u);
      EXPECT_EQ(m.filtered_sequences, 0u);
      EXPECT_EQ(trained_unfound, unfound);
      EXPECT_GE(policy.observation_dlogp.size(), 5 * unfound);
      for (const float g : policy.observation_dlogp) EXPECT_EQ(g, 0.0f);
    } else {
      // Dropped: out of the step before the advantages; only found digits are trained on.
      EXPECT_EQ(m.episodes->dropped, unfound);
      EXPECT_EQ(m.episodes->masked, 0u);
      EXPECT_EQ(m.filtered_sequences, unfound);
      EXPECT_EQ(trained_unfound, 0u);
      EXPECT_EQ(policy.trained_reasons.size(), 32u - unfound);
    }
    const nlohmann::json json = m;
    EXPECT_EQ(json.at("episodes").at(treatment == cr::episode_treatment::mask ? "masked" : "dropped"), unfound);
  }
}

TEST(AgenticStage, EndReasonFilterInJsonAndRefusedBySingleTurnStages) {
  auto config = game_config();
  config.filters.end_reasons.timeout = cr::episode_treatment::mask;
  config.filters.end_reasons.environment_error = cr::episode_treatment::drop;
  const auto json = cr::stage_config_to_json(config);
  EXPECT_EQ(json.at("filters").at("end_reasons").dump(),
            R"({"done":"keep","max_turns":"keep","context_full":"keep","turn_truncated":"keep",)"
            R"("timeout":"mask","environment_error":"drop"})");
  EXPECT_EQ(cr::stage_config_difference(
                config, cr::stage_config_from_json(nlohmann::json::parse(json.dump()))),
            "");
  nlohmann::json bad = json;
  bad["filters"]["end_reasons"]["timeout"] = "skip";
  cr::testing::expect_error_naming([&] { (void)cr::stage_config_from_json(bad); },
                                   "filters.end_reasons.timeout", "keep");
  // A single-turn stage has no episodes to filter: refused, not ignored.
  auto single_turn = cr::make_grpo_stage(config, cr::prompt_pool(game_prompts()),
                                         [](const cr::response_view&) { return 0.0f; });
  cr::testing::expect_error_naming([&] { single_turn.validate(); },
                                   "stage 'swe'.filters.end_reasons", "agentic stages");
}

}  // namespace agentic_stage_cases
}  // namespace
