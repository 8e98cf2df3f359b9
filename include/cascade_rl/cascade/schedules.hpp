#pragma once
// Ready-made schedules as editable stage configs, and the ordering check.
//
// Nemotron-Cascade 2 (after SFT): IF-RL, multi-domain RL (MCQA, tool calling, structured
// output), MOPD, RLHF, long-context RL, code RL, SWE RL. Published settings we use
// (see DESIGN.md): IF-RL 128 prompts x 16 rollouts, lr 3e-6, about 180 steps, strictly
// on-policy GRPO without KL, zero-variance groups filtered; MOPD 128 prompts x 4
// rollouts, lr 2e-6 warmed up linearly from 2e-7 over 30 steps, about 40-52 steps
// (we take 50), band [0.5, 2].
// Nemotron-Cascade 1: RLHF, IF-RL, math RL, code RL, SWE RL.
//
// Every other number below is NOT from the papers: it is a placeholder marked
// "placeholder" (IF-RL's shape and lr, 100 steps) for you to set. Sampling lengths are
// placeholders too. Build stages from these configs with make_grpo_stage /
// make_mopd_stage and your prompts and rewards.

#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/cascade/lr_schedule.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl {

namespace detail {

// The shape of a GRPO stage whose hyperparameters the sources do not give.
inline stage_config placeholder_grpo(std::string name, stage_kind kind, std::vector<std::string> domains) {
  return {.name = std::move(name),
          .kind = kind,
          .domains = std::move(domains),
          .group_size = 16,          // placeholder
          .prompts_per_step = 128,   // placeholder
          .steps = 100,              // placeholder
          .lr = constant_lr(3e-6)};  // placeholder
}

}  // namespace detail

struct cascade2_schedule {
  stage_config if_rl{.name = "if_rl",
                     .kind = stage_kind::if_rl,
                     .domains = {"instruction_following"},
                     .group_size = 16,
                     .prompts_per_step = 128,
                     .steps = 180,
                     .lr = constant_lr(3e-6),
                     .filters = {.drop_zero_variance_groups = true}};
  stage_config multi_domain_rl = detail::placeholder_grpo(
      "multi_domain_rl", stage_kind::multi_domain_rl, {"mcqa", "tool_calling", "structured_output"});
  // Domains routed to teachers: by default those trained before MOPD; edit to yours.
  stage_config mopd{.name = "mopd",
                    .kind = stage_kind::mopd,
                    .domains = {"instruction_following", "mcqa", "tool_calling", "structured_output"},
                    .group_size = 4,
                    .prompts_per_step = 128,
                    .steps = 50,
                    .lr = linear_warmup_lr(2e-7, 2e-6, 30),
                    .mopd = {.band_low = 0.5, .band_high = 2.0, .outcome_weight = 0.0}};
  stage_config rlhf = detail::placeholder_grpo("rlhf", stage_kind::rlhf, {"chat"});
  stage_config long_context_rl =
      detail::placeholder_grpo("long_context_rl", stage_kind::long_context_rl, {"long_context"});
  stage_config code_rl = detail::placeholder_grpo("code_rl", stage_kind::code_rl, {"code"});
  stage_config swe_rl = detail::placeholder_grpo("swe_rl", stage_kind::swe_rl, {"swe"});

  [[nodiscard]] std::vector<stage_config> configs() const {
    return {if_rl, multi_domain_rl, mopd, rlhf, long_context_rl, code_rl, swe_rl};
  }
};

struct cascade1_schedule {
  stage_config rlhf = detail::placeholder_grpo("rlhf", stage_kind::rlhf, {"chat"});
  stage_config if_rl =
      detail::placeholder_grpo("if_rl", stage_kind::if_rl, {"instruction_following"});
  stage_config math_rl = detail::placeholder_grpo("math_rl", stage_kind::math_rl, {"math"});
  stage_config code_rl = detail::placeholder_grpo("code_rl", stage_kind::code_rl, {"code"});
  stage_config swe_rl = detail::placeholder_grpo("swe_rl", stage_kind::swe_rl, {"swe"});

  [[nodiscard]] std::vector<stage_config> configs() const {
    return {rlhf, if_rl, math_rl, code_rl, swe_rl};
  }
};

[[nodiscard]] inline cascade2_schedule nemotron_cascade2_schedule() { return {}; }
[[nodiscard]] inline cascade1_schedule nemotron_cascade1_schedule() { return {}; }

// Warnings about the order of a schedule (empty when none). Today one rule: IF-RL after
// RLHF. Nemotron-Cascade 2 runs IF-RL first because IF-RL hurts human alignment while
// RLHF run later barely hurts instruction following. (Cascade 1's published order
// does run IF-RL after RLHF, so its schedule triggers the warning.)
[[nodiscard]] inline std::vector<std::string> check_ordering(const std::vector<stage_config>& stages) {
  std::vector<std::string> warnings;
  const stage_config* rlhf = nullptr;
  for (const stage_config& s : stages) {
    if (s.kind == stage_kind::rlhf && rlhf == nullptr) rlhf = &s;
    if (s.kind == stage_kind::if_rl && rlhf != nullptr)
      warnings.push_back("stage '" + s.name + "' (IF-RL) runs after stage '" + rlhf->name +
                         "' (RLHF): IF-RL hurts human alignment, while RLHF run later barely "
                         "hurts instruction following; Nemotron-Cascade 2 runs IF-RL before RLHF");
  }
  return warnings;
}

}  // namespace cascade_rl
