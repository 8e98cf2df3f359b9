#pragma once
// A three-stage cascade on the tabular test policy, shared by the engine's tests:
//   stage_a  GRPO on domain "a" (ids 0-3)
//   stage_b  GRPO on domain "b" (ids 8-11: the same table slots as "a", other answers,
//            so training "b" makes the policy forget "a")
//   mopd     MOPD on domain "a", teacher captured automatically (best "a" snapshot)

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/cascade.hpp"
#include "support/test_policy.hpp"

namespace cascade_rl::testing {

inline stage_config test_grpo_config(std::string name, std::string domain, std::size_t steps, double lr,
                                     std::size_t group, std::size_t prompts, std::vector<prompt> evals) {
  return {.name = std::move(name),
          .kind = stage_kind::generic,
          .domains = {domain},
          .group_size = group,
          .prompts_per_step = prompts,
          .steps = steps,
          .lr = constant_lr(lr),
          .sampling = {.temperature = 1.0, .max_response_length = 6},
          .reward_workers = 2,
          .evals = {{.domain = domain, .prompts = std::move(evals)}}};
}

inline stage_config test_mopd_config(std::size_t steps) {
  return {.name = "mopd",
          .kind = stage_kind::mopd,
          .domains = {"a"},
          .group_size = 4,
          .prompts_per_step = 4,
          .steps = steps,
          .lr = linear_warmup_lr(0.01, 0.2, 3),
          .sampling = {.temperature = 1.0, .max_response_length = 6}};
}

inline auto make_test_cascade(std::size_t steps_a = 12, std::size_t steps_b = 30, std::size_t steps_mopd = 30) {
  auto a = make_grpo_stage(test_grpo_config("stage_a", "a", steps_a, 0.05, 8, 4, domain_prompts("a", 0, 4)),
                           prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
  auto b = make_grpo_stage(test_grpo_config("stage_b", "b", steps_b, 0.1, 4, 2, domain_prompts("b", 8, 4)),
                           prompt_pool(domain_prompts("b", 8, 4)), exact_answer_reward{});
  auto mopd = make_mopd_stage(test_mopd_config(steps_mopd), prompt_pool(domain_prompts("a", 0, 4)));
  return make_cascade(std::move(a), std::move(b), std::move(mopd));
}

}  // namespace cascade_rl::testing
