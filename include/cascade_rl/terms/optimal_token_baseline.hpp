#pragma once
// The optimal token baseline's per-token terms (veRL's compute_optimal_token_baseline_advantage
// and compute_multi_turn_optimal_token_baseline_advantage): the path-variance weight of a
// token, the running sums of a group's returns weighted by the cumulative weights at one
// position, the baseline and the advantage. The host loops, the Thrust portable path and
// the CUDA kernels all call these, in the same order, for the same bits:
//   w_t = (1 - 2 exp(old_logp_t) + sum_pi_squared_t) * rho_t^2   (rho = 1 without weights)
//   W_t = sum of w_j over the valid tokens j <= t of the sequence
//   B_p = sum_i G_i(p) W_i(p) / (sum_i W_i(p) + epsilon)  over the group's rows i holding a
//         valid token at position p, in row order
//   A_t = G_t - B_p on valid tokens, 0 on masked ones.

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/reward_to_go.hpp"

namespace cascade_rl::terms {

// ||e_a - pi||^2 = 1 - 2 pi_a + sum pi^2 for the sampled token a, times the squared
// importance weight (pass 1 without weights: the product is then exact). 2 * pi is exact.
CASCADE_RL_HD inline double otb_token_weight(double old_log_prob, double sum_pi_squared,
                                             double rollout_is_weight) {
  const double w = 1.0 - 2.0 * math::exp(old_log_prob) + sum_pi_squared;
  return math::detail::product_rn(w,
                                  math::detail::product_rn(rollout_is_weight, rollout_is_weight));
}

// otb_token_weight's bits for a loop meant to vectorise (the host's, which stores each
// weight before a later loop sums them): the same operations in the same order, but
// without product_rn's asm statement, which stops the vectoriser. Nothing adds a product
// in this expression, so each is rounded alone under any contraction setting (and
// 1 - 2 e^x contracts to the same bits: 2 e^x is exact). The caller must not add the
// result in the same expression: store it first.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double otb_token_weight_to_store(
    double old_log_prob, double sum_pi_squared, double rollout_is_weight) {
  const double w = 1.0 - 2.0 * math::exp(old_log_prob) + sum_pi_squared;
  return w * (rollout_is_weight * rollout_is_weight);
}

// A group's sums at one position, rows added in index order.
struct otb_sums {
  double weighted = 0.0;  // sum G W, each product rounded alone
  double weight = 0.0;    // sum W
};

CASCADE_RL_HD inline void otb_add(otb_sums& acc, double token_return, double cumulative_weight) {
  acc.weighted += math::detail::product_rn(token_return, cumulative_weight);
  acc.weight += cumulative_weight;
}

// The baseline at a position: sum G W / (sum W + epsilon) (0 when no row holds it).
CASCADE_RL_HD inline double otb_baseline(const otb_sums& acc, double epsilon) {
  return math::detail::quotient(acc.weighted, acc.weight + epsilon);
}

// The advantage of a token from its return as stored (in T) and its baseline; 0 on masked
// tokens.
template <class T>
CASCADE_RL_HD inline T otb_advantage(T stored_return, double baseline, bool valid) {
  return valid ? static_cast<T>(static_cast<double>(stored_return) - baseline) : T(0);
}

// handle_zero_tail: within a group, the row holding strictly more valid tokens than every
// other (veRL: the unique longest) gets baseline 0 from position `second` on, `second`
// being the next-largest count (veRL compares a count with a position, and so do we).
struct otb_zero_tail {
  std::size_t row = static_cast<std::size_t>(-1);  // none
  std::size_t from = 0;
};

// Add the next member row's valid-token count (rows in index order).
struct otb_lengths {
  std::size_t max = 0, second = 0, max_row = 0, members = 0;
  bool max_unique = false;
};

CASCADE_RL_HD inline void otb_add_length(otb_lengths& acc, std::size_t row, std::size_t count) {
  if (acc.members == 0 || count > acc.max) {
    if (acc.members != 0) acc.second = acc.max;
    acc.max = count;
    acc.max_row = row;
    acc.max_unique = true;
  } else if (count == acc.max) {
    acc.max_unique = false;
    acc.second = count;
  } else if (count > acc.second) {
    acc.second = count;
  }
  ++acc.members;
}

CASCADE_RL_HD inline otb_zero_tail otb_zero_tail_of(const otb_lengths& acc, bool handle_zero_tail) {
  otb_zero_tail z;
  if (handle_zero_tail && acc.members >= 2 && acc.max_unique && acc.max > acc.second) {
    z.row = acc.max_row;
    z.from = acc.second;
  }
  return z;
}

// The rows as every executor sees them: sequence s owns [offsets[s], offsets[s + 1]); mask
// null or one byte per token (non-zero keeps it).
struct otb_rows {
  const std::int64_t* offsets = nullptr;
  const std::uint8_t* mask = nullptr;
  CASCADE_RL_HD std::size_t begin(std::size_t s) const {
    return static_cast<std::size_t>(offsets[s]);
  }
  CASCADE_RL_HD std::size_t end(std::size_t s) const {
    return static_cast<std::size_t>(offsets[s + 1]);
  }
  CASCADE_RL_HD bool valid(std::size_t t) const { return mask == nullptr || mask[t] != 0; }
};

// One sequence's pass, every executor's: its returns (every token), its advantages reset to
// 0, the running weight W on its valid tokens (cumulative), its valid-token count and, in
// multi-turn (compacted non-null), where its k-th valid token is (compacted[begin + k]).
// rho null: no importance weights.
template <class T>
CASCADE_RL_HD inline void otb_sequence(const otb_rows& layout, std::size_t s, std::size_t begin,
                                       std::size_t end, const T* rewards, const T* old_log_probs,
                                       const T* sum_pi_squared, const T* rho, T* returns,
                                       T* advantages, double* cumulative, std::size_t* counts,
                                       std::size_t* compacted) {
  double run = 0.0;
  for (std::size_t t = end; t-- > begin;) {
    const bool valid = layout.valid(t);
    run = reward_to_go(valid ? static_cast<double>(rewards[t]) : 0.0, valid, run);
    returns[t] = static_cast<T>(run);
    advantages[t] = T(0);
  }
  double w = 0.0;
  std::size_t k = 0;
  for (std::size_t t = begin; t < end; ++t) {
    if (!layout.valid(t)) continue;
    w += otb_token_weight(static_cast<double>(old_log_probs[t]),
                          static_cast<double>(sum_pi_squared[t]),
                          rho != nullptr ? static_cast<double>(rho[t]) : 1.0);
    cumulative[t] = w;
    if (compacted != nullptr) compacted[begin + k] = t;
    ++k;
  }
  counts[s] = k;
}

inline constexpr std::size_t otb_no_token = static_cast<std::size_t>(-1);

// The token of sequence s at position p (an offset, or a rank with compacted), or
// otb_no_token.
CASCADE_RL_HD inline std::size_t otb_token_at(const otb_rows& layout, const std::size_t* counts,
                                              const std::size_t* compacted, std::size_t s,
                                              std::size_t p) {
  if (compacted != nullptr) return p < counts[s] ? compacted[layout.begin(s) + p] : otb_no_token;
  const std::size_t t = layout.begin(s) + p;
  return t < layout.end(s) && layout.valid(t) ? t : otb_no_token;
}

// One group's pass over the sequence pass's results, every executor's: the sums at each
// position in row order, the baseline, the advantages of the valid tokens there.
template <class T>
CASCADE_RL_HD inline void otb_group(const otb_rows& layout, std::size_t first, std::size_t last,
                                    const std::size_t* counts, const std::size_t* compacted,
                                    const T* returns, const double* cumulative, T* advantages,
                                    double epsilon, bool handle_zero_tail) {
  const bool multi_turn = compacted != nullptr;
  otb_lengths lengths;
  std::size_t extent = 0;
  for (std::size_t s = first; s < last; ++s) {
    if (multi_turn && counts[s] == 0) continue;  // veRL drops empty rows (multi-turn)
    otb_add_length(lengths, s, counts[s]);
    const std::size_t e = multi_turn ? counts[s] : layout.end(s) - layout.begin(s);
    extent = e > extent ? e : extent;
  }
  const otb_zero_tail tail = otb_zero_tail_of(lengths, handle_zero_tail);
  for (std::size_t p = 0; p < extent; ++p) {
    otb_sums sums;
    for (std::size_t s = first; s < last; ++s) {
      const std::size_t t = otb_token_at(layout, counts, compacted, s, p);
      if (t != otb_no_token) otb_add(sums, static_cast<double>(returns[t]), cumulative[t]);
    }
    const double baseline = lengths.members < 2 ? 0.0 : otb_baseline(sums, epsilon);
    for (std::size_t s = first; s < last; ++s) {
      const std::size_t t = otb_token_at(layout, counts, compacted, s, p);
      if (t != otb_no_token)
        advantages[t] =
            otb_advantage(returns[t], s == tail.row && p >= tail.from ? 0.0 : baseline, true);
    }
  }
}

}  // namespace cascade_rl::terms
