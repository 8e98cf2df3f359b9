#pragma once
// The passes of the rollout correction (algorithms/rollout_correction.hpp) over raw
// pointers, host-device, so that the host executors and the Thrust path run the same
// code: a pre-pass per row, a token pass per row, and the terms of every token's channel
// sums and extremes. The scalar metrics are then finished on the host from the row
// scratch and the channel totals (rollout_correction.hpp).

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/rollout_correction_terms.hpp"

namespace cascade_rl::terms {

inline constexpr int rollout_criteria_max = 11;

// The options as plain values.
struct rollout_correction_params {
  int is_level = 0;  // 0 none, 1 token, 2 sequence
  bool icepop = false;
  double is_upper = 2.0;
  double is_lower = 0.5;  // IcePop's lower bound, or 1/is_upper (the metrics' bound)
  int criteria = 0;
  int level[rollout_criteria_max] = {};      // 0 token, 1 seq_sum, 2 seq_mean, 3 seq_max
  int statistic[rollout_criteria_max] = {};  // 0 k1, 1 k2, 2 k3
  double low[rollout_criteria_max] = {};     // the statistic's bounds (logs for k1; 0 else)
  double high[rollout_criteria_max] = {};
  bool two_sided[rollout_criteria_max] = {};  // k1
};

// Row scratch: field f of row s at row[f * rows + s]; criterion c's row statistic at
// field rollout_row_fields + c.
enum rollout_row_field : int {
  rollout_row_count = 0,
  rollout_row_log_ratio,
  rollout_row_logp,
  rollout_row_rollout,
  rollout_row_applied,   // sum of the applied weights over the row's valid tokens
  rollout_row_raw,       // sum of the raw weights
  rollout_row_rejected,  // bit c: criterion c rejects a valid token of the row
  rollout_row_fields
};

// Channels of the token sums: the IS ones, the off-policy ones, the overall rejection,
// then six per criterion.
enum rollout_channel : int {
  rc_is_applied = 0,
  rc_is_high,
  rc_is_low,
  rc_is_clamped,
  rc_is_clamped_sq,
  rc_is_oob,
  rc_kl,
  rc_k3,
  rc_rho_sq,
  rc_rejected,
  rc_criteria_base
};
inline constexpr int rollout_criterion_channels = 6;  // stat, high, low, clamped, sq, rejected
inline constexpr int rollout_channels =
    rc_criteria_base + rollout_criterion_channels * rollout_criteria_max;
// The channels the configured criteria use: the rest stay 0 on every token.
CASCADE_RL_HD inline int rollout_active_channels(const rollout_correction_params& p) {
  return rc_criteria_base + rollout_criterion_channels * p.criteria;
}
// Extremes: max and min of the applied weight, then max and min of each criterion's token
// statistic, over valid tokens (-inf / +inf when none).
inline constexpr int rollout_extremes = 2 + 2 * rollout_criteria_max;

// Pass 1 for row s over [begin, end): count, sums of d, logp and rollout logp (index
// order, double) and each criterion's row statistic (sum, mean or max of its token
// statistic; 0 for an empty row; token level: the row mean).
template <class T>
CASCADE_RL_HD void rollout_row_prepass(const rollout_correction_params& p, const T* logp,
                                       const T* rollout, const std::uint8_t* mask,
                                       std::size_t begin, std::size_t end, std::size_t s,
                                       std::size_t rows, double* row) {
  double count = 0, sum_d = 0, sum_logp = 0, sum_rollout = 0;
  double sum[rollout_criteria_max] = {};
  double max[rollout_criteria_max] = {};
  for (std::size_t t = begin; t < end; ++t) {
    if (mask != nullptr && mask[t] == 0) continue;
    const double d = static_cast<double>(logp[t]) - static_cast<double>(rollout[t]);
    for (int c = 0; c < p.criteria; ++c) {
      const double k = rollout_rs_token_statistic(d, p.statistic[c]);
      sum[c] += k;
      max[c] = count == 0 ? k : fmax(max[c], k);
    }
    count += 1;
    sum_d += d;
    sum_logp += static_cast<double>(logp[t]);
    sum_rollout += static_cast<double>(rollout[t]);
  }
  row[rollout_row_count * rows + s] = count;
  row[rollout_row_log_ratio * rows + s] = sum_d;
  row[rollout_row_logp * rows + s] = sum_logp;
  row[rollout_row_rollout * rows + s] = sum_rollout;
  for (int c = 0; c < p.criteria; ++c) {
    const double mean = count > 0 ? math::detail::quotient(sum[c], count) : 0.0;
    const double value = p.level[c] == 1 ? sum[c] : (p.level[c] == 3 ? max[c] : mean);
    row[(rollout_row_fields + c) * rows + s] = value;
  }
}

// A token's statistic for criterion c as veRL broadcasts it (seq levels: the row's).
CASCADE_RL_HD inline double rollout_criterion_token_statistic(const rollout_correction_params& p,
                                                              int c, double d, const double* row,
                                                              std::size_t s, std::size_t rows) {
  return p.level[c] == 0 ? rollout_rs_token_statistic(d, p.statistic[c])
                         : row[(rollout_row_fields + c) * rows + s];
}

// The raw importance weight of a valid token of row s.
CASCADE_RL_HD inline double rollout_token_raw_weight(const rollout_correction_params& p, double d,
                                                     const double* row, std::size_t s,
                                                     std::size_t rows) {
  return p.is_level == 2 ? rollout_raw_weight(row[rollout_row_log_ratio * rows + s])
                         : rollout_raw_weight(d);
}

// Bit c set: criterion c rejects the token.
CASCADE_RL_HD inline unsigned rollout_rejected_bits(const rollout_correction_params& p, double d,
                                                    const double* row, std::size_t s,
                                                    std::size_t rows) {
  unsigned bits = 0;
  for (int c = 0; c < p.criteria; ++c) {
    const double k = rollout_criterion_token_statistic(p, c, d, row, s, rows);
    if (!rollout_rs_keeps(k, p.low[c], p.high[c], p.two_sided[c])) bits |= 1u << c;
  }
  return bits;
}

// Pass 2 for row s: weights_out[t] = the applied weight / factor (0 on masked tokens;
// weights_out null: no weights), keep_out[t] = valid and kept, row_of[t] = s, and the
// row's sums of the applied and raw weights and its rejection bits.
template <class T>
CASCADE_RL_HD void rollout_row_tokens(const rollout_correction_params& p, const T* logp,
                                      const T* rollout, const std::uint8_t* mask, std::size_t begin,
                                      std::size_t end, std::size_t s, std::size_t rows, double* row,
                                      double factor, T* weights_out, std::uint8_t* keep_out,
                                      std::size_t* row_of) {
  double sum_applied = 0, sum_raw = 0;
  unsigned row_bits = 0;
  for (std::size_t t = begin; t < end; ++t) {
    const bool valid = mask == nullptr || mask[t] != 0;
    const double d = valid ? static_cast<double>(logp[t]) - static_cast<double>(rollout[t]) : 0.0;
    if (p.is_level != 0) {
      const double raw = valid ? rollout_token_raw_weight(p, d, row, s, rows) : 0.0;
      const double applied =
          valid ? rollout_applied_weight(raw, p.is_lower, p.is_upper, p.icepop) : 0.0;
      sum_applied += applied;
      sum_raw += raw;
      if (weights_out != nullptr)
        weights_out[t] = static_cast<T>(math::detail::quotient(applied, factor));
    }
    const unsigned bits = rollout_rejected_bits(p, d, row, s, rows);
    if (valid) row_bits |= bits;
    keep_out[t] = static_cast<std::uint8_t>(valid && bits == 0);
    row_of[t] = s;
  }
  row[rollout_row_applied * rows + s] = sum_applied;
  row[rollout_row_raw * rows + s] = sum_raw;
  row[rollout_row_rejected * rows + s] = static_cast<double>(row_bits);
}

// Token t's channel terms v[0, rollout_active_channels(p)) (0 on a masked token; the
// channels of unconfigured criteria are not written: their sums are 0) and extremes
// e[0, rollout_extremes) (-inf / +inf on a masked token).
template <class T>
CASCADE_RL_HD void rollout_token_channels(const rollout_correction_params& p, const T* logp,
                                          const T* rollout, const std::uint8_t* mask,
                                          const double* row, std::size_t rows,
                                          const std::size_t* row_of, std::size_t t, double* v,
                                          double* e) {
  const double inf = INFINITY;
  const int active = rollout_active_channels(p);
  for (int c = 0; c < active; ++c) v[c] = 0.0;
  for (int c = 0; c < rollout_extremes; c += 2) {
    e[c] = -inf;
    e[c + 1] = inf;
  }
  if (mask != nullptr && mask[t] == 0) return;
  const std::size_t s = row_of[t];
  const double d = static_cast<double>(logp[t]) - static_cast<double>(rollout[t]);
  if (p.is_level != 0) {
    const double raw = rollout_token_raw_weight(p, d, row, s, rows);
    const double applied = rollout_applied_weight(raw, p.is_lower, p.is_upper, p.icepop);
    const double clamped = fmin(fmax(applied, 0.0), p.is_upper);
    v[rc_is_applied] = applied;
    v[rc_is_high] = raw > p.is_upper ? 1.0 : 0.0;
    v[rc_is_low] = raw < p.is_lower ? 1.0 : 0.0;
    v[rc_is_clamped] = clamped;
    v[rc_is_clamped_sq] = math::detail::product_rn(clamped, clamped);
    v[rc_is_oob] = raw < p.is_lower || raw > p.is_upper ? 1.0 : 0.0;
    e[0] = applied;
    e[1] = applied;
  }
  const double rho = rollout_raw_weight(d);
  v[rc_kl] = -d;
  v[rc_k3] = math::exp(d) - d - 1.0;
  v[rc_rho_sq] = math::detail::product_rn(rho, rho);
  unsigned bits = 0;
  for (int c = 0; c < p.criteria; ++c) {
    const double k = rollout_criterion_token_statistic(p, c, d, row, s, rows);
    const bool rejected = !rollout_rs_keeps(k, p.low[c], p.high[c], p.two_sided[c]);
    bits |= rejected ? 1u << c : 0u;
    const double clamped = fmin(fmax(k, p.low[c]), p.high[c]);
    double* w = v + rc_criteria_base + rollout_criterion_channels * c;
    w[0] = k;
    w[1] = k > p.high[c] ? 1.0 : 0.0;
    w[2] = p.two_sided[c] && k < p.low[c] ? 1.0 : 0.0;
    w[3] = clamped;
    w[4] = math::detail::product_rn(clamped, clamped);
    w[5] = rejected ? 1.0 : 0.0;
    e[2 + 2 * c] = k;
    e[3 + 2 * c] = k;
  }
  v[rc_rejected] = bits != 0 ? 1.0 : 0.0;
}

// Joins extremes b into a.
CASCADE_RL_HD inline void rollout_join_extremes(double* a, const double* b) {
  for (int c = 0; c < rollout_extremes; c += 2) {
    a[c] = fmax(a[c], b[c]);
    a[c + 1] = fmin(a[c + 1], b[c + 1]);
  }
}

}  // namespace cascade_rl::terms
