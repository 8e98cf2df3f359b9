#pragma once
// Scores of evaluation sets: the mean reward over each set's responses, sampled with
// the stage's eval_sampling from a fixed seed (evaluation never draws from the
// training generator, so evaluating more often does not change training).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rewards.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl {

template <Policy P, Reward R>
[[nodiscard]] std::vector<domain_score> evaluate_sets(P& policy, const R& reward,
                                                      const std::vector<eval_set>& sets,
                                                      const sampling_params& sampling,
                                                      std::uint64_t seed, std::size_t workers) {
  std::vector<domain_score> scores;
  for (std::size_t e = 0; e < sets.size(); ++e) {
    const eval_set& set = sets[e];
    const generation_request request{set.samples_per_prompt, sampling, seed + e};
    const rollout_batch batch =
        policy.generate(std::span<const prompt>(set.prompts), request);
    validate_rollout_batch(batch, "policy.generate (evaluation)", set.prompts.size(),
                           set.samples_per_prompt);
    const reward_result r = score_rewards(reward, batch, workers);
    double sum = 0.0;
    for (float x : r.rewards) sum += x;
    scores.push_back({set.domain, r.rewards.empty() ? 0.0 : sum / static_cast<double>(r.rewards.size())});
  }
  return scores;
}

}  // namespace cascade_rl
