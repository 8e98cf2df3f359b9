#pragma once
// Properties the covariance-selection losses (Clip-Cov, KL-Cov) share on the host
// executors, checked once for both: seq and par give the same bits, and a per-call
// selection is not partition-invariant while a fixed global selection replayed into each
// micro-batch is. Also a large tied batch and a bitwise seq/par check for the host's
// selection scan.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "support/random_batch.hpp"

namespace cascade_rl::testing {

// loss(policy, inputs, grad_out, normalizer, mode) with policy exec::seq or exec::par on
// b.layout(): loss, clipped count, approx_kl sum and gradient are bit-equal on 2, 4 and 7
// threads, in every mode, with and without IS weights.
template <class Loss>
void expect_seq_par_bitwise(const random_batch<double>& b, double max_length, const Loss& loss) {
  const auto layout = b.layout();
  const auto weights = rollout_is_weights_of(b);
  const auto counts = local_loss_counts(exec::seq, layout);
  for (const loss_aggregation mode : all_aggregation_modes)
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(std::string(to_string(mode)) + (weighted ? " weighted" : ""));
      const policy_ratio_inputs<double> in{
          .log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights =
              weighted ? std::span<const double>(weights) : std::span<const double>{}};
      const loss_normalizer normalizer = counts.normalizer(mode, max_length);
      std::vector<double> seq_grad(layout.tokens());
      const policy_loss_result seq =
          loss(exec::seq, in, std::span<double>(seq_grad), normalizer, mode);
      for (const int threads : {2, 4, 7}) {
        std::vector<double> par_grad(layout.tokens());
        const policy_loss_result par = loss(exec::par.with_threads(threads), in,
                                            std::span<double>(par_grad), normalizer, mode);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(par.loss), std::bit_cast<std::uint64_t>(seq.loss));
        EXPECT_EQ(par.metrics.clipped, seq.metrics.clipped);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(par.metrics.approx_kl_sum),
                  std::bit_cast<std::uint64_t>(seq.metrics.approx_kl_sum));
        for (std::size_t t = 0; t < layout.tokens(); ++t)
          ASSERT_EQ(std::bit_cast<std::uint64_t>(par_grad[t]),
                    std::bit_cast<std::uint64_t>(seq_grad[t]))
              << "token " << t << ", " << threads << " threads";
      }
    }
}

// veRL selects per micro-batch: the means, the count and (Clip-Cov) the draw belong to the
// call, so splitting b into four micro-batches changes the selection and the loss. Given
// one fixed global selection replayed into each micro-batch, the shares with the step's
// normaliser add up to the whole, and the gradient is the whole's bit for bit.
// per_call(layout, inputs, grad_out) selects within the call; replayed(layout, inputs,
// tokens, grad_out) takes the selection; global is per_call's selection on the whole.
template <class PerCall, class Replayed>
void expect_micro_batches_change_the_selection_but_not_a_replayed_one(
    const random_batch<double>& b, const std::vector<std::size_t>& global, const PerCall& per_call,
    const Replayed& replayed) {
  const auto layout = b.layout();
  const policy_ratio_inputs<double> whole_inputs{
      .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages};
  std::vector<double> whole_grad(layout.tokens());
  const policy_loss_result whole = per_call(layout, whole_inputs, std::span<double>(whole_grad));
  ASSERT_EQ(whole.metrics.clipped, global.size());
  double local_sum = 0, replayed_sum = 0;
  std::size_t local_selected = 0;
  std::vector<double> replayed_grad(layout.tokens());
  for (const auto& slice : random_split(layout, 4, 8)) {
    const policy_ratio_inputs<double> in{.log_probs = slice.of(b.log_probs),
                                         .old_log_probs = slice.of(b.old_log_probs),
                                         .advantages = slice.of(b.advantages)};
    std::vector<double> grad(slice.token_end - slice.token_begin);
    const policy_loss_result local = per_call(slice.layout(), in, std::span<double>(grad));
    local_sum += local.loss;
    local_selected += local.metrics.clipped;
    std::vector<std::size_t> mine;
    for (const std::size_t t : global)
      if (t >= slice.token_begin && t < slice.token_end) mine.push_back(t - slice.token_begin);
    replayed_sum += replayed(slice.layout(), in, std::span<const std::size_t>(mine),
                             slice.of_mutable(replayed_grad))
                        .loss;
  }
  EXPECT_NE(local_selected, whole.metrics.clipped);
  EXPECT_NE(local_sum, whole.loss);
  // Shares of a canonical sum each: the split changes the order of addition only.
  EXPECT_NEAR(replayed_sum, whole.loss, 1e-12 * (1 + std::abs(whole.loss)));
  for (std::size_t t = 0; t < layout.tokens(); ++t)
    EXPECT_EQ(replayed_grad[t], whole_grad[t]) << "token " << t;
}

// A masked batch of many reduction blocks (so that exec::par scans several ranges side by
// side) whose covariance takes a few values: log-probs and advantages on a few levels, so
// that many tokens share their cov (+0 and -0 among them).
inline random_batch<float> tied_batch(std::uint64_t seed) {
  auto b = make_random_batch<float>(seed, {.sequences = 400, .max_length = 700});
  std::mt19937_64 rng(seed);
  for (std::size_t t = 0; t < b.tokens(); ++t) {
    b.log_probs[t] = -0.25f * static_cast<float>(rng() % 4);
    b.advantages[t] = 0.5f * static_cast<float>(static_cast<int>(rng() % 5) - 2);
  }
  return b;
}

inline std::vector<std::size_t> shuffled(std::vector<std::size_t> tokens, std::uint64_t seed) {
  std::shuffle(tokens.begin(), tokens.end(), std::mt19937_64(seed));
  return tokens;
}

// The loss under `policy` against exec::seq's: the same bits, value, metrics and gradient.
template <class Run>
void expect_same_bits_as_seq(std::size_t tokens, const Run& run) {
  std::vector<float> seq_grad(tokens);
  const policy_loss_result seq = run(exec::seq, std::span<float>(seq_grad));
  for (const int threads : {2, 3, 8}) {
    std::vector<float> grad(tokens);
    const auto par = run(exec::par.with_threads(threads), std::span<float>(grad));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(par.loss), std::bit_cast<std::uint64_t>(seq.loss))
        << threads << " threads";
    EXPECT_EQ(par.metrics.valid_tokens, seq.metrics.valid_tokens);
    EXPECT_EQ(par.metrics.clipped, seq.metrics.clipped);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(par.metrics.approx_kl_sum),
              std::bit_cast<std::uint64_t>(seq.metrics.approx_kl_sum));
    for (std::size_t t = 0; t < tokens; ++t)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(grad[t]), std::bit_cast<std::uint32_t>(seq_grad[t]))
          << "token " << t << ", " << threads << " threads";
  }
}

}  // namespace cascade_rl::testing
