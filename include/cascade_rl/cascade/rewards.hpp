#pragma once
// Scoring a rollout batch with a Reward: a batched reward is called once; a
// per-response reward runs on the bounded worker pool. The wall time of verification
// is measured for the metrics. Non-finite rewards are refused, naming the response.

#include <chrono>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/worker_pool.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

struct reward_result {
  std::vector<float> rewards;  // one per response
  double seconds = 0.0;        // wall time of verification
};

template <Reward R>
[[nodiscard]] reward_result score_rewards(const R& reward, const rollout_batch& batch,
                                          std::size_t workers) {
  const auto start = std::chrono::steady_clock::now();
  reward_result result;
  result.rewards.assign(batch.response_count(), 0.0f);
  if constexpr (batched_reward<R>) {
    reward.score_batch(batch, std::span<float>(result.rewards));
  } else {
    detail::run_on_workers(batch.response_count(), workers, [&](std::size_t i) {
      const response_view view{batch.prompts[batch.group_of(i)], batch.response_tokens(i),
                               batch.texts[i], batch.finish_reasons[i], i};
      result.rewards[i] = static_cast<float>(reward(view));
    });
  }
  for (std::size_t i = 0; i < result.rewards.size(); ++i)
    if (!std::isfinite(result.rewards[i])) {
      const prompt& p = batch.prompts[batch.group_of(i)];
      detail::fail_at("reward", i, std::string(std::isnan(result.rewards[i]) ? "is NaN" : "is infinite") +
                                       " (prompt id " + std::to_string(p.id) + ", domain '" +
                                       p.domain + "')");
    }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace cascade_rl
