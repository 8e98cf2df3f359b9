#pragma once
// Umbrella header of cascade_rl::verify (Linux): the sandbox, the verification pool,
// the unified-diff applier, the unit-test and patch-and-test rewards, and the workspace
// and SWE environment of an agentic episode.

#include "cascade_rl/verify/extract.hpp"
#include "cascade_rl/verify/isolation.hpp"
#include "cascade_rl/verify/patch_test_reward.hpp"
#include "cascade_rl/verify/pool.hpp"
#include "cascade_rl/verify/run_result.hpp"
#include "cascade_rl/verify/sandbox.hpp"
#include "cascade_rl/verify/sandbox_options.hpp"
#include "cascade_rl/verify/scratch_directory.hpp"
#include "cascade_rl/verify/swe_environment.hpp"
#include "cascade_rl/verify/unified_diff.hpp"
#include "cascade_rl/verify/unit_test_reward.hpp"
#include "cascade_rl/verify/workspace.hpp"
