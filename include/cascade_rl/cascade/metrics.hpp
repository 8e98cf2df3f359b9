#pragma once
// What one step reports (a JSON line each), and a domain's evaluation score.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/episode_summary.hpp"

namespace cascade_rl {

// What an agentic stage's step reports of its episodes (over every rank).
struct episode_metrics {
  double turns_mean = 0.0;  // turns per episode
  std::array<std::size_t, end_reason_count> end_reasons{};  // episodes ended by each reason
  // The largest |trainer - sampler| log-prob over the actions (log_prob_drift.hpp): 0
  // when the sampler and the trainer agree, as strictly on-policy training assumes.
  double log_prob_drift = 0.0;
  // Episodes filters.end_reasons masked (no gradient, reward kept in the group baseline)
  // and dropped (out of the step; also counted in filtered_sequences).
  std::size_t masked = 0;
  std::size_t dropped = 0;
};

struct step_metrics {
  std::string stage{};
  std::size_t stage_index = 0;
  std::size_t step = 0;         // 1-based within the stage
  std::size_t steps = 0;        // the stage's step budget
  std::size_t global_step = 0;  // 1-based over the cascade
  double lr = 0.0;

  std::size_t prompts = 0;
  std::size_t responses = 0;
  bool rewarded = true;         // false: the stage has no reward (pure-distillation MOPD),
                                // so reward_mean and accuracy are 0 and mean nothing
  double reward_mean = 0.0;
  double accuracy = 0.0;        // fraction of responses with reward >= success_threshold
  double length_mean = 0.0;
  std::int64_t length_min = 0;
  std::int64_t length_max = 0;
  double truncated_fraction = 0.0;

  std::size_t zero_variance_groups = 0;
  double zero_variance_fraction = 0.0;
  std::size_t filtered_groups = 0;     // groups that left the batch (zero variance, emptied)
  std::size_t filtered_sequences = 0;  // responses that left the batch
  std::size_t overlong = 0;            // responses the overlong filter flagged

  std::size_t updates = 0;   // optimizer steps taken (0: everything was filtered)
  std::size_t tokens = 0;    // valid tokens in the update(s)
  double loss = 0.0;         // mean over the step's updates
  double clip_fraction = 0.0;
  double importance_masked_fraction = 0.0;
  double importance_truncated_fraction = 0.0;
  std::optional<double> kl_to_teacher{};  // MOPD: mean of log pi_student - log pi_teacher
  std::optional<episode_metrics> episodes{};  // agentic stages

  double generation_seconds = 0.0;
  double reward_seconds = 0.0;
  double update_seconds = 0.0;
};

inline nlohmann::json episodes_json(const episode_metrics& e) {
  nlohmann::json reasons = nlohmann::json::object();
  for (std::size_t r = 0; r < end_reason_count; ++r)
    reasons[std::string(name_of(static_cast<end_reason>(r)))] = e.end_reasons[r];
  return {{"turns_mean", e.turns_mean},
          {"end_reasons", reasons},
          {"log_prob_drift", e.log_prob_drift},
          {"masked", e.masked},
          {"dropped", e.dropped}};
}

inline void to_json(nlohmann::json& j, const step_metrics& m) {
  j = {{"stage", m.stage},
       {"stage_index", m.stage_index},
       {"step", m.step},
       {"steps", m.steps},
       {"global_step", m.global_step},
       {"lr", m.lr},
       {"prompts", m.prompts},
       {"responses", m.responses},
       {"rewarded", m.rewarded},
       {"reward_mean", m.reward_mean},
       {"accuracy", m.accuracy},
       {"response_length", {{"mean", m.length_mean}, {"min", m.length_min}, {"max", m.length_max}}},
       {"truncated_fraction", m.truncated_fraction},
       {"zero_variance_groups", m.zero_variance_groups},
       {"zero_variance_fraction", m.zero_variance_fraction},
       {"filtered_groups", m.filtered_groups},
       {"filtered_sequences", m.filtered_sequences},
       {"overlong", m.overlong},
       {"updates", m.updates},
       {"tokens", m.tokens},
       {"loss", m.loss},
       {"clip_fraction", m.clip_fraction},
       {"importance_masked_fraction", m.importance_masked_fraction},
       {"importance_truncated_fraction", m.importance_truncated_fraction},
       {"kl_to_teacher", m.kl_to_teacher ? nlohmann::json(*m.kl_to_teacher) : nlohmann::json()},
       {"episodes", m.episodes ? episodes_json(*m.episodes) : nlohmann::json()},
       {"time", {{"generation", m.generation_seconds},
                 {"reward", m.reward_seconds},
                 {"update", m.update_seconds}}}};
}

struct domain_score {
  std::string domain{};
  double score = 0.0;
};

}  // namespace cascade_rl
