// Every value of a rollout_correction_metrics in one fixed order (an absent optional as
// NaN, an unused criterion left out), for bitwise comparisons across executors.
#pragma once

#include <cmath>
#include <vector>

#include "cascade_rl/algorithms/rollout_correction_metrics.hpp"

namespace cascade_rl::testing {

inline std::vector<double> rollout_correction_values(const rollout_correction_metrics& m) {
  const double none = NAN;
  const rollout_is_metrics& i = m.importance;
  std::vector<double> v = {m.has_importance ? 1.0 : 0.0,
                           i.mean,
                           i.max,
                           i.min,
                           i.ratio_fraction_high,
                           i.ratio_fraction_low,
                           i.std,
                           i.eff_sample_size,
                           i.seq_mean,
                           i.seq_std,
                           i.seq_max,
                           i.seq_min,
                           i.seq_max_deviation,
                           i.seq_fraction_high,
                           i.seq_fraction_low,
                           i.oob_ratio.value_or(none),
                           i.batch_norm_factor.value_or(none),
                           static_cast<double>(m.rejection_count),
                           m.rs_masked_fraction,
                           m.rs_seq_masked_fraction};
  for (std::size_t c = 0; c < m.rejection_count; ++c) {
    const rollout_rs_metrics& r = m.rejection[c];
    v.insert(v.end(),
             {r.mean, r.max, r.min, r.fraction_high, r.fraction_low, r.std, r.seq_mean, r.seq_std,
              r.seq_max, r.seq_min, r.seq_max_deviation, r.seq_fraction_high,
              r.seq_fraction_low.value_or(none), r.masked_fraction, r.seq_masked_fraction});
  }
  const rollout_offpolicy_metrics& f = m.offpolicy;
  v.insert(v.end(), {f.training_ppl, f.training_log_ppl, f.kl, f.k3_kl, f.rollout_ppl,
                     f.rollout_log_ppl, f.log_ppl_diff, f.log_ppl_abs_diff, f.log_ppl_diff_max,
                     f.log_ppl_diff_min, f.ppl_ratio, f.chi2_token, f.chi2_seq});
  return v;
}

// The configurations the executors' tests run: token and sequence level, truncated and
// IcePop, with and without batch normalisation, every criterion kind.
inline std::vector<rollout_correction_options> rollout_correction_variants() {
  std::vector<rollout_correction_options> out;
  using L = rollout_rs_level;
  using S = rollout_rs_statistic;
  for (const auto level :
       {rollout_is_level::none, rollout_is_level::token, rollout_is_level::sequence})
    for (const bool icepop : {false, true})
      for (const bool normalize : {false, true}) {
        rollout_correction_options o;
        o.is_level = level;
        o.is_upper = icepop ? 3.0 : 1.8;
        if (icepop) o.is_lower = 0.4;
        o.batch_normalize = normalize;
        if (icepop) {
          o.rejection[0] = {.level = L::token, .statistic = S::k1, .lower = 0.5, .upper = 2.5};
          o.rejection[1] = {.level = L::seq_mean, .statistic = S::k3, .upper = 0.08};
          o.rejection[2] = {.level = L::seq_max, .statistic = S::k2, .upper = 0.6};
          o.rejection_count = 3;
        } else if (normalize) {
          o.rejection[0] = {.level = L::seq_sum, .statistic = S::k1, .lower = 0.2, .upper = 4.0};
          o.rejection[1] = {.level = L::token, .statistic = S::k3, .upper = 0.3};
          o.rejection[2] = {.level = L::seq_sum, .statistic = S::k2, .upper = 0.8};
          o.rejection_count = 3;
        }
        out.push_back(o);
      }
  return out;
}

}  // namespace cascade_rl::testing
