#pragma once
// Options that reproduce TRL's GRPOTrainer conventions (trl/trainer/grpo_trainer.py),
// checked against tests/reference/trl_nemo_rl.json by the test suite: the loss
// (trl_losses.hpp) and the advantages (trl_advantages.hpp).

#include "cascade_rl/presets/trl_advantages.hpp"
#include "cascade_rl/presets/trl_losses.hpp"
