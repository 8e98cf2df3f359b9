#pragma once
// TRL's GRPO advantages (GRPOTrainer._generate_and_score_completions, at commit f2cd5771)
// from the per-function rewards, through grpo_advantages; checked against
// tests/reference/trl_nemo_rl.json (trl.advantages).
//
//   sum_then_normalize (TRL's default): reward = nansum_k(w_k r_k) per completion, then per
//     group of num_generations
//       scale_rewards "group":  (r - group mean) / (group std + 1e-4)
//       scale_rewards "batch":  (r - group mean) / (batch std + 1e-4)
//       scale_rewards "none":   r - group mean
//     with the unbiased (Bessel) std: grpo_options{epsilon 1e-4 added to the std}; a group
//     of one gets 0.
//   normalize_then_sum: each function normalised within its group as "group" above, the
//     weighted nansum, then (r - batch mean) / (batch std + 1e-4).
// A completion for which every function returned NaN (unscorable) is left out of every
// mean and std and gets advantage 0; a NaN of one function is left out of that function's
// sum (nansum) and, under normalize_then_sum, of that function's group statistics. These
// are expressed by running grpo_advantages on the scorable completions only (their groups
// re-cut), then writing 0 for the others.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::presets::trl {

// GRPOConfig's advantage fields, by TRL's names, with TRL's defaults.
struct advantage_config {
  std::string_view scale_rewards = "group";
  std::string_view multi_objective_aggregation = "sum_then_normalize";
  std::size_t num_generations = 8;
  std::span<const double> reward_weights{};  // one per reward function; empty: all 1
};

// TRL's per-group standardisation: epsilon 1e-4 added to the unbiased std, a group of one
// (or the scorable rest of one) gets 0. scale_by_std = false is scale_rewards "none".
[[nodiscard]] inline grpo_options group_scaling(bool scale_by_std = true) {
  return {.scale_by_std = scale_by_std,
          .epsilon = 1e-4,
          .epsilon_at = epsilon_placement::added_to_std,
          .estimator = std_estimator::unbiased,
          .singleton = singleton_rule::zero_advantage,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::double_precision};
}

namespace detail {

// grpo_advantages over the finite entries of `values` only, each group of `size` cut to
// its finite entries; non-finite entries get NaN. one_group: every entry in one group.
template <class T, exec::host_policy Policy>
std::vector<double> grpo_over_finite(const Policy& policy, std::span<const double> values,
                                     std::size_t size, bool one_group,
                                     const grpo_options& options) {
  std::vector<T> kept;
  std::vector<std::int64_t> offsets{0};
  const std::size_t n = values.size();
  const std::size_t group = one_group ? (n == 0 ? 1 : n) : size;
  for (std::size_t first = 0; first < n; first += group) {
    for (std::size_t i = first; i < first + group && i < n; ++i)
      if (std::isfinite(values[i])) kept.push_back(static_cast<T>(values[i]));
    if (static_cast<std::int64_t>(kept.size()) > offsets.back())
      offsets.push_back(static_cast<std::int64_t>(kept.size()));
  }
  std::vector<double> out(n, std::numeric_limits<double>::quiet_NaN());
  if (kept.empty()) return out;
  std::vector<T> advantages(kept.size());
  const std::span<const std::int64_t> offset_view(offsets);
  const group_layout groups(offset_view);
  grpo_advantages(policy, groups, std::span<const T>(kept), std::span<T>(advantages), options);
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(values[i])) out[i] = static_cast<double>(advantages[k++]);
  return out;
}

// The unbiased std of the finite entries (0 for fewer than two), as torch's nanstd.
inline double finite_std(std::span<const double> values) {
  double sum = 0;
  std::size_t n = 0;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    sum += v;
    ++n;
  }
  if (n < 2) return 0.0;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (const double v : values)
    if (std::isfinite(v)) squares += (v - mean) * (v - mean);
  return std::sqrt(squares / static_cast<double>(n - 1));
}

}  // namespace detail

// TRL's advantages of N completions from rewards_per_func ([N][functions], row-major; NaN:
// the function returned None). Writes advantages_out [N] and, when given, the per-completion
// rewards TRL logs (rewards_out [N]: the weighted nansum, or under normalize_then_sum the
// weighted sum of the normalised rewards; NaN where unscorable). Sums run in double, each
// grpo_advantages pass in T.
template <std::floating_point T, exec::host_policy Policy>
void advantages(const Policy& policy, const advantage_config& config,
                std::span<const T> rewards_per_func, std::size_t functions,
                std::span<T> advantages_out, std::span<T> rewards_out = {}) {
  const std::string_view scale = config.scale_rewards;
  const std::string_view aggregation = config.multi_objective_aggregation;
  if (scale != "group" && scale != "batch" && scale != "none")
    cascade_rl::detail::fail(
        "scale_rewards", "is \"" + std::string(scale) + "\", not a TRL value (group, batch, none)");
  if (aggregation != "sum_then_normalize" && aggregation != "normalize_then_sum")
    cascade_rl::detail::fail("multi_objective_aggregation",
                             "is \"" + std::string(aggregation) +
                                 "\", not a TRL value (sum_then_normalize, normalize_then_sum)");
  if (functions == 0) cascade_rl::detail::fail("functions", "is 0, expected >= 1");
  if (config.num_generations == 0) cascade_rl::detail::fail("num_generations", "is 0");
  if (!config.reward_weights.empty())
    cascade_rl::detail::require_size(config.reward_weights.size(), functions, "reward_weights",
                                     "one per reward function");
  if (rewards_per_func.size() % functions != 0)
    cascade_rl::detail::fail("rewards_per_func", "is not [N][functions]");
  const std::size_t n = rewards_per_func.size() / functions;
  cascade_rl::detail::require_size(advantages_out.size(), n, "advantages_out",
                                   "one per completion");
  if (n % config.num_generations != 0)
    cascade_rl::detail::fail("num_generations",
                             "does not divide the " + std::to_string(n) + " completions");
  if (!rewards_out.empty())
    cascade_rl::detail::require_size(rewards_out.size(), n, "rewards_out", "one per completion");
  const auto weight = [&](std::size_t k) {
    return config.reward_weights.empty() ? 1.0 : config.reward_weights[k];
  };
  const auto at = [&](std::size_t i, std::size_t k) {
    return static_cast<double>(rewards_per_func[i * functions + k]);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<bool> unscorable(n, true);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < functions; ++k)
      unscorable[i] = unscorable[i] && std::isnan(at(i, k));

  std::vector<double> rewards(n, 0.0);
  std::vector<double> result;
  if (aggregation == "sum_then_normalize") {
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < functions; ++k)
        if (!std::isnan(at(i, k))) rewards[i] += at(i, k) * weight(k);
      if (unscorable[i]) rewards[i] = nan;
    }
    if (scale == "batch") {
      // (r - group mean) / (batch std + 1e-4).
      result = detail::grpo_over_finite<T>(policy, rewards, config.num_generations, false,
                                           group_scaling(false));
      const double divisor = detail::finite_std(rewards) + 1e-4;
      for (double& a : result) a /= divisor;
    } else {
      result = detail::grpo_over_finite<T>(policy, rewards, config.num_generations, false,
                                           group_scaling(scale == "group"));
    }
  } else {
    std::vector<double> column(n);
    for (std::size_t k = 0; k < functions; ++k) {
      for (std::size_t i = 0; i < n; ++i) column[i] = at(i, k);
      const std::vector<double> normalised = detail::grpo_over_finite<T>(
          policy, column, config.num_generations, false, group_scaling(true));
      for (std::size_t i = 0; i < n; ++i)
        if (!std::isnan(normalised[i])) rewards[i] += normalised[i] * weight(k);
    }
    for (std::size_t i = 0; i < n; ++i)
      if (unscorable[i]) rewards[i] = nan;
    result = detail::grpo_over_finite<T>(policy, rewards, n, true, group_scaling(true));
  }
  for (std::size_t i = 0; i < n; ++i) {
    advantages_out[i] = static_cast<T>(std::isnan(result[i]) ? 0.0 : result[i]);
    if (!rewards_out.empty()) rewards_out[i] = static_cast<T>(rewards[i]);
  }
}

}  // namespace cascade_rl::presets::trl
