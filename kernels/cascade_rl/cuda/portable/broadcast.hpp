#pragma once
// Per-sequence values onto tokens on the portable path: broadcast_to_tokens and
// place_on_last_valid_token, one Thrust work item per sequence.

#include "cascade_rl/cuda/portable/common.hpp"

namespace cascade_rl::cuda::portable::detail {

// broadcast_to_tokens, one sequence (for_each_sequence).
template <class T>
struct broadcast_rule {
  const T* per_sequence;
  T* per_token;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    fill_valid_tokens(layout, s, per_sequence[s], per_token);
  }
};

// place_on_last_valid_token, one sequence (for_each_sequence): its tokens walked backwards.
template <class T>
struct place_on_last_rule {
  const T* per_sequence;
  T* per_token;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    bool placed = false;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const bool here = !placed && layout.valid(t);
      per_token[t] = here ? per_sequence[s] : T(0);
      placed = placed || here;
    }
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

template <class ExecPolicy, class T>
void broadcast_to_tokens(ExecPolicy&& exec, const T* per_sequence, const device_token_layout& layout,
                         T* per_token) {
  detail::for_each_sequence(exec, layout, detail::broadcast_rule<T>{per_sequence, per_token});
}

// A sequence with no valid token gets zeros (the host core and the CUDA layer refuse it).
template <class ExecPolicy, class T>
void place_on_last_valid_token(ExecPolicy&& exec, const T* per_sequence,
                               const device_token_layout& layout, T* per_token) {
  detail::for_each_sequence(exec, layout, detail::place_on_last_rule<T>{per_sequence, per_token});
}

}  // namespace cascade_rl::cuda::portable
