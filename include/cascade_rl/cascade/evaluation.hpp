#pragma once
// Scores of evaluation sets: the mean reward over each set's responses, sampled with
// the stage's eval_sampling from a fixed seed (evaluation never draws from the
// training generator, so evaluating more often does not change training).
// Data-parallel: rank r generates and scores shard_of(set, r, R) of each set's prompts;
// the rewards are gathered in rank order and summed as one process sums them, so every
// rank returns the single-process scores (given a policy that samples prompt j from
// prompt_seed(request, j)).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rewards.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/comm/collectives.hpp"

namespace cascade_rl {

template <Policy P, Reward R>
[[nodiscard]] std::vector<domain_score> evaluate_sets(P& policy, const R& reward,
                                                      const std::vector<eval_set>& sets,
                                                      const sampling_params& sampling,
                                                      std::uint64_t seed, std::size_t workers,
                                                      communicator_ref comm = {}) {
  std::vector<domain_score> scores;
  for (std::size_t e = 0; e < sets.size(); ++e) {
    const eval_set& set = sets[e];
    const shard_range shard = shard_of(set.prompts.size(), comm.rank(), comm.size());
    const generation_request request{set.samples_per_prompt, sampling, seed + e, shard.begin};
    std::vector<float> local;
    if (!shard.empty()) {
      const auto prompts = std::span<const prompt>(set.prompts).subspan(shard.begin, shard.size());
      const rollout_batch batch = policy.generate(prompts, request);
      validate_rollout_batch(batch, "policy.generate (evaluation)", prompts.size(),
                             set.samples_per_prompt);
      local = score_rewards(reward, batch, workers).rewards;
    }
    const std::vector<float> rewards = all_gather_varying(comm, std::span<const float>(local));
    double sum = 0.0;
    for (float x : rewards) sum += x;
    scores.push_back({set.domain, rewards.empty() ? 0.0 : sum / static_cast<double>(rewards.size())});
  }
  return scores;
}

}  // namespace cascade_rl
