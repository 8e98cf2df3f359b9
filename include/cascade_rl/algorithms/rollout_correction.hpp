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

// The canonical sums of C channels of per-token terms: term(i, v) writes token i's terms
// into v[0..C) (0 where the token does not count).
template <std::size_t C, class Policy, class Term>
std::array<double, C> token_channel_sums(const Policy& policy, std::size_t n, Term&& term) {
  struct no_state {};
  return chunked_blocked_sum<C>(
             policy, n, no_state{},
             [&](no_state&, std::size_t first, std::size_t last, double* out) {
               for (std::size_t i = first; i < last; ++i) {
                 double v[C];
                 term(i, v);
                 for (std::size_t c = 0; c < C; ++c) out[c * sum_chunk + i - first] = v[c];
               }
             },
             [](no_state&, const no_state&) {})
      .sums;
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
  const std::span<const T> logp = inputs.log_probs;
  const std::span<const T> rollout = inputs.rollout_log_probs;
  const auto log_ratio = [&](std::size_t t) {
    return static_cast<double>(logp[t]) - static_cast<double>(rollout[t]);
  };

  const std::size_t criteria = options.rejection_count;
  // Each criterion's bounds as its statistic compares them (logs for k1), and as veRL's
  // metrics read them (lower 0 and one-sided for k2 / k3).
  std::array<double, max_rollout_rs_criteria> bound_low{}, bound_high{};
  std::array<bool, max_rollout_rs_criteria> two_sided{};
  for (std::size_t c = 0; c < criteria; ++c) {
    const rollout_rs_criterion& r = options.rejection[c];
    two_sided[c] = r.statistic == rollout_rs_statistic::k1;
    bound_low[c] = two_sided[c] ? std::log(r.lower) : 0.0;
    bound_high[c] = two_sided[c] ? std::log(r.upper) : r.upper;
  }
  const auto statistic_of = [&](std::size_t c, double d) {
    return terms::rollout_rs_token_statistic(d, static_cast<int>(options.rejection[c].statistic));
  };

  // Pass 1, per row in index order: valid count, sums of d, logp and rollout logp, and
  // each criterion's row sum and max of its token statistic.
  std::vector<double> row_count(rows), row_log_ratio(rows), row_logp(rows), row_rollout(rows);
  std::vector<double> row_stat_sum(criteria * rows), row_stat_max(criteria * rows);
  for_each_index(
      policy, rows,
      [&](std::size_t s) {
        double count = 0, sum_d = 0, sum_logp = 0, sum_rollout = 0;
        std::array<double, max_rollout_rs_criteria> sum{}, max{};
        max.fill(-std::numeric_limits<double>::infinity());
        for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
          if (!layout.valid(t)) continue;
          const double d = log_ratio(t);
          count += 1;
          sum_d += d;
          sum_logp += static_cast<double>(logp[t]);
          sum_rollout += static_cast<double>(rollout[t]);
          for (std::size_t c = 0; c < criteria; ++c) {
            const double k = statistic_of(c, d);
            sum[c] += k;
            max[c] = std::max(max[c], k);
          }
        }
        row_count[s] = count;
        row_log_ratio[s] = sum_d;
        row_logp[s] = sum_logp;
        row_rollout[s] = sum_rollout;
        for (std::size_t c = 0; c < criteria; ++c) {
          row_stat_sum[c * rows + s] = sum[c];
          row_stat_max[c * rows + s] = count > 0 ? max[c] : 0.0;
        }
      },
      /*min_parallel=*/64);

  const double valid_rows_count =
      blocked_sum(policy, rows, [&](std::size_t s) { return row_count[s] > 0 ? 1.0 : 0.0; });
  const double valid_tokens =
      blocked_sum(policy, rows, [&](std::size_t s) { return row_count[s]; });
  if (!(valid_tokens > 0))
    fail("layout", "has no valid token (the rollout correction needs at least one)");
  const auto row_mean = [&](double sum, std::size_t s) {
    return row_count[s] > 0 ? sum / row_count[s] : 0.0;
  };
  // Each criterion's row statistic (seq levels) or row mean of the token statistic (token
  // level): veRL's seq_values.
  std::vector<double> row_stat(criteria * rows);
  for (std::size_t c = 0; c < criteria; ++c)
    for (std::size_t s = 0; s < rows; ++s) {
      const double sum = row_stat_sum[c * rows + s];
      const rollout_rs_level level = options.rejection[c].level;
      row_stat[c * rows + s] = level == rollout_rs_level::seq_sum   ? sum
                               : level == rollout_rs_level::seq_max ? row_stat_max[c * rows + s]
                                                                    : row_mean(sum, s);
    }
  const auto token_stat = [&](std::size_t c, std::size_t s, double d) {
    return options.rejection[c].level == rollout_rs_level::token ? statistic_of(c, d)
                                                                 : row_stat[c * rows + s];
  };

  // Pass 2, per row: the weights (raw and applied), each criterion's verdicts, the
  // effective mask, and the row sums of the weights.
  const bool icepop = options.is_lower.has_value();
  const double is_upper = options.is_upper;
  const double is_lower_metric = icepop ? *options.is_lower : 1.0 / is_upper;
  const bool sequence_level = options.is_level == rollout_is_level::sequence;
  std::vector<double> raw(weighted ? n : 0), applied(weighted ? n : 0);
  std::vector<std::uint16_t> rejected_by(criteria > 0 ? n : 0);  // bit c: criterion c rejects
  std::vector<double> row_applied(rows), row_raw(rows);
  std::vector<std::uint16_t> row_rejected(rows);  // bit c: c rejects a valid token of the row
  for_each_index(
      policy, rows,
      [&](std::size_t s) {
        const double row_weight = terms::rollout_raw_weight(row_log_ratio[s]);
        double sum_applied = 0, sum_raw = 0;
        std::uint16_t row_bits = 0;
        for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
          const bool valid = layout.valid(t);
          const double d = valid ? log_ratio(t) : 0.0;
          if (weighted) {
            const double w =
                valid ? (sequence_level ? row_weight : terms::rollout_raw_weight(d)) : 0.0;
            const double a = terms::rollout_applied_weight(w, is_lower_metric, is_upper, icepop);
            raw[t] = w;
            applied[t] = valid ? a : 0.0;
            sum_applied += applied[t];
            sum_raw += w;
          }
          std::uint16_t bits = 0;
          for (std::size_t c = 0; c < criteria; ++c) {
            const double k = token_stat(c, s, d);
            if (!terms::rollout_rs_keeps(k, bound_low[c], bound_high[c], two_sided[c]))
              bits = static_cast<std::uint16_t>(bits | (1u << c));
          }
          if (criteria > 0) rejected_by[t] = bits;
          if (valid) row_bits = static_cast<std::uint16_t>(row_bits | bits);
          keep_out[t] = static_cast<std::uint8_t>(valid && bits == 0);
        }
        row_applied[s] = sum_applied;
        row_raw[s] = sum_raw;
        row_rejected[s] = row_bits;
      },
      /*min_parallel=*/64);

  rollout_correction_metrics metrics;
  metrics.has_importance = weighted;
  metrics.rejection_count = criteria;

  // ---- importance weights ----
  if (weighted) {
    rollout_is_metrics& m = metrics.importance;
    const auto sums = token_channel_sums<6>(policy, n, [&](std::size_t t, double* v) {
      const bool valid = layout.valid(t);
      const double c = std::min(std::max(applied[t], 0.0), is_upper);
      v[0] = valid ? applied[t] : 0.0;
      v[1] = valid && raw[t] > is_upper ? 1.0 : 0.0;
      v[2] = valid && raw[t] < is_lower_metric ? 1.0 : 0.0;
      v[3] = valid ? c : 0.0;
      v[4] = valid ? c * c : 0.0;
      v[5] = valid && (raw[t] < is_lower_metric || raw[t] > is_upper) ? 1.0 : 0.0;
    });
    m.mean = sums[0] / valid_tokens;
    if (sequence_level) {
      // Over all rows (veRL's log_ratio_for_metrics has one entry per row, empty ones 0).
      double log_max = -std::numeric_limits<double>::infinity();
      double log_min = std::numeric_limits<double>::infinity();
      for (std::size_t s = 0; s < rows; ++s) {
        log_max = std::max(log_max, row_log_ratio[s]);
        log_min = std::min(log_min, row_log_ratio[s]);
      }
      m.max = std::exp(std::min(log_max, terms::rollout_safety_bound));
      m.min = std::exp(log_min);
      const double log_upper = std::log(is_upper), log_lower = std::log(is_lower_metric);
      m.ratio_fraction_high =
          blocked_sum(policy, rows,
                      [&](std::size_t s) { return row_log_ratio[s] > log_upper ? 1.0 : 0.0; }) /
          static_cast<double>(rows);
      m.ratio_fraction_low =
          blocked_sum(policy, rows,
                      [&](std::size_t s) { return row_log_ratio[s] < log_lower ? 1.0 : 0.0; }) /
          static_cast<double>(rows);
    } else {
      m.ratio_fraction_high = sums[1] / valid_tokens;
      m.ratio_fraction_low = sums[2] / valid_tokens;
      double mx = -std::numeric_limits<double>::infinity();
      double mn = std::numeric_limits<double>::infinity();
      for (std::size_t t = 0; t < n; ++t)
        if (layout.valid(t)) {
          mx = std::max(mx, applied[t]);
          mn = std::min(mn, applied[t]);
        }
      m.max = mx;
      m.min = mn;
    }
    const double mean_clamped = sums[3] / valid_tokens;
    if (valid_tokens > 1) {
      const double var = sums[4] / valid_tokens - mean_clamped * mean_clamped;
      m.std = std::sqrt(std::max(var, 0.0));
    }
    const double scale = mean_clamped + 1e-8;
    m.eff_sample_size = 1.0 / (sums[4] / (scale * scale) / valid_tokens);
    // Row means of the applied weights over all rows (empty rows 0).
    std::vector<double> seq_weights(rows), raw_seq(rows);
    for (std::size_t s = 0; s < rows; ++s) {
      seq_weights[s] = row_mean(row_applied[s], s);
      raw_seq[s] = row_mean(row_raw[s], s);
    }
    const row_statistics st = statistics_of(policy, std::span<const double>(seq_weights));
    m.seq_mean = st.mean;
    m.seq_std = st.std;
    m.seq_max = st.max;
    m.seq_min = st.min;
    double deviation = 0;
    for (const double w : seq_weights) deviation = std::max(deviation, std::abs(w - 1.0));
    m.seq_max_deviation = deviation;
    m.seq_fraction_high =
        blocked_sum(policy, rows,
                    [&](std::size_t s) { return raw_seq[s] > is_upper ? 1.0 : 0.0; }) /
        static_cast<double>(rows);
    m.seq_fraction_low =
        blocked_sum(policy, rows,
                    [&](std::size_t s) { return raw_seq[s] < is_lower_metric ? 1.0 : 0.0; }) /
        static_cast<double>(rows);
    if (icepop) m.oob_ratio = sums[5] / valid_tokens;
    double factor = 1.0;
    if (options.batch_normalize) {
      const double mean = sequence_level
                              ? blocked_sum(policy, rows,
                                            [&](std::size_t s) {
                                              return row_count[s] > 0 ? seq_weights[s] : 0.0;
                                            }) /
                                    std::max(valid_rows_count, 1e-8)
                              : m.mean;
      if (mean > 1e-8) factor = mean;
      m.batch_norm_factor = factor;
    }
    for_each_index(policy, n, [&](std::size_t t) {
      is_weights_out[t] = static_cast<T>(
          options.batch_normalize && factor != 1.0 ? applied[t] / factor : applied[t]);
    });
  }

  // ---- rejection ----
  for (std::size_t c = 0; c < criteria; ++c) {
    rollout_rs_metrics& m = metrics.rejection[c];
    const bool seq = options.rejection[c].level != rollout_rs_level::token;
    const double lo = bound_low[c], hi = bound_high[c];
    const std::uint16_t bit = static_cast<std::uint16_t>(1u << c);
    // The token statistic as veRL broadcasts it (seq levels: the row's), per valid token.
    std::vector<double> stat(n);
    for_each_index(
        policy, rows,
        [&](std::size_t s) {
          for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
            stat[t] = layout.valid(t) ? token_stat(c, s, log_ratio(t)) : 0.0;
        },
        /*min_parallel=*/64);
    const auto sums = token_channel_sums<6>(policy, n, [&](std::size_t t, double* v) {
      const bool valid = layout.valid(t);
      const double k = stat[t];
      const double clamped = std::min(std::max(k, lo), hi);
      v[0] = valid ? k : 0.0;
      v[1] = valid && k > hi ? 1.0 : 0.0;
      v[2] = valid && two_sided[c] && k < lo ? 1.0 : 0.0;
      v[3] = valid ? clamped : 0.0;
      v[4] = valid ? clamped * clamped : 0.0;
      v[5] = valid && (rejected_by[t] & bit) != 0 ? 1.0 : 0.0;
    });
    m.mean = sums[0] / valid_tokens;
    // seq_values over the rows holding a valid token.
    std::vector<double> values;
    values.reserve(rows);
    for (std::size_t s = 0; s < rows; ++s)
      if (row_count[s] > 0) values.push_back(row_stat[c * rows + s]);
    const row_statistics st = statistics_of(policy, std::span<const double>(values));
    const double valid_row_n = static_cast<double>(values.size());
    const auto fraction_of = [&](auto&& predicate) {
      return blocked_sum(policy, values.size(),
                         [&](std::size_t i) { return predicate(values[i]) ? 1.0 : 0.0; }) /
             valid_row_n;
    };
    const double seq_high = fraction_of([&](double v) { return v > hi; });
    const double seq_low = two_sided[c] ? fraction_of([&](double v) { return v < lo; }) : 0.0;
    if (seq) {
      m.max = st.max;
      m.min = st.min;
      m.fraction_high = seq_high;
      m.fraction_low = seq_low;
    } else {
      double mx = -std::numeric_limits<double>::infinity();
      double mn = std::numeric_limits<double>::infinity();
      for (std::size_t t = 0; t < n; ++t)
        if (layout.valid(t)) {
          mx = std::max(mx, stat[t]);
          mn = std::min(mn, stat[t]);
        }
      m.max = mx;
      m.min = mn;
      m.fraction_high = sums[1] / valid_tokens;
      m.fraction_low = sums[2] / valid_tokens;
    }
    if (valid_tokens > 1) {
      const double mean_clamped = sums[3] / valid_tokens;
      m.std = std::sqrt(std::max(sums[4] / valid_tokens - mean_clamped * mean_clamped, 0.0));
    }
    m.seq_mean = st.mean;
    m.seq_std = st.std;
    m.seq_max = st.max;
    m.seq_min = st.min;
    double deviation = 0;
    for (const double v : values) deviation = std::max(deviation, std::abs(v));
    m.seq_max_deviation = deviation;
    m.seq_fraction_high = seq_high;
    if (two_sided[c]) m.seq_fraction_low = seq_low;
    m.masked_fraction = sums[5] / valid_tokens;
    m.seq_masked_fraction =
        blocked_sum(policy, rows,
                    [&](std::size_t s) {
                      return row_count[s] > 0 && (row_rejected[s] & bit) != 0 ? 1.0 : 0.0;
                    }) /
        valid_rows_count;
  }
  if (criteria > 0) {
    metrics.rs_masked_fraction =
        blocked_sum(
            policy, n,
            [&](std::size_t t) { return layout.valid(t) && rejected_by[t] != 0 ? 1.0 : 0.0; }) /
        valid_tokens;
    metrics.rs_seq_masked_fraction =
        blocked_sum(policy, rows, [&](std::size_t s) { return row_rejected[s] != 0 ? 1.0 : 0.0; }) /
        static_cast<double>(rows);
  }

  // ---- off-policy diagnostics ----
  {
    rollout_offpolicy_metrics& m = metrics.offpolicy;
    const auto sums = token_channel_sums<3>(policy, n, [&](std::size_t t, double* v) {
      const bool valid = layout.valid(t);
      const double d = valid ? log_ratio(t) : 0.0;
      const double rho = terms::rollout_raw_weight(d);
      v[0] = valid ? -d : 0.0;
      v[1] = valid ? std::exp(d) - d - 1.0 : 0.0;
      v[2] = valid ? rho * rho : 0.0;
    });
    m.kl = sums[0] / valid_tokens;
    m.k3_kl = sums[1] / valid_tokens;
    m.chi2_token = sums[2] / valid_tokens - 1.0;
    const double r = static_cast<double>(rows);
    const auto mean_over_rows = [&](auto&& term) { return blocked_sum(policy, rows, term) / r; };
    const auto train = [&](std::size_t s) { return row_mean(row_logp[s], s); };
    const auto roll = [&](std::size_t s) { return row_mean(row_rollout[s], s); };
    m.training_ppl = mean_over_rows([&](std::size_t s) { return std::exp(-train(s)); });
    m.training_log_ppl = mean_over_rows([&](std::size_t s) { return -train(s); });
    m.rollout_ppl = mean_over_rows([&](std::size_t s) { return std::exp(-roll(s)); });
    m.rollout_log_ppl = mean_over_rows([&](std::size_t s) { return -roll(s); });
    m.log_ppl_diff = mean_over_rows([&](std::size_t s) { return roll(s) - train(s); });
    m.log_ppl_abs_diff =
        mean_over_rows([&](std::size_t s) { return std::abs(roll(s) - train(s)); });
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
                   const double w = terms::rollout_raw_weight(row_log_ratio[s]);
                   return w * w;
                 }) -
                 1.0;
  }
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
