#pragma once
// Per-sequence values onto tokens on the portable path: broadcast_to_tokens and
// place_on_last_valid_token, one Thrust work item per sequence.

#include "cascade_rl/cuda/portable/common.hpp"

namespace cascade_rl::cuda::portable::detail {

template <class T>
struct broadcast_functor {
  const T* per_sequence;
  device_token_layout layout;
  T* per_token;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      per_token[t] = layout.valid(t) ? per_sequence[s] : T(0);
  }
};

template <class T>
struct place_on_last_functor {
  const T* per_sequence;
  device_token_layout layout;
  T* per_token;
  CASCADE_RL_HD void operator()(std::size_t s) const {
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
  detail::for_each_index(exec, layout.sequences,
                         detail::broadcast_functor<T>{per_sequence, layout, per_token});
}

// A sequence with no valid token gets zeros (the host core and the CUDA layer refuse it).
template <class ExecPolicy, class T>
void place_on_last_valid_token(ExecPolicy&& exec, const T* per_sequence,
                               const device_token_layout& layout, T* per_token) {
  detail::for_each_index(exec, layout.sequences,
                         detail::place_on_last_functor<T>{per_sequence, layout, per_token});
}

}  // namespace cascade_rl::cuda::portable
