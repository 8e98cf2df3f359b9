#pragma once
// The fast path of the group estimators (GRPO, Dr. GRPO, RLOO, the plain baseline, GPG) for
// uniform groups of 2 to 64 rewards in double precision: groups reduced side by side in
// vector lanes, with the per-group path's arithmetic and order (the same bits), and the
// per-group path (`group`) for the groups that do not fill a tile.

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/vector_lanes.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::detail {

// Groups reduced side by side on the fast path below (GRPO, RLOO, the plain baseline):
// uniform_tile_vectors vectors of as many doubles as one register of the target holds.
// A GNU vector wider than the registers is lowered badly (eight lanes ran at 73 M
// rewards/s on AVX2 where four ran at 460), and two independent vectors keep two add
// chains in flight. The width changes only the speed: each group is reduced in its own
// lane with the same arithmetic, so the bits are those of the general path on every
// target.
inline constexpr std::size_t uniform_tile_lanes = register_bytes / sizeof(double);
inline constexpr std::size_t uniform_tile_vectors = 2;
inline constexpr std::size_t uniform_group_tile = uniform_tile_vectors * uniform_tile_lanes;
// The largest group size the fast path takes (a tile's rewards, transposed to double,
// stay within 8 KiB of stack with AVX-512, 4 KiB with AVX2).
inline constexpr std::size_t uniform_tile_max_group = 64;

// Tiles below which the tile loop stays on the calling thread: a batch of fewer than
// 65536 rewards takes less time in tiles (about 1 ns per reward and core) than starting
// threads does (tens of microseconds: 4096 rewards took 40 us of wall time for 5 us of
// work when their 16 tiles went parallel).
inline constexpr std::size_t uniform_tile_parallel_rewards = 65536;
inline std::size_t uniform_tile_parallel_tiles(std::size_t group_size) {
  return uniform_tile_parallel_rewards / (uniform_group_tile * group_size) + 1;
}

// GRPO, RLOO or the plain baseline (params.kind) over groups [first_group, first_group +
// uniform_group_tile) of one size in [2, uniform_tile_max_group], with the
// double-precision mean: group_moments_of's, plan_group's and advantage_of's arithmetic,
// each group's sums in the same order (the same bits). The rewards are transposed in
// registers, uniform_tile_lanes groups at a time, into vectors
// x[i][p] = reward i of the groups of vector p (lane arithmetic is plain IEEE double), so
// that every step serves all the groups at once and their dependent adds run side by side
// instead of one group waiting on the next. The accumulators are whole vectors, never read
// lane by lane, so that they stay in registers.
// Writes nothing and returns false when a reward of the tile is NaN or infinite, or a
// group's sum overflows: the general path then decides.
// baseline_factor: what the plain baseline multiplies r - mean by (1 for the baseline
// itself: 1.0 * d == d exactly; GPG's alpha / f_norm, its gpg_advantage's scale * d).
template <std::floating_point T>
bool uniform_group_tile_of(std::span<const T> rewards, std::span<T> advantages,
                           std::size_t first_group, std::size_t size,
                           const terms::group_params& params, double baseline_factor) {
#if defined(__CUDA_ARCH__)
  // nvcc's device pass compiles this host function without a body: device code has no GNU
  // vectors to instantiate the terms with.
  (void)rewards, (void)advantages, (void)first_group, (void)size, (void)params;
  (void)baseline_factor;
  return false;
#else
  constexpr std::size_t W = uniform_tile_lanes;
  constexpr std::size_t P = uniform_tile_vectors;
  using lanes = double __attribute__((vector_size(W * sizeof(double))));
  using mask = long long __attribute__((vector_size(W * sizeof(long long))));
  typedef T stored __attribute__((vector_size(W * sizeof(T))));  // W rewards as stored
  static_assert(sizeof(lanes) == sizeof(mask));
  const T* first = rewards.data() + first_group * size;  // group k of vector p at (pW + k) size
  lanes x[uniform_tile_max_group][P];
  std::size_t i = 0;
  for (; i + W <= size; i += W) {
    CASCADE_RL_UNROLL_LANES
    for (std::size_t p = 0; p < P; ++p) {
      lanes block[W];  // block[k]: rewards i .. i + W - 1 of group k, then transposed
      const T* r = first + p * W * size + i;
      CASCADE_RL_UNROLL_LANES
      for (std::size_t k = 0; k < W; ++k) {
        stored raw;
        std::memcpy(&raw, r + k * size, sizeof raw);
        block[k] = __builtin_convertvector(raw, lanes);
      }
      transpose_lanes(block);
      CASCADE_RL_UNROLL_LANES
      for (std::size_t j = 0; j < W; ++j) x[i + j][p] = block[j];
    }
  }
  for (; i < size; ++i)
    for (std::size_t p = 0; p < P; ++p)
      for (std::size_t k = 0; k < W; ++k)
        x[i][p][k] = static_cast<double>(first[(p * W + k) * size + i]);
  // Min, max and sum as group_moments_of takes them (std::min, std::max, the sum in index
  // order). Starting from +inf, -inf and -0 gives reward 0 itself after the first step
  // (-0 + x is x, -0 included), as group_moments_of's start from reward 0 does.
  lanes low[P], high[P], sum[P];
  CASCADE_RL_UNROLL_LANES
  for (std::size_t p = 0; p < P; ++p) {
    low[p] = lanes{} + std::numeric_limits<double>::infinity();
    high[p] = -low[p];
    sum[p] = -lanes{};
  }
  for (std::size_t j = 0; j < size; ++j) {
    CASCADE_RL_UNROLL_LANES
    for (std::size_t p = 0; p < P; ++p) {
      low[p] = x[j][p] < low[p] ? x[j][p] : low[p];
      high[p] = high[p] < x[j][p] ? x[j][p] : high[p];
      sum[p] += x[j][p];
    }
  }
  // A NaN or infinite reward makes its group's sum NaN or infinite: sum - sum is then NaN
  // (unequal to 0), and 0 for a finite sum.
  mask nonfinite = {};
  CASCADE_RL_UNROLL_LANES
  for (std::size_t p = 0; p < P; ++p) nonfinite |= (sum[p] - sum[p]) != 0.0;
  long long nonfinite_lanes[W];
  std::memcpy(nonfinite_lanes, &nonfinite, sizeof nonfinite);
  for (std::size_t k = 0; k < W; ++k)
    if (nonfinite_lanes[k] != 0) return false;
  lanes mean[P], m2[P], divisor[P];
  mask keep[P];
  CASCADE_RL_UNROLL_LANES
  for (std::size_t p = 0; p < P; ++p) {
    mean[p] = sum[p] / static_cast<double>(size);  // terms::mean_from_sums in double
    m2[p] = lanes{};
  }
  // RLOO and the baseline scale the deviation by a factor (n / (n - 1), or 1) instead of
  // dividing by the spread, which they do not need.
  const bool rloo_like =
      params.kind == terms::group_kind::rloo || params.kind == terms::group_kind::baseline;
  const double n = static_cast<double>(size);
  const double factor = params.kind == terms::group_kind::rloo ? n / (n - 1.0) : baseline_factor;
  if (!rloo_like)
    for (std::size_t j = 0; j < size; ++j) {
      CASCADE_RL_UNROLL_LANES
      for (std::size_t p = 0; p < P; ++p) terms::add_square(x[j][p] - mean[p], m2[p]);
    }
  // plan_group for a finite group of two or more: 0 for a zero-variance group (max == min
  // exactly), else deviation / divisor or factor * deviation (terms::advantage_of).
  CASCADE_RL_UNROLL_LANES
  for (std::size_t p = 0; p < P; ++p) {
    keep[p] = low[p] != high[p];
    if (!rloo_like) terms::grpo_spread_divisor(m2[p], size, params, divisor[p]);
  }
  // Then group by group in the rewards' own order (no transpose back): terms::advantage_of's
  // (r - mean) / divisor in double, rounded to T, W rewards at a time. Group p W + k is lane
  // k of vector p.
  double group_mean[P * W], group_divisor[P * W];
  long long group_keep[P * W];
  std::memcpy(group_mean, mean, sizeof mean);
  std::memcpy(group_divisor, divisor, sizeof divisor);
  std::memcpy(group_keep, keep, sizeof keep);
  for (std::size_t g = 0; g < P * W; ++g) {
    const T* r = first + g * size;
    T* a = advantages.data() + (first_group + g) * size;
    if (group_keep[g] == 0) {
      std::fill(a, a + size, T(0));
      continue;
    }
    const double m = group_mean[g];
    std::size_t j = 0;
    if (rloo_like) {
      for (; j + W <= size; j += W) {
        stored raw;
        std::memcpy(&raw, r + j, sizeof raw);
        const lanes advantage = factor * (__builtin_convertvector(raw, lanes) - m);
        const stored out = __builtin_convertvector(advantage, stored);
        std::memcpy(a + j, &out, sizeof out);
      }
      for (; j < size; ++j) a[j] = static_cast<T>(factor * (static_cast<double>(r[j]) - m));
      continue;
    }
    const double d = group_divisor[g];
    for (; j + W <= size; j += W) {
      stored raw;
      std::memcpy(&raw, r + j, sizeof raw);
      const lanes advantage = (__builtin_convertvector(raw, lanes) - m) / d;
      const stored out = __builtin_convertvector(advantage, stored);
      std::memcpy(a + j, &out, sizeof out);
    }
    for (; j < size; ++j) a[j] = static_cast<T>((static_cast<double>(r[j]) - m) / d);
  }
  return true;
#endif
}

// Every group's advantages when all rewards are finite (returns false, having written
// what it may, when one is not: the general path then decides). Uniform groups in double
// precision go in whole tiles side by side, the rest one by one, both with the arithmetic
// of `group` (the general per-group path). baseline_factor: as uniform_group_tile_of's.
template <class Policy, std::floating_point T, class Group>
bool advantages_of_finite_groups(const Policy& policy, const group_layout& groups,
                                 std::span<const T> rewards, std::span<T> advantages,
                                 const terms::group_params& params,
                                 mean_accumulation accumulation, const Group& group,
                                 double baseline_factor = 1.0) {
  if (!(groups.is_uniform() && groups.groups() > 0 && groups.size(0) >= 2 &&
        groups.size(0) <= uniform_tile_max_group &&
        accumulation == mean_accumulation::double_precision))
    return for_each_finite_group(policy, rewards, groups, group);
  constexpr std::size_t tile = uniform_group_tile;
  const std::size_t size = groups.size(0);
  const std::size_t tiles = groups.groups() / tile;
  std::atomic<bool> nonfinite{false};
  for_each_index(
      policy, tiles,
      [&](std::size_t i) {
        if (!uniform_group_tile_of(rewards, advantages, i * tile, size, params, baseline_factor))
          nonfinite.store(true, std::memory_order_relaxed);
      },
      uniform_tile_parallel_tiles(size));
  for (std::size_t g = tiles * tile; g < groups.groups(); ++g) {
    if (group_has_nonfinite(rewards, groups.begin(g), groups.end(g))) return false;
    group(groups.begin(g), groups.end(g), false);
  }
  return !nonfinite.load(std::memory_order_relaxed);
}

}  // namespace cascade_rl::detail
