#pragma once
// An agentic stage (SWE RL, multi-turn tool calling): GRPO over multi-turn episodes. One
// step:
//   prompts from the source (curriculum) -> run_episodes (G episodes per prompt, turn by
//   turn: one batched continue_generation per turn, the environments' steps on
//   reward_workers threads; episode_driver.hpp) -> each episode's outcome is its reward
//   -> the same filters, advantages and update rule as grpo_stage (grpo_update_phase.hpp)
//   on the trajectories: actions carry the loss (mask 1, the sampler's log-probs),
//   observations carry none (mask 0).
// The step reports its episodes (turns, end reasons, the sampler/trainer drift on the
// actions) beside the usual metrics; response lengths count the actions only. Its
// evaluation runs episodes too (eval_sampling, samples_per_prompt per prompt), a
// domain's score being the mean outcome.
//
// Data-parallel (step_context::comm): each rank runs the episodes of its shard of the
// prompts, numbered as in a single process (so each episode has the same seeds and
// environment), and the rest is grpo_stage's. An episode ended by its time budget is
// the one thing a rerun (or a resumed run) need not repeat bit for bit: it depends on
// how fast the environment ran.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/environment.hpp"
#include "cascade_rl/cascade/episode_driver.hpp"
#include "cascade_rl/cascade/estimators.hpp"
#include "cascade_rl/cascade/grpo_update_phase.hpp"
#include "cascade_rl/cascade/log_prob_drift.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/prompt_pool.hpp"
#include "cascade_rl/cascade/prompt_stage.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_parts.hpp"
#include "cascade_rl/cascade/turn_policy.hpp"

namespace cascade_rl {

// The driver's options of a stage's episodes; the environments step on reward_workers
// threads.
[[nodiscard]] inline episode_options episode_options_of(const stage_config& config) {
  const episode_settings& e = config.episodes;
  return {.max_turns = e.max_turns,
          .context_budget = e.context_budget,
          .max_turn_tokens = e.max_turn_tokens,
          .observation_token_cap = e.observation_token_cap,
          .observation_text_cap = e.observation_text_cap,
          .episode_time_budget = std::chrono::milliseconds(e.episode_time_budget_ms),
          .workers = config.reward_workers};
}

namespace detail {

// What a stage checks of its episode settings, pointing at the config's fields.
inline void validate_episode_settings(const stage_config& c, std::string_view at = {}) {
  const stage_where where{c, at};
  check_nested(where("episodes"), "episode_options.",
               [&] { validate_episode_options(episode_options_of(c)); });
  if (c.episodes.max_turn_tokens > c.episodes.context_budget)
    fail(where("episodes.max_turn_tokens"),
         "is " + std::to_string(c.episodes.max_turn_tokens) + ", more than context_budget = " +
             std::to_string(c.episodes.context_budget));
}

// The episodes' turns, end reasons and drift over every rank.
template <Policy P>
episode_metrics measure_episodes(const P& policy, const rollout_batch& batch,
                                 communicator_ref comm) {
  std::uint64_t counts[end_reason_count + 1] = {};
  for (const episode_summary& e : batch.episodes) {
    counts[static_cast<std::size_t>(e.reason)] += 1;
    counts[end_reason_count] += e.turns();
  }
  comm.all_reduce(std::span<std::uint64_t>(counts), reduce_op::sum);
  episode_metrics m;
  std::uint64_t episodes = 0;
  for (std::size_t r = 0; r < end_reason_count; ++r) {
    m.end_reasons[r] = static_cast<std::size_t>(counts[r]);
    episodes += counts[r];
  }
  m.turns_mean = episodes == 0 ? 0.0
                               : static_cast<double>(counts[end_reason_count]) /
                                     static_cast<double>(episodes);
  double drift = 0.0;
  if (batch.token_count() != 0) {
    std::vector<float> trainer(batch.token_count());
    policy.log_probs(batch, std::span<float>(trainer));
    drift = log_prob_drift(batch, std::span<const float>(trainer));
  }
  comm.all_reduce(std::span<double>(&drift, 1), reduce_op::max);
  m.log_prob_drift = drift;
  return m;
}

}  // namespace detail

template <PromptSource Source, EnvironmentFactory F, AdvantageEstimator E = grpo_estimator>
class agentic_stage : public detail::prompt_stage<Source> {
  using base = detail::prompt_stage<Source>;
  using base::config_;
  using base::source_;

 public:
  agentic_stage(stage_config config, Source source, F make_environment, E estimator = {})
      : base(std::move(config), std::move(source)),
        make_environment_(std::move(make_environment)), estimator_(std::move(estimator)) {}

  void validate() const {
    detail::validate_grpo_config(config_);
    detail::validate_episode_settings(config_);
  }

  // Each evaluation set's score: the mean outcome of samples_per_prompt episodes per
  // prompt, sampled with eval_sampling; each rank runs its shard of the prompts.
  template <Policy P>
    requires TurnPolicy<P>
  std::vector<domain_score> evaluate(P& policy, std::uint64_t seed, communicator_ref comm = {}) {
    std::vector<domain_score> scores;
    const episode_options options = episode_options_of(config_);
    for (std::size_t e = 0; e < config_.evals.size(); ++e) {
      const eval_set& set = config_.evals[e];
      const shard_range shard = shard_of(set.prompts.size(), comm.rank(), comm.size());
      std::vector<float> local;
      if (!shard.empty())
        local = run_episodes(policy, make_environment_,
                             std::span<const prompt>(set.prompts).subspan(shard.begin, shard.size()),
                             set.samples_per_prompt, config_.eval_sampling, options, seed + e,
                             shard.begin * set.samples_per_prompt)
                    .rewards;
      const std::vector<float> outcomes = all_gather_varying(comm, std::span<const float>(local));
      double sum = 0.0;
      for (const float x : outcomes) sum += x;
      scores.push_back(
          {set.domain, outcomes.empty() ? 0.0 : sum / static_cast<double>(outcomes.size())});
    }
    return scores;
  }

  template <Policy P>
    requires TurnPolicy<P>
  step_metrics step(P& policy, step_context<snapshot_t<P>>& context) {
    communicator_ref comm = context.comm;
    step_metrics m;
    const auto start = detail::clock::now();
    // The prompts and the episodes' seed, drawn on every rank from the shared generator
    // (in grpo_stage's order: the prompts, then the seed).
    std::vector<std::size_t> indices;
    const shard_range shard =
        detail::draw_step_prompts(source_, config_, context.rng, indices, comm);
    const std::vector<prompt> prompts = detail::shard_prompts(source_, indices, shard);
    const std::uint64_t seed = context.rng();
    episode_batch episodes;
    if (!prompts.empty()) {
      episodes = run_episodes(policy, make_environment_, std::span<const prompt>(prompts),
                              config_.group_size, config_.sampling, episode_options_of(config_),
                              seed, shard.begin * config_.group_size);
      validate_rollout_batch(episodes.batch, "run_episodes", prompts.size(), config_.group_size);
    }
    // The environments' steps and outcomes run inside the episodes: their time is
    // generation time here.
    m.generation_seconds = detail::seconds_since(start);
    rollout_batch& batch = episodes.batch;
    std::vector<float>& rewards = episodes.rewards;
    m.episodes = detail::measure_episodes(policy, batch, comm);
    detail::record_rewarded_samples(source_, batch, std::span<const float>(rewards), indices,
                                    config_, m, comm);
    detail::grpo_update_phase(policy, batch, rewards, config_, estimator_, context, m);
    return m;
  }

 private:
  F make_environment_;
  E estimator_;
};

// An agentic stage over a prompt source and an environment factory (one environment per
// episode; environment.hpp).
template <PromptSource Source, EnvironmentFactory F, AdvantageEstimator E = grpo_estimator>
[[nodiscard]] agentic_stage<Source, F, E> make_agentic_stage(stage_config config, Source source,
                                                             F make_environment, E estimator = {}) {
  return agentic_stage<Source, F, E>(std::move(config), std::move(source),
                                     std::move(make_environment), std::move(estimator));
}

}  // namespace cascade_rl
