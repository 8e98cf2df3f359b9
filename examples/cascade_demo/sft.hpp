#pragma once
// The supervised warm start before the cascade: cross-entropy on demonstrations,
// written in the library's currency. The loss -1/N sum_t log pi(y_t) over the N tokens
// of a batch has dL/dlogp_t = -1/N, so SFT is apply_gradient with a constant seed.

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <cascade_rl/cascade/rollout_batch.hpp>

#include "tasks.hpp"

namespace demo {

// A batch holding the demonstrations as responses (one per prompt), with a loss mask
// when a demonstration has one (an SWE episode's observations are not trained on).
inline cr::rollout_batch demonstration_batch(const std::vector<const task*>& tasks) {
  cr::rollout_batch batch;
  bool masked = false;
  for (const task* t : tasks) masked = masked || !t->demonstration_mask.empty();
  for (const task* t : tasks) {
    batch.add_prompt(t->prompt);
    const std::vector<float> zeros(t->demonstration.size(), 0.0f);
    batch.add_response(t->demonstration, zeros, cr::finish_reason::stopped, decode(t->demonstration));
    if (!masked) continue;
    if (t->demonstration_mask.empty())
      batch.loss_mask.insert(batch.loss_mask.end(), t->demonstration.size(), 1);
    else
      batch.loss_mask.insert(batch.loss_mask.end(), t->demonstration_mask.begin(), t->demonstration_mask.end());
  }
  return batch;
}

// The tokens a demonstration batch trains on.
inline std::size_t trained_tokens(const cr::rollout_batch& batch) {
  if (batch.loss_mask.empty()) return batch.token_count();
  std::size_t n = 0;
  for (const std::uint8_t m : batch.loss_mask) n += m != 0;
  return n;
}

// One SFT step on `batch_size` demonstrations drawn from `pool`; returns the batch. The
// loss is the mean over the trained tokens (masked ones get no gradient).
template <class Policy>
cr::rollout_batch sft_step(Policy& policy, const std::vector<task>& pool, std::size_t batch_size,
                           double lr, std::mt19937_64& rng) {
  std::vector<const task*> picked;
  for (std::size_t i = 0; i < batch_size; ++i) picked.push_back(&pool[rng() % pool.size()]);
  cr::rollout_batch batch = demonstration_batch(picked);
  const std::vector<float> dlogp(batch.token_count(), -1.0f / static_cast<float>(trained_tokens(batch)));
  policy.apply_gradient(batch, std::span<const float>(dlogp), lr);
  return batch;
}

// Mean negative log-likelihood per trained token of a batch of demonstrations.
template <class Policy>
double demonstration_nll(const Policy& policy, const cr::rollout_batch& batch) {
  std::vector<float> logp(batch.token_count());
  policy.log_probs(batch, std::span<float>(logp));
  double sum = 0;
  for (std::size_t t = 0; t < logp.size(); ++t)
    if (batch.loss_mask.empty() || batch.loss_mask[t] != 0) sum -= logp[t];
  return sum / static_cast<double>(trained_tokens(batch));
}

}  // namespace demo
