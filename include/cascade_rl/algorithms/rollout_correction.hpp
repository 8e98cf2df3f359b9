#pragma once
// Rollout correction (veRL's rollout_corr_helper.compute_rollout_correction_and_rejection_mask)
// and the bypass-mode loss built on it (veRL compute_policy_loss_bypass_mode).
//
//   rollout_correction  from the log-ratio d = logp - rollout_logp: importance weights at
//                       token or sequence level (truncated, or IcePop's band), optionally
//                       batch-normalised; the rejection criteria's verdicts as an effective
//                       mask byte per token (the layout's mask AND every criterion); and
//                       every diagnostic veRL logs under rollout_corr/.
//   bypass_mode_loss    the correction, then PPO's clipped loss (no IS weights) or
//                       REINFORCE with the IS weights, on the effective mask.
//
// Sums over tokens run in the canonical order (core/canonical_sum.hpp), sums over rows in
// the canonical order over row indices, sums within a row in index order, all in double:
// exec::seq and exec::par give the same bits.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/rollout_correction_options.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/rollout_correction_passes.hpp"
#include "cascade_rl/terms/rollout_correction_terms.hpp"

namespace cascade_rl {

template <std::floating_point T>
struct rollout_correction_inputs {
  std::span<const T> log_probs;          // the trainer's (veRL's old_log_prob argument)
  std::span<const T> rollout_log_probs;  // the sampler's
};

template <std::floating_point T>
struct bypass_mode_inputs {
  std::span<const T> log_probs;
  std::span<const T> rollout_log_probs;  // veRL's old_log_prob in bypass mode
  std::span<const T> advantages;
};

// veRL's rollout_is_* metrics (computed before batch normalisation).
struct rollout_is_metrics {
  double mean = 0, max = 0, min = 0;
  double ratio_fraction_high = 0, ratio_fraction_low = 0;
  double std = 0, eff_sample_size = 0;
  double seq_mean = 0, seq_std = 0, seq_max = 0, seq_min = 0, seq_max_deviation = 0;
  double seq_fraction_high = 0, seq_fraction_low = 0;
  std::optional<double> oob_ratio{};          // IcePop only
  std::optional<double> batch_norm_factor{};  // batch_normalize only
};

// veRL's rollout_rs_<name>_* metrics of one criterion.
struct rollout_rs_metrics {
  double mean = 0, max = 0, min = 0, fraction_high = 0, fraction_low = 0, std = 0;
  double seq_mean = 0, seq_std = 0, seq_max = 0, seq_min = 0, seq_max_deviation = 0;
  double seq_fraction_high = 0;
  std::optional<double> seq_fraction_low{};  // k1 only
  double masked_fraction = 0, seq_masked_fraction = 0;
};

// veRL's off-policy diagnostics (compute_offpolicy_metrics).
struct rollout_offpolicy_metrics {
  double training_ppl = 0, training_log_ppl = 0, kl = 0, k3_kl = 0, rollout_ppl = 0,
         rollout_log_ppl = 0, log_ppl_diff = 0, log_ppl_abs_diff = 0, log_ppl_diff_max = 0,
         log_ppl_diff_min = 0, ppl_ratio = 0, chi2_token = 0, chi2_seq = 0;
};

struct rollout_correction_metrics {
  bool has_importance = false;  // is_level != none
  rollout_is_metrics importance{};
  std::size_t rejection_count = 0;  // the criteria's metrics in rejection[0, count)
  std::array<rollout_rs_metrics, max_rollout_rs_criteria> rejection{};
  double rs_masked_fraction = 0, rs_seq_masked_fraction = 0;  // rejection_count > 0 only
  rollout_offpolicy_metrics offpolicy{};
};

// veRL's name of a criterion: token_k1, seq_sum_k3, seq_max_k2, ...
[[nodiscard]] inline std::string to_string(const rollout_rs_criterion& c) {
  constexpr const char* levels[] = {"token", "seq_sum", "seq_mean", "seq_max"};
  constexpr const char* statistics[] = {"k1", "k2", "k3"};
  std::string name = levels[static_cast<int>(c.level)];
  name.append("_").append(statistics[static_cast<int>(c.statistic)]);
  return name;
}

namespace detail {

inline void validate_rollout_correction_options(const rollout_correction_options& o) {
  if (o.is_level != rollout_is_level::none) {
    if (!(o.is_upper > 0 && std::isfinite(o.is_upper)))
      fail("options.is_upper",
           "is " + std::to_string(o.is_upper) + ", expected a finite value > 0");
    if (o.is_lower && !(*o.is_lower > 0 && *o.is_lower <= o.is_upper))
      fail("options.is_lower", "is " + std::to_string(*o.is_lower) +
                                   ", expected 0 < is_lower <= is_upper (" +
                                   std::to_string(o.is_upper) + ")");
  }
  if (o.rejection_count > max_rollout_rs_criteria)
    fail("options.rejection_count", "is " + std::to_string(o.rejection_count) +
                                        ", expected at most " +
                                        std::to_string(max_rollout_rs_criteria));
  for (std::size_t c = 0; c < o.rejection_count; ++c) {
    const rollout_rs_criterion& r = o.rejection[c];
    if (r.level == rollout_rs_level::seq_max && r.statistic == rollout_rs_statistic::k1)
      fail_at("options.rejection", c,
              "is seq_max_k1, which veRL does not define (seq_max "
              "takes k2 or k3)");
    if (!(r.upper > 0 && std::isfinite(r.upper)))
      fail_at("options.rejection", c,
              "has upper " + std::to_string(r.upper) + ", expected a finite value > 0");
    if (r.statistic == rollout_rs_statistic::k1 && !(r.lower > 0 && r.lower <= r.upper))
      fail_at("options.rejection", c,
              "has lower " + std::to_string(r.lower) + ", expected 0 < lower <= upper (" +
                  std::to_string(r.upper) + ")");
    for (std::size_t e = 0; e < c; ++e)
      if (o.rejection[e].level == r.level && o.rejection[e].statistic == r.statistic)
        fail_at("options.rejection", c,
                "repeats " + to_string(r) + " (criterion " + std::to_string(e) + ")");
  }
}

// Mean, unbiased standard deviation (torch.std), max and min of values[0, n), n > 0;
// the sums in the canonical order over indices.
struct row_statistics {
  double mean = 0, std = 0, max = 0, min = 0;
};
template <class Policy>
row_statistics statistics_of(const Policy& policy, std::span<const double> values) {
  const std::size_t n = values.size();
  row_statistics r;
  r.mean =
      blocked_sum(policy, n, [&](std::size_t i) { return values[i]; }) / static_cast<double>(n);
  if (n > 1) {
    const double m = r.mean;
    const double ss = blocked_sum(policy, n, [&](std::size_t i) {
      const double d = values[i] - m;
      return d * d;
    });
    r.std = std::sqrt(ss / static_cast<double>(n - 1));
  }
  r.max = *std::max_element(values.begin(), values.end());
  r.min = *std::min_element(values.begin(), values.end());
  return r;
}

}  // namespace detail

namespace detail {

// The options as the passes' plain values (validate them first).
inline terms::rollout_correction_params rollout_params_of(const rollout_correction_options& o) {
  terms::rollout_correction_params p;
  p.is_level = o.is_level == rollout_is_level::none    ? 0
               : o.is_level == rollout_is_level::token ? 1
                                                       : 2;
  p.icepop = o.is_lower.has_value();
  p.is_upper = o.is_upper;
  p.is_lower = p.icepop ? *o.is_lower : 1.0 / o.is_upper;
  p.criteria = static_cast<int>(o.rejection_count);
  for (std::size_t c = 0; c < o.rejection_count; ++c) {
    const rollout_rs_criterion& r = o.rejection[c];
    p.level[c] = static_cast<int>(r.level);
    p.statistic[c] = static_cast<int>(r.statistic);
    p.two_sided[c] = r.statistic == rollout_rs_statistic::k1;
    p.low[c] = p.two_sided[c] ? std::log(r.lower) : 0.0;
    p.high[c] = p.two_sided[c] ? std::log(r.upper) : r.upper;
  }
  return p;
}

// Entries of the row scratch for `rows` rows.
[[nodiscard]] inline std::size_t rollout_row_scratch(std::size_t rows) {
  return (terms::rollout_row_fields + terms::rollout_criteria_max) * rows;
}

// The metrics from the row scratch (host memory), the channel totals (canonical sums over
// tokens) and the extremes over tokens; `factor` receives the batch normalisation's
// divisor (1 when none). Sums over rows run in the canonical order over row indices.
inline rollout_correction_metrics finish_rollout_correction(
    const rollout_correction_options& options, const terms::rollout_correction_params& p,
    const double* row, std::size_t rows, const double* totals, const double* extremes,
    double& factor) {
  using namespace terms;
  const auto field = [&](int f, std::size_t s) {
    return row[static_cast<std::size_t>(f) * rows + s];
  };
  const auto count = [&](std::size_t s) { return field(rollout_row_count, s); };
  const auto row_mean = [&](double sum, std::size_t s) {
    return count(s) > 0 ? sum / count(s) : 0.0;
  };
  const auto row_sum = [&](auto&& term) { return blocked_sum(exec::seq, rows, term); };
  const double r = static_cast<double>(rows);
  const double valid_tokens = row_sum([&](std::size_t s) { return count(s); });
  const double valid_rows = row_sum([&](std::size_t s) { return count(s) > 0 ? 1.0 : 0.0; });
  if (!(valid_tokens > 0))
    fail("layout", "has no valid token (the rollout correction needs at least one)");
  factor = 1.0;

  rollout_correction_metrics metrics;
  metrics.has_importance = p.is_level != 0;
  metrics.rejection_count = static_cast<std::size_t>(p.criteria);

  if (metrics.has_importance) {
    rollout_is_metrics& m = metrics.importance;
    const double upper = p.is_upper, lower = p.is_lower;
    m.mean = totals[rc_is_applied] / valid_tokens;
    if (p.is_level == 2) {
      // Over all rows (veRL's log_ratio_for_metrics has one entry per row, empty ones 0).
      double log_max = -std::numeric_limits<double>::infinity();
      double log_min = std::numeric_limits<double>::infinity();
      for (std::size_t s = 0; s < rows; ++s) {
        log_max = std::max(log_max, field(rollout_row_log_ratio, s));
        log_min = std::min(log_min, field(rollout_row_log_ratio, s));
      }
      m.max = std::exp(std::min(log_max, rollout_safety_bound));
      m.min = std::exp(log_min);
      const double log_upper = std::log(upper), log_lower = std::log(lower);
      m.ratio_fraction_high = row_sum([&](std::size_t s) {
                                return field(rollout_row_log_ratio, s) > log_upper ? 1.0 : 0.0;
                              }) /
                              r;
      m.ratio_fraction_low = row_sum([&](std::size_t s) {
                               return field(rollout_row_log_ratio, s) < log_lower ? 1.0 : 0.0;
                             }) /
                             r;
    } else {
      m.ratio_fraction_high = totals[rc_is_high] / valid_tokens;
      m.ratio_fraction_low = totals[rc_is_low] / valid_tokens;
      m.max = extremes[0];
      m.min = extremes[1];
    }
    const double mean_clamped = totals[rc_is_clamped] / valid_tokens;
    if (valid_tokens > 1) {
      const double var = totals[rc_is_clamped_sq] / valid_tokens - mean_clamped * mean_clamped;
      m.std = std::sqrt(std::max(var, 0.0));
    }
    const double scale = mean_clamped + 1e-8;
    m.eff_sample_size = 1.0 / (totals[rc_is_clamped_sq] / (scale * scale) / valid_tokens);
    // Row means of the applied weights over all rows (empty rows 0).
    std::vector<double> seq_weights(rows), raw_seq(rows);
    for (std::size_t s = 0; s < rows; ++s) {
      seq_weights[s] = row_mean(field(rollout_row_applied, s), s);
      raw_seq[s] = row_mean(field(rollout_row_raw, s), s);
    }
    const row_statistics st = statistics_of(exec::seq, std::span<const double>(seq_weights));
    m.seq_mean = st.mean;
    m.seq_std = st.std;
    m.seq_max = st.max;
    m.seq_min = st.min;
    double deviation = 0;
    for (const double w : seq_weights) deviation = std::max(deviation, std::abs(w - 1.0));
    m.seq_max_deviation = deviation;
    m.seq_fraction_high =
        row_sum([&](std::size_t s) { return raw_seq[s] > upper ? 1.0 : 0.0; }) / r;
    m.seq_fraction_low = row_sum([&](std::size_t s) { return raw_seq[s] < lower ? 1.0 : 0.0; }) / r;
    if (p.icepop) m.oob_ratio = totals[rc_is_oob] / valid_tokens;
    if (options.batch_normalize) {
      const double mean = p.is_level == 2 ? row_sum([&](std::size_t s) {
                                              return count(s) > 0 ? seq_weights[s] : 0.0;
                                            }) / std::max(valid_rows, 1e-8)
                                          : m.mean;
      if (mean > 1e-8) factor = mean;
      m.batch_norm_factor = factor;
    }
  }

  for (int c = 0; c < p.criteria; ++c) {
    rollout_rs_metrics& m = metrics.rejection[static_cast<std::size_t>(c)];
    const double* w = totals + rc_criteria_base + rollout_criterion_channels * c;
    const double lo = p.low[c], hi = p.high[c];
    const unsigned bit = 1u << c;
    m.mean = w[0] / valid_tokens;
    // veRL's seq_values over the rows holding a valid token.
    std::vector<double> values;
    values.reserve(rows);
    for (std::size_t s = 0; s < rows; ++s)
      if (count(s) > 0) values.push_back(field(rollout_row_fields + c, s));
    const row_statistics st = statistics_of(exec::seq, std::span<const double>(values));
    const double n_values = static_cast<double>(values.size());
    const auto fraction_of = [&](auto&& predicate) {
      return blocked_sum(exec::seq, values.size(),
                         [&](std::size_t i) { return predicate(values[i]) ? 1.0 : 0.0; }) /
             n_values;
    };
    const double seq_high = fraction_of([&](double v) { return v > hi; });
    const double seq_low = p.two_sided[c] ? fraction_of([&](double v) { return v < lo; }) : 0.0;
    if (p.level[c] != 0) {
      m.max = st.max;
      m.min = st.min;
      m.fraction_high = seq_high;
      m.fraction_low = seq_low;
    } else {
      m.max = extremes[2 + 2 * c];
      m.min = extremes[3 + 2 * c];
      m.fraction_high = w[1] / valid_tokens;
      m.fraction_low = w[2] / valid_tokens;
    }
    if (valid_tokens > 1) {
      const double mean_clamped = w[3] / valid_tokens;
      m.std = std::sqrt(std::max(w[4] / valid_tokens - mean_clamped * mean_clamped, 0.0));
    }
    m.seq_mean = st.mean;
    m.seq_std = st.std;
    m.seq_max = st.max;
    m.seq_min = st.min;
    double deviation = 0;
    for (const double v : values) deviation = std::max(deviation, std::abs(v));
    m.seq_max_deviation = deviation;
    m.seq_fraction_high = seq_high;
    if (p.two_sided[c]) m.seq_fraction_low = seq_low;
    m.masked_fraction = w[5] / valid_tokens;
    m.seq_masked_fraction = row_sum([&](std::size_t s) {
                              const auto bits =
                                  static_cast<unsigned>(field(rollout_row_rejected, s));
                              return count(s) > 0 && (bits & bit) != 0 ? 1.0 : 0.0;
                            }) /
                            valid_rows;
  }
  if (p.criteria > 0) {
    metrics.rs_masked_fraction = totals[rc_rejected] / valid_tokens;
    metrics.rs_seq_masked_fraction =
        row_sum([&](std::size_t s) { return field(rollout_row_rejected, s) != 0 ? 1.0 : 0.0; }) / r;
  }

  rollout_offpolicy_metrics& m = metrics.offpolicy;
  m.kl = totals[rc_kl] / valid_tokens;
  m.k3_kl = totals[rc_k3] / valid_tokens;
  m.chi2_token = totals[rc_rho_sq] / valid_tokens - 1.0;
  const auto mean_over_rows = [&](auto&& term) { return row_sum(term) / r; };
  const auto train = [&](std::size_t s) { return row_mean(field(rollout_row_logp, s), s); };
  const auto roll = [&](std::size_t s) { return row_mean(field(rollout_row_rollout, s), s); };
  m.training_ppl = mean_over_rows([&](std::size_t s) { return std::exp(-train(s)); });
  m.training_log_ppl = mean_over_rows([&](std::size_t s) { return -train(s); });
  m.rollout_ppl = mean_over_rows([&](std::size_t s) { return std::exp(-roll(s)); });
  m.rollout_log_ppl = mean_over_rows([&](std::size_t s) { return -roll(s); });
  m.log_ppl_diff = mean_over_rows([&](std::size_t s) { return roll(s) - train(s); });
  m.log_ppl_abs_diff = mean_over_rows([&](std::size_t s) { return std::abs(roll(s) - train(s)); });
  m.ppl_ratio = mean_over_rows([&](std::size_t s) { return std::exp(roll(s) - train(s)); });
  double mx = -std::numeric_limits<double>::infinity();
  double mn = std::numeric_limits<double>::infinity();
  for (std::size_t s = 0; s < rows; ++s) {
    mx = std::max(mx, roll(s) - train(s));
    mn = std::min(mn, roll(s) - train(s));
  }
  m.log_ppl_diff_max = mx;
  m.log_ppl_diff_min = mn;
  m.chi2_seq = mean_over_rows([&](std::size_t s) {
                 const double w = rollout_raw_weight(field(rollout_row_log_ratio, s));
                 return w * w;
               }) -
               1.0;
  return metrics;
}

}  // namespace detail

// The rollout correction of one micro-batch. is_weights_out (one per token; may be empty
// when options.is_level is none) receives the applied weights, 0 on masked tokens;
// keep_out (one per token) receives 1 where the token is valid in `layout` and every
// rejection criterion keeps it (veRL's modified response mask), else 0. The metrics are
// veRL's, over the layout's valid tokens and rows (the micro-batch's local means). At
// least one token must be valid (veRL refuses an empty mask).
template <exec::host_policy Policy, std::floating_point T>
rollout_correction_metrics rollout_correction(const Policy& policy, const token_layout& layout,
                                              const rollout_correction_inputs<T>& inputs,
                                              std::span<T> is_weights_out,
                                              std::span<std::uint8_t> keep_out,
                                              const rollout_correction_options& options) {
  using namespace detail;
  validate_rollout_correction_options(options);
  const std::size_t n = layout.tokens();
  const std::size_t rows = layout.sequences();
  require_size(inputs.log_probs.size(), n, "log_probs", "one per token");
  require_size(inputs.rollout_log_probs.size(), n, "rollout_log_probs", "one per token");
  require_size(keep_out.size(), n, "keep_out", "one per token");
  const bool weighted = options.is_level != rollout_is_level::none;
  if (weighted) require_size(is_weights_out.size(), n, "is_weights_out", "one per token");
  require_finite_where_valid(policy, inputs.log_probs, layout, "log_probs");
  require_finite_where_valid(policy, inputs.rollout_log_probs, layout, "rollout_log_probs");
  const T* logp = inputs.log_probs.data();
  const T* rollout = inputs.rollout_log_probs.data();
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  const terms::rollout_correction_params p = rollout_params_of(options);
  T* weights = weighted ? is_weights_out.data() : nullptr;

  std::vector<double> row(rollout_row_scratch(rows));
  std::vector<std::size_t> row_of(n);
  for_each_index(
      policy, rows,
      [&](std::size_t s) {
        terms::rollout_row_prepass(p, logp, rollout, mask, layout.begin(s), layout.end(s), s, rows,
                                   row.data());
      },
      /*min_parallel=*/64);
  const auto token_pass = [&](double factor) {
    for_each_index(
        policy, rows,
        [&](std::size_t s) {
          terms::rollout_row_tokens(p, logp, rollout, mask, layout.begin(s), layout.end(s), s, rows,
                                    row.data(), factor, weights, keep_out.data(), row_of.data());
        },
        /*min_parallel=*/64);
  };
  token_pass(1.0);

  using extremes_t = std::array<double, terms::rollout_extremes>;
  extremes_t none;
  for (int c = 0; c < terms::rollout_extremes; c += 2) {
    none[c] = -std::numeric_limits<double>::infinity();
    none[c + 1] = std::numeric_limits<double>::infinity();
  }
  const auto sums = chunked_blocked_sum<terms::rollout_channels>(
      policy, n, none,
      [&](extremes_t& e, std::size_t first, std::size_t last, double* out) {
        for (std::size_t t = first; t < last; ++t) {
          double v[terms::rollout_channels];
          extremes_t x;
          terms::rollout_token_channels(p, logp, rollout, mask, row.data(), rows, row_of.data(), t,
                                        v, x.data());
          for (int c = 0; c < terms::rollout_channels; ++c) out[c * sum_chunk + t - first] = v[c];
          terms::rollout_join_extremes(e.data(), x.data());
        }
      },
      [](extremes_t& total, const extremes_t& part) {
        terms::rollout_join_extremes(total.data(), part.data());
      });
  double factor = 1.0;
  rollout_correction_metrics metrics = finish_rollout_correction(
      options, p, row.data(), rows, sums.sums.data(), sums.state.data(), factor);
  if (weighted && factor != 1.0) token_pass(factor);
  return metrics;
}

// The result of bypass_mode_loss: the loss with its metrics (metrics.approx_kl is veRL's
// actor/ppo_kl over the effective mask: PPO's clamped one for ppo_clip, the plain masked
// mean of rollout_logp - logp for reinforce) and the correction's metrics.
struct bypass_mode_result {
  double loss = 0;
  policy_loss_metrics metrics{};
  rollout_correction_metrics correction{};
};

// veRL's compute_policy_loss_bypass_mode: rollout_correction on (log_probs,
// rollout_log_probs), then on the effective mask (keep_out) either ppo_clip_loss with
// old_log_probs = rollout_log_probs and no IS weights, or reinforce_loss (options.reinforce,
// veRL's log-prob surrogate) with the correction's IS weights (is_weights_out) as
// rollout_is_weights. `normalizer` is a loss_normalizer, or a function of the effective
// layout returning one (veRL's agg_loss divides by the rejection-masked counts: pass
// [&](const token_layout& l) { return verl::single_rank_normalizer(policy, l, mode, T); }).
// grad_out, is_weights_out and keep_out hold one entry per token (is_weights_out may be
// empty when no IS level is set).
template <exec::host_policy Policy, contiguous_output Out, class Normalizer>
bypass_mode_result bypass_mode_loss(const Policy& policy, const token_layout& layout,
                                    const bypass_mode_inputs<output_value_t<Out>>& inputs,
                                    Out&& grad_out, const Normalizer& normalizer,
                                    const bypass_mode_options& options,
                                    std::span<output_value_t<Out>> is_weights_out,
                                    std::span<std::uint8_t> keep_out) {
  using T = output_value_t<Out>;
  if (options.ppo.importance.mode != importance_sampling::none)
    detail::fail("options.ppo.importance",
                 "must be none: the bypass mode's ratio is already the correction");
  if (options.reinforce.importance.mode != importance_sampling::none)
    detail::fail("options.reinforce.importance",
                 "must be none: the bypass mode's IS weights are the correction's");
  detail::require_size(inputs.advantages.size(), layout.tokens(), "advantages", "one per token");
  bypass_mode_result result;
  result.correction = rollout_correction(
      policy, layout, rollout_correction_inputs<T>{inputs.log_probs, inputs.rollout_log_probs},
      is_weights_out, keep_out, options.correction);
  const token_layout effective = layout.with_mask(keep_out);
  loss_normalizer norm;
  if constexpr (std::is_same_v<Normalizer, loss_normalizer>)
    norm = normalizer;
  else
    norm = normalizer(effective);
  policy_loss_result loss;
  if (options.loss == bypass_loss::ppo_clip) {
    loss = ppo_clip_loss(policy, effective,
                         ppo_clip_inputs<T>{.log_probs = inputs.log_probs,
                                            .old_log_probs = inputs.rollout_log_probs,
                                            .advantages = inputs.advantages},
                         grad_out, norm, options.ppo);
  } else {
    const bool weighted = options.correction.is_level != rollout_is_level::none;
    loss = reinforce_loss(
        policy, effective,
        reinforce_inputs<T>{.log_probs = inputs.log_probs,
                            .advantages = inputs.advantages,
                            .rollout_is_weights = weighted ? std::span<const T>(is_weights_out)
                                                           : std::span<const T>{}},
        grad_out, norm, options.reinforce);
    const std::span<const T> logp = inputs.log_probs;
    const std::span<const T> rollout = inputs.rollout_log_probs;
    loss.metrics.approx_kl_sum = detail::blocked_sum(policy, layout.tokens(), [&](std::size_t t) {
      return effective.valid(t) ? static_cast<double>(rollout[t]) - static_cast<double>(logp[t])
                                : 0.0;
    });
  }
  result.loss = loss.loss;
  result.metrics = loss.metrics;
  return result;
}

}  // namespace cascade_rl
