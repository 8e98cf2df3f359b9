#pragma once
// Options that reproduce veRL's conventions (verl/trainer/ppo/core_algos.py), checked
// against tests/reference/verl_core_algos.json by the test suite, and the lookup of them
// by veRL's own config names (verl_names.hpp).

#include "cascade_rl/presets/verl_advantages.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "cascade_rl/presets/verl_names.hpp"
