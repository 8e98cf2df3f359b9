#pragma once
// NeMo-RL's sequence-level log-prob error masking (grpo.py,
// compute_and_apply_seq_logprob_error_masking, at commit 7ea279ab); checked against
// tests/reference/trl_nemo_rl.json (nemo_rl.seq_logprob_error_masking).
//
// Each sequence's multiplicative probability error is the mean over its valid tokens
// (token_mask * sample_mask) of exp(|generation_logprobs - prev_logprobs|); with a
// threshold, a sample whose error exceeds it leaves sample_mask (the loss's layout then
// drops its tokens and global_valid_toks / _seqs shrink). Host code of the preset: a
// per-sequence statistic and a mask, no loss.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl::presets::nemo_rl {

// The metrics NeMo returns, by its names.
struct seq_logprob_error_metrics {
  double max_seq_mult_prob_error = 0;
  double mean_seq_mult_prob_error = 0;
  double min_seq_mult_prob_error = 0;
  double max_seq_mult_prob_error_after_mask = 0;
  double mean_seq_mult_prob_error_after_mask = 0;
  double min_seq_mult_prob_error_after_mask = 0;
  std::size_t num_masked_seqs = 0;
  double masked_correct_pct = 0;  // of the masked samples, the share with reward == 1
};

// Computes the errors over `tokens` (one sequence per sample; its mask token_mask, the
// samples' mask apart in sample_mask, 0 or 1 each) and, with a threshold, clears
// sample_mask where the error exceeds it. rewards: one per sample.
template <std::floating_point T>
seq_logprob_error_metrics seq_logprob_error_masking(const token_layout& tokens,
                                                    std::span<const T> prev_logprobs,
                                                    std::span<const T> generation_logprobs,
                                                    std::span<const T> rewards,
                                                    std::span<T> sample_mask,
                                                    std::optional<double> threshold) {
  const std::size_t n = tokens.sequences();
  cascade_rl::detail::require_size(prev_logprobs.size(), tokens.tokens(), "prev_logprobs",
                                   "one per token");
  cascade_rl::detail::require_size(generation_logprobs.size(), tokens.tokens(),
                                   "generation_logprobs", "one per token");
  cascade_rl::detail::require_size(rewards.size(), n, "rewards", "one per sample");
  cascade_rl::detail::require_size(sample_mask.size(), n, "sample_mask", "one per sample");
  std::vector<double> error(n, 0.0);
  std::vector<bool> valid(n, false);
  for (std::size_t s = 0; s < n; ++s) {
    if (!(static_cast<double>(sample_mask[s]) != 0.0)) continue;
    double sum = 0;
    std::size_t count = 0;
    for (std::size_t t = tokens.begin(s); t < tokens.end(s); ++t) {
      if (!tokens.valid(t)) continue;
      sum += std::exp(std::abs(static_cast<double>(generation_logprobs[t]) -
                               static_cast<double>(prev_logprobs[t])));
      ++count;
    }
    if (count == 0) continue;
    valid[s] = true;
    error[s] = sum / static_cast<double>(count);
  }
  const auto summarise = [&](const std::vector<bool>& kept, double& max, double& mean,
                             double& min) {
    std::size_t count = 0;
    double sum = 0;
    for (std::size_t s = 0; s < n; ++s) {
      if (!kept[s]) continue;
      max = count == 0 ? error[s] : std::max(max, error[s]);
      min = count == 0 ? error[s] : std::min(min, error[s]);
      sum += error[s];
      ++count;
    }
    mean = count == 0 ? 0.0 : sum / static_cast<double>(count);
    if (count == 0) max = min = 0.0;
  };
  seq_logprob_error_metrics m;
  summarise(valid, m.max_seq_mult_prob_error, m.mean_seq_mult_prob_error,
            m.min_seq_mult_prob_error);
  m.max_seq_mult_prob_error_after_mask = m.max_seq_mult_prob_error;
  m.mean_seq_mult_prob_error_after_mask = m.mean_seq_mult_prob_error;
  m.min_seq_mult_prob_error_after_mask = m.min_seq_mult_prob_error;
  if (!threshold) return m;
  std::vector<bool> kept(n, false);
  std::size_t correct = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const bool in_sample = static_cast<double>(sample_mask[s]) != 0.0;
    const bool keep = in_sample && error[s] <= *threshold;
    if (in_sample && !keep) {
      ++m.num_masked_seqs;
      correct += static_cast<double>(rewards[s]) == 1.0;
    }
    kept[s] = keep && valid[s];
    sample_mask[s] = keep ? T(1) : T(0);
  }
  if (m.num_masked_seqs > 0)
    m.masked_correct_pct = static_cast<double>(correct) / static_cast<double>(m.num_masked_seqs);
  summarise(kept, m.max_seq_mult_prob_error_after_mask, m.mean_seq_mult_prob_error_after_mask,
            m.min_seq_mult_prob_error_after_mask);
  return m;
}

}  // namespace cascade_rl::presets::nemo_rl
