// optimal_token_baseline_advantages (algorithms/optimal_token_baseline.hpp): a hand-computed
// group, the singleton and zero-tail conventions, the multi-turn compaction, the refusals
// (also found during the work, in a later group, under exec::par), seq/par bitwise and the
// host loops bitwise against the terms' sequence and group passes that the other executors
// run. veRL's v2 cases run in test_verl_reference_advantages.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <limits>
#include <random>
#include <vector>

#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/optimal_token_baseline.hpp"
#include "support/expect_error.hpp"

namespace {
namespace optimal_token_baseline_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::optimal_token_baseline_options;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// log pi = log(1/2), sum pi^2 = 1/2: w = 1 - 1 + 1/2 = 1/2 exactly (math::exp(log 0.5)
// is 0.5 to the ulp; the test reads it back below).
const double half_log = std::log(0.5);

struct otb_case {
  std::vector<std::int64_t> seq_offsets;
  std::vector<std::uint8_t> mask;
  std::vector<double> rewards, old, spi, rho;
};

// One group of two sequences: A has 3 valid tokens, B has 2 then a masked one.
//   A: rewards 0, 0, 1   -> G = 1, 1, 1   W = w, 2w, 3w
//   B: rewards 0, 2, (5) -> G = 2, 2, (0)  W = w, 2w, -
// With every w = 1/2: B_0 = (1 * 0.5 + 2 * 0.5) / 1 = 1.5, B_1 = (1 + 2 * 1) / 2 = 1.5,
// B_2 = 1 * 1.5 / 1.5 = 1 (only A is there).
otb_case two_rows() {
  otb_case c;
  c.seq_offsets = {0, 3, 6};
  c.mask = {1, 1, 1, 1, 1, 0};
  c.rewards = {0, 0, 1, 0, 2, 5};
  c.old.assign(6, half_log);
  c.spi.assign(6, 0.5);
  return c;
}

void run(const otb_case& c, const std::vector<std::int64_t>& group_offsets,
         const optimal_token_baseline_options& options, std::vector<double>& advantages,
         std::vector<double>& returns) {
  advantages.assign(c.mask.size(), -7);
  returns.assign(c.mask.size(), -7);
  cascade_rl::optimal_token_baseline_advantages(exec::seq, group_layout(group_offsets),
                                                token_layout(c.seq_offsets, c.mask),
                                                {.token_rewards = c.rewards,
                                                 .old_log_probs = c.old,
                                                 .sum_pi_squared = c.spi,
                                                 .rollout_is_weights = c.rho},
                                                advantages, returns, options);
}

TEST(OptimalTokenBaseline, HandComputedGroup) {
  ASSERT_EQ(cascade_rl::terms::otb_token_weight(half_log, 0.5, 1.0), 0.5);
  const otb_case c = two_rows();
  std::vector<double> advantages, returns;
  run(c, {0, 2}, {.epsilon = 0}, advantages, returns);
  EXPECT_EQ(returns, (std::vector<double>{1, 1, 1, 2, 2, 0}));
  EXPECT_EQ(advantages, (std::vector<double>{-0.5, -0.5, 0, 0.5, 0.5, 0}));
  // handle_zero_tail: A is the unique longest (3 > 2), baseline 0 from position 2 on.
  run(c, {0, 2}, {.epsilon = 0, .handle_zero_tail = true}, advantages, returns);
  EXPECT_EQ(advantages, (std::vector<double>{-0.5, -0.5, 1, 0.5, 0.5, 0}));
  // Epsilon joins the denominator: B_2 = 1.5 / (1.5 + 0.5) = 0.75.
  run(c, {0, 2}, {.epsilon = 0.5}, advantages, returns);
  EXPECT_EQ(advantages[2], 0.25);
}

TEST(OptimalTokenBaseline, ImportanceWeightsScaleEachTokensWeightBySquare) {
  otb_case c = two_rows();
  // rho = 2 on A's first token: w = 2 there, A's W = 2, 2.5, 3; B's W = 0.5, 1.
  c.rho = {2, 1, 1, 1, 1, 1};
  std::vector<double> advantages, returns;
  run(c, {0, 2}, {.epsilon = 0}, advantages, returns);
  EXPECT_EQ(advantages[0], 1 - (1 * 2 + 2 * 0.5) / 2.5);  // B_0 = 3 / 2.5 = 1.2
  EXPECT_EQ(advantages[1], 1 - (1 * 2.5 + 2 * 1) / 3.5);
  EXPECT_EQ(advantages[3], 2 - (1 * 2 + 2 * 0.5) / 2.5);
}

TEST(OptimalTokenBaseline, GroupOfOneKeepsItsReturns) {
  const otb_case c = two_rows();
  std::vector<double> advantages, returns;
  run(c, {0, 1, 2}, {}, advantages, returns);
  EXPECT_EQ(advantages, (std::vector<double>{1, 1, 1, 2, 2, 0}));
}

TEST(OptimalTokenBaseline, MultiTurnComparesValidTokensByRank) {
  // A: a hole at position 1 (a tool observation, reward 9 ignored); B: no hole.
  //   A valid: positions 0, 2, 3 -> ranks 0, 1, 2; rewards 0, 0, 1 -> G = 1, 1, 1
  //   B valid: ranks 0, 1;   rewards 0, 2 -> G = 2, 2
  // Ranks agree with the hand-computed group above: -0.5, -0.5, 0 and 0.5, 0.5.
  otb_case c;
  c.seq_offsets = {0, 4, 6, 8};
  c.mask = {1, 0, 1, 1, 1, 1, 0, 0};  // a third sequence with no valid token
  c.rewards = {0, 9, 0, 1, 0, 2, 3, 3};
  c.old.assign(8, half_log);
  c.spi.assign(8, 0.5);
  std::vector<double> advantages, returns;
  run(c, {0, 3}, {.epsilon = 0, .multi_turn = true}, advantages, returns);
  EXPECT_EQ(returns, (std::vector<double>{1, 1, 1, 1, 2, 2, 0, 0}));
  EXPECT_EQ(advantages, (std::vector<double>{-0.5, 0, -0.5, 0, 0.5, 0.5, 0, 0}));
  // Single-turn compares offsets instead: position 1 holds B only, position 2 A only.
  run(c, {0, 3}, {.epsilon = 0}, advantages, returns);
  EXPECT_EQ(advantages[0], 1 - (1 * 0.5 + 2 * 0.5) / 1.0);
  EXPECT_EQ(advantages[5], 0.0);  // B alone at offset 1: G - G W / W
  EXPECT_EQ(advantages[2], 0.0);  // A alone at offset 2
  // Multi-turn drops the empty sequence: a group of it and one other is a group of one.
  run(c, {0, 1, 3}, {.epsilon = 0, .multi_turn = true}, advantages, returns);
  EXPECT_EQ(advantages[4], 2.0);
  EXPECT_EQ(advantages[5], 2.0);
  run(c, {0, 1, 3}, {.epsilon = 0}, advantages, returns);
  EXPECT_EQ(advantages[4], 0.0);  // single-turn keeps it: N = 2, B = G W / W
}

TEST(OptimalTokenBaseline, ZeroTailNeedsAUniqueLongest) {
  otb_case c;
  c.seq_offsets = {0, 3, 6};
  c.mask = {1, 1, 1, 1, 1, 1};
  c.rewards = {0, 0, 1, 0, 0, 3};
  c.old.assign(6, half_log);
  c.spi.assign(6, 0.5);
  std::vector<double> with_tail, without, returns;
  run(c, {0, 2}, {.epsilon = 0, .handle_zero_tail = true}, with_tail, returns);
  run(c, {0, 2}, {.epsilon = 0}, without, returns);
  EXPECT_EQ(with_tail, without);
  EXPECT_EQ(without[0], 1 - 2.0);  // B = (1 + 3) / 2
}

TEST(OptimalTokenBaseline, RefusalsNameArgumentAndIndex) {
  const otb_case c = two_rows();
  const token_layout tokens(c.seq_offsets, c.mask);
  const std::vector<std::int64_t> groups{0, 2};
  std::vector<double> advantages(6), returns(6);
  const auto call = [&](const otb_case& k, const optimal_token_baseline_options& o) {
    cascade_rl::optimal_token_baseline_advantages(exec::seq, group_layout(groups), tokens,
                                                  {.token_rewards = k.rewards,
                                                   .old_log_probs = k.old,
                                                   .sum_pi_squared = k.spi,
                                                   .rollout_is_weights = k.rho},
                                                  advantages, returns, o);
  };
  otb_case bad = c;
  bad.old[4] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming([&] { call(bad, {}); }, "old_log_probs", "4", "NaN");
  bad = c;
  bad.old[5] = std::numeric_limits<double>::quiet_NaN();  // masked: not read
  call(bad, {});
  bad = c;
  bad.spi[1] = std::numeric_limits<double>::infinity();
  expect_error_naming([&] { call(bad, {}); }, "sum_pi_squared", "1", "infinite");
  bad = c;
  bad.rewards[0] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming([&] { call(bad, {}); }, "token_rewards", "0", "NaN");
  bad = c;
  bad.rho.assign(6, 1.0);
  bad.rho[3] = std::numeric_limits<double>::infinity();
  expect_error_naming([&] { call(bad, {}); }, "rollout_is_weights", "3", "infinite");
  bad.rho.assign(5, 1.0);
  expect_error_naming([&] { call(bad, {}); }, "rollout_is_weights", "one per token");
  bad = c;
  bad.spi.pop_back();
  expect_error_naming([&] { call(bad, {}); }, "sum_pi_squared", "one per token");
  expect_error_naming([&] { call(c, {.epsilon = -1}); }, "options.epsilon", ">= 0");
  expect_error_naming(
      [&] {
        const std::vector<std::int64_t> three{0, 3};
        cascade_rl::optimal_token_baseline_advantages(exec::seq, group_layout(three), tokens,
                                                      {.token_rewards = c.rewards,
                                                       .old_log_probs = c.old,
                                                       .sum_pi_squared = c.spi,
                                                       .rollout_is_weights = {}},
                                                      advantages, returns);
      },
      "tokens", "groups hold 3");
}

TEST(OptimalTokenBaseline, ParallelMatchesSequentialBitwise) {
  std::mt19937 rng(20);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<std::int64_t> seq_offsets{0}, group_offsets{0};
  for (std::size_t g = 0; g < 150; ++g) {
    const std::size_t size = 1 + g % 5;
    for (std::size_t i = 0; i < size; ++i)
      seq_offsets.push_back(seq_offsets.back() + static_cast<std::int64_t>(rng() % 40));
    group_offsets.push_back(static_cast<std::int64_t>(seq_offsets.size() - 1));
  }
  const std::size_t n = static_cast<std::size_t>(seq_offsets.back());
  std::vector<std::uint8_t> mask(n);
  std::vector<float> rewards(n), old(n), spi(n), rho(n);
  for (std::size_t t = 0; t < n; ++t) {
    mask[t] = unit(rng) < 0.8f;
    rewards[t] = unit(rng) < 0.1f ? unit(rng) - 0.5f : 0.0f;
    old[t] = -3.0f * unit(rng);
    spi[t] = 0.2f + 0.5f * unit(rng);
    rho[t] = 0.5f + unit(rng);
  }
  const token_layout tokens(seq_offsets, mask);
  for (const bool multi : {false, true})
    for (const bool tail : {false, true}) {
      const optimal_token_baseline_options o{.handle_zero_tail = tail, .multi_turn = multi};
      std::vector<float> a_seq(n), r_seq(n), a_par(n), r_par(n);
      const cascade_rl::optimal_token_baseline_inputs<float> in{.token_rewards = rewards,
                                                                .old_log_probs = old,
                                                                .sum_pi_squared = spi,
                                                                .rollout_is_weights = rho};
      cascade_rl::optimal_token_baseline_advantages(exec::seq, group_layout(group_offsets), tokens,
                                                    in, a_seq, r_seq, o);
      cascade_rl::optimal_token_baseline_advantages(exec::par, group_layout(group_offsets), tokens,
                                                    in, a_par, r_par, o);
      EXPECT_EQ(std::memcmp(a_seq.data(), a_par.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(r_seq.data(), r_par.data(), n * sizeof(float)), 0);
    }
}

// A random batch: non-uniform groups (1 to 6 rows, some rows empty), a mask with
// tool-observation holes and fully masked rows, NaN and infinities on masked tokens only
// (never read), and rollout IS weights.
template <class T>
struct random_batch {
  std::vector<std::int64_t> seq_offsets{0}, group_offsets{0};
  std::vector<std::uint8_t> mask;
  std::vector<T> rewards, old, spi, rho;

  explicit random_batch(unsigned seed, std::size_t groups = 120) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t size = 1 + rng() % 6;
      for (std::size_t i = 0; i < size; ++i)
        seq_offsets.push_back(seq_offsets.back() +
                              static_cast<std::int64_t>(rng() % 7 == 0 ? 0 : rng() % 90));
      group_offsets.push_back(static_cast<std::int64_t>(seq_offsets.size() - 1));
    }
    const std::size_t n = static_cast<std::size_t>(seq_offsets.back());
    mask.resize(n);
    rewards.resize(n);
    old.resize(n);
    spi.resize(n);
    rho.resize(n);
    for (std::size_t t = 0; t < n; ++t) {
      mask[t] = unit(rng) < 0.8;
      rewards[t] = unit(rng) < 0.15 ? static_cast<T>(4 * unit(rng) - 2) : T(0);
      old[t] = static_cast<T>(-4 * unit(rng));
      spi[t] = static_cast<T>(unit(rng));
      rho[t] = static_cast<T>(0.3 + 1.5 * unit(rng));
    }
    for (std::size_t s = 0; s + 1 < seq_offsets.size(); s += 9)  // whole rows masked
      for (auto t = seq_offsets[s]; t < seq_offsets[s + 1]; ++t) mask[static_cast<std::size_t>(t)] = 0;
    for (std::size_t t = 0; t < n; t += 5)
      if (mask[t] == 0) {
        rewards[t] = std::numeric_limits<T>::quiet_NaN();
        old[t] = std::numeric_limits<T>::infinity();
        spi[t] = -std::numeric_limits<T>::infinity();
        rho[t] = std::numeric_limits<T>::quiet_NaN();
      }
  }
  std::size_t tokens() const { return mask.size(); }
};

// The sequence and group passes of terms/optimal_token_baseline.hpp, as the Thrust and CUDA
// executors run them (one sequence, then one group, at a time): the reference the host's
// fused group loops must match bit for bit.
template <class T>
void reference_passes(const std::vector<std::int64_t>& group_offsets,
                      const std::vector<std::int64_t>& seq_offsets,
                      const std::vector<std::uint8_t>& mask, const random_batch<T>& b,
                      const std::vector<T>& rho, const optimal_token_baseline_options& o,
                      std::vector<T>& advantages, std::vector<T>& returns) {
  namespace terms = cascade_rl::terms;
  const std::size_t n = mask.size(), sequences = seq_offsets.size() - 1;
  advantages.assign(n, T(-7));
  returns.assign(n, T(-7));
  const terms::otb_rows rows{seq_offsets.data(), mask.data()};
  std::vector<double> cumulative(n, 0.0);
  std::vector<std::size_t> counts(sequences, 0), compacted(o.multi_turn ? n : 0);
  std::size_t* const compacted_at = o.multi_turn ? compacted.data() : nullptr;
  for (std::size_t s = 0; s < sequences; ++s)
    terms::otb_sequence(rows, s, rows.begin(s), rows.end(s), b.rewards.data(), b.old.data(),
                        b.spi.data(), rho.empty() ? nullptr : rho.data(), returns.data(),
                        advantages.data(), cumulative.data(), counts.data(), compacted_at);
  for (std::size_t g = 0; g + 1 < group_offsets.size(); ++g)
    terms::otb_group(rows, static_cast<std::size_t>(group_offsets[g]),
                     static_cast<std::size_t>(group_offsets[g + 1]), counts.data(), compacted_at,
                     static_cast<const T*>(returns.data()),
                     static_cast<const double*>(cumulative.data()), advantages.data(), o.epsilon,
                     o.handle_zero_tail);
}

template <class T>
void expect_host_matches_reference_passes(unsigned seed) {
  const random_batch<T> b(seed);
  const std::size_t n = b.tokens();
  const std::vector<std::uint8_t> all_valid(n, 1);
  for (const bool masked : {true, false})
    for (const bool weighted : {true, false})
      for (const bool multi : {false, true})
        for (const bool tail : {false, true}) {
          // Unmasked, the batch's NaN on masked tokens would be read: a clean copy then.
          random_batch<T> clean = b;
          if (!masked)
            for (std::size_t t = 0; t < n; ++t)
              if (b.mask[t] == 0) clean.rewards[t] = clean.old[t] = clean.spi[t] = clean.rho[t] = T(0.5);
          const std::vector<std::uint8_t>& mask = masked ? b.mask : all_valid;
          const std::vector<T> no_rho;
          const std::vector<T>& rho = weighted ? clean.rho : no_rho;
          const optimal_token_baseline_options o{.epsilon = tail ? 1e-6 : 0.25,
                                                 .handle_zero_tail = tail,
                                                 .multi_turn = multi};
          std::vector<T> a_ref, r_ref;
          reference_passes(b.group_offsets, b.seq_offsets, mask, clean, rho, o, a_ref, r_ref);
          const token_layout tokens(b.seq_offsets, masked ? std::span<const std::uint8_t>(b.mask)
                                                          : std::span<const std::uint8_t>());
          const cascade_rl::optimal_token_baseline_inputs<T> in{.token_rewards = clean.rewards,
                                                                .old_log_probs = clean.old,
                                                                .sum_pi_squared = clean.spi,
                                                                .rollout_is_weights = rho};
          for (const bool parallel : {false, true}) {
            std::vector<T> a(n, T(3)), r(n, T(3));
            if (parallel)
              cascade_rl::optimal_token_baseline_advantages(
                  exec::par, group_layout(b.group_offsets), tokens, in, a, r, o);
            else
              cascade_rl::optimal_token_baseline_advantages(
                  exec::seq, group_layout(b.group_offsets), tokens, in, a, r, o);
            const std::string where = std::string(parallel ? "par" : "seq") +
                                      (masked ? " masked" : "") + (weighted ? " weighted" : "") +
                                      (multi ? " multi-turn" : "") + (tail ? " zero-tail" : "");
            EXPECT_EQ(std::memcmp(a.data(), a_ref.data(), n * sizeof(T)), 0) << where;
            EXPECT_EQ(std::memcmp(r.data(), r_ref.data(), n * sizeof(T)), 0) << where;
          }
        }
}

TEST(OptimalTokenBaseline, HostMatchesTheTermsPassesBitwise) {
  expect_host_matches_reference_passes<float>(31);
  expect_host_matches_reference_passes<double>(32);
}

TEST(OptimalTokenBaseline, PaddedRowsOfEqualLengthMatchTheTermsPasses) {
  // The benchmark's shape: padded rows, uniform groups, no mask, no weights.
  const std::size_t rows = 48, width = 37;
  random_batch<float> b(33, 1);
  b.seq_offsets = cascade_rl::padded_offsets(rows, width);
  b.group_offsets = {0, 16, 32, 48};
  b.mask.assign(rows * width, 1);
  std::mt19937 rng(34);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  b.rewards.assign(rows * width, 0.0f);
  b.old.resize(rows * width);
  b.spi.resize(rows * width);
  for (std::size_t s = 0; s < rows; ++s) b.rewards[(s + 1) * width - 1] = unit(rng) < 0.4f;
  for (std::size_t t = 0; t < rows * width; ++t) {
    b.old[t] = -2.0f * unit(rng);
    b.spi[t] = unit(rng);
  }
  const optimal_token_baseline_options o{.handle_zero_tail = true};
  std::vector<float> a_ref, r_ref, a(rows * width), r(rows * width);
  reference_passes(b.group_offsets, b.seq_offsets, b.mask, b, std::vector<float>{}, o, a_ref,
                   r_ref);
  const auto groups = group_layout::uniform({.groups = 3, .size = 16});
  cascade_rl::optimal_token_baseline_advantages(
      exec::par, groups, token_layout::padded(rows, width),
      {.token_rewards = b.rewards, .old_log_probs = b.old, .sum_pi_squared = b.spi,
       .rollout_is_weights = {}},
      a, r, o);
  EXPECT_EQ(std::memcmp(a.data(), a_ref.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(r.data(), r_ref.data(), r.size() * sizeof(float)), 0);
}

TEST(OptimalTokenBaseline, NonFiniteInputsFoundDuringTheWorkNameTheFirstArgumentAndIndex) {
  // Masked tokens hold NaN and infinities (random_batch): never read, never refused.
  const random_batch<float> b(35);
  const token_layout tokens(b.seq_offsets, b.mask);
  const std::size_t n = b.tokens();
  std::vector<float> a(n), r(n), a_ref, r_ref;
  const auto call = [&](const auto& policy, const random_batch<float>& k) {
    cascade_rl::optimal_token_baseline_advantages(policy, group_layout(b.group_offsets), tokens,
                                                  {.token_rewards = k.rewards,
                                                   .old_log_probs = k.old,
                                                   .sum_pi_squared = k.spi,
                                                   .rollout_is_weights = k.rho},
                                                  a, r, {.multi_turn = true});
  };
  call(exec::par, b);
  reference_passes(b.group_offsets, b.seq_offsets, b.mask, b, b.rho, {.multi_turn = true}, a_ref,
                   r_ref);
  EXPECT_EQ(std::memcmp(a.data(), a_ref.data(), n * sizeof(float)), 0);
  // Valid tokens in late groups (the last task under exec::par): the first bad index of
  // the first bad argument, in the order the checks always ran (token_rewards,
  // old_log_probs, sum_pi_squared, rollout_is_weights), not the first bad token.
  std::vector<std::size_t> valid;
  for (std::size_t t = n / 2; t < n; ++t)
    if (b.mask[t] != 0) valid.push_back(t);
  ASSERT_GE(valid.size(), 4u);
  const std::size_t early = valid[valid.size() / 2], late = valid[valid.size() - 2];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const bool parallel : {false, true}) {
    const auto run = [&](const random_batch<float>& k) {
      if (parallel)
        call(exec::par, k);
      else
        call(exec::seq, k);
    };
    random_batch<float> bad = b;
    bad.spi[early] = inf;
    bad.old[late] = -inf;  // e^-inf = 0: a finite weight, found by the input check
    expect_error_naming([&] { run(bad); }, "old_log_probs[" + std::to_string(late) + "]",
                        "infinite");
    bad = b;
    bad.rho[late] = nan;
    bad.rewards[late] = -inf;
    bad.rho[early] = inf;
    expect_error_naming([&] { run(bad); }, "token_rewards[" + std::to_string(late) + "]",
                        "infinite");
    bad = b;
    bad.rho[late] = nan;
    bad.rho[early] = inf;
    expect_error_naming([&] { run(bad); }, "rollout_is_weights[" + std::to_string(early) + "]",
                        "infinite");
    bad = b;
    bad.spi[late] = nan;
    expect_error_naming([&] { run(bad); }, "sum_pi_squared[" + std::to_string(late) + "]", "NaN");
  }
}

}  // namespace optimal_token_baseline_cases
}  // namespace
