#pragma once
// The rollout correction's metrics (veRL's rollout_corr/* diagnostics) and their finish
// from the passes' row scratch and channel totals (terms/rollout_correction_passes.hpp),
// apart from the host algorithm (rollout_correction.hpp) so that the Thrust path finishes
// its results with the same code.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/rollout_correction.hpp"
#include "cascade_rl/terms/rollout_correction_passes.hpp"

namespace cascade_rl {

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

namespace detail {

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
  metrics.has_importance = p.is_level != rollout_is_level::none;
  metrics.rejection_count = static_cast<std::size_t>(p.criteria);

  if (metrics.has_importance) {
    rollout_is_metrics& m = metrics.importance;
    const double upper = p.is_upper, lower = p.is_lower;
    m.mean = totals[rc_is_applied] / valid_tokens;
    if (p.is_level == rollout_is_level::sequence) {
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
      const double mean = p.is_level == rollout_is_level::sequence ? row_sum([&](std::size_t s) {
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
    if (p.level[c] != rollout_rs_level::token) {
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

}  // namespace cascade_rl
