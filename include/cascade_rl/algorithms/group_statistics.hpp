#pragma once
// Per-group reward statistics (mean, std, min, max, count, exact zero variance) and
// per-sequence leave-one-out statistics. Every group-based advantage builds on the
// detail:: helpers here, so they share one definition of mean, std and zero variance.
//
// Each group is reduced sequentially in double on one thread (two passes: mean, then
// the squared deviations), and groups run in parallel, so the result does not depend
// on the executor or the thread count.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl {

namespace detail {

// Groups are cheap to reduce (a few to a few hundred rewards): go parallel only when
// there are many of them.
inline constexpr std::size_t group_parallel_threshold = 256;

// The formulas are terms/group_moments.hpp's, shared with the CUDA and portable paths.
using terms::deviation;
using terms::group_moments;
using terms::group_std;
using terms::variance_divisor;

template <std::floating_point T>
group_moments group_moments_of(std::span<const T> values, std::size_t first, std::size_t last,
                               mean_accumulation accumulation) {
  return terms::group_moments_of(values.data(), first, last, accumulation);
}

template <std::floating_point T>
group_statistic summarize_group(std::span<const T> values, std::size_t first, std::size_t last,
                                std_estimator estimator, mean_accumulation accumulation) {
  return statistic_of(group_moments_of(values, first, last, accumulation), estimator);
}

// The moments plan_group reads: a group the caller zeroes (zero_group: a non-finite
// group under nonfinite_rule::zero_group) has only its count, flagged non-finite.
template <std::floating_point T>
group_moments moments_to_plan(std::span<const T> values, std::size_t first, std::size_t last,
                              bool zero_group, mean_accumulation accumulation) {
  if (!zero_group) return group_moments_of(values, first, last, accumulation);
  group_moments m;
  m.count = last - first;
  m.nonfinite = true;
  return m;
}

// One group of GRPO, RLOO (a value per reward): the plan, then each advantage.
template <std::floating_point T>
void advantages_of_group(std::span<const T> rewards, std::size_t first, std::size_t last,
                         bool zero_group, const terms::group_params& params,
                         std::span<T> advantages) {
  const group_moments m = moments_to_plan(rewards, first, last, zero_group, params.accumulation);
  const terms::group_plan plan = terms::plan_group(m, params);
  for (std::size_t i = first; i < last; ++i)
    advantages[i] = terms::advantage_of(rewards[i], m, plan, params);
}

template <std::floating_point T>
bool group_has_nonfinite(std::span<const T> values, std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < last; ++i)
    if (!std::isfinite(values[i])) return true;
  return false;
}

// Throws naming the first group of one sequence; `why` says which estimator needs two.
inline bool has_singleton_group(const group_layout& groups) {
  if (groups.is_uniform()) return groups.groups() > 0 && groups.size(0) == 1;
  for (std::size_t g = 0; g < groups.groups(); ++g)
    if (groups.size(g) == 1) return true;
  return false;
}

inline void refuse_singleton_groups(const group_layout& groups, std::string_view why) {
  if (groups.is_uniform() && !has_singleton_group(groups)) return;
  for (std::size_t g = 0; g < groups.groups(); ++g)
    if (groups.size(g) == 1)
      fail_at("groups", g,
              "is a group of one sequence, but " + std::string(why) +
                  " needs at least 2 (set options.singleton to accept it)");
}

inline void require_epsilon(double epsilon, std::string_view argument) {
  if (!(epsilon >= 0.0) || !std::isfinite(epsilon))
    fail(argument, "must be finite and >= 0, got " + std::to_string(epsilon));
}

// Runs body(first, last, nonfinite_group) for each group [first, last), in parallel over
// groups. nonfinite_group is true when the group holds a NaN or infinite value and the
// rule zeroes such groups (under nonfinite_rule::error validation refused them).
// min_parallel: groups below which it stays on the calling thread (a caller whose groups
// carry whole sequences of tokens passes less).
template <class Policy, std::floating_point T, class Body>
void for_each_group(const Policy& policy, std::span<const T> values, const group_layout& groups,
                    nonfinite_rule nonfinite, Body&& body,
                    std::size_t min_parallel = group_parallel_threshold) {
  for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        const std::size_t first = groups.begin(g);
        const std::size_t last = groups.end(g);
        body(first, last,
             nonfinite == nonfinite_rule::zero_group && group_has_nonfinite(values, first, last));
      },
      min_parallel);
}

// The single-pass path of the group advantages under nonfinite_rule::error: runs
// body(first, last, false) on every group whose values are all finite, checking each
// group as it goes instead of in a pass of its own over all values. Returns false when
// some group held a NaN or infinite value (that group's body did not run); the caller
// then validates as usual, which names the first bad index.
template <class Policy, std::floating_point T, class Body>
bool for_each_finite_group(const Policy& policy, std::span<const T> values,
                           const group_layout& groups, Body&& body) {
  std::atomic<bool> nonfinite{false};
  for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        const std::size_t first = groups.begin(g);
        const std::size_t last = groups.end(g);
        if (group_has_nonfinite(values, first, last)) {
          nonfinite.store(true, std::memory_order_relaxed);
          return;
        }
        body(first, last, false);
      },
      group_parallel_threshold);
  return !nonfinite.load(std::memory_order_relaxed);
}

// Whether the single-pass path may run: sizes right, non-finite values refused, and no
// singleton group to refuse (those errors come first, from the usual checks).
template <std::floating_point T>
bool single_pass_applies(std::span<const T> rewards, const group_layout& groups,
                         std::size_t advantages_size, nonfinite_rule nonfinite,
                         bool refuse_singletons) {
  return nonfinite == nonfinite_rule::error && rewards.size() == groups.sequences() &&
         advantages_size == rewards.size() && !(refuse_singletons && has_singleton_group(groups));
}

// The checks every group-based advantage makes before its (non-throwing) loop:
// sizes, finiteness unless non-finite groups are zeroed, and singletons where the
// estimator needs two and the rule says refuse.
template <class Policy, std::floating_point T>
void validate_group_advantage_inputs(const Policy& policy, std::span<const T> rewards,
                                     const group_layout& groups, std::size_t advantages_size,
                                     nonfinite_rule nonfinite, bool refuse_singletons,
                                     std::string_view estimator) {
  groups.require_sequences(rewards.size(), "rewards");
  require_size(advantages_size, rewards.size(), "advantages", "one per sequence");
  if (nonfinite == nonfinite_rule::error) require_finite(policy, rewards, "rewards");
  if (refuse_singletons) refuse_singleton_groups(groups, estimator);
}

}  // namespace detail

// Statistics of every group of `rewards`. Refuses NaN or infinite rewards.
template <exec::host_policy Policy, contiguous_input In>
void group_statistics(const Policy& policy, const group_layout& groups, const In& rewards_in,
                      std::span<group_statistic> statistics,
                      const group_statistics_options& options = {}) {
  const auto rewards = input_span(rewards_in);
  groups.require_sequences(rewards.size(), "rewards");
  detail::require_size(statistics.size(), groups.groups(), "statistics", "one per group");
  detail::require_finite(policy, rewards, "rewards");
  detail::for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        statistics[g] = detail::summarize_group(rewards, groups.begin(g), groups.end(g),
                                                options.estimator, options.accumulation);
      },
      detail::group_parallel_threshold);
}

// Per sequence, the mean (and, when `loo_std` is non-empty, the std) of the other
// sequences of its group: the RLOO baseline (Ahmadian et al. 2024, "Back to Basics").
// Needs groups of at least 2. The std of a single other value is 0.
//
// Computed by downdating the full-group moments instead of re-summing n - 1 values:
//   mean_-i = mean - (r_i - mean) / (n - 1)
//   M2_-i   = M2 - (r_i - mean)^2 * n / (n - 1)    (clamped at 0 against rounding)
template <exec::host_policy Policy, contiguous_output Out>
void leave_one_out_statistics(const Policy& policy, const group_layout& groups,
                              std::span<const output_value_t<Out>> rewards, Out&& loo_mean_out,
                              std::type_identity_t<std::span<output_value_t<Out>>> loo_std,
                              const leave_one_out_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> loo_mean = output_span(loo_mean_out);
  groups.require_sequences(rewards.size(), "rewards");
  detail::require_size(loo_mean.size(), rewards.size(), "loo_mean", "one per sequence");
  if (!loo_std.empty())
    detail::require_size(loo_std.size(), rewards.size(), "loo_std",
                         "one per sequence, or empty to skip");
  detail::require_finite(policy, rewards, "rewards");
  detail::refuse_singleton_groups(groups, "a leave-one-out statistic");
  detail::for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        const std::size_t first = groups.begin(g);
        const std::size_t last = groups.end(g);
        const detail::group_moments s =
            detail::group_moments_of(rewards, first, last, mean_accumulation::double_precision);
        for (std::size_t i = first; i < last; ++i) {
          const terms::leave_one_out_value v = terms::leave_one_out_of(rewards[i], s, options.estimator);
          loo_mean[i] = static_cast<T>(v.mean);
          if (!loo_std.empty()) loo_std[i] = static_cast<T>(v.std);
        }
      },
      detail::group_parallel_threshold);
}

}  // namespace cascade_rl
