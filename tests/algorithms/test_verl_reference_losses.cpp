// Conformance with veRL's compute_policy_loss_vanilla, agg_loss and kl_penalty, through
// the presets::verl options (tests/reference/verl_core_algos.json), and with veRL's wave-2
// policy losses (verl_core_algos_v2.json, see tests/reference/README_v2.md).

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "cascade_rl/presets/verl_names.hpp"
#include "support/conditioning.hpp"
#include "support/expect_error.hpp"
#include "support/reference.hpp"
#include "support/verl_v2_case.hpp"

namespace {
namespace verl_reference_losses_cases {  // this file's names, apart in the area's unity build

namespace verl = cascade_rl::presets::verl;
using cascade_rl::testing::expect_all_close;
using cascade_rl::testing::expect_close;
using cascade_rl::testing::flatten;
using cascade_rl::testing::load_reference;
using cascade_rl::testing::padded_from_mask;

template <class T>
void check_policy_loss_vanilla(const nlohmann::json& entry, const std::string& context) {
  const auto batch = padded_from_mask(entry["mask"]);
  const auto layout = batch.layout();
  const auto log_probs = flatten<T>(entry["log_prob"]);
  const auto old_log_probs = flatten<T>(entry["old_log_prob"]);
  const auto advantages = flatten<T>(entry["advantages"]);
  std::vector<T> grad(layout.tokens(), T(-7));  // garbage: every entry must be written

  // The options by veRL's own config names (presets/verl_names.hpp).
  const std::string mode = entry["mode"].get<std::string>();
  const auto options = std::get<cascade_rl::ppo_clip_options>(
      verl::policy_loss("vanilla", {.loss_agg_mode = mode,
                                    .clip_ratio_low = entry["clip_low"].get<double>(),
                                    .clip_ratio_high = entry["clip_high"].get<double>(),
                                    .clip_ratio_c = entry["clip_ratio_c"].get<double>()}));
  const auto normalizer =
      verl::single_rank_normalizer(cascade_rl::exec::seq, layout, options.aggregation, batch.width);
  const auto result = cascade_rl::ppo_clip_loss(
      cascade_rl::exec::seq, layout,
      {.log_probs = log_probs, .old_log_probs = old_log_probs, .advantages = advantages}, grad,
      normalizer, options);

  expect_close(result.loss, entry["loss"].get<double>(), context + " loss");
  expect_all_close(std::span<const T>(grad), flatten<double>(entry["grad_log_prob"]),
                   context + " grad_log_prob");
  const auto& metrics = entry["metrics"];
  expect_close(result.metrics.clip_fraction(), metrics["actor/pg_clipfrac"].get<double>(),
               context + " pg_clipfrac");
  expect_close(result.metrics.approx_kl(), metrics["actor/ppo_kl"].get<double>(),
               context + " ppo_kl");
  expect_close(result.metrics.dual_clip_fraction(),
               metrics["actor/pg_clipfrac_lower"].get<double>(), context + " pg_clipfrac_lower");
}

TEST(VerlReferenceLosses, PolicyLossVanillaEveryEntryDouble) {
  const auto reference = load_reference("verl_core_algos.json");
  const auto& entries = reference["policy_loss_vanilla"];
  ASSERT_FALSE(entries.empty());
  for (std::size_t k = 0; k < entries.size(); ++k)
    check_policy_loss_vanilla<double>(entries[k], "policy_loss_vanilla[" + std::to_string(k) +
                                                      "] " + entries[k]["mode"].get<std::string>());
}

TEST(VerlReferenceLosses, PolicyLossVanillaEveryEntryFloat) {
  const auto reference = load_reference("verl_core_algos.json");
  const auto& entries = reference["policy_loss_vanilla"];
  for (std::size_t k = 0; k < entries.size(); ++k)
    check_policy_loss_vanilla<float>(entries[k], "policy_loss_vanilla[" + std::to_string(k) +
                                                     "] (float)");
}

// The shipped reference holds clipped tokens (pg_clipfrac up to 0.6) and a fully masked
// row (entries 50..59): without them the comparisons above would not exercise the clip
// branches or veRL's count of non-empty sequences. A regenerated draw that lacks one is
// reported; PpoClipLoss.EveryClipRegimeHandComputed and
// LossAggregation.LocalCountsSkipMaskedTokensAndEmptySequences build them by hand.
TEST(VerlReferenceLosses, PolicyLossReferenceExercisesClipsAndEmptyRows) {
  const auto reference = load_reference("verl_core_algos.json");
  bool clipped = false;
  bool empty_row = false;
  for (const auto& entry : reference["policy_loss_vanilla"]) {
    clipped |= entry["metrics"]["actor/pg_clipfrac"].get<double>() > 0.5;
    for (const auto& row : entry["mask"]) {
      double sum = 0;
      for (const auto& v : row) sum += v.get<double>();
      empty_row |= sum == 0;
    }
  }
  cascade_rl::testing::expect_reference_exercises(clipped, "PPO's clips (pg_clipfrac > 0.5)");
  cascade_rl::testing::expect_reference_exercises(empty_row, "a fully masked row");
}

TEST(VerlReferenceLosses, PolicyLossReferenceCoversEveryAggregationMode) {
  const auto reference = load_reference("verl_core_algos.json");
  for (const char* mode : {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"}) {
    bool found = false;
    for (const auto& entry : reference["policy_loss_vanilla"]) found |= entry["mode"] == mode;
    EXPECT_TRUE(found) << mode;
  }
}

// veRL's seq-mean-token-sum-norm divides the token sum by (sequences * T): T the padded
// width whatever the mask, sequences those with at least one valid token. Every such entry is paired with the token-sum entry of the
// same inputs (found by comparing them, not by position in the file).
TEST(VerlReferenceLosses, SeqMeanTokenSumNormDividesBySequencesTimesWidth) {
  const auto reference = load_reference("verl_core_algos.json");
  const auto& entries = reference["policy_loss_vanilla"];
  const auto same_inputs = [](const nlohmann::json& a, const nlohmann::json& b) {
    for (const char* key : {"old_log_prob", "log_prob", "advantages", "mask", "clip_low",
                            "clip_high", "clip_ratio_c"})
      if (a[key] != b[key]) return false;
    return true;
  };
  std::size_t pairs = 0;
  for (const auto& norm : entries) {
    if (norm["mode"] != "seq-mean-token-sum-norm") continue;
    for (const auto& sum : entries) {
      if (sum["mode"] != "token-sum" || !same_inputs(norm, sum)) continue;
      double rows = 0;
      for (const auto& row : norm["mask"]) {
        double valid = 0;
        for (const auto& v : row) valid += v.get<double>();
        rows += valid > 0 ? 1 : 0;
      }
      const double width = static_cast<double>(norm["mask"][0].size());
      expect_close(sum["loss"].get<double>() / (rows * width), norm["loss"].get<double>(),
                   "token-sum / (N * T)");
      ++pairs;
      break;
    }
  }
  EXPECT_GT(pairs, 0u);
}

template <class T>
void check_kl_penalty(const nlohmann::json& entry, const std::string& context) {
  const auto log_probs = flatten<T>(entry["log_prob"]);
  const auto ref_log_probs = flatten<T>(entry["ref_log_prob"]);
  const auto offsets = cascade_rl::padded_offsets(entry["log_prob"].size(),
                                                  entry["log_prob"][0].size());
  const cascade_rl::token_layout layout(offsets);
  std::vector<T> values(layout.tokens(), T(-7));
  std::vector<T> grad(layout.tokens(), T(-7));
  const double sum = cascade_rl::kl_penalty(
      cascade_rl::exec::seq, layout, {.log_probs = log_probs, .ref_log_probs = ref_log_probs},
      values, grad, verl::kl_penalty(entry["type"].get<std::string>()));
  const auto expected_values = flatten<double>(entry["value"]);
  expect_all_close(std::span<const T>(values), expected_values, context + " value");
  expect_all_close(std::span<const T>(grad), flatten<double>(entry["grad_log_prob_of_sum"]),
                   context + " grad_log_prob_of_sum");
  double expected_sum = 0;
  for (double v : expected_values) expected_sum += v;
  expect_close(sum, expected_sum, context + " sum", 1e-5, 1e-5);
}

TEST(VerlReferenceLosses, KlPenaltyEveryEntry) {
  const auto reference = load_reference("verl_core_algos.json");
  const auto& entries = reference["kl_penalty"];
  for (const char* type : {"kl", "abs", "mse", "low_var_kl"}) {
    bool found = false;
    for (const auto& entry : entries) found |= entry["type"] == type;
    EXPECT_TRUE(found) << type;
  }
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::string context =
        "kl_penalty[" + std::to_string(k) + "] " + entries[k]["type"].get<std::string>();
    check_kl_penalty<double>(entries[k], context);
    check_kl_penalty<float>(entries[k], context + " (float)");
  }
}

// low_var_kl (k3) clamps kl = ref_logp - logp to +-20 before exp and the value to +-10
// after it; beyond the input clamp, e^20 - 21 or e^-20 + 19 both exceed 10, so the value
// is 10 and the gradient 0. Checked on every token of the file where the clamp acts
// (at least one must, or the clamps are untested).
TEST(VerlReferenceLosses, LowVarKlClampsWhereTheLogRatioIsBeyondTwenty) {
  const auto reference = load_reference("verl_core_algos.json");
  std::size_t clamped = 0;
  for (const auto& entry : reference["kl_penalty"]) {
    if (entry["type"] != "low_var_kl" && entry["type"] != "k3") continue;
    const auto log_probs = flatten<double>(entry["log_prob"]);
    const auto ref_log_probs = flatten<double>(entry["ref_log_prob"]);
    const auto values = flatten<double>(entry["value"]);
    const auto grad = flatten<double>(entry["grad_log_prob_of_sum"]);
    for (std::size_t t = 0; t < log_probs.size(); ++t) {
      if (std::abs(ref_log_probs[t] - log_probs[t]) <= 20.0) continue;
      EXPECT_EQ(values[t], 10.0) << entry["type"] << " token " << t;
      EXPECT_EQ(grad[t], 0.0) << entry["type"] << " token " << t;
      ++clamped;
    }
  }
  EXPECT_GT(clamped, 0u);
}

// v2's kl_penalty: every type, the "+" ones included, by its veRL name: value and gradient
// of the plain sum, and the forward value and gradient of the type without its "+"
// (kl_penalty_forward). "full" is refused, as veRL refuses it.
template <class T>
void check_kl_penalty_v2(const nlohmann::json& batch, const nlohmann::json& entry,
                         const std::string& context) {
  const auto log_probs = flatten<T>(batch["log_prob"]);
  const auto ref_log_probs = flatten<T>(batch["ref_log_prob"]);
  const auto offsets =
      cascade_rl::padded_offsets(batch["N"].get<std::size_t>(), batch["T"].get<std::size_t>());
  const cascade_rl::token_layout layout(offsets);
  const auto run = [&](const std::string& type, const char* value_key, const char* grad_key) {
    std::vector<T> values(layout.tokens(), T(-7)), grad(layout.tokens(), T(-7));
    (void)cascade_rl::kl_penalty(cascade_rl::exec::seq, layout,
                                 {.log_probs = log_probs, .ref_log_probs = ref_log_probs}, values,
                                 grad, verl::kl_penalty(type));
    expect_all_close(std::span<const T>(values), flatten<double>(entry[value_key]),
                     context + " " + value_key);
    expect_all_close(std::span<const T>(grad), flatten<double>(entry[grad_key]),
                     context + " " + grad_key);
  };
  run(entry["type"].get<std::string>(), "value", "grad_log_prob_of_sum");
  run(entry["forward_base_type"].get<std::string>(), "forward_value",
      "forward_grad_log_prob_of_sum");
}

TEST(VerlReferenceLossesV2, KlPenaltyEveryTypeWithAndWithoutStraightThrough) {
  const auto reference = load_reference("verl_core_algos_v2.json");
  const auto& batch = reference["kl_penalty"]["batch"];
  std::size_t plus = 0;
  for (const auto& entry : reference["kl_penalty"]["cases"]) {
    const std::string type = entry["type"].get<std::string>();
    if (entry.contains("error")) {
      EXPECT_EQ(type, "full");
      cascade_rl::testing::expect_error_naming([&] { (void)verl::kl_penalty(type); }, "kl_penalty",
                                               "refuses it too");
      continue;
    }
    plus += type.ends_with('+');
    check_kl_penalty_v2<double>(batch, entry, "kl_penalty " + type);
    check_kl_penalty_v2<float>(batch, entry, "kl_penalty " + type + " (float)");
  }
  EXPECT_EQ(plus, 7u);
}

// ---- v2: veRL's other policy losses --------------------------------------------------

template <class T>
using v2_case = cascade_rl::testing::verl_v2_case<T>;
using cascade_rl::testing::for_each_verl_v2_case;

// A ratio loss (CISPO, DPPO, DRO, SAPO) with the options presets::verl gives veRL's name:
// loss, gradient and every metric veRL reports.
// veRL's float32 rounding of a ratio loss's sum: the terms c_t w_t v_t (aggregation
// weight, given weight, the token's value from the loss's own token function) and the
// bound on their float32 sum (support/conditioning.hpp).
template <class Options, class T>
double ratio_loss_slack(const v2_case<T>& c, const Options& options,
                        const cascade_rl::loss_normalizer& normalizer) {
  const auto layout = c.batch.layout();
  std::vector<double> weights(layout.tokens());
  cascade_rl::aggregation_weights(cascade_rl::exec::seq, layout, std::span<double>(weights),
                                  normalizer, options.aggregation);
  std::vector<double> terms, units;
  cascade_rl::detail::visit_ratio_token(options, [&](const auto& token) {
    for (std::size_t t = 0; t < layout.tokens(); ++t) {
      if (!layout.valid(t)) continue;
      const double logp = static_cast<double>(c.log_probs[t]);
      const double old = static_cast<double>(c.old_log_probs[t]);
      const double given = c.rollout_is_weights.empty() ? 1.0 : c.rollout_is_weights[t];
      terms.push_back(weights[t] * given *
                      token(logp, old, static_cast<double>(c.advantages[t])).value);
      units.push_back(cascade_rl::testing::ratio_term_units_of_u(logp - old));
    }
  });
  return cascade_rl::testing::float32_sum_slack(terms, units);
}

template <class Options, class T, class Loss>
void check_ratio_loss(const v2_case<T>& c, const char* name, const Loss& loss) {
  const auto options = std::get<Options>(verl::policy_loss(name, c.actor()));
  const auto layout = c.batch.layout();
  const auto normalizer = c.normalizer(options.aggregation);
  std::vector<T> grad(layout.tokens(), T(-7));
  const auto result =
      loss(cascade_rl::exec::seq, layout, c.ratio_inputs(), grad, normalizer, options);
  c.expect_loss_and_gradient(result.loss, grad, std::nullopt,
                             ratio_loss_slack(c, options, normalizer));
  c.expect_reported_metrics(result.metrics);
}

// The host losses as callables (function templates cannot be passed themselves).
const auto cispo_loss = [](auto&&... a) {
  return cascade_rl::cispo_loss(std::forward<decltype(a)>(a)...);
};
const auto dppo_loss = [](auto&&... a) {
  return cascade_rl::dppo_loss(std::forward<decltype(a)>(a)...);
};
const auto dro_loss = [](auto&&... a) {
  return cascade_rl::dro_loss(std::forward<decltype(a)>(a)...);
};
const auto sapo_loss = [](auto&&... a) {
  return cascade_rl::sapo_loss(std::forward<decltype(a)>(a)...);
};

TEST(VerlReferenceLossesV2, CispoEveryCase) {
  for_each_verl_v2_case("cispo", [](const auto& c) {
    check_ratio_loss<cascade_rl::cispo_options>(c, "cispo", cispo_loss);
  });
}

// GPG and compute_policy_loss_reinforce are one loss, REINFORCE's log-prob surrogate with
// veRL's given weights; they differ in their default aggregation and in the metric veRL's
// reinforce reports (actor/ppo_kl, a statistic of the inputs, not computed here).
template <class T>
void check_log_prob_reinforce(const v2_case<T>& c, const cascade_rl::reinforce_options& options) {
  const auto layout = c.batch.layout();
  std::vector<T> grad(layout.tokens(), T(-7));
  const auto result = cascade_rl::reinforce_loss(cascade_rl::exec::seq, layout,
                                                 {.log_probs = c.log_probs,
                                                  .advantages = c.advantages,
                                                  .rollout_is_weights = c.rollout_is_weights},
                                                 grad, c.normalizer(options.aggregation), options);
  c.expect_loss_and_gradient(result.loss, grad);
}

TEST(VerlReferenceLossesV2, GpgEveryCase) {
  for_each_verl_v2_case("gpg", [](const auto& c) {
    EXPECT_TRUE(c.json["metrics"].empty()) << c.context;
    check_log_prob_reinforce(
        c, std::get<cascade_rl::reinforce_options>(verl::policy_loss("gpg", c.actor())));
  });
}

TEST(VerlReferenceLossesV2, ReinforceEveryCase) {
  for_each_verl_v2_case("reinforce", [](const auto& c) {
    check_log_prob_reinforce(c, verl::reinforce(verl::loss_agg_mode(c.mode)));
  });
  EXPECT_EQ(verl::reinforce().aggregation, cascade_rl::loss_aggregation::seq_mean_token_sum);
}

TEST(VerlReferenceLossesV2, DppoTvEveryCase) {
  for_each_verl_v2_case("dppo_tv", [](const auto& c) {
    check_ratio_loss<cascade_rl::dppo_options>(c, "dppo_tv", dppo_loss);
  });
}

TEST(VerlReferenceLossesV2, DppoKlEveryCase) {
  for_each_verl_v2_case("dppo_kl", [](const auto& c) {
    check_ratio_loss<cascade_rl::dppo_options>(c, "dppo_kl", dppo_loss);
  });
}

TEST(VerlReferenceLossesV2, DroEveryCaseAndTheMissingBeta) {
  for_each_verl_v2_case("dro", [](const auto& c) {
    if (c.json.contains("error")) {  // dro_beta None: veRL raises, and so do we
      EXPECT_TRUE(c.json["config"]["policy_loss.dro_beta"].is_null()) << c.context;
      cascade_rl::testing::expect_error_naming([&] { (void)verl::policy_loss("dro", c.actor()); },
                                               "policy_loss.dro_beta", "positive");
      return;
    }
    check_ratio_loss<cascade_rl::dro_options>(c, "dro", dro_loss);
  });
}

// veRL's SAPO aggregates seq-mean-token-mean whatever loss_agg_mode says: the preset
// reproduces it (every case, token-sum and token-mean ones included, gives veRL's value).
TEST(VerlReferenceLossesV2, SapoEveryCase) {
  for_each_verl_v2_case("sapo", [](const auto& c) {
    check_ratio_loss<cascade_rl::sapo_options>(c, "sapo", sapo_loss);
  });
  EXPECT_EQ(
      std::get<cascade_rl::sapo_options>(verl::policy_loss("sapo", {.loss_agg_mode = "token-sum"}))
          .aggregation,
      cascade_rl::loss_aggregation::seq_mean_token_mean);
}

}  // namespace verl_reference_losses_cases
}  // namespace
