#pragma once
// Umbrella header: everything of the host library.

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"

// Advantages, group statistics and filters.
#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"

// Policy losses, aggregation, KL estimators, log-probs from logits. (The fused
// linear -> log-prob path needs Eigen: include algorithms/fused_linear_log_probs.hpp.)
#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/entropy_loss.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/log_probs.hpp"
#include "cascade_rl/algorithms/log_probs_backward.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/algorithms/token_loss_terms.hpp"

// Presets reproducing peer frameworks' conventions.
#include "cascade_rl/presets/nemo_rl.hpp"
#include "cascade_rl/presets/trl.hpp"
#include "cascade_rl/presets/verl.hpp"
