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
#include "cascade_rl/cascade/grpo_update_phase.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/prompt_pool.hpp"
#include "cascade_rl/cascade/prompt_stage.hpp"
#include "cascade_rl/cascade/rewards.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_parts.hpp"
#include "cascade_rl/cascade/update.hpp"

namespace cascade_rl {

template <PromptSource Source, Reward R, AdvantageEstimator E = grpo_estimator>
class grpo_stage : public detail::prompt_stage<Source> {
  using base = detail::prompt_stage<Source>;
  using base::config_;
  using base::source_;

 public:
  grpo_stage(stage_config config, Source source, R reward, E estimator = {})
      : base(std::move(config), std::move(source)), reward_(std::move(reward)),
        estimator_(std::move(estimator)) {}

  void validate() const {
    detail::validate_grpo_config(config_);
    detail::refuse_end_reason_filter(config_);
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
    detail::record_rewarded_samples(source_, batch, std::span<const float>(rewards), indices,
                                    config_, m, comm);

    detail::grpo_update_phase(policy, batch, rewards, config_, estimator_, context, m);
    return m;
  }

 private:
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
