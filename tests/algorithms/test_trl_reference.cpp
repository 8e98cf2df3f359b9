// Conformance with TRL's GRPOTrainer._compute_loss through presets::trl
// (tests/reference/trl_nemo_rl.json, see tests/reference/README_trl_nemo_rl.md): every
// case of trl.grpo_loss, in double and in float, either reproduced (loss, gradient
// w.r.t. the log-probs, every metric with a field of ours) or refused by name.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/trl.hpp"
#include "support/expect_error.hpp"
#include "support/peer_loss_case.hpp"
#include "support/reference.hpp"

namespace {
namespace trl_reference_cases {  // this file's names, apart in the area's unity build

namespace trl = cascade_rl::presets::trl;
using cascade_rl::testing::case_totals;
using cascade_rl::testing::check_every_case;
using cascade_rl::testing::expect_all_close;
using cascade_rl::testing::expect_close;
using cascade_rl::testing::flatten;
using cascade_rl::testing::load_reference;
using cascade_rl::testing::padded_from_mask;

std::optional<double> number_or_null(const nlohmann::json& object, const char* key) {
  if (!object.contains(key) || object[key].is_null()) return std::nullopt;
  return object[key].get<double>();
}

// The case's GRPOConfig, by TRL's field names (attributes_read and args_read).
trl::grpo_config config_of(const nlohmann::json& c, std::string& loss_type, std::string& level,
                           std::string& vllm_mode) {
  const auto& a = c["attributes_read"];
  const auto& r = c["args_read"];
  loss_type = a["loss_type"].get<std::string>();
  level = a["importance_sampling_level"].get<std::string>();
  trl::grpo_config config{.loss_type = loss_type, .importance_sampling_level = level};
  if (const auto v = number_or_null(a, "epsilon_low")) config.epsilon_low = *v;
  config.epsilon_high = number_or_null(a, "epsilon_high");
  config.delta = number_or_null(r, "delta");
  config.beta = a["beta"].get<double>();
  config.use_bias_correction_kl = r.value("use_bias_correction_kl", false);
  config.top_entropy_quantile = a["top_entropy_quantile"].get<double>();
  config.off_policy_mask_threshold = number_or_null(a, "off_policy_mask_threshold");
  if (a["_entropy_bonus_enabled"].get<bool>())
    config.entropy_coef = a["entropy_coef"].get<double>();
  if (const auto v = number_or_null(a, "max_completion_length"))
    config.max_completion_length = static_cast<std::size_t>(*v);
  if (const auto v = number_or_null(a, "current_gradient_accumulation_steps"))
    config.gradient_accumulation_steps = static_cast<std::size_t>(*v);
  if (const auto v = number_or_null(r, "sapo_temperature_pos")) config.sapo_temperature_pos = *v;
  if (const auto v = number_or_null(r, "sapo_temperature_neg")) config.sapo_temperature_neg = *v;
  if (const auto v = number_or_null(r, "vespo_k_pos")) config.vespo_k_pos = *v;
  if (const auto v = number_or_null(r, "vespo_lambda_pos")) config.vespo_lambda_pos = *v;
  if (const auto v = number_or_null(r, "vespo_k_neg")) config.vespo_k_neg = *v;
  if (const auto v = number_or_null(r, "vespo_lambda_neg")) config.vespo_lambda_neg = *v;
  if (a["use_vllm"].get<bool>() && a.value("vllm_importance_sampling_correction", false)) {
    config.vllm_importance_sampling_correction = true;
    vllm_mode = a["vllm_importance_sampling_mode"].get<std::string>();
    config.vllm_importance_sampling_mode = vllm_mode;
    config.vllm_importance_sampling_clip_min =
        number_or_null(a, "vllm_importance_sampling_clip_min");
    config.vllm_importance_sampling_clip_max =
        number_or_null(a, "vllm_importance_sampling_clip_max");
  }
  return config;
}

// The GRPOConfig field presets::trl must name when it refuses the case, from the case's
// settings alone (the list in trl.hpp's header); empty: the case is reproduced.
std::string expected_refusal(const trl::grpo_config& c) {
  const bool sequence = c.importance_sampling_level == "sequence";
  if (sequence && c.delta) return "delta";
  return "";
}

// Metrics TRL reports that no field of ours holds, each with the reason.
bool unmapped_metric(const std::string& key) {
  return key == "entropy"                  // a statistic of the entropies input
         || key == "clip_ratio/low_mean"   // cascade_rl counts the union of the clips
         || key == "clip_ratio/high_mean"  // (clip_ratio/region_mean), not each side
         || key == "clip_ratio/low_min" || key == "clip_ratio/high_max" ||
         key == "cispo_clip_ratio"         // counts A > 0 only; ours counts every cap
         || key.starts_with("sampling/");  // statistics of the IS ratio input
}

template <class T>
void check_case(const nlohmann::json& c, const nlohmann::json& b, const std::string& context,
                case_totals& totals) {
  std::string loss_type, level, vllm_mode;
  const trl::grpo_config config = config_of(c, loss_type, level, vllm_mode);
  const std::string refusal = expected_refusal(config);
  if (!refusal.empty()) {
    cascade_rl::testing::expect_error_naming([&] { (void)trl::policy_loss(config); }, refusal);
    ++totals.refused;
    return;
  }
  ++totals.reproduced;
  const auto batch = padded_from_mask(b["completion_mask"]);
  const auto layout = batch.layout();
  const std::vector<T> log_probs = flatten<T>(b["per_token_logps"]);
  const std::vector<T> old_log_probs =
      c["old_per_token_logps_given"].get<bool>() ? flatten<T>(b["old_per_token_logps"]) : log_probs;
  const std::vector<T> sampling = flatten<T>(b["sampling_per_token_logps"]);
  const std::vector<T> ref = flatten<T>(b["ref_per_token_logps"]);
  // TRL's [N] advantages, one per token of the row.
  const std::vector<T> raw_advantages =
      cascade_rl::testing::per_token_of_rows<T>(b["advantages"], batch.width);
  // TRL's token masks; sampling_per_token_logps when the inputs hold them, else the old.
  bool sampling_given = false;
  for (const auto& key : c["inputs_used"]) sampling_given |= key == "sampling_per_token_logps";
  const std::vector<T> entropies = flatten<T>(b["entropies"]);
  const std::vector<T> advantages =
      trl::masked_advantages<T>(config, layout, raw_advantages, log_probs,
                                sampling_given ? sampling : old_log_probs, entropies);
  const bool token_masks = config.top_entropy_quantile < 1.0 || config.off_policy_mask_threshold;

  const auto options = trl::policy_loss(config);
  const bool vespo = loss_type == "vespo";
  const std::vector<T> behaviour =
      vespo ? std::vector<T>{}
            : trl::vllm_behaviour_log_probs<T>(config, layout, old_log_probs, sampling);
  const std::vector<T> phi =
      vespo ? trl::vespo_weights<T>(config, layout, advantages, log_probs, old_log_probs, sampling)
      : loss_type == "cispo" && level == "sequence"
          ? trl::cispo_sequence_weights<T>(config, layout, log_probs, old_log_probs)
          : std::vector<T>{};
  const auto normalizer =
      trl::normalizer(cascade_rl::exec::seq, config, layout, c["num_items_in_batch"].get<double>());
  // luspo at token level: every position of the grid, weighted by L / T.
  const auto policy_layout = trl::policy_layout(config, layout);
  const std::vector<T> luspo = trl::luspo_weights<T>(config, layout);
  std::vector<T> grad(layout.tokens(), T(-7));
  // Every loss through the one entry point: luspo's weights reach PPO's clip (over the
  // grid of every position), VESPO's and sequence CISPO's phi REINFORCE; the other losses
  // are given none.
  const bool ppo = std::holds_alternative<cascade_rl::ppo_clip_options>(options);
  const cascade_rl::policy_loss_inputs<T> inputs{
      .log_probs = log_probs,
      .old_log_probs = old_log_probs,
      .advantages = advantages,
      .behaviour_log_probs = behaviour,
      .rollout_is_weights = ppo ? std::span<const T>(luspo) : std::span<const T>(phi)};
  const auto result = cascade_rl::policy_loss(cascade_rl::exec::seq, ppo ? policy_layout : layout,
                                              inputs, grad, normalizer, options);
  cascade_rl::testing::summed_loss total(layout.tokens());
  total.add(result.loss, grad);
  std::optional<double> kl_mean;
  if (config.beta != 0.0 && (config.use_bias_correction_kl || loss_type == "luspo")) {
    const auto terms = trl::kl_token_terms<T>(config, layout, log_probs, old_log_probs, ref);
    std::vector<T> kl_grad(layout.tokens(), T(-7));
    total.add(
        cascade_rl::aggregate_token_losses(cascade_rl::exec::seq, trl::kl_layout(config, layout),
                                           terms, kl_grad, normalizer, trl::aggregation(loss_type)),
        kl_grad);
    // TRL's "kl": the masked mean of (r *) k3 over the valid tokens, without luspo's weight.
    trl::grpo_config unweighted = config;
    unweighted.loss_type = "grpo";
    const auto per_token =
        trl::kl_token_terms<T>(unweighted, layout, log_probs, old_log_probs, ref);
    double sum = 0;
    std::size_t count = 0;
    for (std::size_t t = 0; t < layout.tokens(); ++t)
      if (layout.valid(t)) {
        sum += static_cast<double>(per_token.token_losses[t]) / config.beta;
        ++count;
      }
    kl_mean = sum / static_cast<double>(count);
  } else if (const auto kl = trl::kl_loss(config)) {
    std::vector<T> kl_grad(layout.tokens(), T(-7));
    total.add(
        cascade_rl::kl_loss(cascade_rl::exec::seq, layout,
                            cascade_rl::kl_inputs<T>{.log_probs = log_probs, .ref_log_probs = ref},
                            kl_grad, normalizer, *kl),
        kl_grad);
    // TRL's "kl" metric: the plain masked mean of k3 over the micro-batch.
    const auto counts = cascade_rl::local_loss_counts(cascade_rl::exec::seq, layout);
    cascade_rl::kl_loss_options mean = *kl;
    mean.coefficient = 1.0;
    mean.aggregation = cascade_rl::loss_aggregation::token_mean;
    kl_mean = cascade_rl::kl_loss(
        cascade_rl::exec::seq, layout,
        cascade_rl::kl_inputs<T>{.log_probs = log_probs, .ref_log_probs = ref}, kl_grad,
        cascade_rl::loss_normalizer{.mode = cascade_rl::loss_aggregation::token_mean,
                                    .tokens = static_cast<double>(counts.tokens)},
        mean);
  }
  // TRL's policy_loss metric: the loss before the bonus and before the division by the
  // accumulation steps (dapo and cispo do not divide).
  const bool divides = loss_type != "dapo" && loss_type != "cispo";
  const double policy_loss =
      total.loss * (divides ? static_cast<double>(config.gradient_accumulation_steps) : 1.0);
  // The static entropy bonus over the kept tokens (its entropy seed is not in the file:
  // the stub's entropies are constants).
  const std::vector<std::uint8_t> keep = trl::entropy_mask<T>(config, layout, entropies);
  std::size_t kept = 0;
  for (const auto k : keep) kept += k;
  if (const auto bonus = trl::entropy_bonus(config, kept, c["num_items_in_batch"].get<double>())) {
    std::vector<T> losses(layout.tokens()), seeds(layout.tokens()), h(layout.tokens());
    for (std::size_t t = 0; t < losses.size(); ++t) {
      const double w = keep[t] ? -config.entropy_coef : 0.0;
      losses[t] = static_cast<T>(w * static_cast<double>(entropies[t]));
      seeds[t] = static_cast<T>(w);
    }
    // Its grad_out h is the entropy seed, not a log-prob gradient: the loss only.
    total.loss += cascade_rl::aggregate_token_losses(
        cascade_rl::exec::seq, layout, {.token_losses = losses, .token_grads = seeds}, h, *bonus,
        cascade_rl::loss_aggregation::token_mean);
  }
  total.expect_matches(c, "loss", "grad_per_token_logps", context);

  for (const auto& item : c["metrics"].items()) {
    const std::string& key = item.key();
    const double expected = item.value().get<double>();
    if (key == "clip_ratio/region_mean") {
      // TRL averages the sequence level's clip flags over rows, ours over tokens; and it
      // counts the clips of the tokens its masks drop, whose advantage we zeroed; luspo at
      // token level counts the padded positions too.
      if (level == "token" && !token_masks && loss_type != "luspo")
        expect_close(result.metrics.clip_fraction(), expected, context + " " + key);
    } else if (key == "vespo/phi_seq_mean") {
      double sum = 0;  // one value per row
      for (std::size_t i = 0; i < batch.rows; ++i) sum += static_cast<double>(phi[i * batch.width]);
      expect_close(sum / static_cast<double>(batch.rows), expected, context + " " + key);
    } else if (key == "policy_loss") {
      expect_close(policy_loss, expected, context + " policy_loss");
    } else if (key == "entropy_coef") {
      EXPECT_EQ(expected, config.entropy_coef) << context;
    } else if (key == "kl") {
      ASSERT_TRUE(kl_mean) << context;
      expect_close(*kl_mean, expected, context + " kl");
    } else if (!unmapped_metric(key)) {
      ADD_FAILURE() << context << ": metric " << key << " has no field of ours";
    }
  }
}

TEST(TrlReference, GrpoLossEveryCaseReproducedOrRefusedByName) {
  const auto reference = load_reference("trl_nemo_rl.json");
  const auto& cases = reference["trl"]["grpo_loss"]["cases"];
  ASSERT_EQ(cases.size(), 78u);
  case_totals totals;
  check_every_case(cases, reference["trl"]["batches"], "grpo_loss",
                   [&](const auto& c, const auto& b, const std::string& context, auto precision) {
                     const auto& a = c["attributes_read"];
                     check_case<decltype(precision)>(
                         c, b,
                         context + " " + a["loss_type"].template get<std::string>() + " " +
                             a["importance_sampling_level"].template get<std::string>(),
                         totals);
                   });
  // The split is part of the contract: a case moving from refused to reproduced (or back)
  // must update trl.hpp's list and this count.
  EXPECT_EQ(totals.reproduced, 2 * 78);
  EXPECT_EQ(totals.refused, 0);
}

// The four aggregations on one hand-computed 2-row batch at ratio 1 (old = logp), where
// every token's loss is -A and its gradient -A: row 0 holds 1 valid token of 3 with A = 1,
// row 1 holds 3 with A = 2, so the masked sum is -1 - 6 = -7 over 4 tokens.
TEST(TrlReference, LossTypesDifferOnlyInTheirNormaliserOnAHandComputedBatch) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 0, 0}, {1, 1, 1}});
  const auto layout = batch.layout();
  const std::vector<double> logp{-1.0, -1.1, -1.2, -0.5, -0.6, -0.7};
  const std::vector<double> advantages{1, 1, 1, 2, 2, 2};
  struct expectation {
    const char* loss_type;
    double loss;
    double grad_row0;  // d loss / d logp of row 0's valid token
    double grad_row1;  // of each of row 1's tokens
  };
  // grpo: mean over rows of row means: (-1 + -2) / 2; row 0's token weighs 1/(1*2).
  // bnpo: -7 / 4 local tokens. dr_grpo: -7 / (2 rows * max_completion_length 3).
  // dapo: -7 / num_items_in_batch 8 (the step's tokens: another micro-batch holds 4 more).
  const expectation table[] = {{"grpo", -1.5, -0.5, -1.0 / 3.0},
                               {"bnpo", -1.75, -0.25, -0.5},
                               {"dr_grpo", -7.0 / 6.0, -1.0 / 6.0, -1.0 / 3.0},
                               {"dapo", -7.0 / 8.0, -1.0 / 8.0, -0.25}};
  for (const auto& e : table) {
    const trl::grpo_config config{
        .loss_type = e.loss_type, .epsilon_high = 0.28, .max_completion_length = 3};
    const auto options = std::get<cascade_rl::ppo_clip_options>(trl::policy_loss(config));
    std::vector<double> grad(layout.tokens(), -7.0);
    const auto result = cascade_rl::ppo_clip_loss(
        cascade_rl::exec::seq, layout,
        {.log_probs = logp, .old_log_probs = logp, .advantages = advantages}, grad,
        trl::normalizer(cascade_rl::exec::seq, config, layout, 8.0), options);
    EXPECT_NEAR(result.loss, e.loss, 1e-15) << e.loss_type;
    EXPECT_NEAR(grad[0], e.grad_row0, 1e-15) << e.loss_type;
    EXPECT_EQ(grad[1], 0.0) << e.loss_type;
    for (std::size_t t = 3; t < 6; ++t) EXPECT_NEAR(grad[t], e.grad_row1, 1e-15) << e.loss_type;
  }
}

// TRL's grpo and dr_grpo count every row, a fully masked one too (torch .mean() over rows,
// per_token_loss.size(0)), where veRL's agg_loss counts only rows with a valid token: on
// rows {1 valid token with A = 1}, {masked}, grpo's loss is -1 / 2, not -1.
TEST(TrlReference, GrpoCountsAFullyMaskedRowInTheMean) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 0}, {0, 0}});
  const auto layout = batch.layout();
  const std::vector<double> logp{-1.0, -1.0, -1.0, -1.0};
  const std::vector<double> advantages{1, 1, 1, 1};
  for (const char* type : {"grpo", "dr_grpo"}) {
    const trl::grpo_config config{.loss_type = type, .max_completion_length = 2};
    const auto normalizer = trl::normalizer(cascade_rl::exec::seq, config, layout, 1.0);
    EXPECT_EQ(normalizer.sequences, 2.0) << type;
    std::vector<double> grad(layout.tokens(), -7.0);
    const auto result = cascade_rl::ppo_clip_loss(
        cascade_rl::exec::seq, layout,
        {.log_probs = logp, .old_log_probs = logp, .advantages = advantages}, grad, normalizer,
        std::get<cascade_rl::ppo_clip_options>(trl::policy_loss(config)));
    EXPECT_EQ(result.loss, std::string(type) == "grpo" ? -0.5 : -0.25) << type;
  }
}

// luspo at token level: TRL's (per_token_loss * L).mean() runs over the whole (rows, T)
// grid, the padded positions too. At ratio 1 each position's loss is -A (its gradient -A):
// rows {1 valid of 2, A = 1}, {2 valid, A = 2} give (-1 * 1 * 2 - 2 * 2 * 2) / 4 = -2.5, and
// d/dlogp is -A * L / 4 on every position, row 0's padded one included (-0.25).
TEST(TrlReference, LuspoAtTokenLevelReadsThePaddedPositions) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 0}, {1, 1}});
  const auto layout = batch.layout();
  const std::vector<double> logp{-1.0, -2.0, -0.5, -0.7};
  const std::vector<double> advantages{1, 1, 2, 2};
  const trl::grpo_config config{.loss_type = "luspo", .importance_sampling_level = "token"};
  const std::vector<double> weights = trl::luspo_weights<double>(config, layout);
  EXPECT_EQ(weights, (std::vector<double>{0.5, 0.5, 1.0, 1.0}));  // L / T
  std::vector<double> grad(layout.tokens(), -7.0);
  const auto result =
      cascade_rl::ppo_clip_loss(cascade_rl::exec::seq, trl::policy_layout(config, layout),
                                {.log_probs = logp,
                                 .old_log_probs = logp,
                                 .advantages = advantages,
                                 .rollout_is_weights = weights},
                                grad, trl::normalizer(cascade_rl::exec::seq, config, layout, 3.0),
                                std::get<cascade_rl::ppo_clip_options>(trl::policy_loss(config)));
  EXPECT_NEAR(result.loss, -2.5, 1e-15);
  EXPECT_NEAR(grad[0], -0.25, 1e-15);
  EXPECT_NEAR(grad[1], -0.25, 1e-15);  // padding
  EXPECT_NEAR(grad[2], -1.0, 1e-15);
  EXPECT_NEAR(grad[3], -1.0, 1e-15);
  // At sequence level the loss is one per row: the padded position has no gradient.
  EXPECT_TRUE(trl::luspo_weights<double>(
                  {.loss_type = "luspo", .importance_sampling_level = "sequence"}, layout)
                  .empty());
  EXPECT_FALSE(
      trl::policy_layout({.loss_type = "luspo", .importance_sampling_level = "sequence"}, layout)
          .valid(1));
}

// masked_advantages on a hand-made batch (the reference vectors drop no row by the
// off-policy mask): rows {3 valid tokens, A = -1}, {2 valid of 3, A = 1}.
TEST(TrlReference, TokenMasksZeroTheDroppedTokensAdvantage) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 1, 1}, {1, 1, 0}});
  const auto layout = batch.layout();
  const std::vector<double> advantages{-1, -1, -1, 1, 1, 1};
  const std::vector<double> logp{-1, -1, -1, -1, -1, -1};
  // Row 0's mean of sampling - logp is 0.1, row 1's 0.5.
  const std::vector<double> sampling{-0.9, -0.9, -0.9, -0.5, -0.5, -7};
  // The valid entropies sorted: 0.1 0.2 0.3 0.4 0.5; quantile 0.5 (top_entropy_quantile 0.5)
  // is 0.3: tokens with entropy >= 0.3 keep their advantage.
  const std::vector<double> entropies{0.3, 0.1, 0.5, 0.2, 0.4, 9.0};
  const auto expect = [](const std::vector<double>& got, const std::vector<double>& want,
                         const char* what) {
    for (std::size_t t = 0; t < want.size(); ++t) EXPECT_EQ(got[t], want[t]) << what << t;
  };
  expect(trl::masked_advantages<double>({.loss_type = "grpo", .top_entropy_quantile = 0.5}, layout,
                                        advantages, logp, sampling, entropies),
         {-1, 0, -1, 0, 1, 0}, "entropy");
  // Threshold 0.05: row 0 (A < 0, mean 0.1) drops; row 1 keeps (A >= 0).
  expect(trl::masked_advantages<double>({.loss_type = "grpo", .off_policy_mask_threshold = 0.05},
                                        layout, advantages, logp, sampling, entropies),
         {0, 0, 0, 1, 1, 1}, "off-policy 0.05");
  expect(trl::masked_advantages<double>({.loss_type = "grpo", .off_policy_mask_threshold = 0.2},
                                        layout, advantages, logp, sampling, entropies),
         advantages, "off-policy 0.2");
}

// vllm_behaviour_log_probs on hand-chosen ratios r = exp(old - sampling): row 0 holds
// 0.25 and 2 (row ratio 0.5), row 1 holds 1.5 and a masked token. The importance ratio
// exp(old - behaviour) is TRL's before its upper clamp or mask.
TEST(TrlReference, VllmBehaviourLogProbsGiveTrlsRatio) {
  const auto batch = padded_from_mask(nlohmann::json{{1, 1}, {1, 0}});
  const auto layout = batch.layout();
  const std::vector<double> old{-1, -1, -1, -1};
  const std::vector<double> sampling{-1 - std::log(0.25), -1 - std::log(2.0), -1 - std::log(1.5),
                                     -5};
  const auto ratios = [&](const char* mode, std::optional<double> clip_min) {
    const trl::grpo_config config{.loss_type = "dapo",
                                  .vllm_importance_sampling_correction = true,
                                  .vllm_importance_sampling_mode = mode,
                                  .vllm_importance_sampling_clip_min = clip_min,
                                  .vllm_importance_sampling_clip_max = 1.8};
    const auto behaviour = trl::vllm_behaviour_log_probs<double>(config, layout, old, sampling);
    std::vector<double> r;
    for (std::size_t t = 0; t < 3; ++t) r.push_back(std::exp(old[t] - behaviour[t]));
    EXPECT_EQ(behaviour[3], old[3]) << mode;  // masked: untouched
    return r;
  };
  const auto expect = [](const std::vector<double>& got, const std::vector<double>& want,
                         const char* what) {
    for (std::size_t t = 0; t < want.size(); ++t) EXPECT_NEAR(got[t], want[t], 1e-12) << what << t;
  };
  expect(ratios("token_truncate", std::nullopt), {0.25, 2.0, 1.5}, "token_truncate");
  expect(ratios("token_truncate", 0.5), {0.5, 2.0, 1.5}, "token_truncate, clip_min 0.5");
  expect(ratios("token_mask", 0.5), {0.25, 2.0, 1.5}, "token_mask");
  expect(ratios("sequence_truncate", 0.6), {0.6, 0.6, 1.5}, "sequence_truncate, clip_min 0.6");
  expect(ratios("sequence_mask", 0.6), {0.5, 0.5, 1.5}, "sequence_mask");
  // The options then cap (truncate) or drop (mask) at clip_max 1.8.
  const auto options = std::get<cascade_rl::ppo_clip_options>(
      trl::policy_loss({.loss_type = "dapo",
                        .vllm_importance_sampling_correction = true,
                        .vllm_importance_sampling_mode = "sequence_mask",
                        .vllm_importance_sampling_clip_min = 0.6,
                        .vllm_importance_sampling_clip_max = 1.8}));
  EXPECT_EQ(options.importance.mode, cascade_rl::importance_sampling::band_mask);
  EXPECT_EQ(options.importance.band_low, 0.6);
  EXPECT_EQ(options.importance.band_high, 1.8);
}

// Gradient accumulation: grpo, bnpo and dr_grpo divide by the steps, dapo does not (its
// num_items_in_batch already counts the whole step).
TEST(TrlReference, GradientAccumulationStepsDivideEveryLossTypeButDapo) {
  for (const char* type : {"grpo", "bnpo", "dr_grpo", "dapo", "luspo"}) {
    trl::grpo_config one{.loss_type = type, .max_completion_length = 3};
    trl::grpo_config two = one;
    two.gradient_accumulation_steps = 2;
    const auto a = trl::normalizer(one, 2, 4, 8.0);
    const auto b = trl::normalizer(two, 2, 4, 8.0);
    const double w1 = cascade_rl::terms::aggregation_weight(a.mode, a, 1);
    const double w2 = cascade_rl::terms::aggregation_weight(b.mode, b, 1);
    EXPECT_EQ(w2, std::string(type) == "dapo" ? w1 : w1 / 2) << type;
  }
}

// delta caps the ratio: for delta >= 1 + epsilon_high it is PPO's dual clip; below that it
// would also cap positive advantages, which the dual clip cannot express: refused.
TEST(TrlReference, DeltaIsTheDualClipAndASmallDeltaIsRefused) {
  const trl::grpo_config config{.loss_type = "grpo", .epsilon_high = 0.28, .delta = 1.4};
  const auto options = std::get<cascade_rl::ppo_clip_options>(trl::policy_loss(config));
  ASSERT_TRUE(options.dual_clip);
  EXPECT_EQ(*options.dual_clip, 1.4);
  cascade_rl::testing::expect_error_naming(
      [] { (void)trl::policy_loss({.loss_type = "grpo", .epsilon_high = 0.28, .delta = 1.2}); },
      "delta");
  cascade_rl::testing::expect_error_naming([] { (void)trl::policy_loss({.loss_type = "nope"}); },
                                           "loss_type");
}

// trl.advantages: every case (scale_rewards group / batch / none, one and two reward
// functions with weights, unscorable rows, eval with one generation, normalize_then_sum).
template <class T>
void check_advantages(const nlohmann::json& c, const std::string& context) {
  const auto& options = c["options"];
  const auto weights = options["reward_weights"].get<std::vector<double>>();
  const std::string scale = options["scale_rewards"].get<std::string>();
  const std::string aggregation = options["multi_objective_aggregation"].get<std::string>();
  const trl::advantage_config config{
      .scale_rewards = scale,
      .multi_objective_aggregation = aggregation,
      .num_generations = options["num_generations"].get<std::size_t>(),
      .reward_weights = weights};
  std::vector<T> rewards_per_func;
  for (const auto& row : c["rewards_per_func"])
    for (const auto& v : row)
      rewards_per_func.push_back(v.is_string() ? std::numeric_limits<T>::quiet_NaN() : v.get<T>());
  const std::size_t functions = c["rewards_per_func"][0].size();
  const std::size_t n = c["rewards_per_func"].size();
  std::vector<T> advantages(n, T(-7)), rewards(n, T(-7));
  trl::advantages(cascade_rl::exec::seq, config, std::span<const T>(rewards_per_func), functions,
                  std::span<T>(advantages), std::span<T>(rewards));
  std::vector<double> expected_advantages = c["advantages"].get<std::vector<double>>();
  expect_all_close(std::span<const T>(advantages), expected_advantages, context + " advantages");
  for (std::size_t i = 0; i < n; ++i) {
    const auto& e = c["rewards"][i];
    if (e.is_string()) {
      EXPECT_TRUE(std::isnan(rewards[i])) << context << " rewards[" << i << "]";
    } else {
      expect_close(static_cast<double>(rewards[i]), e.get<double>(),
                   context + " rewards[" + std::to_string(i) + "]");
    }
  }
}

TEST(TrlReference, AdvantagesEveryCase) {
  const auto reference = load_reference("trl_nemo_rl.json");
  const auto& cases = reference["trl"]["advantages"]["cases"];
  ASSERT_EQ(cases.size(), 20u);
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const std::string context =
        "advantages[" + std::to_string(k) + "] " + cases[k]["options"].dump();
    check_advantages<double>(cases[k], context);
    check_advantages<float>(cases[k], context + " (float)");
  }
}

}  // namespace trl_reference_cases
}  // namespace
