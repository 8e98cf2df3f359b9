// The GPU tests (test_executors.cu) built by the host compiler and run on the CPU
// emulator (tests/cuda/emulator): every kernel of kernels/cascade_rl/cuda runs against
// the host executors on a machine without a GPU, with divergent collectives refused.
// The emulator's runtime first, before <cuda_bf16.h> brings the toolkit's definitions.
#include <cuda_runtime.h>

#include "test_executors.cu"  // NOLINT(bugprone-suspicious-include)
