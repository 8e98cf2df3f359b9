// Conformance with NeMo-RL's ClippedPGLossFn through presets::nemo_rl
// (tests/reference/trl_nemo_rl.json, see tests/reference/README_trl_nemo_rl.md): every
// case of nemo_rl.clipped_pg_loss, in double and in float, reproduced (loss, gradient
// w.r.t. curr_logprobs, every metric with a field of ours).

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/nemo_rl.hpp"
#include "support/expect_error.hpp"
#include "support/peer_loss_case.hpp"
#include "support/reference.hpp"

namespace {
namespace nemo_rl_reference_cases {  // this file's names, apart in the area's unity build

namespace nemo = cascade_rl::presets::nemo_rl;
using cascade_rl::testing::case_totals;
using cascade_rl::testing::check_every_case;
using cascade_rl::testing::expect_close;
using cascade_rl::testing::flatten;
using cascade_rl::testing::load_reference;
using cascade_rl::testing::padded_from_mask;

// The case's ClippedPGLossConfig from its resolved_config (every field, NeMo's names).
nemo::clipped_pg_loss_config config_of(const nlohmann::json& r, std::string& type,
                                       std::string& kl_type) {
  nemo::clipped_pg_loss_config c;
  c.disable_ppo_ratio = r["disable_ppo_ratio"].get<bool>();
  c.token_level_loss = r["token_level_loss"].get<bool>();
  c.sequence_level_importance_ratios = r["sequence_level_importance_ratios"].get<bool>();
  c.ratio_clip_min = r["ratio_clip_min"].get<double>();
  c.ratio_clip_max = r["ratio_clip_max"].get<double>();
  if (!r["ratio_clip_c"].is_null()) c.ratio_clip_c = r["ratio_clip_c"].get<double>();
  c.reference_policy_kl_penalty = r["reference_policy_kl_penalty"].get<double>();
  c.use_kl_in_reward = r["use_kl_in_reward"].get<bool>();
  kl_type = r["reference_policy_kl_type"].get<std::string>();
  c.reference_policy_kl_type = kl_type;
  c.kl_input_clamp_value = r["kl_input_clamp_value"].is_null()
                               ? std::nullopt
                               : std::optional<double>(r["kl_input_clamp_value"].get<double>());
  c.kl_output_clamp_value = r["kl_output_clamp_value"].is_null()
                                ? std::nullopt
                                : std::optional<double>(r["kl_output_clamp_value"].get<double>());
  c.use_on_policy_kl_approximation = r["use_on_policy_kl_approximation"].get<bool>();
  c.use_importance_sampling_correction = r["use_importance_sampling_correction"].get<bool>();
  if (!r["truncated_importance_sampling_type"].is_null()) {
    type = r["truncated_importance_sampling_type"].get<std::string>();
    c.truncated_importance_sampling_type = type;
  }
  if (!r["truncated_importance_sampling_ratio"].is_null())
    c.truncated_importance_sampling_ratio = r["truncated_importance_sampling_ratio"].get<double>();
  if (!r["truncated_importance_sampling_ratio_min"].is_null())
    c.truncated_importance_sampling_ratio_min =
        r["truncated_importance_sampling_ratio_min"].get<double>();
  c.force_on_policy_ratio = r["force_on_policy_ratio"].get<bool>();
  c.use_cispo = r["use_cispo"].get<bool>();
  c.positive_example_nll_weight = r["positive_example_nll_weight"].get<double>();
  return c;
}

// Metrics NeMo reports that are statistics of the inputs (ratios, log-prob errors, sample
// counts), not of the loss: no field of ours holds them.
bool unmapped_metric(const std::string& key) {
  return key.starts_with("probs_ratio") || key == "token_mult_prob_error" ||
         key == "gen_kl_error" || key == "policy_kl_error" || key == "js_divergence_error" ||
         key == "sampling_importance_ratio" || key == "num_valid_samples" ||
         key == "approx_entropy";
}

template <class T>
void check_case(const nlohmann::json& c, const nlohmann::json& b, const std::string& context,
                case_totals& totals) {
  std::string type, kl_type;
  const auto config = config_of(c["resolved_config"], type, kl_type);
  ++totals.reproduced;
  // The valid tokens are token_mask * sample_mask.
  nlohmann::json mask = b["token_mask"];
  for (std::size_t i = 0; i < mask.size(); ++i)
    for (auto& m : mask[i]) m = m.get<double>() * b["sample_mask"][i].get<double>();
  const auto batch = padded_from_mask(mask);
  const auto layout = batch.layout();
  const std::vector<T> curr = flatten<T>(b["curr_logprobs"]);
  const std::vector<T> prev = flatten<T>(b["prev_logprobs"]);
  const std::vector<T> generation = flatten<T>(b["generation_logprobs"]);
  const std::vector<T> advantages = flatten<T>(b["advantages"]);
  std::vector<T> rewards;
  for (const auto& r : b["rewards"]) rewards.push_back(r.get<T>());

  const auto options = nemo::policy_loss(config);
  const auto normalizer = nemo::normalizer(config, c["global_valid_toks"].get<double>(),
                                           c["global_valid_seqs"].get<double>());
  const std::vector<T> weights = nemo::rollout_is_weights<T>(config, layout, prev, generation);
  std::vector<T> grad(layout.tokens(), T(-7));
  // The preset's variant runs as it is: each loss reads the inputs it takes (the
  // generation log-probs only under an importance option).
  const cascade_rl::policy_loss_result result =
      cascade_rl::policy_loss(cascade_rl::exec::seq, layout,
                              {.log_probs = curr,
                               .old_log_probs = prev,
                               .advantages = advantages,
                               .behaviour_log_probs = generation,
                               .rollout_is_weights = weights},
                              grad, normalizer, options);
  cascade_rl::testing::summed_loss total(layout.tokens());
  total.add(result.loss, grad);
  // NeMo's KL term through aggregate_token_losses over the same normaliser.
  const std::vector<T> ref = flatten<T>(b["reference_policy_logprobs"]);
  const auto kl = nemo::kl_token_terms<T>(config, layout, curr, ref, generation);
  double kl_value = 0;
  if (!kl.empty()) {
    std::vector<T> kl_grad(layout.tokens(), T(-7));
    kl_value = cascade_rl::aggregate_token_losses(cascade_rl::exec::seq, layout, kl, kl_grad,
                                                  normalizer, nemo::aggregation(config));
    total.add(kl_value, kl_grad);
  }
  std::optional<double> nll;
  if (c["data_rewards_given"].get<bool>()) {
    if (const auto term = nemo::positive_example_nll<T>(config, layout, rewards)) {
      std::vector<T> nll_grad(layout.tokens(), T(-7));
      const auto r = cascade_rl::reinforce_loss(cascade_rl::exec::seq, layout,
                                                {.log_probs = curr, .advantages = term->advantages},
                                                nll_grad, term->normalizer, term->options);
      total.add(r.loss, nll_grad);
      nll = r.loss / config.positive_example_nll_weight;
    }
  }
  total.expect_matches(c, "loss", "grad_curr_logprobs", context);

  const bool options_carry_correction = !nemo::takes_rollout_is_weights(config);
  for (const auto& item : c["metrics"].items()) {
    const std::string& key = item.key();
    // Read only for mapped keys: the unmapped min / max of an empty batch are "inf" strings.
    const auto expected_value = [&] { return item.value().template get<double>(); };
    if (unmapped_metric(key)) continue;
    const double expected = expected_value();
    if (key == "loss") {
      expect_close(total.loss, expected, context + " metrics.loss");
    } else if (key == "kl_penalty") {
      // NeMo reports kl / coefficient (0 without a KL in the loss).
      expect_close(kl.empty() ? 0.0 : kl_value / config.reference_policy_kl_penalty, expected,
                   context + " kl_penalty");
    } else if (key == "positive_nll_loss") {
      expect_close(nll.value_or(0.0), expected, context + " positive_nll_loss");
    } else if (key == "is_oob_ratio") {
      // The tokens the cap truncated (tis) or the band dropped (icepop), over the valid
      // tokens; where the weights are precomputed inputs the loss does not count them.
      if (options_carry_correction)
        expect_close(type == "icepop" ? result.metrics.masked_fraction()
                                      : result.metrics.truncated_fraction(),
                     expected, context + " is_oob_ratio");
    } else if (!unmapped_metric(key)) {
      ADD_FAILURE() << context << ": metric " << key << " has no field of ours";
    }
  }
}

TEST(NemoRlReference, ClippedPgLossEveryCaseReproducedOrRefusedByName) {
  const auto reference = load_reference("trl_nemo_rl.json");
  const auto& cases = reference["nemo_rl"]["clipped_pg_loss"]["cases"];
  ASSERT_EQ(cases.size(), 62u);
  case_totals totals;
  check_every_case(cases, reference["nemo_rl"]["batches"], "clipped_pg_loss",
                   [&](const auto& c, const auto& b, const std::string& context, auto precision) {
                     check_case<decltype(precision)>(c, b, context + " " + c["config"].dump(),
                                                     totals);
                   });
  // Every case is reproduced (tis with a min and seq-mask-tis on the PPO clip through its
  // rollout_is_weights); a case moving to refused must update nemo_rl.hpp and this count.
  EXPECT_EQ(totals.reproduced, 2 * 62);
  EXPECT_EQ(totals.refused, 0);
}

// token_level_loss on a hand-computed 2-row batch at ratio 1 (prev = curr), every token's
// loss -A: row 0 holds 1 valid token with A = 1, row 1 holds 3 with A = 2 (sum -7).
// Token level: -7 / global_valid_toks 4; sequence level: the row means (-1, -2) over
// global_valid_seqs 2. A sample_mask = 0 row is out of the layout's mask and of both counts.
TEST(NemoRlReference, TokenLevelAndSequenceLevelLossOnAHandComputedBatch) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 0, 0}, {1, 1, 1}, {0, 0, 0}});
  const auto layout = batch.layout();
  const std::vector<double> logp{-1.0, -1.1, -1.2, -0.5, -0.6, -0.7, -0.1, -0.2, -0.3};
  const std::vector<double> advantages{1, 1, 1, 2, 2, 2, 5, 5, 5};
  for (const bool token_level : {true, false}) {
    const nemo::clipped_pg_loss_config config{.token_level_loss = token_level,
                                              .reference_policy_kl_penalty = 0.0};
    const auto options = std::get<cascade_rl::ppo_clip_options>(nemo::policy_loss(config));
    std::vector<double> grad(layout.tokens(), -7.0);
    const auto result = cascade_rl::ppo_clip_loss(
        cascade_rl::exec::seq, layout,
        {.log_probs = logp, .old_log_probs = logp, .advantages = advantages}, grad,
        nemo::normalizer(config, 4.0, 2.0), options);
    // masked_mean's + 1e-8 on the divisor: a relative 2.5e-9 / 5e-9.
    EXPECT_NEAR(result.loss, token_level ? -7.0 / 4.0 : -1.5, 1e-8) << token_level;
    EXPECT_NEAR(grad[0], token_level ? -0.25 : -0.5, 1e-8) << token_level;
    EXPECT_NEAR(grad[3], token_level ? -0.5 : -1.0 / 3.0, 1e-8) << token_level;
    EXPECT_EQ(grad[6], 0.0);
  }
}

// rollout_is_weights on hand-chosen log-ratios log(prev / generation): row 0 ratios
// 0.5, 1, 1.6; row 1 ratios 1.2, 1.2 (row mean 1.2).
TEST(NemoRlReference, RolloutIsWeightsOfEveryTruncationType) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 1, 1}, {1, 1, 0}});
  const auto layout = batch.layout();
  const std::vector<double> generation(6, -1.0);
  const double l = std::log(1.2);
  const std::vector<double> prev{
      -1.0 + std::log(0.5), -1.0, -1.0 + std::log(1.6), -1.0 + l, -1.0 + l, -3.0};
  const auto weights = [&](nemo::clipped_pg_loss_config c) {
    c.reference_policy_kl_penalty = 0.0;
    c.use_importance_sampling_correction = true;
    c.use_cispo = true;  // a loss that takes the weights as inputs
    return nemo::rollout_is_weights<double>(c, layout, prev, generation);
  };
  const auto expect = [](const std::vector<double>& got, const std::vector<double>& want,
                         const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t t = 0; t < got.size(); ++t) EXPECT_NEAR(got[t], want[t], 1e-12) << what << t;
  };
  expect(weights({}), {0.5, 1, 1.6, 1.2, 1.2, 0}, "plain");
  expect(weights({.truncated_importance_sampling_type = "tis",
                  .truncated_importance_sampling_ratio = 1.5,
                  .truncated_importance_sampling_ratio_min = 0.8}),
         {0.8, 1, 1.5, 1.2, 1.2, 0}, "tis");
  expect(weights({.truncated_importance_sampling_type = "icepop",
                  .truncated_importance_sampling_ratio = 1.5,
                  .truncated_importance_sampling_ratio_min = 0.8}),
         {0, 1, 0, 1.2, 1.2, 0}, "icepop");
  // Row 0's geometric mean (0.5 * 1 * 1.6)^(1/3) = 0.928 leaves [0.95, 1.3]: the row drops.
  expect(weights({.truncated_importance_sampling_type = "seq-mask-tis",
                  .truncated_importance_sampling_ratio = 1.3,
                  .truncated_importance_sampling_ratio_min = 0.95}),
         {0, 0, 0, 1.2, 1.2, 0}, "seq-mask-tis");
  // Sequence level: exp of the row's summed log-ratio, on every token of the row.
  nemo::clipped_pg_loss_config sequence{.token_level_loss = false,
                                        .sequence_level_importance_ratios = true,
                                        .reference_policy_kl_penalty = 0.0,
                                        .use_importance_sampling_correction = true};
  expect(nemo::rollout_is_weights<double>(sequence, layout, prev, generation),
         {0.8, 0.8, 0.8, 1.44, 1.44, 0}, "sequence level");
  // The PPO clip carries the plain correction in its options instead: no weights.
  EXPECT_TRUE(nemo::rollout_is_weights<double>(
                  {.reference_policy_kl_penalty = 0.0, .use_importance_sampling_correction = true},
                  layout, prev, generation)
                  .empty());
  // seq-mask-tis (and tis with a min) no importance_options expresses: the PPO clip takes
  // the same weights as the other losses, and no correction in its options.
  const nemo::clipped_pg_loss_config ppo_seq_mask{
      .reference_policy_kl_penalty = 0.0,
      .use_importance_sampling_correction = true,
      .truncated_importance_sampling_type = "seq-mask-tis",
      .truncated_importance_sampling_ratio = 1.3,
      .truncated_importance_sampling_ratio_min = 0.95};
  ASSERT_TRUE(nemo::takes_rollout_is_weights(ppo_seq_mask));
  EXPECT_EQ(std::get<cascade_rl::ppo_clip_options>(nemo::policy_loss(ppo_seq_mask)).importance.mode,
            cascade_rl::importance_sampling::none);
  expect(nemo::rollout_is_weights<double>(ppo_seq_mask, layout, prev, generation),
         {0, 0, 0, 1.2, 1.2, 0}, "seq-mask-tis on the PPO clip");
}

// An unknown KL type is refused by name, as are NeMo's own invalid combinations.
TEST(NemoRlReference, RefusalsNameTheField) {
  using cascade_rl::testing::expect_error_naming;
  expect_error_naming([] { (void)nemo::policy_loss({.reference_policy_kl_type = "k4"}); },
                      "reference_policy_kl_type");
  expect_error_naming(
      [] {
        (void)nemo::policy_loss(
            {.ratio_clip_c = 3.0, .reference_policy_kl_penalty = 0.0, .use_cispo = true});
      },
      "use_cispo");
  expect_error_naming(
      [] {
        (void)nemo::policy_loss({.reference_policy_kl_penalty = 0.0,
                                 .truncated_importance_sampling_type = "icepop",
                                 .truncated_importance_sampling_ratio = 1.5,
                                 .truncated_importance_sampling_ratio_min = 0.5});
      },
      "truncated_importance_sampling_type", "use_importance_sampling_correction");
  expect_error_naming(
      [] {
        (void)nemo::policy_loss({.reference_policy_kl_penalty = 0.0,
                                 .use_importance_sampling_correction = true,
                                 .truncated_importance_sampling_type = "tis",
                                 .truncated_importance_sampling_ratio = 1.5,
                                 .truncated_importance_sampling_ratio_min = 2.0});
      },
      "truncated_importance_sampling_ratio_min", "<= truncated_importance_sampling_ratio");
  EXPECT_TRUE(std::holds_alternative<cascade_rl::ppo_clip_options>(
      nemo::policy_loss({.reference_policy_kl_penalty = 0.05, .use_kl_in_reward = true})));
}

// nemo_rl.advantage_estimators: GRPO (leave-one-out x normalize), GDPO (with and without
// weights), RawReward (normalize on and off) and Reinforce++ (minus_baseline x KL in
// reward) and OPD, every case.
template <class T>
void check_estimator(const nlohmann::json& inputs, const nlohmann::json& c,
                     const std::string& context) {
  const auto& group_of_row = inputs["prompt_ids_group_of_row"];
  std::vector<std::int64_t> offsets{0};
  for (std::size_t i = 1; i <= group_of_row.size(); ++i)
    if (i == group_of_row.size() || group_of_row[i] != group_of_row[i - 1])
      offsets.push_back(static_cast<std::int64_t>(i));
  const std::span<const std::int64_t> offset_view(offsets);
  const cascade_rl::group_layout groups(offset_view);
  std::vector<T> rewards;
  for (const auto& r : inputs["rewards"]) rewards.push_back(r.get<T>());
  const auto batch = padded_from_mask(inputs["mask"]);
  const auto layout = batch.layout();
  const std::string estimator = c["estimator"].get<std::string>();
  const auto& options = c["options"];
  std::vector<double> got(layout.tokens());  // per token
  if (estimator == "GRPOAdvantageEstimator") {
    std::vector<T> advantages(rewards.size(), T(-7));
    nemo::grpo_advantages(
        cascade_rl::exec::seq, groups, std::span<const T>(rewards), std::span<T>(advantages),
        {.use_leave_one_out_baseline = options["use_leave_one_out_baseline"].get<bool>(),
         .normalize_rewards = options["normalize_rewards"].get<bool>()});
    for (std::size_t t = 0; t < got.size(); ++t)
      got[t] = static_cast<double>(advantages[t / batch.width]);
  } else if (estimator == "OPDAdvantageEstimator") {
    const std::vector<T> teacher = flatten<T>(inputs["teacher_logprobs"]);
    const std::vector<T> student = flatten<T>(inputs["prev_logprobs"]);
    std::vector<T> advantages(layout.tokens(), T(-7));
    cascade_rl::distillation_advantages(
        cascade_rl::exec::seq, layout, {.teacher_log_probs = teacher, .student_log_probs = student},
        std::span<T>(advantages));
    for (std::size_t t = 0; t < got.size(); ++t) got[t] = static_cast<double>(advantages[t]);
  } else if (estimator == "GDPOAdvantageEstimator") {
    std::vector<T> components;  // component-major, keys in sorted order (json objects are)
    for (const auto& item : inputs["reward_components"].items())
      for (const auto& v : item.value()) components.push_back(v.get<T>());
    std::vector<double> weights;
    if (!options["reward_weights"].is_null())
      weights = options["reward_weights"].get<std::vector<double>>();
    std::vector<T> advantages(rewards.size(), T(-7));
    nemo::gdpo_advantages(
        cascade_rl::exec::seq, groups, std::span<const T>(components),
        std::span<const double>(weights), std::span<T>(advantages),
        {.use_leave_one_out_baseline = options["use_leave_one_out_baseline"].get<bool>(),
         .normalize_rewards = options["normalize_rewards"].get<bool>()});
    for (std::size_t t = 0; t < got.size(); ++t)
      got[t] = static_cast<double>(advantages[t / batch.width]);
  } else if (estimator == "ReinforcePlusPlusAdvantageEstimator") {
    const std::vector<T> logp = flatten<T>(inputs["logprobs_policy"]);
    const std::vector<T> ref = flatten<T>(inputs["logprobs_reference"]);
    std::vector<T> advantages(layout.tokens(), T(-7));
    const std::string kl_type = options["reference_policy_kl_type"].get<std::string>();
    nemo::reinforce_plus_plus_advantages(
        cascade_rl::exec::seq, groups, layout, std::span<const T>(rewards),
        std::span<const T>(logp), std::span<const T>(ref), std::span<T>(advantages),
        {.minus_baseline = options["minus_baseline"].get<bool>(),
         .use_kl_in_reward = options["use_kl_in_reward"].get<bool>(),
         .reference_policy_kl_penalty = options["reference_policy_kl_penalty"].get<double>(),
         .reference_policy_kl_type = kl_type});
    for (std::size_t t = 0; t < got.size(); ++t) got[t] = static_cast<double>(advantages[t]);
  } else {
    std::vector<T> expanded(layout.tokens());
    for (std::size_t t = 0; t < expanded.size(); ++t) expanded[t] = rewards[t / batch.width];
    std::vector<T> whitened(expanded);
    if (options["normalize_advantages"].get<bool>())
      cascade_rl::masked_whiten(cascade_rl::exec::seq, layout, std::span<const T>(expanded),
                                std::span<T>(whitened), nemo::raw_reward_whitening());
    for (std::size_t t = 0; t < got.size(); ++t) got[t] = static_cast<double>(whitened[t]);
  }
  // NeMo expands the advantage to every position; the loss reads the valid tokens only
  // (masked_whiten writes 0 on the others).
  const std::vector<double> expected = flatten<double>(c["advantages"]);
  for (std::size_t t = 0; t < got.size(); ++t)
    if (layout.valid(t))
      expect_close(got[t], expected[t], context + " advantages[" + std::to_string(t) + "]");
}

TEST(NemoRlReference, EveryEstimatorCase) {
  const auto reference = load_reference("trl_nemo_rl.json");
  const auto& estimators = reference["nemo_rl"]["advantage_estimators"];
  int checked = 0;
  for (std::size_t k = 0; k < estimators["cases"].size(); ++k) {
    const auto& c = estimators["cases"][k];
    const std::string estimator = c["estimator"].get<std::string>();
    const std::string context = estimator + " " + c["options"].dump();
    check_estimator<double>(estimators["inputs"], c, context);
    check_estimator<float>(estimators["inputs"], c, context + " (float)");
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

// GDPO with leave-one-out on a batch built to hold what a random draw may or may not:
// a component constant in a group (its leave-one-out spread is zero, so NeMo leaves
// r - baseline = 0 undivided) beside one whose lone value's others are all equal (b's 0
// in {1, 0, 1}: others {1, 1}, std exactly 0, advantage 0 - 1 undivided), and a group of
// two (one other value: std 0). Hand-computed, per row:
//   group {0, 1, 2}: a = {2, 2, 2} -> 0;  b = {1, 0, 1} -> {x, -1, x},
//                    x = (1 - 0.5) / (std{0, 1} + 1e-6) = 0.5 / (sqrt(0.5) + 1e-6)
//   group {3, 4}:    a = {0.5, -0.5} -> {1, -1};  b = {1, 1} -> 0
// weighted sum s = w_a a + w_b b, then (s - mean(s)) / std(s) over the 5 rows (unbiased,
// no epsilon). The literal values are NeMo-RL 7ea279a's GDPOAdvantageEstimator run on
// this batch in float32 (refgen's loader).
template <class T>
std::vector<double> nemo_gdpo(const std::vector<std::int64_t>& offsets,
                              const std::vector<T>& components, std::vector<double> weights,
                              bool leave_one_out = true) {
  const std::span<const std::int64_t> offset_view(offsets);
  std::vector<T> advantages(static_cast<std::size_t>(offsets.back()), T(-7));
  nemo::gdpo_advantages(cascade_rl::exec::seq, cascade_rl::group_layout(offset_view),
                        std::span<const T>(components), std::span<const double>(weights),
                        std::span<T>(advantages),
                        {.use_leave_one_out_baseline = leave_one_out, .normalize_rewards = true});
  return {advantages.begin(), advantages.end()};
}

std::vector<double> standardised(std::vector<double> s) {
  double mean = 0, m2 = 0;
  for (double v : s) mean += v / static_cast<double>(s.size());
  for (double v : s) m2 += (v - mean) * (v - mean);
  const double std = std::sqrt(m2 / static_cast<double>(s.size() - 1));
  for (double& v : s) v = (v - mean) / std;
  return s;
}

template <class T>
void expect_gdpo_leave_one_out_with_lone_values() {
  const std::vector<std::int64_t> offsets{0, 3, 5};
  const std::vector<T> components{T(2), T(2), T(2), T(0.5), T(-0.5),  // reward/a
                                  T(1), T(0), T(1), T(1), T(1)};      // reward/b
  const double x = 0.5 / (std::sqrt(0.5) + 1e-6);
  const double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-12;
  const double peer_tolerance = 2e-6;  // NeMo's values are float32
  const auto unweighted = nemo_gdpo(offsets, components, {});
  const auto want = standardised({x, -1, x, 1, -1});
  const double peer[] = {0.626958668, -1.0875175, 0.626958668, 0.921117485, -1.0875175};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(unweighted[i], want[i], tolerance) << "row " << i;
    EXPECT_NEAR(unweighted[i], peer[i], peer_tolerance) << "row " << i;
  }
  const auto weighted = nemo_gdpo(offsets, components, {1.0, 0.5});
  const auto want_weighted = standardised({0.5 * x, -0.5, 0.5 * x, 1, -1});
  const double peer_weighted[] = {0.395498067, -0.686027706, 0.395498067, 1.21460295, -1.31957126};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(weighted[i], want_weighted[i], tolerance) << "weighted row " << i;
    EXPECT_NEAR(weighted[i], peer_weighted[i], peer_tolerance) << "weighted row " << i;
  }
  // Without leave-one-out the same batch: b's group mean 2/3, std sqrt(1/3).
  const double y = (1.0 / 3.0) / (std::sqrt(1.0 / 3.0) + 1e-6);
  const double a2 = 0.5 / (std::sqrt(0.5) + 1e-6);
  const auto plain = nemo_gdpo(offsets, components, {}, false);
  const auto want_plain = standardised({y, -2 * y, y, a2, -a2});
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(plain[i], want_plain[i], tolerance) << "without leave-one-out, row " << i;
}

TEST(NemoRlReference, GdpoLeaveOneOutWithAConstantComponentAndALoneValue) {
  expect_gdpo_leave_one_out_with_lone_values<double>();
  expect_gdpo_leave_one_out_with_lone_values<float>();
}

TEST(NemoRlReference, GdpoLeaveOneOutDegenerateBatches) {
  // Groups of two, a constant across the whole batch: b's {1, 0} gives {1, -1} (one other
  // value, std 0), its {0, 0} nothing: s = {1, -1, 0, 0}, std sqrt(2/3).
  const std::vector<std::int64_t> pairs{0, 2, 4};
  const auto lone = nemo_gdpo<double>(pairs, {3, 3, 3, 3, 1, 0, 0, 0}, {});
  const double r = std::sqrt(1.5);  // NeMo: 1.2247448
  EXPECT_NEAR(lone[0], r, 1e-12);
  EXPECT_NEAR(lone[1], -r, 1e-12);
  EXPECT_EQ(lone[2], 0.0);
  EXPECT_EQ(lone[3], 0.0);
  // Every component constant over the batch: every part 0, a zero spread, NeMo's
  // advantages - mean: exactly 0 everywhere, never NaN.
  for (bool leave_one_out : {true, false}) {
    const auto flat = nemo_gdpo<float>(pairs, {3, 3, 3, 3, 1, 1, 1, 1}, {}, leave_one_out);
    for (std::size_t i = 0; i < flat.size(); ++i) EXPECT_EQ(flat[i], 0.0) << "row " << i;
  }
}

// nemo_rl.seq_logprob_error_masking: every case's metrics and sample_mask after the mask,
// and ClippedPGLossFn on the masked batch (loss_after_mask) through the same check as the
// loss cases.
template <class T>
void check_error_masking(const nlohmann::json& c, const nlohmann::json& b,
                         const std::string& context, case_totals& totals) {
  const auto batch = padded_from_mask(b["token_mask"]);
  const auto layout = batch.layout();
  const std::vector<T> prev = flatten<T>(b["prev_logprobs"]);
  const std::vector<T> generation = flatten<T>(b["generation_logprobs"]);
  std::vector<T> rewards, sample_mask;
  for (const auto& r : b["rewards"]) rewards.push_back(r.get<T>());
  for (const auto& m : b["sample_mask"]) sample_mask.push_back(m.get<T>());
  std::optional<double> threshold;
  if (!c["seq_logprob_error_threshold"].is_null())
    threshold = c["seq_logprob_error_threshold"].get<double>();
  const auto m = nemo::seq_logprob_error_masking(
      layout, std::span<const T>(prev), std::span<const T>(generation), std::span<const T>(rewards),
      std::span<T>(sample_mask), threshold);
  const auto& e = c["metrics"];
  const std::pair<const char*, double> values[] = {
      {"max_seq_mult_prob_error", m.max_seq_mult_prob_error},
      {"mean_seq_mult_prob_error", m.mean_seq_mult_prob_error},
      {"min_seq_mult_prob_error", m.min_seq_mult_prob_error},
      {"max_seq_mult_prob_error_after_mask", m.max_seq_mult_prob_error_after_mask},
      {"mean_seq_mult_prob_error_after_mask", m.mean_seq_mult_prob_error_after_mask},
      {"min_seq_mult_prob_error_after_mask", m.min_seq_mult_prob_error_after_mask},
      {"num_masked_seqs", static_cast<double>(m.num_masked_seqs)},
      {"masked_correct_pct", m.masked_correct_pct}};
  EXPECT_EQ(e.size(), std::size(values)) << context << ": a metric without a field of ours";
  for (const auto& [key, value] : values)
    expect_close(value, e[key].template get<double>(), context + " " + key);
  const auto expected_mask = c["sample_mask_after"].get<std::vector<double>>();
  for (std::size_t s = 0; s < sample_mask.size(); ++s)
    EXPECT_EQ(static_cast<double>(sample_mask[s]), expected_mask[s]) << context << " sample " << s;
  if (!c.contains("loss_after_mask")) return;
  nlohmann::json loss_case = c["loss_after_mask"];
  loss_case["data_rewards_given"] = false;
  nlohmann::json masked_batch = b;
  masked_batch["sample_mask"] = c["sample_mask_after"];
  check_case<T>(loss_case, masked_batch, context + " loss_after_mask", totals);
}

TEST(NemoRlReference, SeqLogprobErrorMaskingEveryCase) {
  const auto reference = load_reference("trl_nemo_rl.json");
  const auto& cases = reference["nemo_rl"]["seq_logprob_error_masking"]["cases"];
  ASSERT_EQ(cases.size(), 6u);
  case_totals totals;
  check_every_case(cases, reference["nemo_rl"]["batches"], "seq_logprob_error_masking",
                   [&](const auto& c, const auto& b, const std::string& context, auto precision) {
                     check_error_masking<decltype(precision)>(c, b, context, totals);
                   });
  EXPECT_EQ(totals.reproduced, 2 * 4);  // every loss_after_mask runs without the KL
  EXPECT_EQ(totals.refused, 0);
}

}  // namespace nemo_rl_reference_cases
}  // namespace
