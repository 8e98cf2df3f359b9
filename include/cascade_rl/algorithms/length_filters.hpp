#pragma once
// Overlong responses: a response cut at the length limit has no final answer, so its
// reward says more about the limit than about the reasoning. Three treatments, one
// per overlong_mode (DAPO, Yu et al. 2025, sec. 3.4 "Overlong Reward Shaping"):
//   drop:          the sequence leaves the batch          (drop_overlong)
//   mask:          its tokens' loss mask is zeroed        (mask_overlong; DAPO's
//                  "overlong filtering")
//   soft_penalty:  a length penalty is added to its reward (add_soft_overlong_penalty;
//                  DAPO's "soft overlong punishment"):
//       0                                  if L <= L_max - L_cache
//       ((L_max - L_cache) - L) / L_cache * factor   if L_max - L_cache < L <= L_max
//       -factor                            if L > L_max
// A sequence is overlong when L > max_length, or when the sampler reports it
// truncated (finish reason "length") and truncated_is_overlong is set. Under the soft
// penalty a truncated sequence gets the full -factor.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"  // detail::sequence_parallel_threshold
#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/length_filters.hpp"

namespace cascade_rl {

// Soft penalty of one length (options already checked).
[[nodiscard]] inline double soft_overlong_penalty(std::int64_t length, bool truncated,
                                                  const overlong_options& options) {
  const std::int64_t expected = options.max_length - options.buffer_length;
  if (length > options.max_length || (truncated && options.truncated_is_overlong))
    return -options.penalty_factor;
  if (length <= expected) return 0.0;
  return static_cast<double>(expected - length) / static_cast<double>(options.buffer_length) *
         options.penalty_factor;
}

namespace detail {

inline void require_overlong_options(const overlong_options& options, bool soft) {
  if (options.max_length <= 0)
    fail("max_length", "must be > 0, got " + std::to_string(options.max_length));
  if (!soft) return;
  if (options.buffer_length <= 0 || options.buffer_length > options.max_length)
    fail("buffer_length", "must lie in (0, max_length = " + std::to_string(options.max_length) +
                              "], got " + std::to_string(options.buffer_length));
  if (!(options.penalty_factor >= 0.0) || !std::isfinite(options.penalty_factor))
    fail("penalty_factor", "must be finite and >= 0, got " + std::to_string(options.penalty_factor));
}

// Sizes and non-negative lengths; `truncated` is empty or one flag per sequence.
inline void require_lengths(std::span<const std::int64_t> lengths,
                            std::span<const std::uint8_t> truncated, std::size_t sequences) {
  require_size(lengths.size(), sequences, "lengths", "one per sequence");
  if (!truncated.empty())
    require_size(truncated.size(), sequences, "truncated", "one per sequence, or empty");
  for (std::size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] < 0) fail_at("lengths", i, "is negative: " + std::to_string(lengths[i]));
}

inline bool is_overlong(std::span<const std::int64_t> lengths,
                        std::span<const std::uint8_t> truncated, std::size_t i,
                        const overlong_options& options) {
  return lengths[i] > options.max_length ||
         (options.truncated_is_overlong && !truncated.empty() && truncated[i] != 0);
}

}  // namespace detail

// flags[i] = 1 where sequence i is overlong; returns how many are.
template <exec::host_policy Policy>
std::size_t overlong_sequences(const Policy& policy, std::span<const std::int64_t> lengths,
                               std::span<const std::uint8_t> truncated,
                               std::span<std::uint8_t> flags, const overlong_options& options) {
  detail::require_overlong_options(options, false);
  detail::require_lengths(lengths, truncated, lengths.size());
  detail::require_size(flags.size(), lengths.size(), "flags", "one per sequence");
  return detail::blocked_reduce(
      policy, lengths.size(), std::size_t{0},
      [&](std::size_t& count, std::size_t i) {
        flags[i] = detail::is_overlong(lengths, truncated, i, options) ? 1 : 0;
        count += flags[i];
      },
      [](std::size_t& total, std::size_t part) { total += part; });
}

// mode drop: the selection without the overlong sequences (groups left empty drop).
template <exec::host_policy Policy>
group_selection drop_overlong(const Policy& policy, std::span<const std::int64_t> lengths,
                              std::span<const std::uint8_t> truncated, const group_layout& groups,
                              const overlong_options& options) {
  groups.require_sequences(lengths.size(), "lengths");
  std::vector<std::uint8_t> keep(lengths.size());
  overlong_sequences(policy, lengths, truncated, std::span<std::uint8_t>(keep), options);
  for (auto& k : keep) k = k != 0 ? 0 : 1;
  return select_sequences(groups, keep);
}

// mode mask: zeroes mask[t] over every token of an overlong sequence (`mask` is the
// caller's writable loss mask over `tokens`; it may be the one the layout views).
// Returns the number of sequences masked.
template <exec::host_policy Policy>
std::size_t mask_overlong(const Policy& policy, std::span<const std::int64_t> lengths,
                          std::span<const std::uint8_t> truncated, const token_layout& tokens,
                          std::span<std::uint8_t> mask, const overlong_options& options) {
  detail::require_overlong_options(options, false);
  detail::require_lengths(lengths, truncated, tokens.sequences());
  detail::require_size(mask.size(), tokens.tokens(), "mask", "one per token");
  std::size_t masked = 0;
  for (std::size_t s = 0; s < lengths.size(); ++s)
    masked += detail::is_overlong(lengths, truncated, s, options) ? 1 : 0;
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        if (!detail::is_overlong(lengths, truncated, s, options)) return;
        for (std::size_t t = tokens.begin(s); t < tokens.end(s); ++t) mask[t] = 0;
      },
      detail::sequence_parallel_threshold);
  return masked;
}

// mode soft_penalty: rewards[i] += soft_overlong_penalty(lengths[i]).
template <exec::host_policy Policy, std::floating_point T>
void add_soft_overlong_penalty(const Policy& policy, std::span<const std::int64_t> lengths,
                               std::span<const std::uint8_t> truncated, std::span<T> rewards,
                               const overlong_options& options) {
  detail::require_overlong_options(options, true);
  detail::require_lengths(lengths, truncated, lengths.size());
  detail::require_size(rewards.size(), lengths.size(), "rewards", "one per sequence");
  detail::for_each_index(policy, lengths.size(), [&](std::size_t i) {
    const bool cut = !truncated.empty() && truncated[i] != 0;
    rewards[i] = static_cast<T>(static_cast<double>(rewards[i]) +
                                soft_overlong_penalty(lengths[i], cut, options));
  });
}

// What apply_overlong did: the selection (every sequence kept unless mode is drop)
// and how many sequences were overlong.
struct overlong_report {
  group_selection selection;
  std::size_t overlong = 0;
};

// Applies options.mode. Spans a mode does not touch may be empty: `mask` is needed
// for mask, `rewards` for soft_penalty.
template <exec::host_policy Policy, std::floating_point T>
overlong_report apply_overlong(const Policy& policy, std::span<const std::int64_t> lengths,
                               std::span<const std::uint8_t> truncated,
                               const group_layout& groups, const token_layout& tokens,
                               std::span<std::uint8_t> mask, std::span<T> rewards,
                               const overlong_options& options) {
  groups.require_sequences(lengths.size(), "lengths");
  overlong_report report;
  std::vector<std::uint8_t> flags(lengths.size());
  report.overlong =
      overlong_sequences(policy, lengths, truncated, std::span<std::uint8_t>(flags), options);
  switch (options.mode) {
    case overlong_mode::drop:
      report.selection = drop_overlong(policy, lengths, truncated, groups, options);
      return report;
    case overlong_mode::mask:
      mask_overlong(policy, lengths, truncated, tokens, mask, options);
      break;
    case overlong_mode::soft_penalty:
      add_soft_overlong_penalty(policy, lengths, truncated, rewards, options);
      break;
  }
  std::vector<std::uint8_t> keep_all(lengths.size(), 1);
  report.selection = select_sequences(groups, keep_all);
  return report;
}

}  // namespace cascade_rl
