#pragma once
// Pieces shared by the ready-made stages' steps: sample metrics, the request of a step,
// and the timing helper. Data-parallel: every rank draws the step's prompts from the
// shared generator and generates its shard (data_parallel.hpp); what needs the whole
// batch (sample metrics, the curriculum, advantages) sees it gathered in rank order,
// which is the single-process order.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/comm/collectives.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/distributed/sequences_across_ranks.hpp"

namespace cascade_rl::detail {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point start) {
  return std::chrono::duration<double>(clock::now() - start).count();
}

// A step's prompts, drawn on every rank from the shared generator (indices: all of
// them), and this rank's shard of them.
template <PromptSource Source>
shard_range draw_step_prompts(Source& source, const stage_config& config, rng_type& rng,
                              std::vector<std::size_t>& indices, communicator_ref comm) {
  indices = source.next(config.prompts_per_step, rng);
  return shard_of(indices.size(), comm.rank(), comm.size());
}
template <PromptSource Source>
std::vector<prompt> shard_prompts(const Source& source, const std::vector<std::size_t>& indices,
                                  const shard_range& shard) {
  std::vector<prompt> prompts;
  prompts.reserve(shard.size());
  for (std::size_t k = shard.begin; k < shard.end; ++k) prompts.push_back(source.at(indices[k]));
  return prompts;
}

// Draws the prompts of a step from the source (indices: all of them, on every rank) and
// generates the responses of this rank's shard; the sampling seed comes from the
// cascade's generator, request.first_prompt says where the shard starts.
template <Policy P, PromptSource Source>
rollout_batch generate_step_batch(P& policy, Source& source, const stage_config& config,
                                  rng_type& rng, std::vector<std::size_t>& indices,
                                  communicator_ref comm = {}) {
  const shard_range shard = draw_step_prompts(source, config, rng, indices, comm);
  const std::vector<prompt> prompts = shard_prompts(source, indices, shard);
  const generation_request request{config.group_size, config.sampling, rng(), shard.begin};
  if (prompts.empty()) return {};  // more ranks than prompts: this one sits the step out
  rollout_batch batch = policy.generate(std::span<const prompt>(prompts), request);
  validate_rollout_batch(batch, "policy.generate", prompts.size(), config.group_size);
  return batch;
}

// Per-response values of the whole step, in global order (rank order).
struct step_samples {
  std::vector<float> rewards;          // empty when the stage has no reward
  std::vector<std::int64_t> lengths;
  std::vector<std::uint8_t> truncated;
};

template <Communicator C>
[[nodiscard]] step_samples gather_samples(C& comm, const rollout_batch& batch,
                                          std::span<const float> rewards, bool with_rewards) {
  step_samples all;
  if (with_rewards) all.rewards = all_gather_varying(comm, rewards);
  const std::vector<std::int64_t> lengths = batch.lengths();
  const std::vector<std::uint8_t> truncated = batch.truncated_flags();
  all.lengths = all_gather_varying(comm, std::span<const std::int64_t>(lengths));
  all.truncated = all_gather_varying(comm, std::span<const std::uint8_t>(truncated));
  return all;
}

// Reward mean, accuracy and response-length statistics over the whole sampled step.
inline void fill_sample_metrics(step_metrics& m, std::size_t prompts, const step_samples& all,
                                double success_threshold) {
  m.prompts = prompts;
  m.responses = all.lengths.size();
  if (m.responses == 0) return;
  double sum = 0.0, length_sum = 0.0;
  std::size_t solved = 0, truncated = 0;
  m.length_min = all.lengths[0];
  m.length_max = m.length_min;
  for (std::size_t i = 0; i < m.responses; ++i) {
    if (!all.rewards.empty()) {
      sum += all.rewards[i];
      solved += all.rewards[i] >= success_threshold;
    }
    const std::int64_t n = all.lengths[i];
    length_sum += static_cast<double>(n);
    m.length_min = std::min(m.length_min, n);
    m.length_max = std::max(m.length_max, n);
    truncated += all.truncated[i] != 0;
  }
  const auto count = static_cast<double>(m.responses);
  m.reward_mean = sum / count;
  m.accuracy = static_cast<double>(solved) / count;
  m.length_mean = length_sum / count;
  m.truncated_fraction = static_cast<double>(truncated) / count;
}

// Tells the curriculum which prompts every response solved; rewards: the whole step's,
// group_size per prompt of `indices` (every rank records every prompt, so the sources
// of all ranks stay equal).
template <PromptSource Source>
void record_curriculum(Source& source, std::span<const float> rewards,
                       const std::vector<std::size_t>& indices, std::size_t group_size,
                       double success_threshold) {
  for (std::size_t g = 0; g < indices.size(); ++g) {
    bool all = true;
    for (std::size_t i = g * group_size; i < (g + 1) * group_size; ++i)
      all = all && rewards[i] >= success_threshold;
    source.record(indices[g], all);
  }
}

// The sample metrics of a rewarded step (over every rank) and the curriculum's record of
// which prompts every response solved.
template <PromptSource Source>
void record_rewarded_samples(Source& source, const rollout_batch& batch,
                             std::span<const float> rewards,
                             const std::vector<std::size_t>& indices, const stage_config& config,
                             step_metrics& m, communicator_ref comm) {
  const step_samples all = gather_samples(comm, batch, rewards, true);
  fill_sample_metrics(m, indices.size(), all, config.success_threshold);
  record_curriculum(source, std::span<const float>(all.rewards), indices, config.group_size,
                    config.success_threshold);
}

// A stage's checkpointed state: its prompt source's.
template <PromptSource Source>
[[nodiscard]] nlohmann::json source_state(const Source& source) {
  return {{"source", source.state()}};
}
template <PromptSource Source>
void load_source_state(Source& source, const nlohmann::json& state, const std::string& stage) {
  if (!state.is_object() || !state.contains("source"))
    fail("stage '" + stage + "' state", "has no 'source' entry");
  source.load_state(state.at("source"));
}

// A whole-batch per-sequence algorithm (an advantage estimator) on a batch sharded by
// whole groups: every rank runs `whole(all_values, all_groups, all_out)` on the
// gathered batch (so estimators that look across groups see the single-process batch)
// and keeps its slice.
template <Communicator C, class Whole>
void per_sequence_of_batch(C& comm, std::span<const float> local_values,
                           const rollout_batch& local, std::span<float> local_out, Whole&& whole) {
  std::vector<std::int64_t> sizes(local.prompt_count());
  for (std::size_t g = 0; g < sizes.size(); ++g)
    sizes[g] = local.group_offsets[g + 1] - local.group_offsets[g];
  const std::vector<std::int64_t> all_sizes = all_gather_varying(comm, std::span<const std::int64_t>(sizes));
  std::vector<std::int64_t> offsets(all_sizes.size() + 1, 0);
  for (std::size_t g = 0; g < all_sizes.size(); ++g) offsets[g + 1] = offsets[g] + all_sizes[g];
  per_sequence_across_ranks(comm, local_values, local_out, [&](auto all_values, auto all_out) {
    whole(all_values, group_layout(std::span<const std::int64_t>(offsets)), all_out);
  });
}

}  // namespace cascade_rl::detail
