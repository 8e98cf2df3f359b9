#pragma once
// What every stage that draws its prompts from a PromptSource holds and answers alike
// (grpo_stage, mopd_stage, agentic_stage): its config, its source, and the source's
// position as the stage's checkpointed state. A stage derives from it and brings
// config_ and source_ into scope with using-declarations (they live in a dependent base).

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_parts.hpp"

namespace cascade_rl::detail {

template <PromptSource Source>
class prompt_stage {
 public:
  prompt_stage(stage_config config, Source source)
      : config_(std::move(config)), source_(std::move(source)) {}

  // Each rank draws its shard of the step's prompts (whole groups).
  static constexpr bool data_parallel = true;

  [[nodiscard]] const stage_config& config() const { return config_; }
  [[nodiscard]] stage_config& config() { return config_; }
  [[nodiscard]] const Source& source() const { return source_; }

  [[nodiscard]] nlohmann::json state() const { return source_state(source_); }
  void load_state(const nlohmann::json& state) { load_source_state(source_, state, config_.name); }

 protected:
  stage_config config_;
  Source source_;
};

}  // namespace cascade_rl::detail
