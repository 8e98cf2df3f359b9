// The engine's step losses, compiled once for the repository's own tests and examples
// (cmake/engine.cmake): every other translation unit that includes the engine
// sees them declared extern (CASCADE_RL_COMPILED_STEP_LOSSES) and does not instantiate
// them again. See include/cascade_rl/cascade/step_losses.hpp.
#define CASCADE_RL_INSTANTIATE_STEP_LOSSES 1
#include "cascade_rl/cascade/step_losses.hpp"
