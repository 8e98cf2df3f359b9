#pragma once
// The covariance-selection losses' pieces as the CUDA kernels and the portable Thrust path
// run them (terms/covariance_tokens.hpp holds the formulas, which the host core calls
// too; their token terms over a per-token selection mask are in contextual_tokens.hpp):
// the steps of both selections: canonical block sums of A, logp and the valid count, their
// totals in block order, each token's key (Clip-Cov: its seeded key where a candidate;
// KL-Cov: terms::covariance_key where valid; terms::not_a_candidate elsewhere), and after
// a stable sort by key the marking of the first selection_count tokens that hold a key.

#include <array>
#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/cuda/detail/contextual_tokens.hpp"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/covariance_tokens.hpp"

namespace cascade_rl::cuda::detail {

// Per block of reduce_block_size tokens: the canonical sums of A, logp and the valid count
// over its valid tokens (sums[3b], sums[3b + 1], sums[3b + 2]).
template <class T>
struct covariance_block_sums_functor {
  device_token_layout layout;
  const T* advantages;
  const T* log_probs;
  double* sums;
  CASCADE_RL_HD void operator()(std::size_t b) const {
    const std::size_t first = b * cascade_rl::detail::reduce_block_size;
    const std::size_t last = min_of(first + cascade_rl::detail::reduce_block_size, layout.tokens);
    double a[cascade_rl::detail::reduce_lanes] = {};
    double l[cascade_rl::detail::reduce_lanes] = {};
    double count = 0;
    for (std::size_t i = first; i < last; ++i) {
      const bool valid = layout.valid(i);
      const std::size_t lane = (i - first) % cascade_rl::detail::reduce_lanes;
      a[lane] += valid ? static_cast<double>(advantages[i]) : 0.0;
      l[lane] += valid ? static_cast<double>(log_probs[i]) : 0.0;
      count += valid ? 1.0 : 0.0;
    }
    sums[3 * b] = cascade_rl::detail::fold_lanes(a, cascade_rl::detail::plus{});
    sums[3 * b + 1] = cascade_rl::detail::fold_lanes(l, cascade_rl::detail::plus{});
    sums[3 * b + 2] = count;
  }
};

// sums[3 blocks .. 3 blocks + 2] = the block sums added in block order from +0.0 (the
// count is exact).
struct covariance_combine_functor {
  double* sums;
  std::size_t blocks;
  CASCADE_RL_HD void operator()(std::size_t) const {
    double a = 0, l = 0, count = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      a += sums[3 * b];
      l += sums[3 * b + 1];
      count += sums[3 * b + 2];
    }
    sums[3 * blocks] = a;
    sums[3 * blocks + 1] = l;
    sums[3 * blocks + 2] = count;
  }
};

// keys[t] = terms::selection_key(seed, t) where token t is a candidate of our seeded
// Clip-Cov draw (a valid token with terms::clip_cov_candidate), terms::not_a_candidate
// elsewhere; indices[t] = t. `totals` are the combined sums: A, logp and the valid count
// (the means are totals[k] / totals[2], as the host core divides).
template <class T>
struct clip_cov_keys_functor {
  device_token_layout layout;
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const double* totals;
  std::uint64_t seed;
  clip_cov_options params;
  std::uint64_t* keys;
  std::size_t* indices;
  CASCADE_RL_HD void operator()(std::size_t t) const {
    indices[t] = t;
    bool candidate = false;
    if (layout.valid(t)) {
      const double logp = static_cast<double>(log_probs[t]);
      const double advantage = static_cast<double>(advantages[t]);
      const double cov =
          terms::covariance_term(advantage, logp, totals[0] / totals[2], totals[1] / totals[2]);
      candidate = terms::clip_cov_candidate(logp, static_cast<double>(old_log_probs[t]), advantage,
                                            cov, params);
    }
    keys[t] = candidate ? terms::selection_key(seed, t) : terms::not_a_candidate;
  }
};

// keys[t] = terms::covariance_key(cov_t) where token t is valid (KL-Cov's order: largest
// cov first), terms::not_a_candidate elsewhere; indices[t] = t.
template <class T>
struct kl_cov_keys_functor {
  device_token_layout layout;
  const T* log_probs;
  const T* advantages;
  const double* totals;
  std::uint64_t* keys;
  std::size_t* indices;
  CASCADE_RL_HD void operator()(std::size_t t) const {
    indices[t] = t;
    std::uint64_t key = terms::not_a_candidate;
    if (layout.valid(t))
      key = terms::covariance_key(terms::covariance_term(
          static_cast<double>(advantages[t]), static_cast<double>(log_probs[t]),
          totals[0] / totals[2], totals[1] / totals[2]));
    keys[t] = key;
  }
};

// After the keys are sorted (stably, so (key, index) order): selected[indices[k]] = 1 for
// the first selection_count(ratio, valid) tokens holding a key (Clip-Cov's clip_num,
// KL-Cov's k). `selected` is zeroed before.
struct mark_selected_functor {
  const std::uint64_t* sorted_keys;
  const std::size_t* sorted_indices;
  const double* totals;
  double ratio;
  std::uint8_t* selected;
  CASCADE_RL_HD void operator()(std::size_t k) const {
    const std::size_t valid = static_cast<std::size_t>(totals[2]);
    if (valid == 0 || k >= terms::selection_count(ratio, valid)) return;
    if (sorted_keys[k] != terms::not_a_candidate) selected[sorted_indices[k]] = 1;
  }
};

// Doubles of scratch the block sums need for `tokens` tokens; the totals are the last 3.
CASCADE_RL_HD inline std::size_t covariance_sum_entries(std::size_t tokens) {
  return 3 * ((tokens + cascade_rl::detail::reduce_block_size - 1) /
              cascade_rl::detail::reduce_block_size) +
         3;
}

}  // namespace cascade_rl::cuda::detail
