// algorithms/rollout_correction.hpp: veRL's rollout correction (rollout_corr_helper) and
// its bypass-mode loss, against every v2 bypass_mode case (IS weights, the rejection-masked
// mask, every rollout_corr/* metric, the loss, actor metrics and gradient; float and
// double), hand-computed values, seq/par bits and refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/presets/verl.hpp"
#include "support/conditioning.hpp"
#include "support/expect_error.hpp"
#include "support/reference.hpp"
#include "support/verl_v2_case.hpp"

namespace {
namespace rollout_correction_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace exec = cascade_rl::exec;
namespace verl = cascade_rl::presets::verl;
using cr::testing::expect_error_naming;
using cr::testing::for_each_verl_v2_case;

// Every rollout_corr/* value of ours by veRL's key (without the prefix); a key missing
// here is one we do not report for this configuration.
std::map<std::string, double> rollout_corr_values(const cr::rollout_correction_metrics& m,
                                                  const cr::rollout_correction_options& o) {
  std::map<std::string, double> v;
  if (m.has_importance) {
    const cr::rollout_is_metrics& i = m.importance;
    v["rollout_is_mean"] = i.mean;
    v["rollout_is_max"] = i.max;
    v["rollout_is_min"] = i.min;
    v["rollout_is_ratio_fraction_high"] = i.ratio_fraction_high;
    v["rollout_is_ratio_fraction_low"] = i.ratio_fraction_low;
    v["rollout_is_std"] = i.std;
    v["rollout_is_eff_sample_size"] = i.eff_sample_size;
    v["rollout_is_seq_mean"] = i.seq_mean;
    v["rollout_is_seq_std"] = i.seq_std;
    v["rollout_is_seq_max"] = i.seq_max;
    v["rollout_is_seq_min"] = i.seq_min;
    v["rollout_is_seq_max_deviation"] = i.seq_max_deviation;
    v["rollout_is_seq_fraction_high"] = i.seq_fraction_high;
    v["rollout_is_seq_fraction_low"] = i.seq_fraction_low;
    if (i.oob_ratio) v["rollout_is_oob_ratio"] = *i.oob_ratio;
    if (i.batch_norm_factor) v["rollout_is_batch_norm_factor"] = *i.batch_norm_factor;
  }
  for (std::size_t c = 0; c < m.rejection_count; ++c) {
    const cr::rollout_rs_metrics& r = m.rejection[c];
    const std::string p = "rollout_rs_" + cr::to_string(o.rejection[c]) + "_";
    v[p + "mean"] = r.mean;
    v[p + "max"] = r.max;
    v[p + "min"] = r.min;
    v[p + "fraction_high"] = r.fraction_high;
    v[p + "fraction_low"] = r.fraction_low;
    v[p + "std"] = r.std;
    v[p + "seq_mean"] = r.seq_mean;
    v[p + "seq_std"] = r.seq_std;
    v[p + "seq_max"] = r.seq_max;
    v[p + "seq_min"] = r.seq_min;
    v[p + "seq_max_deviation"] = r.seq_max_deviation;
    v[p + "seq_fraction_high"] = r.seq_fraction_high;
    if (r.seq_fraction_low) v[p + "seq_fraction_low"] = *r.seq_fraction_low;
    v[p + "masked_fraction"] = r.masked_fraction;
    v[p + "seq_masked_fraction"] = r.seq_masked_fraction;
  }
  if (m.rejection_count > 0) {
    v["rollout_rs_masked_fraction"] = m.rs_masked_fraction;
    v["rollout_rs_seq_masked_fraction"] = m.rs_seq_masked_fraction;
  }
  const cr::rollout_offpolicy_metrics& f = m.offpolicy;
  v["training_ppl"] = f.training_ppl;
  v["training_log_ppl"] = f.training_log_ppl;
  v["kl"] = f.kl;
  v["k3_kl"] = f.k3_kl;
  v["rollout_ppl"] = f.rollout_ppl;
  v["rollout_log_ppl"] = f.rollout_log_ppl;
  v["log_ppl_diff"] = f.log_ppl_diff;
  v["log_ppl_abs_diff"] = f.log_ppl_abs_diff;
  v["log_ppl_diff_max"] = f.log_ppl_diff_max;
  v["log_ppl_diff_min"] = f.log_ppl_diff_min;
  v["ppl_ratio"] = f.ppl_ratio;
  v["chi2_token"] = f.chi2_token;
  v["chi2_seq"] = f.chi2_seq;
  return v;
}

template <class T>
struct bypass_run {
  std::vector<T> grad, weights;
  std::vector<std::uint8_t> keep;
  cr::bypass_mode_result result;
};

template <class Case>
auto run_case(const Case& c, const cr::bypass_mode_options& options) {
  using T = typename decltype(c.log_probs)::value_type;
  const auto layout = c.batch.layout();
  bypass_run<T> run;
  run.grad.assign(layout.tokens(), T(-7));
  run.weights.assign(layout.tokens(), T(-7));
  run.keep.assign(layout.tokens(), 7);
  const cr::bypass_mode_inputs<T> inputs{
      .log_probs = c.log_probs, .rollout_log_probs = c.old_log_probs, .advantages = c.advantages};
  const cr::loss_aggregation mode = options.loss == cr::bypass_loss::ppo_clip
                                        ? options.ppo.aggregation
                                        : options.reinforce.aggregation;
  if (c.json["config"]["global_batch_info"].empty()) {
    // veRL's agg_loss on the rejection-masked mask: its own counts.
    const std::size_t width = c.batch.width;
    run.result = cr::bypass_mode_loss(
        exec::seq, layout, inputs, run.grad,
        [&](const cr::token_layout& effective) {
          return verl::single_rank_normalizer(exec::seq, effective, mode, width);
        },
        options, std::span<T>(run.weights), std::span<std::uint8_t>(run.keep));
  } else {
    run.result =
        cr::bypass_mode_loss(exec::seq, layout, inputs, run.grad, c.normalizer(mode), options,
                             std::span<T>(run.weights), std::span<std::uint8_t>(run.keep));
  }
  return run;
}

// veRL's float32 rounding of its cancelling sums of log-probs, where the log-probs reach
// -30 and the result is 5e-3 (P4): the per-row log-perplexity difference d_i =
// mean_t(rollout) - mean_t(training) over the row's valid tokens, and kl, the token mean
// of rollout - training. Each bounded by the float32 sum of its terms
// (support/conditioning.hpp); the metrics' means over rows (log_ppl_diff,
// log_ppl_abs_diff, ppl_ratio, weighted by exp(d_i)) and extremes (log_ppl_diff_max /
// _min) take the rows' bounds accordingly.
struct log_ppl_slack {
  double mean = 0;
  double ratio_mean = 0;
  double max = 0;
  double kl = 0;
};

template <class Case>
log_ppl_slack log_ppl_slack_of(const Case& c) {
  const auto layout = c.batch.layout();
  log_ppl_slack slack;
  std::vector<double> kl_terms;
  for (std::size_t t = 0; t < layout.tokens(); ++t)
    if (layout.valid(t))
      kl_terms.push_back(static_cast<double>(c.old_log_probs[t]) -
                         static_cast<double>(c.log_probs[t]));
  for (double& term : kl_terms) term /= static_cast<double>(kl_terms.size());
  slack.kl = cr::testing::float32_sum_slack(kl_terms, std::vector<double>(kl_terms.size(), 2.0));
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    std::vector<double> terms;
    double difference = 0;
    std::size_t n = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) n += layout.valid(t);
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
      if (!layout.valid(t)) continue;
      terms.push_back(static_cast<double>(c.old_log_probs[t]) / static_cast<double>(n));
      terms.push_back(-static_cast<double>(c.log_probs[t]) / static_cast<double>(n));
      difference += terms[terms.size() - 2] + terms.back();
    }
    const std::vector<double> units(terms.size(), 2.0);  // each mean's division rounds
    const double row = cr::testing::float32_sum_slack(terms, units);
    const double rows = static_cast<double>(layout.sequences());
    slack.mean += row / rows;
    slack.ratio_mean += std::exp(difference) * row / rows;
    slack.max = std::max(slack.max, row);
  }
  return slack;
}

// The slack of a rollout_corr/ metric beyond the file's tolerance (0 for the others).
double rollout_metric_slack(const std::string& key, const log_ppl_slack& slack) {
  if (key == "log_ppl_diff" || key == "log_ppl_abs_diff") return slack.mean;
  if (key == "log_ppl_diff_max" || key == "log_ppl_diff_min") return slack.max;
  if (key == "ppl_ratio") return slack.ratio_mean;
  if (key == "kl") return slack.kl;
  return 0.0;
}

// Every v2 bypass_mode case through policy_loss("bypass_mode", actor): IS weights and
// effective mask (veRL's internals), the loss, its gradient, and every metric veRL
// reported (an unmapped key fails), in float and double.
TEST(BypassMode, VerlV2EveryCase) {
  std::size_t reinforce = 0, rejected = 0, icepop = 0, normalized = 0, unweighted = 0;
  for_each_verl_v2_case("bypass_mode", [&](const auto& c) {
    const auto options =
        std::get<cr::bypass_mode_options>(verl::policy_loss("bypass_mode", c.actor()));
    const auto run = run_case(c, options);
    c.expect_loss_and_gradient(run.result.loss, run.grad);
    const auto& internals = c.json["internals"];
    const auto mask = cr::testing::flatten<double>(internals["effective_response_mask"]);
    std::size_t mismatched = 0;
    for (std::size_t t = 0; t < mask.size(); ++t) mismatched += run.keep[t] != mask[t];
    EXPECT_EQ(mismatched, 0u) << c.context << " effective_response_mask";
    if (internals["rollout_is_weights"].is_null()) {
      EXPECT_EQ(options.correction.is_level, cr::rollout_is_level::none) << c.context;
      ++unweighted;
    } else {
      cr::testing::expect_all_close(
          std::span<const typename decltype(run.weights)::value_type>(run.weights),
          cr::testing::flatten<double>(internals["rollout_is_weights"]),
          c.context + " rollout_is_weights");
    }
    const auto values = rollout_corr_values(run.result.correction, options.correction);
    const bool relative = c.json["batch"] == "P4";
    const log_ppl_slack slack = log_ppl_slack_of(c);
    for (const auto& item : c.json["metrics"].items()) {
      const std::string& key = item.key();
      const double want = item.value().template get<double>();
      if (key == "actor/pg_clipfrac")
        c.expect_metric(run.result.metrics.clip_fraction(), key);
      else if (key == "actor/pg_clipfrac_lower")
        c.expect_metric(run.result.metrics.dual_clip_fraction(), key);
      else if (key == "actor/ppo_kl")
        cr::testing::expect_close(run.result.metrics.approx_kl(), want, c.context + " " + key,
                                  relative ? 1e-5 : cr::testing::reference_rtol,
                                  relative ? 0.0 : cr::testing::reference_atol);
      else if (key.starts_with("rollout_corr/")) {
        const auto found = values.find(key.substr(13));
        if (found == values.end()) {
          ADD_FAILURE() << c.context << ": metric " << key << " has no field of ours";
          continue;
        }
        cr::testing::expect_close(
            found->second, want, c.context + " " + key,
            relative ? 1e-5 : cr::testing::reference_rtol,
            (relative ? 0.0 : cr::testing::reference_atol) +
                rollout_metric_slack(key.substr(13), slack));
      } else
        ADD_FAILURE() << c.context << ": metric " << key << " has no field of ours";
    }
    // Nothing reported that veRL did not.
    for (const auto& [key, value] : values)
      EXPECT_TRUE(c.json["metrics"].contains("rollout_corr/" + key))
          << c.context << ": we report rollout_corr/" << key << " = " << value;
    reinforce += options.loss == cr::bypass_loss::reinforce;
    rejected += options.correction.rejection_count > 0;
    icepop += options.correction.is_lower.has_value();
    normalized += options.correction.batch_normalize;
  });
  EXPECT_GT(reinforce, 0u);
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(icepop, 0u);
  EXPECT_GT(normalized, 0u);
  EXPECT_GT(unweighted, 0u);
}

// ---- hand-computed ---------------------------------------------------------------------

// One row of two tokens with ratios 3 and 1/4 (and a masked third), token-level truncated
// IS at 2 and token_k2 rejection at 0.7: k2 = (ln 3)^2 / 2 = 0.603 passes, (ln 4)^2 / 2 =
// 0.961 does not.
TEST(RolloutCorrection, HandComputedTokenLevel) {
  const std::vector<std::uint8_t> mask = {1, 1, 0};
  const auto layout = cr::token_layout::padded(1, 3, mask);
  const std::vector<double> rollout = {-1.0, -1.0, -1.0};
  const std::vector<double> logp = {-1.0 + std::log(3.0), -1.0 - std::log(4.0), 5.0};
  cr::rollout_correction_options o;
  o.is_level = cr::rollout_is_level::token;
  o.is_upper = 2.0;
  o.rejection[0] = {.level = cr::rollout_rs_level::token,
                    .statistic = cr::rollout_rs_statistic::k2,
                    .upper = 0.7};
  o.rejection_count = 1;
  std::vector<double> w(3, -1);
  std::vector<std::uint8_t> keep(3, 9);
  const auto m = cr::rollout_correction(exec::seq, layout,
                                        cr::rollout_correction_inputs<double>{logp, rollout},
                                        std::span<double>(w), std::span<std::uint8_t>(keep), o);
  EXPECT_DOUBLE_EQ(w[0], 2.0);
  EXPECT_DOUBLE_EQ(w[1], 0.25);
  EXPECT_EQ(w[2], 0.0);
  EXPECT_EQ(keep, (std::vector<std::uint8_t>{1, 0, 0}));
  EXPECT_DOUBLE_EQ(m.importance.mean, 1.125);
  EXPECT_DOUBLE_EQ(m.importance.max, 2.0);
  EXPECT_DOUBLE_EQ(m.importance.min, 0.25);
  EXPECT_DOUBLE_EQ(m.importance.ratio_fraction_high, 0.5);  // raw 3 > 2
  EXPECT_DOUBLE_EQ(m.importance.ratio_fraction_low, 0.5);   // raw 1/4 < 1/2
  // std of clamp(w, 0, 2) = {2, 1/4}: half their distance.
  EXPECT_NEAR(m.importance.std, 0.875, 1e-15);
  // ESS = mean^2 / mean of squares = 1.125^2 / ((4 + 1/16) / 2).
  EXPECT_NEAR(m.importance.eff_sample_size, 1.125 * 1.125 / (4.0625 / 2), 1e-7);
  EXPECT_NEAR(m.rejection[0].mean, 0.25 * (std::pow(std::log(3.0), 2) + std::pow(std::log(4.0), 2)),
              1e-15);
  EXPECT_DOUBLE_EQ(m.rejection[0].masked_fraction, 0.5);
  EXPECT_DOUBLE_EQ(m.rejection[0].seq_masked_fraction, 1.0);
  EXPECT_DOUBLE_EQ(m.rs_seq_masked_fraction, 1.0);
  EXPECT_NEAR(m.offpolicy.kl, -0.5 * (std::log(3.0) - std::log(4.0)), 1e-15);
  EXPECT_NEAR(m.offpolicy.chi2_token, (9.0 + 1.0 / 16) / 2 - 1, 1e-13);
  EXPECT_NEAR(m.offpolicy.chi2_seq, std::pow(3.0 / 4.0, 2) - 1, 1e-13);
}

// Sequence level with IcePop's band and batch normalisation over two rows: ratios 4
// (outside [0.5, 3]: 0) and 2 (kept); the mean over rows with a valid token is 1.
TEST(RolloutCorrection, HandComputedSequenceIcePopNormalized) {
  const std::vector<std::uint8_t> mask = {1, 1, 1, 0, 0, 0};
  const auto layout = cr::token_layout::padded(3, 2, mask);
  const std::vector<double> rollout(6, -2.0);
  const double l2 = std::log(2.0);
  const std::vector<double> logp = {-2 + l2, -2 + l2, -2 + l2, -2, 0, 0};
  cr::rollout_correction_options o;
  o.is_level = cr::rollout_is_level::sequence;
  o.is_upper = 3.0;
  o.is_lower = 0.5;
  o.batch_normalize = true;
  std::vector<double> w(6, -1);
  std::vector<std::uint8_t> keep(6, 9);
  const auto m = cr::rollout_correction(exec::seq, layout,
                                        cr::rollout_correction_inputs<double>{logp, rollout},
                                        std::span<double>(w), std::span<std::uint8_t>(keep), o);
  EXPECT_EQ(keep, mask);
  EXPECT_DOUBLE_EQ(*m.importance.batch_norm_factor, 1.0);  // (0 + 2) / 2 rows
  EXPECT_EQ(w, (std::vector<double>{0, 0, 2, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(*m.importance.oob_ratio, 2.0 / 3.0);
  EXPECT_NEAR(m.importance.max, 4.0, 1e-14);
  EXPECT_DOUBLE_EQ(m.importance.min, 1.0);  // the empty row's log-ratio sum 0
  EXPECT_DOUBLE_EQ(m.importance.seq_mean, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.importance.seq_fraction_high, 1.0 / 3.0);
}

// ---- executors ---------------------------------------------------------------------------

std::vector<double> flat_values(const cr::rollout_correction_metrics& m,
                                const cr::rollout_correction_options& o) {
  std::vector<double> out;
  for (const auto& [key, value] : rollout_corr_values(m, o)) out.push_back(value);
  return out;
}

// exec::par gives exec::seq's bits: weights, mask, metrics, loss and gradient, over a
// batch of several canonical blocks and rows enough to split.
TEST(BypassMode, ParallelMatchesSequentialBitwise) {
  const std::size_t rows = 96, width = 131;
  std::mt19937 gen(5);
  std::normal_distribution<double> noise(0.0, 0.4);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<double> logp(rows * width), rollout(rows * width), adv(rows * width);
  std::vector<std::uint8_t> mask(rows * width);
  for (std::size_t t = 0; t < logp.size(); ++t) {
    rollout[t] = -2.0 * uni(gen);
    logp[t] = rollout[t] + noise(gen);
    adv[t] = noise(gen) * 3;
    mask[t] = uni(gen) < 0.8;
  }
  const auto layout = cr::token_layout::padded(rows, width, mask);
  for (const char* loss : {"ppo_clip", "reinforce"})
    for (const char* level : {"token", "sequence"}) {
      const auto options = std::get<cr::bypass_mode_options>(
          verl::policy_loss("bypass_mode", {.loss_agg_mode = "seq-mean-token-mean",
                                            .rollout_correction_loss_type = loss,
                                            .rollout_is = level,
                                            .rollout_is_threshold = "0.5_3.0",
                                            .rollout_is_batch_normalize = true,
                                            .rollout_rs = "token_k1,seq_mean_k3,seq_max_k2",
                                            .rollout_rs_threshold = "0.3_3.0,0.2,1.5"}));
      const auto run = [&](const auto& policy) {
        bypass_run<double> r;
        r.grad.assign(layout.tokens(), -7);
        r.weights.assign(layout.tokens(), -7);
        r.keep.assign(layout.tokens(), 7);
        r.result = cr::bypass_mode_loss(
            policy, layout,
            cr::bypass_mode_inputs<double>{
                .log_probs = logp, .rollout_log_probs = rollout, .advantages = adv},
            r.grad,
            [&](const cr::token_layout& effective) {
              return verl::single_rank_normalizer(policy, effective,
                                                  cr::loss_aggregation::seq_mean_token_mean, width);
            },
            options, std::span<double>(r.weights), std::span<std::uint8_t>(r.keep));
        return r;
      };
      const auto seq = run(exec::seq);
      const auto par = run(exec::par);
      const std::string context = std::string(loss) + " " + level;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(seq.result.loss),
                std::bit_cast<std::uint64_t>(par.result.loss))
          << context;
      EXPECT_EQ(seq.grad, par.grad) << context;
      EXPECT_EQ(seq.weights, par.weights) << context;
      EXPECT_EQ(seq.keep, par.keep) << context;
      EXPECT_EQ(flat_values(seq.result.correction, options.correction),
                flat_values(par.result.correction, options.correction))
          << context;
      EXPECT_EQ(seq.result.metrics.approx_kl_sum, par.result.metrics.approx_kl_sum) << context;
      EXPECT_GT(seq.result.correction.rs_masked_fraction, 0.0) << context;
    }
}

// ---- refusals ----------------------------------------------------------------------------

TEST(RolloutCorrection, RefusesBadConfigsByName) {
  const auto with = [](verl::actor_config c) {
    return [c] { (void)verl::policy_loss("bypass_mode", c); };
  };
  expect_error_naming(with({.rollout_is = "tokens"}), "rollout_is", "tokens");
  expect_error_naming(with({.rollout_is = "token", .rollout_is_threshold = "0"}),
                      "rollout_is_threshold", "expected > 0");
  expect_error_naming(with({.rollout_is = "token", .rollout_is_threshold = "3_2"}),
                      "rollout_is_threshold", "lower <= upper");
  expect_error_naming(with({.rollout_is = "token", .rollout_is_threshold = "two"}),
                      "rollout_is_threshold", "not a number");
  expect_error_naming(with({.rollout_rs = "token_k4", .rollout_rs_threshold = "2"}), "rollout_rs",
                      "token_k4", "seq_max_k3");
  expect_error_naming(with({.rollout_rs = "seq_max_k1", .rollout_rs_threshold = "2"}), "rollout_rs",
                      "seq_max_k1");
  expect_error_naming(with({.rollout_rs = "token_k1"}), "rollout_rs_threshold", "not set");
  expect_error_naming(with({.rollout_rs = "token_k2", .rollout_rs_threshold = "0.5_2"}),
                      "rollout_rs_threshold", "single upper bound");
  expect_error_naming(with({.rollout_rs = "token_k2,token_k3", .rollout_rs_threshold = "1,2,3"}),
                      "rollout_rs_threshold", "holds 3");
  expect_error_naming(with({.rollout_rs = "token_k1", .rollout_rs_threshold = "2_1"}),
                      "rollout_rs_threshold", "lower <= upper");
  expect_error_naming(with({.rollout_correction_loss_type = "ppo"}), "rollout_correction.loss_type",
                      "ppo");
  // Repeats are dropped, as veRL does.
  const auto once = std::get<cr::bypass_mode_options>(verl::policy_loss(
      "bypass_mode", {.rollout_rs = "token_k2, token_k2", .rollout_rs_threshold = "2"}));
  EXPECT_EQ(once.correction.rejection_count, 1u);
}

TEST(RolloutCorrection, RefusesBadInputsByArgumentAndIndex) {
  const std::vector<std::uint8_t> mask = {1, 1, 0, 1};
  const auto layout = cr::token_layout::padded(2, 2, mask);
  std::vector<double> logp = {-1, -1, -1, -1}, rollout = {-1, -1, -1, -1};
  std::vector<double> w(4);
  std::vector<std::uint8_t> keep(4);
  cr::rollout_correction_options o;
  o.is_level = cr::rollout_is_level::token;
  const auto call = [&] {
    (void)cr::rollout_correction(exec::seq, layout,
                                 cr::rollout_correction_inputs<double>{logp, rollout},
                                 std::span<double>(w), std::span<std::uint8_t>(keep), o);
  };
  rollout[3] = NAN;
  expect_error_naming(call, "rollout_log_probs[3]", "NaN");
  rollout[3] = -1;
  rollout[2] = NAN;  // masked: never read
  call();
  logp[1] = INFINITY;
  expect_error_naming(call, "log_probs[1]", "infinite");
  logp[1] = -1;
  o.is_upper = 0;
  expect_error_naming(call, "options.is_upper", "expected a finite value > 0");
  o.is_upper = 2;
  o.is_lower = 3;
  expect_error_naming(call, "options.is_lower", "is_lower <= is_upper");
  o.is_lower.reset();
  o.rejection[0] = {.level = cr::rollout_rs_level::token,
                    .statistic = cr::rollout_rs_statistic::k2};
  o.rejection[1] = o.rejection[0];
  o.rejection_count = 2;
  expect_error_naming(call, "options.rejection[1]", "repeats token_k2");
  o.rejection[1].level = cr::rollout_rs_level::seq_max;
  o.rejection[1].statistic = cr::rollout_rs_statistic::k1;
  expect_error_naming(call, "options.rejection[1]", "seq_max_k1");
  o.rejection_count = 0;
  w.resize(3);
  expect_error_naming(call, "is_weights_out", "3 entries");
  w.resize(4);
  const std::vector<std::uint8_t> none(4, 0);
  const auto empty = cr::token_layout::padded(2, 2, none);
  expect_error_naming(
      [&] {
        (void)cr::rollout_correction(exec::seq, empty,
                                     cr::rollout_correction_inputs<double>{logp, rollout},
                                     std::span<double>(w), std::span<std::uint8_t>(keep), o);
      },
      "layout", "no valid token");
}

// ---- micro-batches ------------------------------------------------------------------------

// With the step's normaliser (the whole batch's effective counts), the loss of two
// micro-batches adds up to the whole batch's: every weight and verdict is per token or per
// row. Batch normalisation divides the weights by a micro-batch's own mean (veRL's too: it
// normalises per call), so there REINFORCE's halves do not add up to the whole.
TEST(BypassMode, MicroBatchesAddUpExceptUnderBatchNormalization) {
  const std::size_t rows = 8, width = 6, half = rows / 2 * width;
  std::mt19937 gen(11);
  std::normal_distribution<double> noise(0.0, 0.5);
  std::vector<double> logp(rows * width), rollout(rows * width), adv(rows * width);
  std::vector<std::uint8_t> mask(rows * width);
  for (std::size_t t = 0; t < logp.size(); ++t) {
    rollout[t] = -1.0 + 0.3 * noise(gen);
    logp[t] = rollout[t] + noise(gen);
    adv[t] = noise(gen);
    mask[t] = (t % 7) != 3;
  }
  for (const bool normalize : {false, true})
    for (const char* loss : {"ppo_clip", "reinforce"}) {
      const auto options = std::get<cr::bypass_mode_options>(
          verl::policy_loss("bypass_mode", {.loss_agg_mode = "token-mean",
                                            .rollout_correction_loss_type = loss,
                                            .rollout_is = "sequence",
                                            .rollout_is_threshold = "3.0",
                                            .rollout_is_batch_normalize = normalize,
                                            .rollout_rs = "token_k1",
                                            .rollout_rs_threshold = "0.4_2.5"}));
      const auto run = [&](std::size_t first, std::size_t count, const cr::loss_normalizer* norm) {
        const auto layout = cr::token_layout::padded(
            count / width, width, std::span<const std::uint8_t>(mask).subspan(first, count));
        std::vector<double> grad(count), w(count);
        std::vector<std::uint8_t> keep(count);
        const cr::bypass_mode_inputs<double> in{
            .log_probs = std::span<const double>(logp).subspan(first, count),
            .rollout_log_probs = std::span<const double>(rollout).subspan(first, count),
            .advantages = std::span<const double>(adv).subspan(first, count)};
        const auto local = [&](const cr::token_layout& effective) {
          return norm != nullptr
                     ? *norm
                     : verl::single_rank_normalizer(exec::seq, effective,
                                                    cr::loss_aggregation::token_mean, width);
        };
        return cr::bypass_mode_loss(exec::seq, layout, in, grad, local, options,
                                    std::span<double>(w), std::span<std::uint8_t>(keep))
            .loss;
      };
      const double whole = run(0, rows * width, nullptr);
      // The step's normaliser: the whole batch's effective token count.
      std::vector<double> w(rows * width);
      std::vector<std::uint8_t> keep(rows * width);
      (void)cr::rollout_correction(exec::seq, cr::token_layout::padded(rows, width, mask),
                                   cr::rollout_correction_inputs<double>{logp, rollout},
                                   std::span<double>(w), std::span<std::uint8_t>(keep),
                                   options.correction);
      const auto effective = cr::token_layout::padded(rows, width, keep);
      const cr::loss_normalizer step = verl::single_rank_normalizer(
          exec::seq, effective, cr::loss_aggregation::token_mean, width);
      const double parts = run(0, half, &step) + run(half, half, &step);
      // (PPO-clip applies no IS weights: the normalisation cannot reach its loss.)
      if (normalize && std::string(loss) == "reinforce")
        EXPECT_GT(std::abs(parts - whole), 1e-6) << loss;
      else
        EXPECT_NEAR(parts, whole, 1e-12 * (1 + std::abs(whole))) << loss;
    }
}

// The bypass-mode loss is the composition it claims, bit for bit: its gradient and loss
// are ppo_clip_loss's (old = rollout, no weights) or reinforce_loss's (the correction's
// weights as rollout_is_weights) on the layout masked by keep_out. The weights and the
// mask are stop-gradients (veRL computes them under no_grad), so the gradient is those
// losses' own (their finite-difference tests cover it).
TEST(BypassMode, IsTheCompositionOfTheCorrectionAndTheLoss) {
  const std::size_t rows = 6, width = 9;
  std::mt19937 gen(17);
  std::normal_distribution<double> noise(0.0, 0.6);
  std::vector<double> logp(rows * width), rollout(rows * width), adv(rows * width);
  std::vector<std::uint8_t> mask(rows * width);
  for (std::size_t t = 0; t < logp.size(); ++t) {
    rollout[t] = -1.5 + 0.3 * noise(gen);
    logp[t] = rollout[t] + noise(gen);
    adv[t] = noise(gen);
    mask[t] = (t % 5) != 2;
  }
  const auto layout = cr::token_layout::padded(rows, width, mask);
  for (const char* loss : {"ppo_clip", "reinforce"}) {
    const auto options = std::get<cr::bypass_mode_options>(
        verl::policy_loss("bypass_mode", {.loss_agg_mode = "seq-mean-token-sum",
                                          .rollout_correction_loss_type = loss,
                                          .rollout_is = "token",
                                          .rollout_is_threshold = "0.5_4.0",
                                          .rollout_rs = "seq_mean_k2,token_k3",
                                          .rollout_rs_threshold = "0.3,0.5"}));
    std::vector<double> grad(rows * width), w(rows * width);
    std::vector<std::uint8_t> keep(rows * width);
    const auto normalizer = [&](const cr::token_layout& effective) {
      return verl::single_rank_normalizer(exec::seq, effective,
                                          cr::loss_aggregation::seq_mean_token_sum, width);
    };
    const auto got = cr::bypass_mode_loss(
        exec::seq, layout,
        cr::bypass_mode_inputs<double>{
            .log_probs = logp, .rollout_log_probs = rollout, .advantages = adv},
        grad, normalizer, options, std::span<double>(w), std::span<std::uint8_t>(keep));
    const auto effective = layout.with_mask(keep);
    EXPECT_LT(std::count(keep.begin(), keep.end(), 1), std::count(mask.begin(), mask.end(), 1))
        << loss;
    std::vector<double> want(rows * width);
    cr::policy_loss_result direct;
    if (std::string(loss) == "ppo_clip")
      direct =
          cr::ppo_clip_loss(exec::seq, effective,
                            cr::ppo_clip_inputs<double>{
                                .log_probs = logp, .old_log_probs = rollout, .advantages = adv},
                            want, normalizer(effective), options.ppo);
    else
      direct =
          cr::reinforce_loss(exec::seq, effective,
                             cr::reinforce_inputs<double>{
                                 .log_probs = logp, .advantages = adv, .rollout_is_weights = w},
                             want, normalizer(effective), options.reinforce);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.loss), std::bit_cast<std::uint64_t>(direct.loss))
        << loss;
    EXPECT_EQ(grad, want) << loss;
    EXPECT_EQ(got.metrics.valid_tokens, direct.metrics.valid_tokens) << loss;
  }
}

}  // namespace rollout_correction_cases
}  // namespace
