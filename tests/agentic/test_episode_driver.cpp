// Multi-turn episodes (cascade/episode_driver.hpp) with a scripted policy and scripted
// environments: every end reason produced and reported in one batch, failures confined
// to their own episode, the trajectory's mask, log-probs and turn boundaries, no
// gradient on observation tokens (finite differences through the loss), the drift
// metric, capped observations, one batched generate call per turn, and refusals by name.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/cascade/episode_driver.hpp"
#include "cascade_rl/cascade/log_prob_drift.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/expect_error.hpp"

namespace {
namespace episode_driver_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
using namespace std::chrono_literals;

// Text as tokens: one token per byte, with a marker token before each part (prompt 1000,
// action 1001, observation 1002), so the test can read a context back.
constexpr std::int32_t prompt_marker = 1000, action_marker = 1001, observation_marker = 1002;

std::vector<std::int32_t> tokens_of(std::int32_t marker, std::string_view text) {
  std::vector<std::int32_t> out{marker};
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// The sampler's log-prob of token j of an action: what the scripted trainer also gives
// (scored_log_prob), so the drift is exactly 0.
float scored_log_prob(std::size_t j) { return -0.0625f * static_cast<float>(j + 1); }

// Acts by the prompt's text: "long" answers with more tokens than a turn allows,
// "stop@k" says "stop" on turn k, anything else "go". Records every call.
struct scripted_policy {
  std::vector<std::size_t> calls;  // live episodes per call

  std::vector<std::int32_t> render_prompt(const cr::prompt& p) const {
    return tokens_of(prompt_marker, p.text);
  }
  std::vector<std::int32_t> render_observation(std::span<const std::int32_t>,
                                               std::string_view text) const {
    return tokens_of(observation_marker, text);
  }
  std::vector<cr::turn_output> continue_generation(std::span<const cr::turn_request> requests,
                                                   const cr::sampling_params&) {
    calls.push_back(requests.size());
    std::vector<cr::turn_output> out;
    for (const auto& r : requests) {
      std::string prompt_text;
      for (std::size_t t = 1; t < r.context.size() && r.context[t] < 256; ++t)
        prompt_text.push_back(static_cast<char>(r.context[t]));
      std::size_t turn = 0;
      for (const auto token : r.context) turn += token == action_marker;
      std::string text = "go";
      if (prompt_text == "long") text = std::string(40, 'x');
      if (prompt_text.starts_with("stop@") && std::to_string(turn) == prompt_text.substr(5))
        text = "stop";
      cr::turn_output a;
      a.tokens = tokens_of(action_marker, text);
      if (a.tokens.size() > r.max_tokens) {
        a.tokens.resize(r.max_tokens);
        a.finish = cr::finish_reason::truncated;
      }
      for (std::size_t j = 0; j < a.tokens.size(); ++j) a.log_probs.push_back(scored_log_prob(j));
      a.text = text;
      out.push_back(std::move(a));
    }
    return out;
  }
};
static_assert(cr::TurnPolicy<scripted_policy>);

// The abandoned step of "hang" waits for this, and says when it has returned.
std::atomic<bool> release_hang{false}, hang_returned{false};

// Behaves by the prompt's text: "stop@k" ends when the action is "stop"; "throw" throws
// on its second step; "binary" answers with a NUL byte; "hang" blocks past any budget;
// "flood" answers with 100 KB; "long" and the others answer "ok" forever. Each step
// earns 0.25; the outcome is 1 + the number of steps.
struct scripted_environment {
  std::string kind;
  int steps = 0;

  std::string reset(const cr::prompt& p) {
    kind = p.text;
    return kind == "opens" ? "hello" : "";
  }
  cr::environment_step step(std::string_view action) {
    ++steps;
    if (kind == "throw" && steps == 2) throw std::runtime_error("the tool crashed");
    if (kind == "binary") return {.observation = std::string("a\0b", 3)};
    if (kind == "hang") {  // until the test lets it go (at most 10 s)
      for (int i = 0; i < 1000 && !release_hang.load(); ++i) std::this_thread::sleep_for(10ms);
      hang_returned.store(true);
    }
    if (kind == "flood") return {.observation = std::string(100000, 'y'), .reward = 0.25};
    return {.observation = "ok", .reward = 0.25, .done = action == "stop"};
  }
  double outcome() const { return 1.0 + steps; }
};
static_assert(cr::Environment<scripted_environment>);

const auto make_scripted = [](const cr::prompt&, std::size_t) { return scripted_environment{}; };

std::vector<cr::prompt> prompts_of(std::initializer_list<const char*> kinds) {
  std::vector<cr::prompt> out;
  std::int64_t id = 0;
  for (const char* k : kinds) out.push_back({.id = id++, .text = k});
  return out;
}

cr::episode_options small_options() {
  return {.max_turns = 4,
          .context_budget = 64,
          .max_turn_tokens = 8,
          .observation_token_cap = 16,
          .observation_text_cap = 1024,
          .episode_time_budget = 0ms,
          .workers = 3};
}

TEST(EpisodeDriver, EveryEndReasonInOneBatchAndFailuresStayInTheirEpisode) {
  scripted_policy policy;
  const auto prompts = prompts_of({"stop@1", "plain", "flood", "long", "hang", "throw", "binary"});
  auto options = small_options();
  options.context_budget = 36;  // "flood"'s observations fill it on the second turn
  options.episode_time_budget = 1000ms;  // "hang" blocks: its step is abandoned
  const auto result = cr::run_episodes(policy, make_scripted, std::span<const cr::prompt>(prompts),
                                       1, {}, options, 7);
  cr::validate_rollout_batch(result.batch, "run_episodes");
  const auto& e = result.batch.episodes;
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0].reason, cr::end_reason::done);
  EXPECT_EQ(e[0].turns(), 2u);  // "go", then "stop" on turn 1
  EXPECT_EQ(e[1].reason, cr::end_reason::max_turns);
  EXPECT_EQ(e[1].turns(), 4u);
  EXPECT_EQ(e[2].reason, cr::end_reason::context_full);
  EXPECT_EQ(e[3].reason, cr::end_reason::turn_truncated);
  EXPECT_EQ(e[3].turns(), 1u);
  EXPECT_EQ(e[4].reason, cr::end_reason::timeout);
  EXPECT_NE(e[4].error.find("time budget"), std::string::npos) << e[4].error;
  EXPECT_EQ(e[5].reason, cr::end_reason::environment_error);
  EXPECT_NE(e[5].error.find("the tool crashed"), std::string::npos) << e[5].error;
  EXPECT_EQ(e[6].reason, cr::end_reason::environment_error);
  EXPECT_NE(e[6].error.find("not text"), std::string::npos) << e[6].error;
  // Outcomes: 1 + steps where the episode ended on its own terms, 0 where the
  // environment failed or was abandoned.
  EXPECT_EQ(result.rewards[0], 3.0f);
  EXPECT_EQ(result.rewards[1], 5.0f);
  EXPECT_EQ(result.rewards[3], 1.0f);  // truncated before its first step
  EXPECT_EQ(result.rewards[4], 0.0f);
  EXPECT_EQ(result.rewards[5], 0.0f);
  EXPECT_EQ(result.rewards[6], 0.0f);
  // Turn rewards as the steps gave them; the failed step's turn earns nothing.
  EXPECT_EQ(e[1].turn_rewards, std::vector<double>(4, 0.25));
  EXPECT_EQ(e[5].turn_rewards, (std::vector<double>{0.25, 0.0}));
  // The episodes beside the failures ran every turn they were due.
  EXPECT_EQ(result.batch.finish_reasons[3], cr::finish_reason::truncated);
  EXPECT_EQ(result.batch.finish_reasons[1], cr::finish_reason::stopped);
  for (std::size_t r = 0; r < cr::end_reason_count; ++r)
    EXPECT_NE(cr::name_of(static_cast<cr::end_reason>(r)), "unknown");
  // The abandoned step was still running; let it go and see it return.
  EXPECT_FALSE(hang_returned.load());
  release_hang.store(true);
  for (int i = 0; i < 500 && !hang_returned.load(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(hang_returned.load());
  std::this_thread::sleep_for(50ms);  // its thread releases the environment as it ends
}

TEST(EpisodeDriver, OneBatchedGenerateCallPerTurnForTheLiveEpisodes) {
  scripted_policy policy;
  const auto prompts = prompts_of({"stop@0", "stop@2", "plain"});
  const auto options = small_options();
  const auto result = cr::run_episodes(policy, make_scripted, std::span<const cr::prompt>(prompts),
                                       2, {}, options, 1);
  // Turn 0: all 6; turn 1: "stop@0"'s two are done; turn 2, 3: "stop@2"'s end after turn 2.
  EXPECT_EQ(policy.calls, (std::vector<std::size_t>{6, 4, 4, 2}));
  EXPECT_EQ(result.batch.prompt_count(), 3u);
  EXPECT_EQ(result.batch.response_count(), 6u);
}

TEST(EpisodeDriver, ActionsCarryMaskAndSamplerLogProbsObservationsNeither) {
  scripted_policy policy;
  const auto prompts = prompts_of({"opens", "stop@1"});
  auto options = small_options();
  const auto result = cr::run_episodes(policy, make_scripted, std::span<const cr::prompt>(prompts),
                                       1, {}, options, 3);
  const auto& b = result.batch;
  // "opens": reset's "hello" (6 tokens, mask 0), then four turns of "go" (3 tokens,
  // mask 1) each answered by "ok" (3 tokens, mask 0).
  const auto& e = b.episodes[0];
  ASSERT_EQ(e.turns(), 4u);
  EXPECT_EQ(e.action_begin, (std::vector<std::int64_t>{6, 12, 18, 24}));
  EXPECT_EQ(e.observation_begin, (std::vector<std::int64_t>{9, 15, 21, 27}));
  ASSERT_EQ(b.length(0), 30u);
  for (std::size_t t = 0; t < 30; ++t) {
    bool action = false;
    std::size_t j = 0;
    for (std::size_t k = 0; k < e.turns(); ++k)
      if (t >= static_cast<std::size_t>(e.action_begin[k]) &&
          t < static_cast<std::size_t>(e.observation_begin[k])) {
        action = true;
        j = t - static_cast<std::size_t>(e.action_begin[k]);
      }
    EXPECT_EQ(b.loss_mask[t], action ? 1 : 0) << "token " << t;
    EXPECT_EQ(b.behaviour_log_probs[t], action ? scored_log_prob(j) : 0.0f) << "token " << t;
  }
  EXPECT_EQ(b.response_tokens(0)[0], observation_marker);
  EXPECT_EQ(b.response_tokens(0)[6], action_marker);
  // A done step's observation is not appended: nothing follows the last action.
  const auto& stop = b.episodes[1];
  EXPECT_EQ(stop.observation_begin.back(), static_cast<std::int64_t>(b.length(1)));
  // subset keeps each episode with its response.
  const auto kept = cr::subset_groups(b, std::vector<std::uint8_t>{0, 1});
  cr::validate_rollout_batch(kept, "subset");
  ASSERT_EQ(kept.episodes.size(), 1u);
  EXPECT_EQ(kept.episodes[0].action_begin, stop.action_begin);
  EXPECT_EQ(kept.episodes[0].reason, cr::end_reason::done);
}

// Observation tokens get no gradient: the loss over the episode's layout (its loss mask)
// does not move when an observation token's log-prob moves, and moves by the reported
// gradient when an action token's does (central differences).
TEST(EpisodeDriver, ObservationTokensGetNoGradientFiniteDifferences) {
  scripted_policy policy;
  const auto prompts = prompts_of({"opens"});
  const auto result = cr::run_episodes(policy, make_scripted, std::span<const cr::prompt>(prompts),
                                       1, {}, small_options(), 5);
  const auto& b = result.batch;
  const auto layout = b.layout();
  std::vector<double> logp(b.token_count()), advantages(b.token_count(), 0.7);
  for (std::size_t t = 0; t < logp.size(); ++t) logp[t] = -0.3 - 0.01 * static_cast<double>(t);
  const auto counts = cr::local_loss_counts(cr::exec::seq, layout);
  const auto normalizer = counts.normalizer(cr::loss_aggregation::token_mean);
  const auto loss_at = [&](const std::vector<double>& lp, std::vector<double>& grad) {
    return cr::reinforce_loss(cr::exec::seq, layout, {.log_probs = lp, .advantages = advantages},
                              grad, normalizer,
                              {.surrogate = cr::reinforce_surrogate::log_prob})
        .loss;
  };
  std::vector<double> grad(logp.size()), scratch(logp.size());
  (void)loss_at(logp, grad);
  std::size_t observations = 0, actions = 0;
  for (std::size_t t = 0; t < logp.size(); ++t) {
    const double h = 1e-6;
    auto up = logp, down = logp;
    up[t] += h;
    down[t] -= h;
    const double fd = (loss_at(up, scratch) - loss_at(down, scratch)) / (2 * h);
    if (b.loss_mask[t] == 0) {
      EXPECT_EQ(grad[t], 0.0) << "observation token " << t;
      EXPECT_EQ(fd, 0.0) << "observation token " << t;
      ++observations;
    } else {
      EXPECT_NEAR(fd, grad[t], 1e-8) << "action token " << t;
      EXPECT_NE(grad[t], 0.0);
      ++actions;
    }
  }
  EXPECT_EQ(observations, 18u);
  EXPECT_EQ(actions, 12u);
}

TEST(EpisodeDriver, DriftIsZeroForTheSamplersOwnLogProbsAndSeesOnlyActions) {
  scripted_policy policy;
  const auto prompts = prompts_of({"opens", "plain"});
  const auto result = cr::run_episodes(policy, make_scripted, std::span<const cr::prompt>(prompts),
                                       1, {}, small_options(), 9);
  const auto& b = result.batch;
  // The scripted trainer scores each action token as the sampler did.
  std::vector<float> trainer(b.token_count(), -9.0f);  // observations: anything
  for (std::size_t i = 0; i < b.response_count(); ++i)
    for (std::size_t k = 0; k < b.episodes[i].turns(); ++k)
      for (auto t = b.episodes[i].action_begin[k]; t < b.episodes[i].observation_begin[k]; ++t)
        trainer[static_cast<std::size_t>(b.token_offsets[i] + t)] = scored_log_prob(
            static_cast<std::size_t>(t - b.episodes[i].action_begin[k]));
  EXPECT_EQ(cr::log_prob_drift(b, trainer), 0.0);
  const auto second_action = static_cast<std::size_t>(b.token_offsets[1] + b.episodes[1].action_begin[1]);
  trainer[second_action] += 0.125f;
  EXPECT_DOUBLE_EQ(cr::log_prob_drift(b, trainer), 0.125);
  cr::testing::expect_error_naming(
      [&] { (void)cr::log_prob_drift(b, std::span<const float>(trainer).first(3)); },
      "trainer_log_probs");
}

TEST(EpisodeDriver, HugeObservationsAreCappedAndTheEpisodeGoesOn) {
  scripted_policy policy;
  const auto prompts = prompts_of({"flood"});
  auto options = small_options();
  options.context_budget = 200;
  options.observation_token_cap = 10;
  const auto result = cr::run_episodes(policy, make_scripted, std::span<const cr::prompt>(prompts),
                                       1, {}, options, 2);
  const auto& e = result.batch.episodes[0];
  EXPECT_EQ(e.reason, cr::end_reason::max_turns);
  for (std::size_t k = 0; k < e.turns(); ++k)
    EXPECT_EQ((k + 1 < e.turns() ? e.action_begin[k + 1] : static_cast<std::int64_t>(result.batch.length(0))) -
                  e.observation_begin[k],
              10);
}

TEST(EpisodeDriver, RefusesBadOptionsAndPolicyResultsByName) {
  scripted_policy policy;
  const auto prompts = prompts_of({"plain"});
  const std::span<const cr::prompt> view(prompts);
  auto options = small_options();
  options.max_turns = 0;
  cr::testing::expect_error_naming(
      [&] { (void)cr::run_episodes(policy, make_scripted, view, 1, {}, options, 0); },
      "episode_options.max_turns");
  options = small_options();
  options.workers = 0;
  cr::testing::expect_error_naming(
      [&] { (void)cr::run_episodes(policy, make_scripted, view, 1, {}, options, 0); },
      "episode_options.workers");
  cr::testing::expect_error_naming(
      [&] { (void)cr::run_episodes(policy, make_scripted, view, 0, {}, small_options(), 0); },
      "group_size");
  struct overlong_policy : scripted_policy {
    std::vector<cr::turn_output> continue_generation(std::span<const cr::turn_request> requests,
                                                     const cr::sampling_params&) {
      std::vector<cr::turn_output> out(requests.size());
      out[0].tokens.assign(requests[0].max_tokens + 1, 7);
      out[0].log_probs.assign(requests[0].max_tokens + 1, -1.0f);
      return out;
    }
  } overlong;
  cr::testing::expect_error_naming(
      [&] { (void)cr::run_episodes(overlong, make_scripted, view, 1, {}, small_options(), 0); },
      "policy.continue_generation result[0]");
  // An episode whose turn boundaries run past its tokens is refused by index.
  auto batch = cr::run_episodes(policy, make_scripted, view, 1, {}, small_options(), 0).batch;
  batch.episodes[0].observation_begin.back() = 1000;
  cr::testing::expect_error_naming([&] { cr::validate_rollout_batch(batch, "stage"); },
                                   "stage result .episodes[0]");
}

}  // namespace episode_driver_cases
}  // namespace
