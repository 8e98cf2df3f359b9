#pragma once
// The kernels of the rollout correction: the functors of detail/rollout_correction_terms.hpp
// run by detail::for_each_kernel (one thread per row for the pre-pass and the token pass,
// one per canonical block of reduce_block_size tokens for the channel sums), the same
// functors the portable Thrust path runs, so the results are the host's.

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/rollout_correction_terms.hpp"
