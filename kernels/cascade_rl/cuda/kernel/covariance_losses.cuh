#pragma once
// The kernels of the covariance-selection losses (Clip-Cov, KL-Cov). Each step is a
// functor of detail/covariance_terms.hpp run by detail::for_each_kernel (one thread per
// block of reduce_block_size tokens for the canonical sums, one for their totals, one per
// token for the keys and the marking), the same functors the portable Thrust path runs, so
// the selection is the host's; each loss is detail::token_loss_kernel over its term
// (clip_cov_term, kl_cov_term). The sort between the keys and the marking is CUB's
// (device/covariance_losses.cuh).

#include "cascade_rl/cuda/detail/covariance_terms.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/kernel/token_losses.cuh"
