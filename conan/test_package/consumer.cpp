// A consumer of the installed package: GRPO advantages and the on-policy loss gradient
// for two prompts with three responses each, checked against hand-computed values.
#include <cascade_rl/cascade_rl.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  namespace cr = cascade_rl;

  // Rewards of 2 groups x 3 responses, and each response's token count.
  const std::vector<float> rewards{1, 0, 0, 1, 1, 0};
  const std::vector<std::int64_t> offsets{0, 2, 5, 6, 8, 10, 14};  // cu_seqlens
  const cr::group_layout groups = cr::group_layout::uniform({.groups = 2, .size = 3});
  const cr::token_layout tokens(offsets);

  std::vector<float> advantages(rewards.size());
  cr::grpo_advantages(cr::exec::seq, groups, rewards, advantages);

  std::vector<float> token_advantages(tokens.tokens()), log_probs(tokens.tokens(), -1.0f),
      dlogp(tokens.tokens());
  cr::broadcast_to_tokens(cr::exec::seq, tokens, advantages, token_advantages);
  const cr::loss_normalizer normalizer =
      cr::local_loss_counts(cr::exec::seq, tokens).normalizer(cr::loss_aggregation::token_mean);
  const cr::policy_loss_result loss = cr::reinforce_loss(
      cr::exec::par, tokens, {.log_probs = log_probs, .advantages = token_advantages}, dlogp,
      normalizer);

  // Group {1, 0, 0}: mean 1/3, unbiased std sqrt(1/3), so A = 2/sqrt(3), -1/sqrt(3), -1/sqrt(3).
  const double a = 1.0 / std::sqrt(3.0);
  const std::vector<double> expected{2 * a, -a, -a, a, a, -2 * a};
  bool ok = true;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::printf("sequence %zu: reward %.0f  advantage %+.6f  dL/dlogp %+.6f\n", i, rewards[i],
                advantages[i], dlogp[tokens.begin(i)]);
    ok = ok && std::abs(advantages[i] - expected[i]) < 1e-5;
    // token-mean over 14 tokens: dL/dlogp = -A / 14 on every token of the sequence.
    for (std::size_t t = tokens.begin(i); t < tokens.end(i); ++t)
      ok = ok && std::abs(dlogp[t] + expected[i] / 14.0) < 1e-6;
  }
  std::printf("loss %+.6f over %zu tokens\n", loss.loss, loss.metrics.valid_tokens);
  if (!ok) std::printf("consumer: values differ from the hand-computed ones\n");
  return ok ? 0 : 1;
}
