#pragma once
// A GRPO stage (IF-RL, multi-domain RL, RLHF with a reward model, code RL, ...). One step:
//   prompts from the source (curriculum) -> policy.generate (G per prompt)
//   -> rewards on the worker pool (verification time measured)
//   -> filters: overlong (drop / mask / soft penalty), then zero-variance groups
//   -> per-sequence advantages (the estimator) -> tokens
//   -> loss and dL/dlogp with the step's global normaliser -> policy.apply_gradient
//   -> metrics.
// If the filters leave nothing, the step takes no optimizer step (metrics.updates = 0).
// Data-parallel (step_context::comm): each rank generates, scores and filters its shard
// of the prompts (whole groups); metrics, the curriculum, advantages and normalisers
// come from the whole step (see step_parts.hpp, update.hpp).

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/estimators.hpp"
#include "cascade_rl/cascade/evaluation.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/prompt_pool.hpp"
#include "cascade_rl/cascade/rewards.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_parts.hpp"
#include "cascade_rl/cascade/update.hpp"

namespace cascade_rl {

template <PromptSource Source, Reward R, AdvantageEstimator E = grpo_estimator>
class grpo_stage {
 public:
  grpo_stage(stage_config config, Source source, R reward, E estimator = {})
      : config_(std::move(config)), source_(std::move(source)), reward_(std::move(reward)),
        estimator_(std::move(estimator)) {}

  static constexpr bool data_parallel = true;

  [[nodiscard]] const stage_config& config() const { return config_; }
  [[nodiscard]] stage_config& config() { return config_; }
  [[nodiscard]] const Source& source() const { return source_; }

  void validate() const { detail::validate_grpo_config(config_); }

  [[nodiscard]] nlohmann::json state() const { return {{"source", source_.state()}}; }
  void load_state(const nlohmann::json& state) {
    if (!state.is_object() || !state.contains("source"))
      detail::fail("stage '" + config_.name + "' state", "has no 'source' entry");
    source_.load_state(state.at("source"));
  }

  template <Policy P>
  std::vector<domain_score> evaluate(P& policy, std::uint64_t seed, communicator_ref comm = {}) {
    return evaluate_sets(policy, reward_, config_.evals, config_.eval_sampling, seed,
                         config_.reward_workers, comm);
  }

  template <Policy P>
  step_metrics step(P& policy, step_context<snapshot_t<P>>& context) {
    communicator_ref comm = context.comm;
    step_metrics m;
    auto start = detail::clock::now();
    std::vector<std::size_t> indices;
    rollout_batch batch =
        detail::generate_step_batch(policy, source_, config_, context.rng, indices, comm);
    m.generation_seconds = detail::seconds_since(start);

    reward_result scored = score_rewards(reward_, batch, config_.reward_workers);
    m.reward_seconds = scored.seconds;
    std::vector<float>& rewards = scored.rewards;
    {
      const detail::step_samples all =
          detail::gather_samples(comm, batch, std::span<const float>(rewards), true);
      detail::fill_sample_metrics(m, indices.size(), all, config_.success_threshold);
      detail::record_curriculum(source_, std::span<const float>(all.rewards), indices,
                                config_.group_size, config_.success_threshold);
    }

    start = detail::clock::now();
    {
      std::vector<std::uint8_t> flags(batch.prompt_count());
      if (!flags.empty())
        zero_variance_groups(exec::par, batch.groups(), rewards, std::span<std::uint8_t>(flags));
      std::uint64_t zero = 0;
      for (auto f : flags) zero += f;
      m.zero_variance_groups = static_cast<std::size_t>(sum_counts(comm, zero));
      m.zero_variance_fraction = static_cast<double>(m.zero_variance_groups) /
                                 static_cast<double>(m.prompts);
    }
    filter(batch, rewards, m, comm);
    if (sum_counts(comm, batch.response_count()) == 0) {
      m.update_seconds = detail::seconds_since(start);
      return m;
    }

    std::vector<float> advantages(batch.response_count());
    if (comm.size() == 1)
      estimator_(std::span<const float>(rewards), batch.groups(), std::span<float>(advantages));
    else
      detail::per_sequence_of_batch(comm, std::span<const float>(rewards), batch,
                                    std::span<float>(advantages),
                                    [&](auto all, const group_layout& groups, auto out) {
                                      estimator_(all, groups, out);
                                    });
    detail::update_totals totals;
    if (!std::holds_alternative<on_policy_update>(config_.update.rule)) {
      std::visit(
          [&]<class Rule>(const Rule& rule) {
            if constexpr (mini_batch_rule<Rule>)
              detail::mini_batch_steps(policy, batch, std::span<const float>(advantages), rule,
                                       config_, context.lr, context.rng, totals, comm);
          },
          config_.update.rule);
    } else {
      const token_layout layout = batch.layout();
      std::vector<float> token_advantages(batch.token_count());
      if (batch.response_count() != 0)
        broadcast_to_tokens(exec::par, layout, advantages, token_advantages);
      totals.add(comm,
                 detail::on_policy_step(policy, batch, std::span<const float>(token_advantages),
                                        std::get<on_policy_update>(config_.update.rule), config_,
                                        context.lr, comm));
    }
    totals.into(m);
    m.update_seconds = detail::seconds_since(start);
    return m;
  }

 private:
  // Applies the overlong and zero-variance filters, replacing batch and rewards by what
  // is kept.
  // Data-parallel: each rank filters its groups; the counts are summed over ranks.
  void filter(rollout_batch& batch, std::vector<float>& rewards, step_metrics& m,
              communicator_ref comm) const {
    const std::size_t groups_before = batch.prompt_count();
    const std::size_t responses_before = batch.response_count();
    if (config_.filters.overlong && batch.response_count() > 0) {
      const overlong_options& options = *config_.filters.overlong;
      const std::vector<std::int64_t> lengths = batch.lengths();
      const std::vector<std::uint8_t> truncated = batch.truncated_flags();
      if (options.mode == overlong_mode::mask && batch.loss_mask.empty())
        batch.loss_mask.assign(batch.token_count(), 1);
      const overlong_report report = apply_overlong(
          exec::par, std::span<const std::int64_t>(lengths), std::span<const std::uint8_t>(truncated),
          batch.groups(), batch.layout(), std::span<std::uint8_t>(batch.loss_mask),
          std::span<float>(rewards), options);
      m.overlong = report.overlong;
      if (options.mode == overlong_mode::drop) keep(batch, rewards, report.selection);
    }
    if (config_.filters.drop_zero_variance_groups && batch.response_count() > 0)
      keep(batch, rewards, drop_zero_variance_groups(exec::par, batch.groups(), rewards));
    std::uint64_t counts[3] = {groups_before - batch.prompt_count(),
                               responses_before - batch.response_count(), m.overlong};
    comm.all_reduce(std::span<std::uint64_t>(counts), reduce_op::sum);
    m.filtered_groups = static_cast<std::size_t>(counts[0]);
    m.filtered_sequences = static_cast<std::size_t>(counts[1]);
    m.overlong = static_cast<std::size_t>(counts[2]);
  }

  static void keep(rollout_batch& batch, std::vector<float>& rewards, const group_selection& selection) {
    std::vector<float> kept(selection.kept_sequences.size());
    gather_sequences(exec::seq, selection, rewards, kept);
    batch = subset(batch, selection);
    rewards = std::move(kept);
  }

  stage_config config_;
  Source source_;
  R reward_;
  E estimator_;
};

// A GRPO stage over a prompt source (a prompt_pool, or any PromptSource).
template <PromptSource Source, Reward R, AdvantageEstimator E = grpo_estimator>
[[nodiscard]] grpo_stage<Source, R, E> make_grpo_stage(stage_config config, Source source, R reward,
                                                       E estimator = {}) {
  return grpo_stage<Source, R, E>(std::move(config), std::move(source), std::move(reward),
                                  std::move(estimator));
}

}  // namespace cascade_rl
