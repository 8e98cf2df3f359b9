#pragma once
// The passes of the rollout correction (algorithms/rollout_correction.hpp) over raw
// pointers, host-device, so that the host executors and the Thrust path run the same
// code: a pre-pass per row, a token pass per row, and the terms of every token's channel
// sums and extremes. The scalar metrics are then finished on the host from the row
// scratch and the channel totals (rollout_correction.hpp).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/rollout_correction.hpp"
#include "cascade_rl/terms/rollout_correction_terms.hpp"

namespace cascade_rl::terms {

inline constexpr int rollout_criteria_max = static_cast<int>(max_rollout_rs_criteria);

// The options resolved for the passes (detail::rollout_params_of below): IcePop's flag
// and lower bound unpacked, each criterion's bounds as its statistic compares them (logs
// for k1), in a struct a kernel takes by copy.
struct rollout_correction_params {
  rollout_is_level is_level = rollout_is_level::none;
  bool icepop = false;
  double is_upper = 2.0;
  double is_lower = 0.5;  // IcePop's lower bound, or 1/is_upper (the metrics' bound)
  int criteria = 0;
  rollout_rs_level level[rollout_criteria_max] = {};
  rollout_rs_statistic statistic[rollout_criteria_max] = {};
  double low[rollout_criteria_max] = {};  // the statistic's bounds (logs for k1; 0 else)
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

// Extremes the configured criteria use: the applied weight's, then each criterion's (the
// rest stay -inf / +inf).
CASCADE_RL_HD inline int rollout_active_extremes(const rollout_correction_params& p) {
  return 2 + 2 * p.criteria;
}

// Whether some criterion takes k3, whose exp the pre-pass then computes per token.
CASCADE_RL_HD inline bool rollout_uses_k3(const rollout_correction_params& p) {
  for (int c = 0; c < p.criteria; ++c)
    if (p.statistic[c] == rollout_rs_statistic::k3) return true;
  return false;
}

// Pass 1 for row s over [begin, end): count, sums of d, logp and rollout logp (index
// order, double) and each criterion's row statistic (sum, mean or max of its token
// statistic; 0 for an empty row; token level: the row mean). When a criterion takes k3,
// the tokens' exps are computed Batch at a time first, in a loop of their own that the
// host's compiler vectorises (the device runs Batch = 1); the sums then run in index
// order as before.
template <std::size_t Batch = 1, class T>
CASCADE_RL_HD void rollout_row_prepass(const rollout_correction_params& p, const T* logp,
                                       const T* rollout, const std::uint8_t* mask,
                                       std::size_t begin, std::size_t end, std::size_t s,
                                       std::size_t rows, double* row) {
  double count = 0, sum_d = 0, sum_logp = 0, sum_rollout = 0;
  double sum[rollout_criteria_max] = {};
  double max[rollout_criteria_max] = {};
  const bool k3 = rollout_uses_k3(p);
  for (std::size_t base = begin; base < end; base += Batch) {
    const std::size_t stop = end - base > Batch ? base + Batch : end;
    double raw[Batch] = {};  // read only where k3 wrote it; GCC cannot tell
    if (k3)
      for (std::size_t t = base; t < stop; ++t)  // masked tokens too: their exp goes unread
        raw[t - base] =
            rollout_raw_weight(static_cast<double>(logp[t]) - static_cast<double>(rollout[t]));
    for (std::size_t t = base; t < stop; ++t) {
      if (mask != nullptr && mask[t] == 0) continue;
      const double d = static_cast<double>(logp[t]) - static_cast<double>(rollout[t]);
      const double w = k3 ? raw[t - base] : 0.0;
      for (int c = 0; c < p.criteria; ++c) {
        const double k = rollout_rs_token_statistic(d, w, p.statistic[c]);
        sum[c] += k;
        max[c] = count == 0 ? k : rollout_max(max[c], k);
      }
      count += 1;
      sum_d += d;
      sum_logp += static_cast<double>(logp[t]);
      sum_rollout += static_cast<double>(rollout[t]);
    }
  }
  row[rollout_row_count * rows + s] = count;
  row[rollout_row_log_ratio * rows + s] = sum_d;
  row[rollout_row_logp * rows + s] = sum_logp;
  row[rollout_row_rollout * rows + s] = sum_rollout;
  for (int c = 0; c < p.criteria; ++c) {
    const double mean = count > 0 ? math::detail::quotient(sum[c], count) : 0.0;
    const double value = p.level[c] == rollout_rs_level::seq_sum   ? sum[c]
                        : p.level[c] == rollout_rs_level::seq_max ? max[c]
                                                                  : mean;
    row[(rollout_row_fields + c) * rows + s] = value;
  }
}

// What the pre-pass decided for a row that each of its tokens reads: the sequence-level
// raw weight (is_level 2) and the sequence-level criteria's row statistics. Read once per
// row by the passes that walk rows, per token by the device's block pass.
struct rollout_row_view {
  double raw = 0;  // exp of the clamped row log-ratio sum (is_level 2 only)
  double statistic[rollout_criteria_max] = {};
};

CASCADE_RL_HD inline rollout_row_view rollout_row_view_of(const rollout_correction_params& p,
                                                          const double* row, std::size_t s,
                                                          std::size_t rows) {
  rollout_row_view v;
  if (p.is_level == rollout_is_level::sequence) v.raw = rollout_raw_weight(row[rollout_row_log_ratio * rows + s]);
  for (int c = 0; c < p.criteria; ++c) v.statistic[c] = row[(rollout_row_fields + c) * rows + s];
  return v;
}

// What a valid token's terms share: d, exp of the clamped d (the token-level raw weight,
// rho, and k3's exp), and the raw weight the IS level applies.
struct rollout_token_ratio {
  double d = 0, rho = 0, raw = 0;
};

// Whether the weights and the rejection need a token's own exp: token-level IS, or a
// token-level k3 criterion (the diagnostics' channels always do).
CASCADE_RL_HD inline bool rollout_tokens_need_rho(const rollout_correction_params& p) {
  if (p.is_level == rollout_is_level::token) return true;
  for (int c = 0; c < p.criteria; ++c)
    if (p.level[c] == rollout_rs_level::token && p.statistic[c] == rollout_rs_statistic::k3)
      return true;
  return false;
}

// From d and its rho = rollout_raw_weight(d), computed by the caller.
CASCADE_RL_HD inline rollout_token_ratio rollout_token_ratio_of(const rollout_correction_params& p,
                                                                double d, double rho,
                                                                const rollout_row_view& row) {
  return {.d = d, .rho = rho, .raw = p.is_level == rollout_is_level::sequence ? row.raw : rho};
}

// need_rho false: rho is left 0 (the caller reads neither it nor a token-level raw weight).
CASCADE_RL_HD inline rollout_token_ratio rollout_token_ratio_of(const rollout_correction_params& p,
                                                                double d,
                                                                const rollout_row_view& row,
                                                                bool need_rho = true) {
  return rollout_token_ratio_of(p, d, need_rho ? rollout_raw_weight(d) : 0.0, row);
}

// A token's statistic for criterion c as veRL broadcasts it (seq levels: the row's).
CASCADE_RL_HD inline double rollout_criterion_token_statistic(const rollout_correction_params& p,
                                                              int c, const rollout_token_ratio& r,
                                                              const rollout_row_view& row) {
  return p.level[c] == rollout_rs_level::token ? rollout_rs_token_statistic(r.d, r.rho, p.statistic[c])
                         : row.statistic[c];
}

// Bit c set: criterion c rejects the token.
CASCADE_RL_HD inline unsigned rollout_rejected_bits(const rollout_correction_params& p,
                                                    const rollout_token_ratio& r,
                                                    const rollout_row_view& row) {
  unsigned bits = 0;
  for (int c = 0; c < p.criteria; ++c) {
    const double k = rollout_criterion_token_statistic(p, c, r, row);
    if (!rollout_rs_keeps(k, p.low[c], p.high[c], p.two_sided[c])) bits |= 1u << c;
  }
  return bits;
}

// Pass 2 for row s: weights_out[t] = the applied weight / factor (0 on masked tokens;
// weights_out null: no weights), keep_out[t] = valid and kept, row_of[t] = s (row_of
// null: not written), and the row's sums of the applied and raw weights and its rejection
// bits.
template <class T>
CASCADE_RL_HD void rollout_row_tokens(const rollout_correction_params& p, const T* logp,
                                      const T* rollout, const std::uint8_t* mask, std::size_t begin,
                                      std::size_t end, std::size_t s, std::size_t rows, double* row,
                                      double factor, T* weights_out, std::uint8_t* keep_out,
                                      std::size_t* row_of) {
  const rollout_row_view view = rollout_row_view_of(p, row, s, rows);
  const bool need_rho = rollout_tokens_need_rho(p);
  const rollout_token_ratio masked = rollout_token_ratio_of(p, 0.0, view, need_rho);
  double sum_applied = 0, sum_raw = 0;
  unsigned row_bits = 0;
  for (std::size_t t = begin; t < end; ++t) {
    const bool valid = mask == nullptr || mask[t] != 0;
    const rollout_token_ratio r =
        valid ? rollout_token_ratio_of(
                    p, static_cast<double>(logp[t]) - static_cast<double>(rollout[t]), view,
                    need_rho)
              : masked;
    if (p.is_level != rollout_is_level::none) {
      const double raw = valid ? r.raw : 0.0;
      const double applied =
          valid ? rollout_applied_weight(raw, p.is_lower, p.is_upper, p.icepop) : 0.0;
      sum_applied += applied;
      sum_raw += raw;
      if (weights_out != nullptr)
        weights_out[t] = static_cast<T>(math::detail::quotient(applied, factor));
    }
    const unsigned bits = rollout_rejected_bits(p, r, view);
    if (valid) row_bits |= bits;
    keep_out[t] = static_cast<std::uint8_t>(valid && bits == 0);
    if (row_of != nullptr) row_of[t] = s;
  }
  row[rollout_row_applied * rows + s] = sum_applied;
  row[rollout_row_raw * rows + s] = sum_raw;
  row[rollout_row_rejected * rows + s] = static_cast<double>(row_bits);
}

// A valid token's channel terms v[0, rollout_active_channels(p)) and extremes
// e[0, rollout_active_extremes(p)) (a masked token has none: 0 terms, no extremes; the
// channels and extremes of unconfigured criteria are not written).
// Always inlined: called out of line per token it was a sixth of the host pass.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline void rollout_valid_token_channels(
    const rollout_correction_params& p, const rollout_token_ratio& r, const rollout_row_view& row,
    double* v, double* e) {
  const double d = r.d;
  if (p.is_level != rollout_is_level::none) {
    const double raw = r.raw;
    const double applied = rollout_applied_weight(raw, p.is_lower, p.is_upper, p.icepop);
    const double clamped = rollout_min(rollout_max(applied, 0.0), p.is_upper);
    v[rc_is_applied] = applied;
    v[rc_is_high] = raw > p.is_upper ? 1.0 : 0.0;
    v[rc_is_low] = raw < p.is_lower ? 1.0 : 0.0;
    v[rc_is_clamped] = clamped;
    v[rc_is_clamped_sq] = math::detail::product_rn(clamped, clamped);
    v[rc_is_oob] = raw < p.is_lower || raw > p.is_upper ? 1.0 : 0.0;
    e[0] = applied;
    e[1] = applied;
  } else {
    for (int c = rc_is_applied; c <= rc_is_oob; ++c) v[c] = 0.0;
    e[0] = -INFINITY;
    e[1] = INFINITY;
  }
  // exp(d) of the unclamped d: the clamped one's exp unless the clamp moved it.
  const double exp_d = rollout_safe_log_ratio(d) == d ? r.rho : math::exp(d);
  v[rc_kl] = -d;
  v[rc_k3] = exp_d - d - 1.0;
  v[rc_rho_sq] = math::detail::product_rn(r.rho, r.rho);
  unsigned bits = 0;
  for (int c = 0; c < p.criteria; ++c) {
    const double k = rollout_criterion_token_statistic(p, c, r, row);
    const bool rejected = !rollout_rs_keeps(k, p.low[c], p.high[c], p.two_sided[c]);
    bits |= rejected ? 1u << c : 0u;
    const double clamped = rollout_min(rollout_max(k, p.low[c]), p.high[c]);
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

// Token t's channel terms v[0, rollout_active_channels(p)) (0 on a masked token) and
// extremes e[0, rollout_extremes) (-inf / +inf on a masked token and for unconfigured
// criteria), its row found through row_of.
template <class T>
CASCADE_RL_HD void rollout_token_channels(const rollout_correction_params& p, const T* logp,
                                          const T* rollout, const std::uint8_t* mask,
                                          const double* row, std::size_t rows,
                                          const std::size_t* row_of, std::size_t t, double* v,
                                          double* e) {
  for (int c = 0; c < rollout_extremes; c += 2) {
    e[c] = -INFINITY;
    e[c + 1] = INFINITY;
  }
  if (mask != nullptr && mask[t] == 0) {
    const int active = rollout_active_channels(p);
    for (int c = 0; c < active; ++c) v[c] = 0.0;
    return;
  }
  const rollout_row_view view = rollout_row_view_of(p, row, row_of[t], rows);
  const double d = static_cast<double>(logp[t]) - static_cast<double>(rollout[t]);
  rollout_valid_token_channels(p, rollout_token_ratio_of(p, d, view), view, v, e);
}

// Joins extremes b into a (the first `count`; the rest of a is left as it is).
CASCADE_RL_HD inline void rollout_join_extremes(double* a, const double* b,
                                                int count = rollout_extremes) {
  for (int c = 0; c < count; c += 2) {
    a[c] = rollout_max(a[c], b[c]);
    a[c + 1] = rollout_min(a[c + 1], b[c + 1]);
  }
}

}  // namespace cascade_rl::terms

namespace cascade_rl::detail {

// The options as the passes' plain values (validate them first).
inline terms::rollout_correction_params rollout_params_of(const rollout_correction_options& o) {
  terms::rollout_correction_params p;
  p.is_level = o.is_level;
  p.icepop = o.is_lower.has_value();
  p.is_upper = o.is_upper;
  p.is_lower = p.icepop ? *o.is_lower : 1.0 / o.is_upper;
  p.criteria = static_cast<int>(o.rejection_count);
  for (std::size_t c = 0; c < o.rejection_count; ++c) {
    const rollout_rs_criterion& r = o.rejection[c];
    p.level[c] = r.level;
    p.statistic[c] = r.statistic;
    p.two_sided[c] = r.statistic == rollout_rs_statistic::k1;
    p.low[c] = p.two_sided[c] ? std::log(r.lower) : 0.0;
    p.high[c] = p.two_sided[c] ? std::log(r.upper) : r.upper;
  }
  return p;
}

}  // namespace cascade_rl::detail
