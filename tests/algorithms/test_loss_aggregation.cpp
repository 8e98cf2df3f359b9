// Loss aggregation: per-token weights of each mode, local counts, normaliser checks.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/expect_error.hpp"

namespace {
namespace loss_aggregation_cases {  // this file's names, apart in the area's unity build

using cascade_rl::loss_aggregation;
using cascade_rl::loss_normalizer;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// Sequence 0: tokens 0..2, mask 1 0 1 (2 valid). Sequence 1: empty. Sequence 2: tokens
// 3..6, mask 1 1 1 0 (3 valid). Sequence 3: tokens 7..8, fully masked.
struct small_batch {
  std::vector<std::int64_t> offsets{0, 3, 3, 7, 9};
  std::vector<std::uint8_t> mask{1, 0, 1, 1, 1, 1, 0, 0, 0};
  token_layout layout() const { return token_layout(offsets, mask); }
};

// The weights of `mode` with the divisors of `divisors`, in a normaliser made for mode.
std::vector<double> weights(const token_layout& layout, loss_aggregation mode,
                            loss_normalizer divisors) {
  divisors.mode = mode;
  std::vector<double> out(layout.tokens(), -1.0);
  cascade_rl::aggregation_weights(exec::seq, layout, std::span<double>(out), divisors, mode);
  return out;
}

TEST(LossAggregation, LocalCountsSkipMaskedTokensAndEmptySequences) {
  const small_batch batch;
  const auto counts = cascade_rl::local_loss_counts(exec::seq, batch.layout());
  EXPECT_EQ(counts.tokens, 5u);
  EXPECT_EQ(counts.sequences, 2u);  // sequences 1 (no token) and 3 (all masked) do not count
  const auto normalizer_for = [counts = counts](cascade_rl::loss_aggregation mode) {
    return counts.normalizer(mode, 6.0);
  };
  const loss_normalizer normalizer = normalizer_for(loss_aggregation::seq_mean_token_sum_norm);
  EXPECT_EQ(normalizer.mode, loss_aggregation::seq_mean_token_sum_norm);
  EXPECT_EQ(normalizer.tokens, 5.0);
  EXPECT_EQ(normalizer.sequences, 2.0);
  EXPECT_EQ(normalizer.scale, 6.0);

  cascade_rl::loss_counts total{3, 1};
  total += counts;
  EXPECT_EQ(total.tokens, 8u);
  EXPECT_EQ(total.sequences, 3u);
}

TEST(LossAggregation, NormalizersCarryTheirMode) {
  const small_batch batch;
  const auto layout = batch.layout();
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  std::vector<double> out(layout.tokens());
  // Made for token-mean, used for seq-mean-token-sum: refused, whatever the divisors.
  expect_error_naming(
      [&] {
        cascade_rl::aggregation_weights(exec::seq, layout, out,
                                        counts.normalizer(loss_aggregation::token_mean),
                                        loss_aggregation::seq_mean_token_sum);
      },
      "normalizer", "made for token-mean");
  std::vector<double> losses(layout.tokens(), 1.0), grad(layout.tokens());
  expect_error_naming(
      [&] {
        cascade_rl::aggregate_token_losses(
            exec::seq, layout, {.token_losses = losses, .token_grads = losses}, grad,
            counts.normalizer(loss_aggregation::seq_mean_token_mean), loss_aggregation::token_mean);
      },
      "normalizer", "made for seq-mean-token-mean");
  // seq-mean-token-sum-norm divides by sequences x the padded length: not made without it.
  expect_error_naming([&] { (void)counts.normalizer(loss_aggregation::seq_mean_token_sum_norm); },
                      "mode", "padded_length");
  const loss_normalizer without_scale{
      .mode = loss_aggregation::seq_mean_token_sum_norm, .tokens = 5, .sequences = 2};
  expect_error_naming(
      [&] {
        cascade_rl::aggregation_weights(exec::seq, layout, out, without_scale,
                                        loss_aggregation::seq_mean_token_sum_norm);
      },
      "normalizer.scale");
  // Made with it: 1 / (2 sequences x 8) on every valid token.
  cascade_rl::aggregation_weights(exec::seq, layout, out,
                                  counts.normalizer(loss_aggregation::seq_mean_token_sum_norm, 8.0),
                                  loss_aggregation::seq_mean_token_sum_norm);
  EXPECT_EQ(out, (std::vector<double>{0.0625, 0, 0.0625, 0.0625, 0.0625, 0.0625, 0, 0, 0}));
}

TEST(LossAggregation, WeightsOfEveryMode) {
  const small_batch batch;
  const auto layout = batch.layout();
  const loss_normalizer normalizer{.tokens = 10, .sequences = 4, .scale = 3};
  EXPECT_EQ(weights(layout, loss_aggregation::token_mean, normalizer),
            (std::vector<double>{0.1, 0, 0.1, 0.1, 0.1, 0.1, 0, 0, 0}));
  EXPECT_EQ(weights(layout, loss_aggregation::token_sum, normalizer),
            (std::vector<double>{1, 0, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(weights(layout, loss_aggregation::seq_mean_token_sum, normalizer),
            (std::vector<double>{0.25, 0, 0.25, 0.25, 0.25, 0.25, 0, 0, 0}));
  const double s0 = 1.0 / (2 * 4);
  const double s2 = 1.0 / (3 * 4);
  EXPECT_EQ(weights(layout, loss_aggregation::seq_mean_token_mean, normalizer),
            (std::vector<double>{s0, 0, s0, s2, s2, s2, 0, 0, 0}));
  const double norm = 1.0 / (4 * 3);
  EXPECT_EQ(weights(layout, loss_aggregation::seq_mean_token_sum_norm, normalizer),
            (std::vector<double>{norm, 0, norm, norm, norm, norm, 0, 0, 0}));
}

TEST(LossAggregation, AggregateTokenLossesHandComputed) {
  const small_batch batch;
  const auto layout = batch.layout();
  // Masked tokens hold garbage (NaN, 100) that must be ignored.
  const std::vector<double> losses{1, nan, 2, 3, 4, 5, 100, nan, 100};
  const std::vector<double> grads{10, nan, 20, 30, 40, 50, 100, 100, nan};
  std::vector<double> grad(layout.tokens(), -1.0);
  auto run = [&](loss_aggregation mode) {
    const loss_normalizer normalizer{.mode = mode, .tokens = 10, .sequences = 4, .scale = 3};
    return cascade_rl::aggregate_token_losses(
        exec::seq, layout, {.token_losses = losses, .token_grads = grads}, grad, normalizer, mode);
  };
  EXPECT_DOUBLE_EQ(run(loss_aggregation::token_mean), 15.0 / 10);
  EXPECT_EQ(grad, (std::vector<double>{1, 0, 2, 3, 4, 5, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(run(loss_aggregation::token_sum), 15.0);
  EXPECT_EQ(grad, (std::vector<double>{10, 0, 20, 30, 40, 50, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(run(loss_aggregation::seq_mean_token_sum), 15.0 / 4);
  // (1 + 2) / 2 / 4 + (3 + 4 + 5) / 3 / 4
  EXPECT_DOUBLE_EQ(run(loss_aggregation::seq_mean_token_mean), 0.375 + 1.0);
  EXPECT_DOUBLE_EQ(grad[0], 10.0 / 8);
  EXPECT_DOUBLE_EQ(grad[5], 50.0 / 12);
  EXPECT_DOUBLE_EQ(run(loss_aggregation::seq_mean_token_sum_norm), 15.0 / 12);
  EXPECT_DOUBLE_EQ(grad[4], 40.0 / 12);
}

// seq-mean-token-mean weighs each sequence by its own valid tokens, applied run by run
// inside the token pass: sequences that straddle the 256-token chunks and the 4096-token
// blocks, empty ones between them, masked and unmasked. Each token's gradient is its own
// sequence's weight (as aggregation_weights writes it) times its derivative, on seq and
// on par alike.
TEST(LossAggregation, SeqMeanTokenMeanWeighsEachSequenceAcrossChunksAndBlocks) {
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t length : {300, 0, 0, 255, 1, 3800, 0, 4097, 17, 0, 513})
    offsets.push_back(offsets.back() + length);
  const std::size_t n = static_cast<std::size_t>(offsets.back());
  std::vector<std::uint8_t> mask(n);
  std::vector<double> losses(n), grads(n);
  for (std::size_t t = 0; t < n; ++t) {
    mask[t] = t % 7 != 3;
    losses[t] = static_cast<double>(t % 11) - 5;
    grads[t] = static_cast<double>(t % 13) + 0.5;
  }
  for (const bool masked : {false, true}) {
    const token_layout layout = masked ? token_layout(offsets, mask) : token_layout(offsets);
    const loss_normalizer normalizer = cascade_rl::local_loss_counts(exec::seq, layout)
                                           .normalizer(loss_aggregation::seq_mean_token_mean);
    std::vector<double> weights(n);
    cascade_rl::aggregation_weights(exec::seq, layout, weights, normalizer,
                                    loss_aggregation::seq_mean_token_mean);
    for (const bool parallel : {false, true}) {
      std::vector<double> grad(n, -1.0);
      const auto run = [&](const auto& policy) {
        return cascade_rl::aggregate_token_losses(
            policy, layout, {.token_losses = losses, .token_grads = grads}, grad, normalizer,
            loss_aggregation::seq_mean_token_mean);
      };
      const double loss = parallel ? run(exec::par.with_threads(3)) : run(exec::seq);
      double expected = 0, magnitude = 0;
      for (std::size_t t = 0; t < n; ++t) {
        ASSERT_EQ(grad[t], weights[t] * grads[t]) << "token " << t << (masked ? " masked" : "");
        expected += weights[t] * losses[t];
        magnitude += std::abs(weights[t] * losses[t]);
      }
      // The pass sums in the canonical order, this loop in index order: each within
      // (n - 1) u sum |term| of the exact sum.
      const double bound = 2 * static_cast<double>(n) * 0x1p-53 * magnitude;
      EXPECT_NEAR(loss, expected, bound) << (masked ? "masked" : "");
    }
  }
}

// A slice's share of a step is its weighted sum under the global normaliser: the
// shares of two slices add up to the whole, unlike per-slice means.
TEST(LossAggregation, GlobalNormaliserMakesSlicesAdd) {
  const std::vector<std::int64_t> whole_offsets{0, 1, 4};
  const std::vector<double> losses{2, 4, 6, 8};
  const std::vector<double> ones(4, 1.0);
  std::vector<double> grad(4);
  const token_layout whole(whole_offsets);
  const loss_normalizer normalizer{.tokens = 4, .sequences = 2};
  const double all = cascade_rl::aggregate_token_losses(
      exec::seq, whole, {.token_losses = losses, .token_grads = ones}, grad, normalizer,
      loss_aggregation::token_mean);
  EXPECT_DOUBLE_EQ(all, 5.0);

  const std::vector<std::int64_t> first_offsets{0, 1};
  const std::vector<std::int64_t> second_offsets{0, 3};
  const double first = cascade_rl::aggregate_token_losses(
      exec::seq, token_layout(first_offsets),
      {.token_losses = std::span<const double>(losses).first(1),
       .token_grads = std::span<const double>(ones).first(1)},
      std::span<double>(grad).first(1), normalizer, loss_aggregation::token_mean);
  const double second = cascade_rl::aggregate_token_losses(
      exec::seq, token_layout(second_offsets),
      {.token_losses = std::span<const double>(losses).last(3),
       .token_grads = std::span<const double>(ones).last(3)},
      std::span<double>(grad).last(3), normalizer, loss_aggregation::token_mean);
  EXPECT_DOUBLE_EQ(first, 0.5);
  EXPECT_DOUBLE_EQ(second, 4.5);
  EXPECT_DOUBLE_EQ(first + second, all);
  EXPECT_EQ(grad, (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
}

TEST(LossAggregation, BatchWithoutValidTokensAcceptsAnyNormaliser) {
  const std::vector<std::int64_t> offsets{0, 2};
  const std::vector<std::uint8_t> mask{0, 0};
  const token_layout layout(offsets, mask);
  const std::vector<double> losses{nan, 1};
  std::vector<double> grad(2, -1.0);
  // A normaliser of the loss's mode with no divisor at all: nothing divides by it.
  const double loss = cascade_rl::aggregate_token_losses(
      exec::seq, layout, {.token_losses = losses, .token_grads = losses}, grad,
      loss_normalizer{.mode = loss_aggregation::seq_mean_token_mean},
      loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(loss, 0.0);
  EXPECT_EQ(grad, (std::vector<double>{0, 0}));
}

TEST(LossAggregation, RefusesBadNormalisersAndInputs) {
  const small_batch batch;
  const auto layout = batch.layout();
  std::vector<double> out(layout.tokens());
  auto with = [&](loss_normalizer normalizer, loss_aggregation mode) {
    normalizer.mode = mode;  // these cases are about the divisors
    return [&, normalizer, mode] {
      cascade_rl::aggregation_weights(exec::seq, layout, std::span<double>(out), normalizer, mode);
    };
  };
  expect_error_naming(with({.tokens = 0, .sequences = 2}, loss_aggregation::token_mean),
                    "normalizer.tokens");
  expect_error_naming(with({.tokens = -5, .sequences = 2}, loss_aggregation::token_mean),
                    "normalizer.tokens");
  expect_error_naming(with({.tokens = nan, .sequences = 2}, loss_aggregation::token_mean),
                    "normalizer.tokens");
  expect_error_naming(with({.tokens = 5, .sequences = 0}, loss_aggregation::seq_mean_token_sum),
                    "normalizer.sequences");
  expect_error_naming(with({.tokens = 5, .sequences = -1}, loss_aggregation::seq_mean_token_mean),
                    "normalizer.sequences");
  expect_error_naming(
      with({.tokens = 5, .sequences = 2, .scale = 0}, loss_aggregation::seq_mean_token_sum_norm),
      "normalizer.scale");
  // token-sum divides by nothing.
  EXPECT_NO_THROW(with({}, loss_aggregation::token_sum)());
  // The seq modes do not read tokens; token-mean does not read sequences.
  EXPECT_NO_THROW(with({.tokens = 0, .sequences = 2}, loss_aggregation::seq_mean_token_sum)());
  EXPECT_NO_THROW(with({.tokens = 5, .sequences = 0}, loss_aggregation::token_mean)());

  std::vector<double> short_out(3);
  expect_error_naming(
      [&] {
        cascade_rl::aggregation_weights(exec::seq, layout, std::span<double>(short_out),
                                        loss_normalizer{.tokens = 5, .sequences = 2},
                                        loss_aggregation::token_mean);
      },
      "weights_out");

  std::vector<double> losses{1, 0, 2, 3, nan, 5, 0, 0, 0};
  std::vector<double> grads(9, 1.0);
  std::vector<double> grad(9);
  auto aggregate = [&] {
    cascade_rl::aggregate_token_losses(
        exec::seq, layout, {.token_losses = losses, .token_grads = grads}, grad,
        loss_normalizer{.tokens = 5, .sequences = 2}, loss_aggregation::token_mean);
  };
  expect_error_naming(aggregate, "token_losses[4]");
  losses[4] = 4;
  grads[2] = std::numeric_limits<double>::infinity();
  expect_error_naming(aggregate, "token_grads[2]");
  grads.pop_back();
  expect_error_naming(aggregate, "token_grads");
}

TEST(LossAggregation, ModeNames) {
  EXPECT_EQ(cascade_rl::to_string(loss_aggregation::token_mean), "token-mean");
  EXPECT_EQ(cascade_rl::to_string(loss_aggregation::seq_mean_token_sum_norm),
            "seq-mean-token-sum-norm");
}

}  // namespace loss_aggregation_cases
}  // namespace
