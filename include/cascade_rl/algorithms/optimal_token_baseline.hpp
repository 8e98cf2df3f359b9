#pragma once
// The optimal token baseline (OTB), as veRL computes it (compute_optimal_token_baseline_advantage
// and, with options.multi_turn, compute_multi_turn_optimal_token_baseline_advantage in
// verl/trainer/ppo/core_algos.py): a baseline per token position and group, the group's
// returns weighted by each path's accumulated variance proxy,
//   G_t = the valid rewards of the sequence from t on (the returns, written on every token)
//   w_t = (1 - 2 exp(old_logp_t) + sum_pi_squared_t) * rho_t^2,  W_t = sum_{valid j <= t} w_j
//   B_p = sum_i G_i(p) W_i(p) / (sum_i W_i(p) + epsilon)  over the group's rows i with a
//         valid token at position p
//   A_t = G_t - B_p on valid tokens, 0 on masked ones.
// Positions: single-turn, a token's offset in its sequence (veRL's column); multi-turn, its
// rank among the sequence's valid tokens (veRL compacts each row's valid tokens to the
// left, so tool-observation holes do not shift later turns).
//
// Conventions, veRL's: a group of one gets baseline 0 (advantage = return); in multi-turn,
// sequences without a valid token leave their group (so a group can become one). With
// handle_zero_tail, the group's unique longest sequence (most valid tokens) gets baseline
// 0 from position `second` on, `second` the next-largest count of valid tokens.
// The sums run in double in row order (terms/optimal_token_baseline.hpp), so every
// executor gives the same bits; veRL sums float32 tensors.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/optimal_token_baseline.hpp"

namespace cascade_rl {

// The per-token inputs, by name (one type: a swap would compile positionally).
template <std::floating_point T>
struct optimal_token_baseline_inputs {
  std::span<const T> token_rewards;       // one per token
  std::span<const T> old_log_probs;       // one per token: log pi_old of the sampled token
  std::span<const T> sum_pi_squared;      // one per token: sum over the vocabulary of pi_old^2
  std::span<const T> rollout_is_weights;  // one per token, or empty: none (rho = 1)
};

namespace detail {

inline void require_otb_options(const optimal_token_baseline_options& options) {
  if (!(std::isfinite(options.epsilon) && options.epsilon >= 0.0))
    fail("options.epsilon", "must be finite and >= 0, got " + std::to_string(options.epsilon));
}

// token(i, valid) for i in [0, length), valid whether the mask keeps token begin + i. Two
// loops: a mask test that depends on whether there is a mask, in one loop, leaves GCC a
// branch in it (no vectorisation).
template <class Token>
CASCADE_RL_ALWAYS_INLINE inline void otb_for_tokens(const std::uint8_t* mask, std::size_t begin,
                                                    std::size_t length, Token&& token) {
  if (mask == nullptr) {
    for (std::size_t i = 0; i < length; ++i) token(i, true);
  } else {
    const std::uint8_t* const row_mask = mask + begin;
    for (std::size_t i = 0; i < length; ++i) token(i, row_mask[i] != 0);
  }
}

// The host's view of the inputs and outputs (raw pointers; mask and rho null when absent).
template <class T>
struct otb_host_arrays {
  const T* rewards;
  const T* old_log_probs;
  const T* sum_pi_squared;
  const T* rho;
  const std::uint8_t* mask;
  T* returns;
  T* advantages;
};

// One row's token weights w_t (terms::otb_token_weight's bits), w[i] for its token
// begin + i, +0 on masked tokens. A loop without branches or dependences from one token to
// the next, so it vectorises (math::exp is branch-free). It also notes, without branching,
// whether a valid token holds a non-finite input (x - x is 0 for finite x, NaN for inf
// and NaN): returns 1 if so.
template <bool Weighted, class T>
unsigned otb_row_weights(const otb_host_arrays<T>& a, std::size_t begin, std::size_t length,
                         double* w) {
  // Locals the compiler keeps in registers (a pointer read through `a` is reloaded after
  // every store).
  const T *const rewards = a.rewards + begin, *const old_log_probs = a.old_log_probs + begin,
                *const sum_pi_squared = a.sum_pi_squared + begin,
                *const rhos = Weighted ? a.rho + begin : nullptr;
  unsigned seen = 0;
  otb_for_tokens(a.mask, begin, length, [&](std::size_t i, bool valid) {
    // In double (exact from T): the conversions are then needed on every path, and GCC
    // does not sink one into a select's arm (under -ftrapping-math a conversion there
    // would not be if-converted: no vectorisation).
    const double r = static_cast<double>(rewards[i]), lp = static_cast<double>(old_log_probs[i]),
                 sp = static_cast<double>(sum_pi_squared[i]),
                 rho = Weighted ? static_cast<double>(rhos[i]) : 1.0;
    const double zero = (r - r) + (lp - lp) + (sp - sp) + (rho - rho);
    seen |= static_cast<unsigned>(valid) & static_cast<unsigned>(!(zero == 0.0));
    w[i] = math::detail::select(valid, terms::otb_token_weight_to_store(lp, sp, rho), 0.0);
  });
  return seen;
}

// One row's two running sums, each a chain of dependent adds: the returns from the end
// (written on every token, and kept as stored, in T, for the products; +0 on masked
// tokens, in gw), the weights W from the start (in place of w; +0 on masked tokens: w is
// +0 there, and an added +0 leaves W alone since W starts at +0 and so is never -0).
// step(j) advances each by one token; the group pass runs two rows' steps side by side,
// so that four chains' latencies overlap.
template <class T>
struct otb_row_chains {
  // The row's tokens (its first at index 0; mask null: all valid) and scratch.
  const T* rewards = nullptr;
  const std::uint8_t* mask = nullptr;
  T* returns = nullptr;
  std::size_t length = 0;
  double* gw = nullptr;
  double* w = nullptr;
  double run = 0.0, cumulative = 0.0;
  std::size_t count = 0;  // valid tokens so far

  CASCADE_RL_ALWAYS_INLINE void step(std::size_t j) {
    const std::size_t i = length - 1 - j;
    const bool valid_i = mask == nullptr || mask[i] != 0;
    run = terms::reward_to_go(valid_i ? static_cast<double>(rewards[i]) : 0.0, valid_i, run);
    const T stored = static_cast<T>(run);
    returns[i] = stored;
    gw[i] = math::detail::select(valid_i, static_cast<double>(stored), 0.0);
    const bool valid_j = mask == nullptr || mask[j] != 0;
    cumulative += w[j];
    w[j] = math::detail::select(valid_j, cumulative, 0.0);
    count += valid_j;
  }
};

// One group: the sequence pass of each row (terms::otb_sequence) and the group pass
// (terms::otb_group), the same operations in the same order, so the same bits. Rows are
// done two at a time while their data is in cache, and their terms G W and W join the
// group's sums at each position right away (rows in index order, as otb_group adds
// them); then the baselines, then the advantages. Scratch per thread, per position: the
// group's two sums and, for each of the two rows, its G and w (later G W and W). Returns
// 1 if a valid token held a non-finite input.
template <class T>
unsigned otb_host_group(const token_layout& tokens, std::size_t first, std::size_t last,
                        const otb_host_arrays<T>& a, const optimal_token_baseline_options& options) {
  const bool multi_turn = options.multi_turn;
  std::size_t longest = 0;
  for (std::size_t s = first; s < last; ++s)
    longest = tokens.length(s) > longest ? tokens.length(s) : longest;
  // Kept for later groups and calls (no allocation per group), unless a very long row
  // grew it past this many doubles: then given back once the group is done.
  constexpr std::size_t kept_scratch = std::size_t{1} << 20;
  thread_local std::vector<double> scratch;
  if (scratch.size() < 6 * longest) scratch.resize(6 * longest);
  double* const weighted = scratch.data();    // the group's sum of G W per position
  double* const weight = weighted + longest;  // the group's sum of W per position
  // Per row of a pair: its G (then G W) and its w (then W) per position.
  double* const row_scratch = weight + longest;

  unsigned seen = 0;
  terms::otb_lengths lengths;
  std::size_t extent = 0;  // positions whose sums have started (at +0)
  // A row's terms into the group's sums, rows in index order.
  const auto add_row = [&](std::size_t s, const otb_row_chains<T>& row) {
    double* const gw = row.gw;
    double* const w = row.w;
    const std::size_t length = row.length;
    // Each valid token's product G W, rounded alone (stored, then added by the next
    // loop: no contraction can fuse them), by position: single-turn the offset (+0 * +0
    // = +0 on masked tokens, and an added +0 leaves a sum alone: the sums start at +0),
    // multi-turn the rank among the valid tokens (compacted in place: rank k <= offset
    // i, so slot i is read before any write reaches it).
    if (multi_turn) {
      if (row.count == 0) return;  // veRL drops empty rows (multi-turn)
      std::size_t k = 0;
      for (std::size_t i = 0; i < length; ++i) {
        gw[k] = gw[i] * w[i];
        w[k] = w[i];
        k += row.mask == nullptr || row.mask[i] != 0;
      }
    } else {
      for (std::size_t i = 0; i < length; ++i) gw[i] *= w[i];
    }
    terms::otb_add_length(lengths, s, row.count);
    // The adds of terms::otb_add at each of the row's positions.
    const std::size_t positions = multi_turn ? row.count : length;
    for (; extent < positions; ++extent) weighted[extent] = weight[extent] = 0.0;
    for (std::size_t p = 0; p < positions; ++p) {
      weighted[p] += gw[p];
      weight[p] += w[p];
    }
  };
  // Rows two at a time (the second empty past the last row): their weights, their
  // chains side by side, then their terms in order.
  for (std::size_t s = first; s < last; s += 2) {
    otb_row_chains<T> one, two;
    for (otb_row_chains<T>* row : {&one, &two}) {
      const std::size_t r = row == &one ? s : s + 1;
      const std::size_t begin = r < last ? tokens.begin(r) : 0;
      row->rewards = a.rewards + begin;
      row->mask = a.mask != nullptr ? a.mask + begin : nullptr;
      row->returns = a.returns + begin;
      row->length = r < last ? tokens.length(r) : 0;
      row->gw = row_scratch + (row == &one ? 0 : 2 * longest);
      row->w = row->gw + longest;
      seen |= a.rho != nullptr ? otb_row_weights<true>(a, begin, row->length, row->w)
                               : otb_row_weights<false>(a, begin, row->length, row->w);
    }
    const std::size_t both = one.length < two.length ? one.length : two.length;
    for (std::size_t j = 0; j < both; ++j) {
      one.step(j);
      two.step(j);
    }
    for (std::size_t j = both; j < one.length; ++j) one.step(j);
    for (std::size_t j = both; j < two.length; ++j) two.step(j);
    add_row(s, one);
    if (s + 1 < last) add_row(s + 1, two);
  }
  // The baselines (0 for a group of one), in place of the sums of G W.
  for (std::size_t p = 0; p < extent; ++p)
    weighted[p] = lengths.members < 2 ? 0.0 : terms::otb_baseline({weighted[p], weight[p]},
                                                                  options.epsilon);
  const double* const baseline = weighted;
  const terms::otb_zero_tail tail = terms::otb_zero_tail_of(lengths, options.handle_zero_tail);
  // The advantages of every token (0 on masked ones), row by row: their returns are still
  // in cache.
  for (std::size_t s = first; s < last; ++s) {
    const std::size_t begin = tokens.begin(s), length = tokens.length(s);
    const T* const returns = a.returns + begin;
    T* const advantages = a.advantages + begin;
    if (multi_turn) {
      std::size_t k = 0;  // the token's rank among the valid ones
      for (std::size_t i = 0; i < length; ++i) {
        if (a.mask != nullptr && a.mask[begin + i] == 0) {
          advantages[i] = T(0);
          continue;
        }
        advantages[i] = terms::otb_advantage(
            returns[i], s == tail.row && k >= tail.from ? 0.0 : baseline[k], true);
        ++k;
      }
      continue;
    }
    // Single-turn: baseline 0 from the zero tail's start on (on its row only).
    const std::size_t from = s == tail.row && tail.from < length ? tail.from : length;
    // Every token's as if valid, then 0 on the masked ones: a select in the first loop
    // lets GCC move the conversions into a branch, which it does not if-convert under
    // -ftrapping-math (no vectorisation).
    for (std::size_t p = 0; p < from; ++p)
      advantages[p] = terms::otb_advantage(returns[p], baseline[p], true);
    for (std::size_t p = from; p < length; ++p)
      advantages[p] = terms::otb_advantage(returns[p], 0.0, true);
    if (a.mask != nullptr) {
      const std::uint8_t* const row_mask = a.mask + begin;
      for (std::size_t p = 0; p < length; ++p)
        advantages[p] = row_mask[p] != 0 ? advantages[p] : T(0);
    }
  }
  if (scratch.size() > kept_scratch) std::vector<double>().swap(scratch);
  return seen;
}

}  // namespace detail

// Advantages (0 on masked tokens) and returns (on every token). Inputs must be finite on
// valid tokens; a non-finite one is found while the work runs, and only then are the
// inputs checked in turn to name it, so the outputs are written (with garbage) when it
// throws, as the losses write grad_out.
template <exec::host_policy Policy, contiguous_output Out>
void optimal_token_baseline_advantages(
    const Policy& policy, const group_layout& groups, const token_layout& tokens,
    const optimal_token_baseline_inputs<output_value_t<Out>>& inputs, Out&& advantages_out,
    std::type_identity_t<std::span<output_value_t<Out>>> returns,
    const optimal_token_baseline_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  const std::size_t n = tokens.tokens();
  detail::require_otb_options(options);
  groups.require_sequences(tokens.sequences(), "tokens");
  detail::require_size(inputs.token_rewards.size(), n, "token_rewards", "one per token");
  detail::require_size(inputs.old_log_probs.size(), n, "old_log_probs", "one per token");
  detail::require_size(inputs.sum_pi_squared.size(), n, "sum_pi_squared", "one per token");
  const bool weighted = !inputs.rollout_is_weights.empty();
  if (weighted)
    detail::require_size(inputs.rollout_is_weights.size(), n, "rollout_is_weights",
                         "one per token, or none");
  detail::require_size(advantages.size(), n, "advantages", "one per token");
  detail::require_size(returns.size(), n, "returns", "one per token");

  // One task per group (a group is thousands of tokens: worth a task even when there are
  // few groups), each doing its rows' sequence passes and then its group pass on data
  // still in cache, with scratch per thread the size of its longest row: no per-token
  // arrays. Four checks, an array of 8 bytes per token and separate sequence and group
  // passes took about 8x this time at 16M tokens.
  const detail::otb_host_arrays<T> arrays{
      inputs.token_rewards.data(), inputs.old_log_probs.data(), inputs.sum_pi_squared.data(),
      weighted ? inputs.rollout_is_weights.data() : nullptr,
      tokens.has_mask() ? tokens.mask().data() : nullptr, returns.data(), advantages.data()};
  std::vector<std::uint8_t> nonfinite(groups.groups(), 0);
  detail::for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        nonfinite[g] = static_cast<std::uint8_t>(
            detail::otb_host_group(tokens, groups.begin(g), groups.end(g), arrays, options));
      },
      /*min_parallel=*/2);
  // Only when a group noted a non-finite input on a valid token: the checks, in the
  // order of the arguments, name the first one and its first bad index.
  if (std::find(nonfinite.begin(), nonfinite.end(), std::uint8_t{1}) != nonfinite.end()) {
    detail::require_finite_where_valid(policy, inputs.token_rewards, tokens, "token_rewards");
    detail::require_finite_where_valid(policy, inputs.old_log_probs, tokens, "old_log_probs");
    detail::require_finite_where_valid(policy, inputs.sum_pi_squared, tokens, "sum_pi_squared");
    if (weighted)
      detail::require_finite_where_valid(policy, inputs.rollout_is_weights, tokens,
                                         "rollout_is_weights");
  }
}

}  // namespace cascade_rl
