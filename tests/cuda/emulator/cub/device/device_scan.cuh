#pragma once
// cub::DeviceScan::InclusiveSum for the cuda_emulated test: the same contract (a size
// query with null temporary storage, then the scan), done in a loop.

#include <cuda_runtime.h>

#include <cstddef>
#include <iterator>

namespace cub {

struct DeviceScan {
  template <class In, class Out, class N>
  static cudaError_t InclusiveSum(void* d_temp_storage, std::size_t& temp_storage_bytes, In in, Out out,
                                  N num_items, cudaStream_t = nullptr) {
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = 1;
      return cudaSuccess;
    }
    if (num_items <= 0) return cudaSuccess;
    auto sum = in[0];
    out[0] = sum;
    for (N i = 1; i < num_items; ++i) out[i] = sum = sum + in[i];
    return cudaSuccess;
  }
};

}  // namespace cub
