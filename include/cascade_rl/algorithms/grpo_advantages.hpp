#pragma once
// GRPO outcome advantages (Shao et al. 2024, DeepSeekMath), per sequence:
//   A_i = (r_i - mean_g(r)) / (std_g(r) + eps)
// and Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"), which drops
// the std scaling because it up-weights near-constant groups:
//   A_i = r_i - mean_g(r)                      (options.scale_by_std = false)
// veRL: compute_grpo_outcome_advantage in verl/trainer/ppo/core_algos.py
// (norm_adv_by_std_in_grpo selects between the two).
//
// The output is per sequence; broadcast_to_tokens (broadcast.hpp) puts it on tokens.
// A zero-variance group (max == min, exactly) gets exactly 0: with eps = 0 the formula
// would be 0/0, and with a float32 mean it could be a rounding residue over eps.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace cascade_rl {

struct grpo_options {
  bool scale_by_std = true;  // false: Dr. GRPO
  double epsilon = 1e-6;
  epsilon_placement epsilon_at = epsilon_placement::added_to_std;
  std_estimator estimator = std_estimator::unbiased;
  // Applies to groups of one when the estimator needs two (scale_by_std with the
  // unbiased std). Otherwise a group of one is a zero-variance group and gets 0,
  // except under raw_score, which always reproduces veRL's mean 0 / std 1.
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

namespace detail {

// Groups GRPO reduces side by side on the fast path below, and the largest group size
// it takes (a tile's rewards, transposed to double, stay in 4 KiB of stack).
inline constexpr std::size_t grpo_group_tile = 8;
inline constexpr std::size_t grpo_tile_max_group = 64;

// GRPO over groups [first_group, first_group + grpo_group_tile) of one size in
// [2, grpo_tile_max_group], with the double-precision mean: group_moments_of's
// arithmetic, each group's sums in the same order (the same bits). The tile is first
// transposed into vectors x[i] = reward i of the eight groups (a GNU vector: one AVX-512
// register, or several narrower ones; lane arithmetic is plain IEEE double), so that
// every step of every pass serves all eight groups at once and their dependent adds run
// side by side instead of one group waiting on the next. Writes nothing and returns
// false when a reward of the tile is NaN or infinite.
template <std::floating_point T, class Scale>
bool grpo_uniform_tile(std::span<const T> rewards, std::span<T> advantages,
                       std::size_t first_group, std::size_t size, const grpo_options& options,
                       Scale&& scale) {
  constexpr std::size_t tile = grpo_group_tile;
  using lanes = double __attribute__((vector_size(tile * sizeof(double))));
  using mask = long long __attribute__((vector_size(tile * sizeof(long long))));
  static_assert(sizeof(lanes) == sizeof(mask));
  const T* r = rewards.data() + first_group * size;
  T* a = advantages.data() + first_group * size;
  lanes x[grpo_tile_max_group];
  for (std::size_t i = 0; i < size; ++i)
    for (std::size_t k = 0; k < tile; ++k) x[i][k] = static_cast<double>(r[k * size + i]);
  // v - v is 0 for a finite v and NaN (unequal to 0) for an infinite or NaN one.
  mask nonfinite = {};
  for (std::size_t i = 0; i < size; ++i) nonfinite |= (x[i] - x[i]) != 0.0;
  for (std::size_t k = 0; k < tile; ++k)
    if (nonfinite[k] != 0) return false;
  const lanes zero = {};
  lanes first;  // x[0], read again so the compiler sees it set for any size
  for (std::size_t k = 0; k < tile; ++k) first[k] = static_cast<double>(r[k * size]);
  lanes low = first, high = first, sum = zero + first;
  for (std::size_t i = 1; i < size; ++i) {
    low = x[i] < low ? x[i] : low;     // std::min(low, x)
    high = high < x[i] ? x[i] : high;  // std::max(high, x)
    sum += x[i];
  }
  const lanes mean = sum / static_cast<double>(size);
  lanes m2 = zero;
  for (std::size_t i = 0; i < size; ++i) {
    const lanes d = x[i] - mean;
    // math::product_unfused on every lane: the square rounded alone, last bit cleared,
    // as group_moments_of does (the same bits whether or not the target fuses).
    const lanes square = d * d;
    mask square_bits;
    std::memcpy(&square_bits, &square, sizeof square_bits);
    square_bits &= ~1LL;
    lanes unfused;
    std::memcpy(&unfused, &square_bits, sizeof unfused);
    m2 += unfused;
  }
  const double spread = variance_divisor(size, options.estimator);
  lanes divisor;
  for (std::size_t k = 0; k < tile; ++k)
    divisor[k] = options.scale_by_std ? scale(std::sqrt(m2[k] / spread)) : 1.0;
  // A zero-variance group (max == min, exactly) gets exactly 0, as in the general path.
  const mask varies = low != high;
  for (std::size_t i = 0; i < size; ++i) {
    const lanes advantage = (x[i] - mean) / divisor;
    for (std::size_t k = 0; k < tile; ++k)
      a[k * size + i] = varies[k] != 0 ? static_cast<T>(advantage[k]) : T(0);
  }
  return true;
}

}  // namespace detail

template <exec::host_policy Policy, std::floating_point T>
void grpo_advantages(const Policy& policy, std::span<const T> rewards, const group_layout& groups,
                     std::span<T> advantages, const grpo_options& options = {}) {
  detail::require_epsilon(options.epsilon, "epsilon");
  const bool needs_two = options.scale_by_std && options.estimator == std_estimator::unbiased;
  const bool refuse_singletons = needs_two && options.singleton == singleton_rule::error;

  // The divisor for a given std, with eps where the options put it.
  const auto scale = [&](double std) {
    return terms::grpo_divisor(std, options.epsilon, options.epsilon_at);
  };

  const auto group = [&](std::size_t first, std::size_t last, bool zero_group) {
    const bool singleton = last - first == 1;
    if (zero_group || (singleton && options.singleton == singleton_rule::zero_advantage)) {
      for (std::size_t i = first; i < last; ++i) advantages[i] = T(0);
      return;
    }
    if (singleton && options.singleton == singleton_rule::raw_score) {
      // veRL: mean 0, std 1.
      const double r = static_cast<double>(rewards[first]);
      advantages[first] = static_cast<T>(options.scale_by_std ? r / scale(1.0) : r);
      return;
    }
    const detail::group_moments m =
        detail::group_moments_of(rewards, first, last, options.accumulation);
    if (m.zero_variance) {
      for (std::size_t i = first; i < last; ++i) advantages[i] = T(0);
      return;
    }
    const double divisor =
        options.scale_by_std ? scale(detail::group_std(m, options.estimator)) : 1.0;
    for (std::size_t i = first; i < last; ++i)
      advantages[i] =
          static_cast<T>(detail::deviation(rewards[i], m.mean, options.accumulation) / divisor);
  };

  if (detail::single_pass_applies(rewards, groups, advantages.size(), options.nonfinite,
                                  refuse_singletons)) {
    // Uniform groups in double precision: whole tiles of groups side by side, the rest
    // one by one (both with the arithmetic of `group`).
    if (groups.is_uniform() && groups.groups() > 0 && groups.size(0) >= 2 &&
        groups.size(0) <= detail::grpo_tile_max_group &&
        options.accumulation == mean_accumulation::double_precision) {
      constexpr std::size_t tile = detail::grpo_group_tile;
      const std::size_t size = groups.size(0);
      const std::size_t tiles = groups.groups() / tile;
      std::atomic<bool> nonfinite{false};
      detail::for_each_index(
          policy, tiles,
          [&](std::size_t i) {
            if (!detail::grpo_uniform_tile(rewards, advantages, i * tile, size, options, scale))
              nonfinite.store(true, std::memory_order_relaxed);
          },
          detail::group_parallel_threshold / tile);
      bool rest_finite = true;
      for (std::size_t g = tiles * tile; g < groups.groups(); ++g) {
        if (detail::group_has_nonfinite(rewards, groups.begin(g), groups.end(g))) {
          rest_finite = false;
          break;
        }
        group(groups.begin(g), groups.end(g), false);
      }
      if (!nonfinite.load(std::memory_order_relaxed) && rest_finite) return;
    } else if (detail::for_each_finite_group(policy, rewards, groups, group)) {
      return;
    }
    // A NaN or infinite reward: the checks below name it.
  }
  detail::validate_group_advantage_inputs(policy, rewards, groups, advantages.size(),
                                          options.nonfinite, refuse_singletons,
                                          "GRPO with the unbiased std");
  detail::for_each_group(policy, rewards, groups, options.nonfinite, group);
}

}  // namespace cascade_rl
