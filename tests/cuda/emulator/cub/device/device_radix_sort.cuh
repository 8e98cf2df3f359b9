#pragma once
// cub::DeviceRadixSort::SortPairs for the cuda_emulated test: the same contract (a size
// query with null temporary storage, then a stable sort of the pairs by key, ascending),
// done with std::stable_sort. begin_bit / end_bit must cover the whole key.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace cub {

struct DeviceRadixSort {
  template <class Key, class Value, class N>
  static cudaError_t SortPairs(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const Key* keys_in, Key* keys_out, const Value* values_in,
                               Value* values_out, N num_items, int = 0,
                               int = static_cast<int>(sizeof(Key) * 8), cudaStream_t = nullptr) {
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = 1;
      return cudaSuccess;
    }
    std::vector<std::pair<Key, Value>> pairs;
    for (N i = 0; i < num_items; ++i) pairs.emplace_back(keys_in[i], values_in[i]);
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (N i = 0; i < num_items; ++i) {
      keys_out[i] = pairs[static_cast<std::size_t>(i)].first;
      values_out[i] = pairs[static_cast<std::size_t>(i)].second;
    }
    return cudaSuccess;
  }
};

}  // namespace cub
