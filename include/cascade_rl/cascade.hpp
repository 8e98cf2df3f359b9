#pragma once
// Umbrella header of the cascade engine (target cascade_rl::cascade, which adds
// nlohmann_json and threads to the standard-library-only core): concepts, stage
// configs and schedules (also as JSON files), GRPO and MOPD stages (and a stage's own
// evaluation reward), the cascade runner, teachers, the forgetting matrix, checkpoints
// and observers.

#include "cascade_rl/cascade_rl.hpp"

#include "cascade_rl/cascade/agentic_stage.hpp"
#include "cascade_rl/cascade/atomic_file.hpp"
#include "cascade_rl/cascade/checkpoint.hpp"
#include "cascade_rl/cascade/composition.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/environment.hpp"
#include "cascade_rl/cascade/episode_driver.hpp"
#include "cascade_rl/cascade/episode_summary.hpp"
#include "cascade_rl/cascade/estimators.hpp"
#include "cascade_rl/cascade/eval_reward.hpp"
#include "cascade_rl/cascade/evaluation.hpp"
#include "cascade_rl/cascade/forgetting_matrix.hpp"
#include "cascade_rl/cascade/grpo_stage.hpp"
#include "cascade_rl/cascade/log_prob_drift.hpp"
#include "cascade_rl/cascade/lr_schedule.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/mopd_stage.hpp"
#include "cascade_rl/cascade/observer_list.hpp"
#include "cascade_rl/cascade/observers.hpp"
#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/cascade/prompt_pool.hpp"
#include "cascade_rl/cascade/rewards.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/runner.hpp"
#include "cascade_rl/cascade/schedules.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/stage_config_json.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"
#include "cascade_rl/cascade/turn_policy.hpp"
#include "cascade_rl/cascade/worker_pool.hpp"
