#pragma once
// The CUDA executors of cascade_rl (exec::cuda): include from a .cu file compiled by nvcc.
// The portable Thrust path (portable.hpp, with portable_tokens.hpp) also compiles with a
// host compiler.

#include "cascade_rl/cuda/broadcast.cuh"
#include "cascade_rl/cuda/bypass_mode.cuh"
#include "cascade_rl/cuda/covariance_losses.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/distillation_advantages.cuh"
#include "cascade_rl/cuda/gae_advantages.cuh"
#include "cascade_rl/cuda/gdpo_advantages.cuh"
#include "cascade_rl/cuda/gpg_advantages.cuh"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/group_filter.cuh"
#include "cascade_rl/cuda/grpo_passk_advantages.cuh"
#include "cascade_rl/cuda/log_probs.cuh"
#include "cascade_rl/cuda/opo_advantages.cuh"
#include "cascade_rl/cuda/optimal_token_baseline.cuh"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/cuda/policy_loss.cuh"
#include "cascade_rl/cuda/portable.hpp"
#include "cascade_rl/cuda/reinforce_plus_plus.cuh"
#include "cascade_rl/cuda/remax_advantages.cuh"
#include "cascade_rl/cuda/rollout_correction.cuh"
#include "cascade_rl/cuda/sequence_ratio_losses.cuh"
#include "cascade_rl/cuda/token_losses.cuh"
#include "cascade_rl/cuda/tuning.hpp"
