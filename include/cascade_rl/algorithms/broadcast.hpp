#pragma once
// Moving per-sequence values onto a token layout and back.
//   broadcast_to_tokens:        every valid token of sequence i gets v_i, masked ones 0
//                               (an outcome advantage as a [N, T] token advantage).
//   place_on_last_valid_token:  v_i on the last valid token of sequence i, 0 elsewhere
//                               (veRL's token_level_rewards: the score sits on the
//                               response's last token, so that token_level_rewards
//                               .sum(-1) gives it back and returns can be discounted).

#include <concepts>
#include <cstddef>
#include <span>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl {

namespace detail {
// Sequences are as cheap as a few tokens each to fill; parallelise over many only.
inline constexpr std::size_t sequence_parallel_threshold = 64;
}  // namespace detail

template <exec::host_policy Policy, contiguous_output Out>
void broadcast_to_tokens(const Policy& policy, const token_layout& tokens,
                         std::span<const output_value_t<Out>> per_sequence, Out&& per_token_out) {
  using T = output_value_t<Out>;
  const std::span<T> per_token = output_span(per_token_out);
  detail::require_size(per_sequence.size(), tokens.sequences(), "per_sequence",
                       "one per sequence of the token layout");
  detail::require_size(per_token.size(), tokens.tokens(), "per_token",
                       "one per token of the token layout");
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        for (std::size_t t = tokens.begin(s); t < tokens.end(s); ++t)
          per_token[t] = tokens.valid(t) ? per_sequence[s] : T(0);
      },
      detail::sequence_parallel_threshold);
}

// Refuses a sequence with no valid token: its value would be lost silently.
template <exec::host_policy Policy, contiguous_output Out>
void place_on_last_valid_token(const Policy& policy, const token_layout& tokens,
                               std::span<const output_value_t<Out>> per_sequence,
                               Out&& per_token_out) {
  using T = output_value_t<Out>;
  const std::span<T> per_token = output_span(per_token_out);
  detail::require_size(per_sequence.size(), tokens.sequences(), "per_sequence",
                       "one per sequence of the token layout");
  detail::require_size(per_token.size(), tokens.tokens(), "per_token",
                       "one per token of the token layout");
  for (std::size_t s = 0; s < tokens.sequences(); ++s)
    if (tokens.valid_tokens(s) == 0)
      detail::fail_at("per_sequence", s, "belongs to a sequence with no valid token to carry it");
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        bool placed = false;
        for (std::size_t t = tokens.end(s); t-- > tokens.begin(s);) {
          const bool here = !placed && tokens.valid(t);
          per_token[t] = here ? per_sequence[s] : T(0);
          placed = placed || here;
        }
      },
      detail::sequence_parallel_threshold);
}

}  // namespace cascade_rl
