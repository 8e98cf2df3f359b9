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
#include <span>
#include <string>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/group_estimator_options.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/vector_lanes.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl {

namespace detail {

// Groups GRPO reduces side by side on the fast path below: as many doubles as one
// vector register of the target holds. A GNU vector wider than the registers is lowered
// badly: eight lanes ran at 73 M rewards/s on AVX2 where four ran at 460 (and two lanes
// 338, four 60 on the baseline x86-64 target; GCC 12 -O3, groups of 16, one core). The
// width changes only the speed: each group is reduced in its own lane with the same
// arithmetic, so the bits are those of the general path on every target.
inline constexpr std::size_t grpo_group_tile = register_bytes / sizeof(double);
// The largest group size the fast path takes (a tile's rewards, transposed to double,
// stay within 4 KiB of stack).
inline constexpr std::size_t grpo_tile_max_group = 64;

// GRPO over groups [first_group, first_group + grpo_group_tile) of one size in
// [2, grpo_tile_max_group], with the double-precision mean: group_moments_of's
// arithmetic, each group's sums in the same order (the same bits). The tile is first
// transposed into vectors x[i] = reward i of the tile's groups (a GNU vector, one
// register; lane arithmetic is plain IEEE double), so that every step of every pass
// serves all of them at once and their dependent adds run side by side instead of one
// group waiting on the next. Writes nothing and returns false when a reward of the tile
// is NaN or infinite.
template <std::floating_point T>
bool grpo_uniform_tile(std::span<const T> rewards, std::span<T> advantages,
                       std::size_t first_group, std::size_t size,
                       const terms::group_params& params) {
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
    lanes square = d * d;
    clear_last_bit(square);
    m2 += square;
  }
  // Each group's plan as the general path decides it (a zero-variance group, max == min
  // exactly, gets exactly 0); then terms::advantage_of's deviation / divisor on the lanes.
  lanes divisor;
  bool zeroed[tile];
  for (std::size_t k = 0; k < tile; ++k) {
    terms::group_moments m;
    m.count = size;
    m.mean = mean[k];
    m.m2 = m2[k];
    m.min = low[k];
    m.max = high[k];
    m.zero_variance = low[k] == high[k];
    const terms::group_plan plan = terms::plan_group(m, params);
    divisor[k] = plan.divisor;
    zeroed[k] = plan.zero;
  }
  for (std::size_t i = 0; i < size; ++i) {
    const lanes advantage = (x[i] - mean) / divisor;
    for (std::size_t k = 0; k < tile; ++k)
      a[k * size + i] = zeroed[k] ? T(0) : static_cast<T>(advantage[k]);
  }
  return true;
}

}  // namespace detail

template <exec::host_policy Policy, std::floating_point T>
void grpo_advantages(const Policy& policy, std::span<const T> rewards, const group_layout& groups,
                     std::span<T> advantages, const grpo_options& options = {}) {
  detail::require_epsilon(options.epsilon, "epsilon");
  const terms::group_params params = detail::group_params_of(options);
  const bool refuse_singletons = params.refuse_singletons;
  const auto group = [&](std::size_t first, std::size_t last, bool zero_group) {
    detail::advantages_of_group(rewards, first, last, zero_group, params, advantages);
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
            if (!detail::grpo_uniform_tile(rewards, advantages, i * tile, size, params))
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
