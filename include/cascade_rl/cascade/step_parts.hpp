#pragma once
// Pieces shared by the ready-made stages' steps: sample metrics, the request of a step,
// and the timing helper.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl::detail {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point start) {
  return std::chrono::duration<double>(clock::now() - start).count();
}

// Draws the prompts of a step from the source and generates their responses; the
// sampling seed comes from the cascade's generator.
template <Policy P, PromptSource Source>
rollout_batch generate_step_batch(P& policy, Source& source, const stage_config& config,
                                  rng_type& rng, std::vector<std::size_t>& indices) {
  indices = source.next(config.prompts_per_step, rng);
  std::vector<prompt> prompts;
  prompts.reserve(indices.size());
  for (std::size_t i : indices) prompts.push_back(source.at(i));
  const generation_request request{config.group_size, config.sampling, rng()};
  rollout_batch batch = policy.generate(std::span<const prompt>(prompts), request);
  validate_rollout_batch(batch, "policy.generate", prompts.size(), config.group_size);
  return batch;
}

// Reward mean, accuracy and response-length statistics over the whole sampled batch.
inline void fill_sample_metrics(step_metrics& m, const rollout_batch& batch,
                                std::span<const float> rewards, double success_threshold) {
  m.prompts = batch.prompt_count();
  m.responses = batch.response_count();
  if (m.responses == 0) return;
  double sum = 0.0, length_sum = 0.0;
  std::size_t solved = 0, truncated = 0;
  m.length_min = static_cast<std::int64_t>(batch.length(0));
  m.length_max = m.length_min;
  for (std::size_t i = 0; i < m.responses; ++i) {
    if (!rewards.empty()) {
      sum += rewards[i];
      solved += rewards[i] >= success_threshold;
    }
    const auto n = static_cast<std::int64_t>(batch.length(i));
    length_sum += static_cast<double>(n);
    m.length_min = std::min(m.length_min, n);
    m.length_max = std::max(m.length_max, n);
    truncated += batch.finish_reasons[i] == finish_reason::truncated;
  }
  const auto count = static_cast<double>(m.responses);
  m.reward_mean = sum / count;
  m.accuracy = static_cast<double>(solved) / count;
  m.length_mean = length_sum / count;
  m.truncated_fraction = static_cast<double>(truncated) / count;
}

// Tells the curriculum which prompts every response solved.
template <PromptSource Source>
void record_curriculum(Source& source, const rollout_batch& batch, std::span<const float> rewards,
                       const std::vector<std::size_t>& indices, double success_threshold) {
  for (std::size_t g = 0; g < batch.prompt_count(); ++g) {
    bool all = true;
    for (auto i = static_cast<std::size_t>(batch.group_offsets[g]);
         i < static_cast<std::size_t>(batch.group_offsets[g + 1]); ++i)
      all = all && rewards[i] >= success_threshold;
    source.record(indices[g], all);
  }
}

}  // namespace cascade_rl::detail
