#pragma once
// The communicator of a single process: rank 0 of 1. Reductions leave the values as
// they are, so code written against the Communicator concept runs unchanged (and gives
// the same bits) without MPI or NCCL.

#include <algorithm>
#include <span>

#include "cascade_rl/comm/communicator.hpp"

namespace cascade_rl {

class local_communicator {
 public:
  [[nodiscard]] int rank() const { return 0; }
  [[nodiscard]] int size() const { return 1; }

  template <reducible_value T>
  void all_reduce(std::span<T> /*values*/, reduce_op /*op*/) {}

  template <transferable_value T>
  void all_gather(std::span<const T> mine, std::span<T> all) {
    detail::require_gather_size(all.size(), mine.size(), 1);
    std::copy(mine.begin(), mine.end(), all.begin());
  }

  template <transferable_value T>
  void broadcast(std::span<T> /*values*/, int root) {
    detail::require_root(root, 1);
  }

  void barrier() {}
};

static_assert(Communicator<local_communicator>);

}  // namespace cascade_rl
