// The CUDA runtime functions the kernels and tests/cuda/test_executors.cu call, on host
// memory, for the cuda_emulated test. Streams are not modelled: every operation is done
// when its call returns, which is one valid order of a stream's work.

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace {

cudaError_t last_error = cudaSuccess;

cudaError_t record(cudaError_t status) {
  if (status != cudaSuccess) last_error = status;
  return status;
}

// Aligned as cudaMalloc's (256 bytes; the kernels rely on 16), but exactly `bytes` long,
// so that AddressSanitizer reports a kernel's access past the end, which the padding of
// a real allocation would hide.
void* allocate(std::size_t bytes) {
  void* pointer = nullptr;
  return posix_memalign(&pointer, 256, bytes == 0 ? 1 : bytes) == 0 ? pointer : nullptr;
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** pointer, std::size_t bytes) {
  *pointer = allocate(bytes);
  return *pointer != nullptr ? cudaSuccess : record(cudaErrorMemoryAllocation);
}

cudaError_t CUDARTAPI cudaMallocAsync(void** pointer, std::size_t bytes, cudaStream_t) {
  return cudaMalloc(pointer, bytes);
}

cudaError_t CUDARTAPI cudaFree(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeAsync(void* pointer, cudaStream_t) { return cudaFree(pointer); }

cudaError_t CUDARTAPI cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memcpy(to, from, bytes);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                                      cudaStream_t) {
  return cudaMemcpy(to, from, bytes, kind);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t) {
  if (bytes > 0) std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaGetLastError() {
  const cudaError_t status = last_error;
  last_error = cudaSuccess;
  return status;
}

cudaError_t CUDARTAPI cudaPeekAtLastError() { return last_error; }

const char* CUDARTAPI cudaGetErrorName(cudaError_t status) {
  switch (status) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaError (not emulated)";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t status) {
  if (status == cudaErrorLaunchFailure && !cascade_rl_cuda_emulator::last_launch_error().empty())
    return cascade_rl_cuda_emulator::last_launch_error().c_str();
  return cudaGetErrorName(status);
}

}  // extern "C"
