#pragma once
// The portable path: every device algorithm written with Thrust algorithms and the
// per-element formulas of detail/math.hpp, for any Thrust system. Under the CPP and OMP
// systems (a g++ build with -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP or _OMP)
// it runs on the host and the test suite checks it against exec::seq without a GPU;
// under nvcc it runs on the device with thrust::cuda::par.on(stream).
//
// It keeps the host core's structure: groups and rows are reduced sequentially one
// per Thrust work item, token sums over fixed blocks of detail::reduce_block_size
// tokens in the canonical order (core/canonical_sum.hpp). Under CPP and OMP it
// therefore gives the same bits as exec::seq for any thread count. The CUB kernels
// (*.cuh) are the fast path; this one is the reference that runs everywhere.
//
// Pointers are in the memory of the policy's system. Inputs are not validated here
// (the convenience layer over the CUB path does that; the advantage estimators throw
// cascade_rl::error, with the host core's message, only for options the host core
// refuses); callers own every buffer. One operation per file, in portable/.

#include "cascade_rl/cuda/portable/broadcast.hpp"
#include "cascade_rl/cuda/portable/bypass_mode.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/covariance_losses.hpp"
#include "cascade_rl/cuda/portable/distillation_advantages.hpp"
#include "cascade_rl/cuda/portable/gae_advantages.hpp"
#include "cascade_rl/cuda/portable/gdpo_advantages.hpp"
#include "cascade_rl/cuda/portable/gpg_advantages.hpp"
#include "cascade_rl/cuda/portable/group_advantages.hpp"
#include "cascade_rl/cuda/portable/group_filter.hpp"
#include "cascade_rl/cuda/portable/grpo_passk_advantages.hpp"
#include "cascade_rl/cuda/portable/log_probs.hpp"
#include "cascade_rl/cuda/portable/opo_advantages.hpp"
#include "cascade_rl/cuda/portable/optimal_token_baseline.hpp"
#include "cascade_rl/cuda/portable/reinforce_plus_plus.hpp"
#include "cascade_rl/cuda/portable/remax_advantages.hpp"
#include "cascade_rl/cuda/portable/rollout_correction.hpp"
#include "cascade_rl/cuda/portable/sequence_ratio_losses.hpp"
#include "cascade_rl/cuda/portable/token_losses.hpp"
#include "cascade_rl/cuda/portable/token_reduction.hpp"
#include "cascade_rl/cuda/portable/whitening.hpp"
