#pragma once
// Stands in for <cuda_runtime.h> in the cuda_emulated test (tests/cuda/tests.cmake puts
// this directory first on the include path): the kernels of kernels/cascade_rl/cuda,
// compiled by the host compiler, run on the CPU through emulator.hpp. The CUDA toolkit's
// own headers still provide the types and the runtime API's declarations; runtime.cpp
// defines the functions the kernels and the tests call, on host memory.

// Before the toolkit's host_defines.h: shared memory becomes a function-local static,
// which every fiber of a block sees (blocks run one at a time); launch bounds go.
#define __shared__ static
#define __launch_bounds__(...)
#define CASCADE_RL_CUDA_EMULATOR 1

#include <cuda_runtime_api.h>  // IWYU pragma: export

#include <cstddef>

#include "emulator.hpp"  // IWYU pragma: export

// The typed overload of <cuda_runtime.h>, which the tests use.
template <class T>
cudaError_t cudaMalloc(T** pointer, std::size_t bytes) {
  return ::cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
