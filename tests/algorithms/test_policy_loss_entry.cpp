// policy_loss, the one entry point: each loss's options run the loss of that name on the
// inputs it reads (same bits as the named function), a variant of options runs the
// loss it holds, and a replayed token selection is refused by losses that select none.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"

namespace {
namespace policy_loss_entry_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace exec = cr::exec;
using batch_t = cr::testing::random_batch<double>;

struct outcome {
  cr::policy_loss_result result;
  std::vector<double> grad;
};

// Every field the losses report, compared exactly (same code path, same bits).
void expect_same(const outcome& a, const outcome& b, const std::string& what) {
  EXPECT_EQ(a.result.loss, b.result.loss) << what;
  EXPECT_EQ(a.grad, b.grad) << what;
  const cr::policy_loss_metrics& m = a.result.metrics;
  const cr::policy_loss_metrics& n = b.result.metrics;
  EXPECT_EQ(m.valid_tokens, n.valid_tokens) << what;
  EXPECT_EQ(m.clipped, n.clipped) << what;
  EXPECT_EQ(m.dual_clipped, n.dual_clipped) << what;
  EXPECT_EQ(m.importance_masked, n.importance_masked) << what;
  EXPECT_EQ(m.importance_truncated, n.importance_truncated) << what;
  EXPECT_EQ(m.approx_kl_sum, n.approx_kl_sum) << what;
}

cr::policy_loss_inputs<double> every_input(const batch_t& b, std::span<const double> weights) {
  return {.log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .behaviour_log_probs = b.behaviour_log_probs,
          .rollout_is_weights = weights};
}

template <class Options>
outcome through_entry(const batch_t& b, std::span<const double> weights,
                      const cr::loss_normalizer& normalizer, const Options& options,
                      cr::token_selection selection = cr::token_selection::seeded(0)) {
  outcome o{{}, std::vector<double>(b.tokens(), -7.0)};
  cr::policy_loss_inputs<double> inputs = every_input(b, weights);
  inputs.selection = selection;
  o.result = cr::policy_loss(exec::seq, b.layout(), inputs, o.grad, normalizer, options);
  return o;
}

template <class Call>
outcome named(const batch_t& b, Call call) {
  outcome o{{}, std::vector<double>(b.tokens(), -7.0)};
  o.result = call(std::span<double>(o.grad));
  return o;
}

class PolicyLossEntry : public ::testing::Test {
 protected:
  const batch_t b = cr::testing::make_random_batch<double>(
      41, {.sequences = 24, .max_length = 20, .log_ratio_spread = 0.4});
  std::vector<double> weights = std::vector<double>(b.tokens(), 0.0);
  cr::loss_normalizer normalizer;

  void SetUp() override {
    for (std::size_t t = 0; t < weights.size(); ++t)
      weights[t] = 0.5 + static_cast<double>(t % 7) / 7.0;
    normalizer = cr::local_loss_counts(exec::seq, b.layout())
                     .normalizer(cr::loss_aggregation::token_mean, 20.0);
  }
  [[nodiscard]] cr::policy_ratio_inputs<double> ratio_inputs() const {
    return {.log_probs = b.log_probs,
            .old_log_probs = b.old_log_probs,
            .advantages = b.advantages,
            .rollout_is_weights = weights};
  }
};

TEST_F(PolicyLossEntry, EachLossIsItsNamedFunction) {
  const auto layout = b.layout();
  const cr::reinforce_options reinforce{
      .importance = {.mode = cr::importance_sampling::truncated, .cap = 1.5}};
  expect_same(through_entry(b, weights, normalizer, reinforce), named(b, [&](std::span<double> g) {
                return cr::reinforce_loss(exec::seq, layout,
                                          {.log_probs = b.log_probs,
                                           .advantages = b.advantages,
                                           .behaviour_log_probs = b.behaviour_log_probs,
                                           .rollout_is_weights = weights},
                                          g, normalizer, reinforce);
              }),
              "reinforce");
  const cr::ppo_clip_options ppo{.clip_high = 0.28,
                                 .dual_clip = 3.0,
                                 .importance = {.mode = cr::importance_sampling::truncated}};
  expect_same(through_entry(b, weights, normalizer, ppo), named(b, [&](std::span<double> g) {
                return cr::ppo_clip_loss(exec::seq, layout,
                                         {.log_probs = b.log_probs,
                                          .old_log_probs = b.old_log_probs,
                                          .advantages = b.advantages,
                                          .behaviour_log_probs = b.behaviour_log_probs,
                                          .rollout_is_weights = weights},
                                         g, normalizer, ppo);
              }),
              "ppo_clip");
  const auto ratio = ratio_inputs();
  const cr::cispo_options cispo{.clip_low = 0.5, .clip_high = 0.1};
  expect_same(through_entry(b, weights, normalizer, cispo), named(b, [&](std::span<double> g) {
                return cr::cispo_loss(exec::seq, layout, ratio, g, normalizer, cispo);
              }),
              "cispo");
  for (const auto divergence :
       {cr::dppo_divergence::total_variation, cr::dppo_divergence::binary_kl}) {
    const cr::dppo_options dppo{.divergence = divergence, .clip_low = 0.1, .truncation = 2.0};
    expect_same(through_entry(b, weights, normalizer, dppo), named(b, [&](std::span<double> g) {
                  return cr::dppo_loss(exec::seq, layout, ratio, g, normalizer, dppo);
                }),
                "dppo");
  }
  const cr::dro_options dro{.beta = 0.3};
  expect_same(through_entry(b, weights, normalizer, dro), named(b, [&](std::span<double> g) {
                return cr::dro_loss(exec::seq, layout, ratio, g, normalizer, dro);
              }),
              "dro");
  const cr::sapo_options sapo{.tau_neg = 1.2};
  expect_same(through_entry(b, weights, normalizer, sapo), named(b, [&](std::span<double> g) {
                return cr::sapo_loss(exec::seq, layout, ratio, g, normalizer, sapo);
              }),
              "sapo");
  const cr::gspo_options gspo{.clip_low = 0.01, .clip_high = 0.02};
  expect_same(through_entry(b, weights, normalizer, gspo), named(b, [&](std::span<double> g) {
                return cr::gspo_loss(exec::seq, layout, ratio, g, normalizer, gspo);
              }),
              "gspo");
  const cr::geo_mean_options geo_mean{.clip_low = 0.1};
  expect_same(through_entry(b, weights, normalizer, geo_mean), named(b, [&](std::span<double> g) {
                return cr::geo_mean_loss(exec::seq, layout, ratio, g, normalizer, geo_mean);
              }),
              "geo_mean");
  const cr::clip_cov_options clip_cov{.clip_cov_ratio = 0.2, .clip_cov_lb = -5, .clip_cov_ub = 5};
  expect_same(through_entry(b, weights, normalizer, clip_cov, cr::token_selection::seeded(9)),
              named(b, [&](std::span<double> g) {
                return cr::clip_cov_loss(exec::seq, layout, ratio, cr::token_selection::seeded(9),
                                         g, normalizer, clip_cov);
              }),
              "clip_cov");
  const cr::kl_cov_options kl_cov{.kl_cov_ratio = 0.2, .ppo_kl_coef = 0.1};
  expect_same(through_entry(b, weights, normalizer, kl_cov), named(b, [&](std::span<double> g) {
                return cr::kl_cov_loss(exec::seq, layout, ratio, g, normalizer, kl_cov);
              }),
              "kl_cov");
}

// A seed changes Clip-Cov's draw through the entry as through clip_cov_loss; KL-Cov
// replays a given selection.
TEST_F(PolicyLossEntry, SelectionsReachTheCovarianceLosses) {
  const cr::clip_cov_options clip_cov{.clip_cov_ratio = 0.2, .clip_cov_lb = -5, .clip_cov_ub = 5};
  const auto one = through_entry(b, weights, normalizer, clip_cov, cr::token_selection::seeded(1));
  const auto two = through_entry(b, weights, normalizer, clip_cov, cr::token_selection::seeded(2));
  EXPECT_NE(one.grad, two.grad);
  std::vector<std::size_t> valid;
  for (std::size_t t = 0; t < b.tokens() && valid.size() < 3; ++t)
    if (b.mask[t] != 0) valid.push_back(t);
  const cr::kl_cov_options kl_cov{.kl_cov_ratio = 3.0 / static_cast<double>(b.tokens()),
                                  .ppo_kl_coef = 0.1};
  const auto layout = b.layout();
  expect_same(through_entry(b, weights, normalizer, kl_cov, cr::token_selection::replay(valid)),
              named(b, [&](std::span<double> g) {
                return cr::kl_cov_loss(exec::seq, layout, ratio_inputs(),
                                       cr::token_selection::replay(valid), g, normalizer, kl_cov);
              }),
              "kl_cov replayed");
}

// A preset's variant (here the losses TRL's and NeMo-RL's presets choose among) runs
// the loss it holds.
TEST_F(PolicyLossEntry, VariantRunsTheLossItHolds) {
  using options_t = std::variant<cr::ppo_clip_options, cr::gspo_options, cr::cispo_options,
                                 cr::sapo_options, cr::reinforce_options>;
  for (const options_t& options :
       {options_t{cr::ppo_clip_options{.clip_low = 0.1}}, options_t{cr::gspo_options{}},
        options_t{cr::cispo_options{.clip_high = 0.3}}, options_t{cr::sapo_options{}},
        options_t{cr::reinforce_options{}}}) {
    const auto via_variant = through_entry(b, weights, normalizer, options);
    const auto direct = std::visit(
        [&](const auto& held) { return through_entry(b, weights, normalizer, held); }, options);
    expect_same(via_variant, direct, "alternative " + std::to_string(options.index()));
  }
  // Different losses give different gradients (the variant is not read as one loss).
  EXPECT_NE(through_entry(b, weights, normalizer, options_t{cr::cispo_options{}}).grad,
            through_entry(b, weights, normalizer, options_t{cr::sapo_options{}}).grad);
}

TEST_F(PolicyLossEntry, ReplayedSelectionRefusedWhereNoTokensAreSelected) {
  const std::vector<std::size_t> tokens{0};
  const auto replay = cr::token_selection::replay(tokens);
  cr::testing::expect_error_naming(
      [&] { (void)through_entry(b, weights, normalizer, cr::cispo_options{}, replay); },
      "inputs.selection", "cispo selects none");
  cr::testing::expect_error_naming(
      [&] { (void)through_entry(b, weights, normalizer, cr::ppo_clip_options{}, replay); },
      "inputs.selection", "ppo_clip selects none");
  cr::testing::expect_error_naming(
      [&] { (void)through_entry(b, weights, normalizer, cr::reinforce_options{}, replay); },
      "inputs.selection", "reinforce selects none");
  // The loss's own checks still name its options.
  cr::testing::expect_error_naming(
      [&] { (void)through_entry(b, weights, normalizer, cr::dro_options{}); }, "options.beta");
}

// The specs (policy_loss_spec.hpp): every loss's options have one, other types none, and
// what they say about the selection holds whatever the qualifiers (the engine asks of
// decltype(a const local): before the spec, its Clip-Cov seed was 0 in every mini-batch).
static_assert(cr::policy_loss_options<cr::reinforce_options> &&
              cr::policy_loss_options<cr::ppo_clip_options> &&
              cr::policy_loss_options<cr::cispo_options> &&
              cr::policy_loss_options<cr::dppo_options> &&
              cr::policy_loss_options<cr::dro_options> &&
              cr::policy_loss_options<cr::sapo_options> &&
              cr::policy_loss_options<cr::gspo_options> &&
              cr::policy_loss_options<cr::geo_mean_options> &&
              cr::policy_loss_options<cr::clip_cov_options> &&
              cr::policy_loss_options<cr::kl_cov_options>);
static_assert(!cr::policy_loss_options<cr::bypass_mode_options> &&
              !cr::policy_loss_options<cr::importance_options> && !cr::policy_loss_options<int>);
static_assert(cr::draws_token_selection<cr::clip_cov_options> &&
              cr::draws_token_selection<const cr::clip_cov_options> &&
              cr::draws_token_selection<const cr::clip_cov_options&>);
static_assert(!cr::draws_token_selection<cr::kl_cov_options> &&
              !cr::draws_token_selection<const cr::cispo_options> &&
              !cr::draws_token_selection<cr::reinforce_options>);
static_assert(cr::policy_loss_spec<cr::kl_cov_options>::selection == cr::selection_use::replayable);

}  // namespace policy_loss_entry_cases
}  // namespace
