#pragma once
// The rollout correction's passes as functors over a device_token_layout (one work item
// per row, or per canonical block of tokens), for the Thrust path (portable.hpp) and the
// CUDA kernels (device/rollout_correction.cuh): the host's code
// (terms/rollout_correction_passes.hpp), the host's order.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/rollout_correction_passes.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
struct rollout_prepass_functor {
  terms::rollout_correction_params params;
  device_token_layout layout;
  const T* log_probs;
  const T* rollout_log_probs;
  double* row;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    terms::rollout_row_prepass(params, log_probs, rollout_log_probs, layout.mask, layout.begin(s),
                               layout.end(s), s, layout.sequences, row);
  }
};

template <class T>
struct rollout_tokens_functor {
  terms::rollout_correction_params params;
  device_token_layout layout;
  const T* log_probs;
  const T* rollout_log_probs;
  double* row;
  double factor;
  T* weights;
  std::uint8_t* keep;
  std::size_t* row_of;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    terms::rollout_row_tokens(params, log_probs, rollout_log_probs, layout.mask, layout.begin(s),
                              layout.end(s), s, layout.sequences, row, factor, weights, keep,
                              row_of);
  }
};

// Block b's canonical sum of every channel (token t in lane (t - first) mod 32, the tree
// fold) and its extremes.
template <class T>
struct rollout_block_functor {
  terms::rollout_correction_params params;
  device_token_layout layout;
  const T* log_probs;
  const T* rollout_log_probs;
  const double* row;
  const std::size_t* row_of;
  double* block_sums;
  double* block_extremes;
  CASCADE_RL_HD void operator()(std::size_t b) const {
    constexpr int channels = terms::rollout_channels;
    constexpr int extremes = terms::rollout_extremes;
    const int active = terms::rollout_active_channels(params);
    const std::size_t first = b * cascade_rl::detail::reduce_block_size;
    const std::size_t last = first + cascade_rl::detail::reduce_block_size < layout.tokens
                                 ? first + cascade_rl::detail::reduce_block_size
                                 : layout.tokens;
    double lanes[channels][cascade_rl::detail::reduce_lanes] = {};
    double e[extremes];
    for (int c = 0; c < extremes; c += 2) {
      e[c] = -INFINITY;
      e[c + 1] = INFINITY;
    }
    for (std::size_t t = first; t < last; ++t) {
      double v[channels];
      double x[extremes];
      terms::rollout_token_channels(params, log_probs, rollout_log_probs, layout.mask, row,
                                    layout.sequences, row_of, t, v, x);
      for (int c = 0; c < active; ++c)
        lanes[c][(t - first) % cascade_rl::detail::reduce_lanes] += v[c];
      terms::rollout_join_extremes(e, x);
    }
    // The unconfigured criteria's channels are zeros: their sums are +0.0.
    for (int c = 0; c < channels; ++c)
      block_sums[b * channels + static_cast<std::size_t>(c)] =
          c < active ? cascade_rl::detail::fold_lanes(lanes[c], cascade_rl::detail::plus{}) : 0.0;
    for (int c = 0; c < extremes; ++c)
      block_extremes[b * extremes + static_cast<std::size_t>(c)] = e[c];
  }
};

}  // namespace cascade_rl::cuda::detail
