#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace grpo_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::grpo_options;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {1, 0, 0, 1}, {0.5, 0.5}, {2, 0, 1}.
const std::vector<double> rewards{1, 0, 0, 1, 0.5, 0.5, 2, 0, 1};
const std::vector<std::int64_t> offsets{0, 4, 6, 9};

std::vector<double> grpo(const std::vector<double>& r, const std::vector<std::int64_t>& o,
                         const grpo_options& options = {}) {
  std::vector<double> a(r.size());
  cascade_rl::grpo_advantages(exec::seq, group_layout(o), r, a, options);
  return a;
}

TEST(Grpo, NormalisesByTheUnbiasedGroupStd) {
  const auto a = grpo(rewards, offsets);
  const double s0 = std::sqrt(1.0 / 3.0);  // {1,0,0,1}: sum of squares 1, / 3
  EXPECT_DOUBLE_EQ(a[0], 0.5 / (s0 + 1e-6));
  EXPECT_DOUBLE_EQ(a[1], -0.5 / (s0 + 1e-6));
  EXPECT_DOUBLE_EQ(a[3], 0.5 / (s0 + 1e-6));
  EXPECT_EQ(a[4], 0.0);  // zero-variance group: exactly 0
  EXPECT_EQ(a[5], 0.0);
  EXPECT_DOUBLE_EQ(a[6], 1.0 / (1.0 + 1e-6));  // {2,0,1}: mean 1, std 1
  EXPECT_DOUBLE_EQ(a[7], -1.0 / (1.0 + 1e-6));
  EXPECT_EQ(a[8], 0.0);
}

TEST(Grpo, BiasedStdAndEpsilonInsideTheSqrt) {
  const auto biased = grpo(rewards, offsets, {.estimator = cascade_rl::std_estimator::biased});
  EXPECT_DOUBLE_EQ(biased[0], 0.5 / (0.5 + 1e-6));
  const auto inside = grpo(rewards, offsets,
                           {.epsilon = 1e-2, .epsilon_at = cascade_rl::epsilon_placement::inside_sqrt});
  EXPECT_DOUBLE_EQ(inside[0], 0.5 / std::sqrt(1.0 / 3.0 + 1e-2));
  EXPECT_DOUBLE_EQ(inside[6], 1.0 / std::sqrt(1.0 + 1e-2));
}

TEST(Grpo, DrGrpoOnlyCentres) {
  const auto a = grpo(rewards, offsets, {.scale_by_std = false});
  EXPECT_EQ(a, (std::vector<double>{0.5, -0.5, -0.5, 0.5, 0, 0, 1, -1, 0}));
}

TEST(Grpo, ZeroVarianceIsExactlyZeroEvenWithoutEpsilon) {
  const std::vector<double> constant{0.3, 0.3, 0.3};
  const std::vector<std::int64_t> one{0, 3};
  for (const auto& a : {grpo(constant, one, {.epsilon = 0.0}),
                        grpo(constant, one, {.epsilon = 0.0, .accumulation =
                                                 cascade_rl::mean_accumulation::float32_sequential})})
    for (double v : a) {
      EXPECT_EQ(v, 0.0);
      EXPECT_FALSE(std::signbit(v));
    }
}

TEST(Grpo, SingletonRules) {
  const std::vector<double> r{3, 1, 2};
  const std::vector<std::int64_t> o{0, 1, 3};  // {3}, {1, 2}
  expect_error_naming([&] { grpo(r, o); }, "groups[0]", "group of one");
  EXPECT_EQ(grpo(r, o, {.singleton = cascade_rl::singleton_rule::zero_advantage})[0], 0.0);
  // veRL: mean 0, std 1.
  EXPECT_DOUBLE_EQ(grpo(r, o, {.singleton = cascade_rl::singleton_rule::raw_score})[0],
                   3.0 / (1.0 + 1e-6));
  EXPECT_EQ(grpo(r, o, {.scale_by_std = false, .singleton = cascade_rl::singleton_rule::raw_score})[0],
            3.0);
  // Estimators that do not need two: a group of one is a zero-variance group.
  EXPECT_EQ(grpo(r, o, {.scale_by_std = false})[0], 0.0);
  EXPECT_EQ(grpo(r, o, {.estimator = cascade_rl::std_estimator::biased})[0], 0.0);
}

TEST(Grpo, NonfiniteRewards) {
  std::vector<double> r = rewards;
  r[7] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming([&] { grpo(r, offsets); }, "rewards[7]", "NaN");
  const auto a = grpo(r, offsets, {.nonfinite = cascade_rl::nonfinite_rule::zero_group});
  EXPECT_EQ(a[6], 0.0);
  EXPECT_EQ(a[7], 0.0);
  EXPECT_EQ(a[8], 0.0);
  EXPECT_DOUBLE_EQ(a[0], grpo(rewards, offsets)[0]);  // other groups untouched
}

TEST(Grpo, RefusesBadOptionsAndSizes) {
  expect_error_naming([&] { grpo(rewards, offsets, {.epsilon = -1e-6}); }, "epsilon");
  expect_error_naming([&] { grpo(rewards, offsets, {.epsilon = std::nan("")}); }, "epsilon");
  std::vector<double> short_out(8);
  expect_error_naming(
      [&] { cascade_rl::grpo_advantages(exec::seq, group_layout(offsets), rewards, short_out); },
      "advantages");
  const std::vector<double> r{1, 2};
  expect_error_naming([&] { grpo(r, offsets); }, "rewards");
}

TEST(Grpo, FloatRewardsAndUniformGroups) {
  const std::vector<float> r{1, 0, 0, 1, 2, 0, 1, 1};
  std::vector<float> a(8);
  cascade_rl::grpo_advantages(exec::seq, group_layout::uniform({.groups = 2, .size = 4}), r, a);
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(0.5 / (std::sqrt(1.0 / 3.0) + 1e-6)));
  EXPECT_FLOAT_EQ(a[4], static_cast<float>(1.0 / (std::sqrt(2.0 / 3.0) + 1e-6)));
}

// Uniform groups of 2 to 64 in double precision take the group tile (uniform_group_tile_of:
// many groups side by side in vector lanes); the same groups given by offsets take the
// general path, one group at a time. The two must give the same bits for every size
// (whole and partial vector blocks), both reward types and every option, with
// zero-variance groups, with a NaN or infinite reward (the tile hands the batch back) and
// with finite rewards whose sum overflows (likewise).
template <class T>
std::vector<T> tile_case_rewards(std::size_t size, std::size_t groups, int kind) {
  std::mt19937 rng(static_cast<unsigned>(size * 131 + groups * 7 + kind));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::bernoulli_distribution correct(0.4);
  std::vector<T> r(size * groups);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double z = normal(rng);
    r[i] = static_cast<T>(kind == 0   ? (correct(rng) ? 1.0 : 0.0)
                          : kind == 1 ? z
                                      : 1e6 + z * static_cast<double>(i % 3));
  }
  for (std::size_t g = 0; g < groups; g += 3)  // every third group constant
    for (std::size_t i = 0; i < size; ++i) r[g * size + i] = T(0.25);
  return r;
}

// The estimator's advantages of r in groups of `size`, the layout uniform (the tile) or
// given by offsets (the general path).
template <class T, class Estimator>
std::vector<T> advantages_by_layout(const std::vector<T>& r, std::size_t size, bool uniform,
                                    const Estimator& estimator) {
  const std::size_t groups = r.size() / size;
  std::vector<std::int64_t> offsets(groups + 1);
  for (std::size_t g = 0; g <= groups; ++g) offsets[g] = static_cast<std::int64_t>(g * size);
  const group_layout layout =
      uniform ? group_layout::uniform({.groups = groups, .size = size}) : group_layout(offsets);
  std::vector<T> a(r.size());
  estimator(layout, std::span<const T>(r), std::span<T>(a));
  return a;
}

template <class T>
std::vector<T> grpo_by_layout(const std::vector<T>& r, std::size_t size, bool uniform,
                              const grpo_options& options) {
  return advantages_by_layout(r, size, uniform, [&](const group_layout& l, auto in, auto out) {
    cascade_rl::grpo_advantages(exec::par, l, in, out, options);
  });
}

template <class T>
void expect_same_bits(const std::vector<T>& tile, const std::vector<T>& general,
                      const std::string& what) {
  ASSERT_EQ(tile.size(), general.size());
  for (std::size_t i = 0; i < tile.size(); ++i)
    ASSERT_EQ(std::memcmp(&tile[i], &general[i], sizeof(T)), 0)
        << what << ": advantages[" << i << "] " << tile[i] << " vs " << general[i];
}

template <class T>
void expect_tile_matches_general_path() {
  std::vector<grpo_options> options(5);
  options[1].scale_by_std = false;
  options[2].epsilon_at = cascade_rl::epsilon_placement::inside_sqrt;
  options[3].estimator = cascade_rl::std_estimator::biased;
  options[3].epsilon = 0.0;
  options[4].nonfinite = cascade_rl::nonfinite_rule::zero_group;
  for (std::size_t o = 0; o < options.size(); ++o)
    for (std::size_t size = 2; size <= 64; size += size < 20 ? 1 : 7)
      for (std::size_t groups : {5, 16, 41})
        for (int kind = 0; kind < 3; ++kind) {
          const auto r = tile_case_rewards<T>(size, groups, kind);
          const std::string what = "option set " + std::to_string(o) + ", size " +
                                   std::to_string(size) + ", groups " + std::to_string(groups) +
                                   ", kind " + std::to_string(kind);
          expect_same_bits(grpo_by_layout(r, size, true, options[o]),
                           grpo_by_layout(r, size, false, options[o]), what);
        }
  // A NaN and an infinite reward inside tiles: their groups zeroed under zero_group, the
  // error naming the first bad index otherwise.
  auto r = tile_case_rewards<T>(16, 40, 1);
  r[16 * 9 + 3] = std::numeric_limits<T>::quiet_NaN();
  r[16 * 30 + 15] = std::numeric_limits<T>::infinity();
  expect_same_bits(grpo_by_layout(r, 16, true, options[4]),
                   grpo_by_layout(r, 16, false, options[4]), "NaN and inf, zero_group");
  expect_error_naming([&] { grpo_by_layout(r, 16, true, options[0]); }, "rewards[147]", "NaN");
  // Finite rewards whose group sum overflows in double.
  auto huge = tile_case_rewards<T>(8, 16, 1);
  for (std::size_t i = 0; i < 8; ++i) huge[i] = std::numeric_limits<T>::max();
  expect_same_bits(grpo_by_layout(huge, 8, true, options[0]),
                   grpo_by_layout(huge, 8, false, options[0]), "overflowing sum");
}

TEST(Grpo, GroupTileGivesTheGeneralPathsBits) {
  expect_tile_matches_general_path<float>();
  expect_tile_matches_general_path<double>();
}

// RLOO takes the same tile (factor n / (n - 1) times the deviation): the same bits as its
// general path for every size, both types, zero-variance groups, and a NaN (zero_group).
template <class T>
void expect_rloo_tile_matches_general_path() {
  std::vector<cascade_rl::rloo_options> options(2);
  options[1].nonfinite = cascade_rl::nonfinite_rule::zero_group;
  const auto rloo = [](const cascade_rl::rloo_options& o) {
    return [&o](const group_layout& l, auto in, auto out) {
      cascade_rl::rloo_advantages(exec::par, l, in, out, o);
    };
  };
  for (std::size_t size = 2; size <= 64; size += size < 20 ? 1 : 7)
    for (std::size_t groups : {5, 16, 41})
      for (int kind = 0; kind < 3; ++kind) {
        const auto r = tile_case_rewards<T>(size, groups, kind);
        const std::string what = "RLOO, size " + std::to_string(size) + ", groups " +
                                 std::to_string(groups) + ", kind " + std::to_string(kind);
        expect_same_bits(advantages_by_layout(r, size, true, rloo(options[0])),
                         advantages_by_layout(r, size, false, rloo(options[0])), what);
      }
  auto r = tile_case_rewards<T>(16, 40, 1);
  r[16 * 9 + 3] = std::numeric_limits<T>::quiet_NaN();
  expect_same_bits(advantages_by_layout(r, 16, true, rloo(options[1])),
                   advantages_by_layout(r, 16, false, rloo(options[1])), "RLOO, NaN, zero_group");
  // A hand-computed group: {1, 0, 0, 1} has mean 1/2, so 4/3 * (r - 1/2) = +-2/3.
  const std::vector<T> small{1, 0, 0, 1};
  const auto a = advantages_by_layout(small, 4, true, rloo(options[0]));
  EXPECT_EQ(a[0], static_cast<T>(4.0 / 3.0 * 0.5));
  EXPECT_EQ(a[1], static_cast<T>(4.0 / 3.0 * -0.5));
}

TEST(RlooGroupTile, GivesTheGeneralPathsBits) {
  expect_rloo_tile_matches_general_path<float>();
  expect_rloo_tile_matches_general_path<double>();
}

// GPG takes the tile as the plain baseline scaled by alpha / f_norm: the same bits as its
// general path for every size, both types, two f_norms, zero-variance groups, and a NaN
// (zero_group: its group zeroed, and it still counts in alpha on both paths).
template <class T>
void expect_gpg_tile_matches_general_path() {
  std::vector<cascade_rl::gpg_options> options(3);
  options[1].f_norm = 3.0;
  options[2].nonfinite = cascade_rl::nonfinite_rule::zero_group;
  const auto gpg = [](const cascade_rl::gpg_options& o) {
    return [&o](const group_layout& l, auto in, auto out) {
      cascade_rl::gpg_advantages(exec::par, l, in, out, o);
    };
  };
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t size = 2; size <= 64; size += size < 20 ? 1 : 7)
      for (std::size_t groups : {5, 16, 41})
        for (int kind = 0; kind < 3; ++kind) {
          const auto r = tile_case_rewards<T>(size, groups, kind);
          const std::string what = "GPG, f_norm " + std::to_string(options[o].f_norm) +
                                   ", size " + std::to_string(size) + ", groups " +
                                   std::to_string(groups) + ", kind " + std::to_string(kind);
          expect_same_bits(advantages_by_layout(r, size, true, gpg(options[o])),
                           advantages_by_layout(r, size, false, gpg(options[o])), what);
        }
  auto r = tile_case_rewards<T>(16, 40, 1);
  r[16 * 9 + 3] = std::numeric_limits<T>::quiet_NaN();
  expect_same_bits(advantages_by_layout(r, 16, true, gpg(options[2])),
                   advantages_by_layout(r, 16, false, gpg(options[2])), "GPG, NaN, zero_group");
  expect_error_naming([&] { advantages_by_layout(r, 16, true, gpg(options[0])); }, "scores[147]",
                      "NaN");
  // By hand: 16 groups {1, 0, 0, 1}, half the scores non-zero, so alpha = 2 and the
  // advantages 2 * (r - 1/2) = +-1.
  std::vector<T> small(64);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = i % 4 == 0 || i % 4 == 3 ? 1 : 0;
  const auto a = advantages_by_layout(small, 4, true, gpg(options[0]));
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], small[i] == 1 ? T(1) : T(-1)) << i;
}

TEST(GpgGroupTile, GivesTheGeneralPathsBits) {
  expect_gpg_tile_matches_general_path<float>();
  expect_gpg_tile_matches_general_path<double>();
}

TEST(Broadcast, PerSequenceValueOnValidTokensZeroOnMasked) {
  const std::vector<std::int64_t> offsets3{0, 3, 3, 5};
  const std::vector<std::uint8_t> mask{1, 0, 1, 1, 1};
  const cascade_rl::token_layout tokens(offsets3, mask);
  const std::vector<float> values{2.5f, 7.0f, -1.0f};
  std::vector<float> out(5, 9.0f);
  cascade_rl::broadcast_to_tokens(exec::seq, tokens, values, out);
  EXPECT_EQ(out, (std::vector<float>{2.5f, 0.0f, 2.5f, -1.0f, -1.0f}));
  std::vector<float> short_out(4);
  expect_error_naming(
      [&] { cascade_rl::broadcast_to_tokens(exec::seq, tokens, values, short_out); }, "per_token");
  const std::vector<float> two{1.0f, 2.0f};
  expect_error_naming([&] { cascade_rl::broadcast_to_tokens(exec::seq, tokens, two, out); },
                      "per_sequence");
}

}  // namespace grpo_advantages_cases
}  // namespace
