// One case of verl_core_algos_v2.json's policy_losses.<name> with its shared batch, read
// once for every test of veRL's wave-2 policy losses (see tests/reference/README_v2.md).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "cascade_rl/presets/verl_names.hpp"
#include "support/reference.hpp"

namespace cascade_rl::testing {

template <class T>
struct verl_v2_case {
  const nlohmann::json& json;
  padded_batch batch;
  std::vector<T> log_probs, old_log_probs, advantages, rollout_is_weights;
  std::string mode;
  std::string context;
  // policy_loss.rollout_correction.* as text (actor_config views them): unset when the
  // config holds no such key or null.
  std::optional<std::string> rc_loss_type, rc_is, rc_is_threshold, rc_rs, rc_rs_threshold;

  verl_v2_case(const nlohmann::json& c, const nlohmann::json& b, std::string where)
      : json(c),
        batch(padded_from_mask(b["response_mask"])),
        log_probs(flatten<T>(b["log_prob"])),
        old_log_probs(flatten<T>(b["old_log_prob"])),
        advantages(flatten<T>(b["advantages"])),
        mode(c["loss_agg_mode"].get<std::string>()),
        context(std::move(where)) {
    if (c["rollout_is_weights"].get<bool>())
      rollout_is_weights = flatten<T>(b["rollout_is_weights"]);
    rc_loss_type = config_text("policy_loss.rollout_correction.loss_type");
    rc_is = config_text("policy_loss.rollout_correction.rollout_is");
    rc_is_threshold = config_text("policy_loss.rollout_correction.rollout_is_threshold");
    rc_rs = config_text("policy_loss.rollout_correction.rollout_rs");
    rc_rs_threshold = config_text("policy_loss.rollout_correction.rollout_rs_threshold");
  }

  // A config field as text (a number as JSON writes it: 2.0 as "2.0"); absent or null:
  // nullopt.
  [[nodiscard]] std::optional<std::string> config_text(const char* key) const {
    const auto& c = json["config"];
    if (!c.contains(key) || c[key].is_null()) return std::nullopt;
    return c[key].is_string() ? c[key].get<std::string>() : c[key].dump();
  }

  // A config field as a number; absent or null leaves veRL's default.
  [[nodiscard]] std::optional<double> config_number(const char* key) const {
    const auto& c = json["config"];
    if (!c.contains(key) || c[key].is_null()) return std::nullopt;
    return c[key].get<double>();
  }

  // Every actor field the case's config holds, by veRL's key.
  [[nodiscard]] presets::verl::actor_config actor() const {
    presets::verl::actor_config config{.loss_agg_mode = mode};
    if (const auto v = config_number("clip_ratio")) config.clip_ratio = *v;
    config.clip_ratio_low = config_number("clip_ratio_low");
    config.clip_ratio_high = config_number("clip_ratio_high");
    if (const auto v = config_number("clip_ratio_c")) config.clip_ratio_c = *v;
    config.dro_beta = config_number("policy_loss.dro_beta");
    if (const auto v = config_number("tau_pos")) config.tau_pos = *v;
    if (const auto v = config_number("tau_neg")) config.tau_neg = *v;
    config.clip_cov_ratio = config_number("policy_loss.clip_cov_ratio");
    config.clip_cov_lb = config_number("policy_loss.clip_cov_lb");
    config.clip_cov_ub = config_number("policy_loss.clip_cov_ub");
    config.kl_cov_ratio = config_number("policy_loss.kl_cov_ratio");
    config.ppo_kl_coef = config_number("policy_loss.ppo_kl_coef");
    if (rc_loss_type) config.rollout_correction_loss_type = *rc_loss_type;
    if (rc_is) config.rollout_is = *rc_is;
    // veRL's default 2.0 when the key is absent; a null turns the weights off.
    if (json["config"].contains("policy_loss.rollout_correction.rollout_is_threshold"))
      config.rollout_is_threshold =
          rc_is_threshold ? std::optional<std::string_view>(*rc_is_threshold) : std::nullopt;
    if (const auto& c = json["config"];
        c.contains("policy_loss.rollout_correction.rollout_is_batch_normalize"))
      config.rollout_is_batch_normalize =
          c["policy_loss.rollout_correction.rollout_is_batch_normalize"].get<bool>();
    if (rc_rs) config.rollout_rs = *rc_rs;
    if (rc_rs_threshold) config.rollout_rs_threshold = *rc_rs_threshold;
    return config;
  }

  // agg_loss's divisors: the batch's own counts, or the case's global_batch_info.
  [[nodiscard]] loss_normalizer normalizer(loss_aggregation aggregation) const {
    const auto& info = json["config"]["global_batch_info"];
    if (info.empty())
      return presets::verl::single_rank_normalizer(exec::seq, batch.layout(), aggregation,
                                                   batch.width);
    return presets::verl::global_batch_normalizer(
        aggregation, info["batch_num_tokens"].get<double>(),
        info["global_batch_size"].get<double>(), info["loss_scale_factor"].get<double>());
  }

  // veRL's agg_loss multiplies by dp_size (see verl::global_batch_normalizer).
  [[nodiscard]] double dp_size() const {
    const auto& info = json["config"]["global_batch_info"];
    return info.empty() ? 1.0 : info["dp_size"].get<double>();
  }

  // The loss and dL/dlogp times veRL's factor (dp_size unless the loss ignores it, as
  // geo_mean does: pass 1). The suite's reference tolerance covers float32 arithmetic in
  // veRL against ours; P4's log-ratios reach +-20 (exp up to e^10 and beyond), so there
  // magnitudes are compared relatively (README_v2's Cautions). loss_slack: the bound on
  // veRL's float32 rounding of its sum of terms (float32_sum_slack), added to the loss's
  // tolerance where the caller can derive it; a cancelling sum needs it.
  void expect_loss_and_gradient(double loss, const std::vector<T>& grad,
                                std::optional<double> factor = std::nullopt,
                                double loss_slack = 0.0) const {
    const bool relative = json["batch"] == "P4";
    const double atol = relative ? 0.0 : reference_atol;
    const double rtol = relative ? 1e-5 : reference_rtol;
    const double dp = factor.value_or(dp_size());
    expect_close(loss * dp, json["loss"].get<double>(), context + " loss", rtol,
                 atol + loss_slack * dp);
    std::vector<double> scaled(grad.size());
    for (std::size_t t = 0; t < grad.size(); ++t) scaled[t] = static_cast<double>(grad[t]) * dp;
    expect_all_close(std::span<const double>(scaled), flatten<double>(json["grad_log_prob"]),
                     context + " grad_log_prob", rtol, relative ? 1e-6 : atol);
  }

  void expect_metric(double value, const std::string& key) const {
    expect_close(value, json["metrics"][key].get<double>(), context + " " + key);
  }

  // Every metric veRL reported for the case, each by its field of ours; a key without
  // one fails (a new metric in the file must be mapped, not skipped).
  void expect_reported_metrics(const policy_loss_metrics& metrics) const {
    for (const auto& item : json["metrics"].items()) {
      const std::string& key = item.key();
      if (key == "actor/pg_clipfrac")
        expect_metric(metrics.clip_fraction(), key);
      else if (key == "actor/ppo_kl")
        expect_metric(metrics.approx_kl(), key);
      else if (key == "actor/pg_clipfrac_lower")
        expect_metric(metrics.dual_clip_fraction(), key);
      else
        ADD_FAILURE() << context << ": metric " << key << " has no field of ours";
    }
  }

  [[nodiscard]] policy_ratio_inputs<T> ratio_inputs() const {
    return {.log_probs = log_probs,
            .old_log_probs = old_log_probs,
            .advantages = advantages,
            .rollout_is_weights = rollout_is_weights};
  }

  // [row, col] pairs as flat token indices of the padded batch.
  [[nodiscard]] std::vector<std::size_t> tokens_of(const nlohmann::json& pairs) const {
    std::vector<std::size_t> tokens;
    for (const auto& p : pairs)
      tokens.push_back(p[0].get<std::size_t>() * batch.width + p[1].get<std::size_t>());
    return tokens;
  }
};

// Runs check(case) on every case of policy_losses.<name>, in double and in float.
template <class Check>
void for_each_verl_v2_case(const std::string& name, const Check& check) {
  const auto reference = load_reference("verl_core_algos_v2.json");
  const auto& cases = reference["policy_losses"][name]["cases"];
  ASSERT_FALSE(cases.empty()) << name;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const auto& batch = reference["policy_loss_batches"][c["batch"].get<std::string>()];
    std::string context = name;
    context.append("[").append(std::to_string(k)).append("] ");
    context.append(c["batch"].get<std::string>()).append(" ");
    context.append(c["loss_agg_mode"].get<std::string>()).append(" ");
    context.append(c["variant"].get<std::string>());
    check(verl_v2_case<double>(c, batch, context));
    check(verl_v2_case<float>(c, batch, context + " (float)"));
  }
}

}  // namespace cascade_rl::testing
