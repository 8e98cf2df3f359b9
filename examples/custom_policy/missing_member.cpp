// Deliberately does not compile: bigram_policy without apply_gradient. The test
// examples_custom_policy_missing_member builds it and expects g++ to name the missing
// member; missing_member.txt holds the message, trimmed.

#include <span>

#include <cascade_rl/cascade.hpp>

namespace cr = cascade_rl;

struct incomplete_policy {
  using snapshot_type = int;
  cr::rollout_batch generate(std::span<const cr::prompt>, const cr::generation_request&) { return {}; }
  void log_probs(const cr::rollout_batch&, std::span<float>) const {}
  // void apply_gradient(const cr::rollout_batch&, std::span<const float> dlogp, double lr);
  int snapshot() const { return 0; }
  void restore(int) {}
};

int main() {
  const std::vector<cr::prompt> prompts{{.id = 0, .domain = "d"}};
  auto cascade = cr::make_cascade(cr::make_grpo_stage(
      {.name = "rl", .group_size = 2, .prompts_per_step = 1, .steps = 1}, cr::prompt_pool(prompts),
      [](const cr::response_view&) { return 0.0; }));
  incomplete_policy policy;
  auto runner = cr::make_runner(cascade, policy);  // error: constraints not satisfied
  (void)runner;
}
