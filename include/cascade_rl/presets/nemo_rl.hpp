#pragma once
// Options that reproduce NeMo-RL's conventions (nemo_rl/algorithms/loss/loss_functions.py,
// advantage_estimator.py), checked against tests/reference/trl_nemo_rl.json by the test
// suite: ClippedPGLossFn (nemo_rl_losses.hpp) and the advantage estimators
// (nemo_rl_advantages.hpp), and its sequence-level log-prob error masking
// (nemo_rl_filters.hpp).

#include "cascade_rl/presets/nemo_rl_advantages.hpp"
#include "cascade_rl/presets/nemo_rl_filters.hpp"
#include "cascade_rl/presets/nemo_rl_losses.hpp"
