// The losses take their inputs by name and write into any contiguous range of float or
// double: vectors, arrays and spans bind without casts; other ranges, const outputs and
// mismatched value types are refused at compile time (tests/api/misuse holds the calls
// that must not compile, with the compiler's message).

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <deque>
#include <list>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/exec.hpp"

namespace {
namespace loss_inputs_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace exec = cr::exec;

template <class Out>
constexpr bool reinforce_writes_into = requires(Out&& out, const cr::token_layout& layout) {
  cr::reinforce_loss(exec::seq, layout, cr::reinforce_inputs<float>{}, std::forward<Out>(out),
                     cr::loss_normalizer{});
};

// A vector, an array, a span and a C array are outputs; so is a double vector for double
// inputs (the output's type decides, and the inputs must match it).
static_assert(reinforce_writes_into<std::vector<float>&>);
static_assert(reinforce_writes_into<std::array<float, 4>&>);
static_assert(reinforce_writes_into<std::span<float>>);
static_assert(reinforce_writes_into<float (&)[4]>);
// Not contiguous, not writable, not floating point, or of another type than the inputs.
static_assert(!reinforce_writes_into<std::list<float>&>);
static_assert(!reinforce_writes_into<std::deque<float>&>);
static_assert(!reinforce_writes_into<const std::vector<float>&>);
static_assert(!reinforce_writes_into<std::span<const float>>);
static_assert(!reinforce_writes_into<std::vector<int>&>);
static_assert(!reinforce_writes_into<std::vector<double>&>);  // float inputs
static_assert(!reinforce_writes_into<decltype(std::views::filter(
                  std::declval<std::vector<float>&>(), [](float) { return true; }))>);

template <class Out>
constexpr bool cispo_writes_into = requires(Out&& out, const cr::token_layout& layout) {
  cr::cispo_loss(exec::seq, layout, cr::policy_ratio_inputs<float>{}, std::forward<Out>(out),
                 cr::loss_normalizer{});
};
static_assert(cispo_writes_into<std::vector<float>&>);
static_assert(cispo_writes_into<std::span<float>>);
static_assert(!cispo_writes_into<std::vector<double>&>);  // float inputs
static_assert(!cispo_writes_into<const std::vector<float>&>);
// The PPO inputs do not stand in for CISPO's (no behaviour_log_probs there, weights here).
static_assert(!std::is_convertible_v<cr::ppo_clip_inputs<float>, cr::policy_ratio_inputs<float>>);

// Two sequences of 2 and 3 tokens, token 3 masked.
struct batch {
  std::vector<std::int64_t> offsets{0, 2, 5};
  std::vector<std::uint8_t> mask{1, 1, 1, 0, 1};
  std::vector<float> log_probs{-1.0f, -2.0f, -0.5f, -9.0f, -3.0f};
  std::vector<float> old_log_probs{-1.0f, -2.0f, -0.5f, -9.0f, -3.0f};
  std::vector<float> advantages{2.0f, 2.0f, -1.0f, 5.0f, -1.0f};
  cr::token_layout layout() const { return cr::token_layout(offsets, mask); }
};

TEST(LossInputs, VectorsAndArraysBindWithoutCasts) {
  const batch b;
  std::vector<float> grad(5, 7.0f);
  // token-mean over 4 valid tokens: l = -(2 + 2 - 1 - 1) / 4, dl/dlogp_t = -A_t / 4.
  const auto reinforce = cr::reinforce_loss(exec::seq, b.layout(),
                                            {.log_probs = b.log_probs, .advantages = b.advantages},
                                            grad, cr::loss_normalizer{.tokens = 4});
  EXPECT_EQ(reinforce.loss, -0.5);
  EXPECT_EQ(grad, (std::vector<float>{-0.5f, -0.5f, 0.25f, 0.0f, 0.25f}));

  // At ratio 1 PPO's clipped surrogate is REINFORCE's: same loss, same gradient, written
  // into an array this time.
  std::array<float, 5> ppo_grad{};
  const auto ppo = cr::ppo_clip_loss(
      exec::par.with_threads(2), b.layout(),
      {.log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages},
      ppo_grad, cr::loss_normalizer{.tokens = 4});
  EXPECT_EQ(ppo.loss, -0.5);
  EXPECT_EQ(std::vector<float>(ppo_grad.begin(), ppo_grad.end()), grad);

  // CISPO at ratio 1 is -A * logp: the token-mean of 2, 4, -0.5 and -3 is 0.625; the
  // gradient is REINFORCE's. Given weights scale both, token by token.
  std::vector<float> cispo_grad(5);
  const auto cispo = cr::cispo_loss(
      exec::seq, b.layout(),
      {.log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages},
      cispo_grad, cr::loss_normalizer{.tokens = 4});
  EXPECT_EQ(cispo.loss, 0.625);
  EXPECT_EQ(cispo_grad, grad);
  const std::vector<float> weights{2.0f, 0.0f, 1.0f, 9.0f, 0.5f};
  const auto weighted = cr::cispo_loss(exec::seq, b.layout(),
                                       {.log_probs = b.log_probs,
                                        .old_log_probs = b.old_log_probs,
                                        .advantages = b.advantages,
                                        .rollout_is_weights = weights},
                                       cispo_grad, cr::loss_normalizer{.tokens = 4});
  EXPECT_EQ(weighted.loss, (2 * 2.0 + 0 * 4.0 + 1 * -0.5 + 0.5 * -3.0) / 4);
  EXPECT_EQ(cispo_grad, (std::vector<float>{-1.0f, 0.0f, 0.25f, 0.0f, 0.125f}));
}

TEST(LossInputs, KlAggregationAndImportanceTakeNamedInputs) {
  const batch b;
  const std::vector<float> ref{-1.5f, -2.0f, -1.5f, 0.0f, -2.0f};
  std::vector<float> values(5), grad(5);
  // k1 = logp - ref_logp on valid tokens: 0.5 + 0 + 1 - 1.
  const double total =
      cr::kl_penalty(exec::seq, b.layout(), {.log_probs = b.log_probs, .ref_log_probs = ref},
                     values, grad, cr::kl_options{.estimator = cr::kl_estimator::k1});
  EXPECT_EQ(total, 0.5);
  EXPECT_EQ(values, (std::vector<float>{0.5f, 0.0f, 1.0f, 0.0f, -1.0f}));
  EXPECT_EQ(grad, (std::vector<float>{1.0f, 1.0f, 1.0f, 0.0f, 1.0f}));

  // sum of c_t * loss_t with token-sum weights (c_t = 1 on valid tokens).
  std::vector<float> aggregated_grad(5);
  const double aggregated = cr::aggregate_token_losses(
      exec::seq, b.layout(), {.token_losses = values, .token_grads = grad}, aggregated_grad,
      cr::loss_normalizer{.mode = cr::loss_aggregation::token_sum},
      cr::loss_aggregation::token_sum);
  EXPECT_EQ(aggregated, 0.5);
  EXPECT_EQ(aggregated_grad, grad);

  // Without a correction the weights are 1 on valid tokens; behaviour is not needed.
  std::vector<double> target{-1, -2, -0.5, 0, -3}, weights(5);
  const cr::importance_counts counts = cr::importance_weights(
      exec::seq, b.layout(), {.target_log_probs = target}, weights, cr::importance_options{});
  EXPECT_EQ(weights, (std::vector<double>{1, 1, 1, 0, 1}));
  EXPECT_EQ(counts.truncated, 0u);
}

}  // namespace loss_inputs_cases
}  // namespace
