#pragma once
// cub::DeviceSelect::Flagged for the cuda_emulated test: the same contract (a size query
// with null temporary storage, then the selection, in input order), done in a loop.

#include <cuda_runtime.h>

#include <cstddef>

namespace cub {

struct DeviceSelect {
  template <class In, class Flags, class Out, class Count, class N>
  static cudaError_t Flagged(void* d_temp_storage, std::size_t& temp_storage_bytes, In in, Flags flags,
                             Out out, Count num_selected, N num_items, cudaStream_t = nullptr) {
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = 1;
      return cudaSuccess;
    }
    N selected = 0;
    for (N i = 0; i < num_items; ++i)
      if (flags[i]) out[selected++] = in[i];
    *num_selected = selected;
    return cudaSuccess;
  }
};

}  // namespace cub
