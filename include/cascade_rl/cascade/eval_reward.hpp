#pragma once
// A stage that evaluates with a reward of its own. By default a stage scores its
// evaluation sets with its training reward; when the two differ (RLHF trains against a
// learned reward model but should be judged by held-out preferences, a verifier is
// relaxed for training but strict for reporting), wrap the stage:
//
//   auto rlhf = cr::with_eval_reward(cr::make_grpo_stage(config, pool, reward_model),
//                                    human_preference);
//
// Training (step) is the wrapped stage's, unchanged; evaluate() scores config().evals
// with the evaluation reward, with the stage's eval_sampling and reward_workers, sharded
// over the ranks like a GRPO stage's evaluation. Everything else (config, validation,
// checkpoint state, the teachers MOPD needs, data-parallel support) is the wrapped
// stage's. A stage that refuses evaluation sets without a training reward (a pure
// distillation MOPD stage) still refuses them when wrapped.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/evaluation.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl {

template <stage_shape S, Reward R>
class evaluated_stage {
 public:
  evaluated_stage(S stage, R eval_reward) : stage_(std::move(stage)), eval_reward_(std::move(eval_reward)) {}

  static constexpr bool data_parallel = data_parallel_stage<S>;

  [[nodiscard]] const stage_config& config() const { return stage_.config(); }
  [[nodiscard]] stage_config& config()
    requires requires(S& s) { { s.config() } -> std::same_as<stage_config&>; }
  {
    return stage_.config();
  }
  void validate() const { stage_.validate(); }
  [[nodiscard]] nlohmann::json state() const { return stage_.state(); }
  void load_state(const nlohmann::json& state) { stage_.load_state(state); }

  [[nodiscard]] std::vector<std::string> required_teachers() const
    requires needs_teachers<S>
  {
    return stage_.required_teachers();
  }

  template <Policy P>
    requires Stage<S, P>
  step_metrics step(P& policy, step_context<snapshot_t<P>>& context) {
    return stage_.step(policy, context);
  }

  template <Policy P>
  std::vector<domain_score> evaluate(P& policy, std::uint64_t seed, communicator_ref comm = {}) {
    const stage_config& c = stage_.config();
    return evaluate_sets(policy, eval_reward_, c.evals, c.eval_sampling, seed, c.reward_workers, comm);
  }

  [[nodiscard]] S& stage() { return stage_; }
  [[nodiscard]] const S& stage() const { return stage_; }
  [[nodiscard]] const R& eval_reward() const { return eval_reward_; }

 private:
  S stage_;
  R eval_reward_;
};

// The stage, evaluated by `eval_reward` instead of its training reward.
template <stage_shape S, Reward R>
[[nodiscard]] evaluated_stage<S, R> with_eval_reward(S stage, R eval_reward) {
  return evaluated_stage<S, R>(std::move(stage), std::move(eval_reward));
}

}  // namespace cascade_rl
