#pragma once
// The options of the rollout correction (algorithms/rollout_correction.hpp: veRL's
// rollout_corr_helper) and of the bypass-mode loss built on it: plain values that the
// passes (terms/rollout_correction_passes.hpp), every executor's driver and the kernels
// take.

#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "cascade_rl/options/policy_losses.hpp"

namespace cascade_rl {

// The level of the importance weights w = pi_train / pi_rollout.
enum class rollout_is_level {
  none,      // no weights (rejection and diagnostics only)
  token,     // w_t = exp(clamp(logp_t - rollout_logp_t, +-20))
  sequence,  // every token of a row: exp(clamp(sum of the row's valid log-ratios, +-20))
};

// The divergence a rejection criterion tests, per token on the log-ratio d = clamp(logp -
// rollout_logp, +-20): k1 = -d, k2 = d^2 / 2, k3 = exp(d) - 1 - d.
enum class rollout_rs_statistic { k1, k2, k3 };

// Where the statistic is taken: per token, or the sum / mean / maximum over the row's
// valid tokens (a row's verdict then holds for every token of it; an empty row's statistic
// is 0).
enum class rollout_rs_level { token, seq_sum, seq_mean, seq_max };

// One rejection criterion: a token (or row) is kept when its statistic s passes,
// k1: log(lower) <= s <= log(upper) (ratio bounds, as veRL reads them), k2 / k3: s <= upper.
// lower is read by k1 only. seq_max takes k2 or k3 only.
struct rollout_rs_criterion {
  rollout_rs_level level = rollout_rs_level::token;
  rollout_rs_statistic statistic = rollout_rs_statistic::k1;
  double lower = 0.5;  // k1 only, > 0, <= upper
  double upper = 2.0;  // > 0
};

// Every distinct criterion veRL knows (token_k1..3, seq_sum_k1..3, seq_mean_k1..3,
// seq_max_k2..3): a correction holds at most that many.
inline constexpr std::size_t max_rollout_rs_criteria = 11;

struct rollout_correction_options {
  rollout_is_level is_level = rollout_is_level::none;
  // Truncated IS (is_lower unset): w = min(w, is_upper). IcePop (is_lower set): w is 0
  // outside [is_lower, is_upper] and kept exactly inside.
  double is_upper = 2.0;
  std::optional<double> is_lower{};
  // Divide the weights by their mean (token level: over the valid tokens; sequence level:
  // over the rows holding a valid token), when that mean exceeds 1e-8.
  bool batch_normalize = false;
  // The rejection criteria, all of which must pass; the first `rejection_count` are used
  // (distinct, in veRL's order of the names).
  std::array<rollout_rs_criterion, max_rollout_rs_criteria> rejection{};
  std::size_t rejection_count = 0;
};

// veRL's name of a criterion: token_k1, seq_sum_k3, seq_max_k2, ...
[[nodiscard]] inline std::string to_string(const rollout_rs_criterion& c) {
  constexpr const char* levels[] = {"token", "seq_sum", "seq_mean", "seq_max"};
  constexpr const char* statistics[] = {"k1", "k2", "k3"};
  std::string name = levels[static_cast<int>(c.level)];
  name.append("_").append(statistics[static_cast<int>(c.statistic)]);
  return name;
}

// The loss the bypass mode runs on the rejection-masked tokens (veRL
// compute_policy_loss_bypass_mode, old_log_prob playing the rollout log-probs).
enum class bypass_loss {
  ppo_clip,   // PPO's clipped surrogate (dual clip), no IS weights: the ratio is the IS
  reinforce,  // -w A logp with the correction's IS weights
};

struct bypass_mode_options {
  rollout_correction_options correction{};
  bypass_loss loss = bypass_loss::ppo_clip;
  ppo_clip_options ppo{};         // loss ppo_clip (its importance option must be none)
  reinforce_options reinforce{};  // loss reinforce (its importance option must be none)
};

}  // namespace cascade_rl
