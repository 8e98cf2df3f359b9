#pragma once
// Collectives built from a Communicator's primitives, for data whose shape the
// primitives do not carry:
//   all_reduce_value     one scalar reduced over ranks (a loss, a count)
//   all_gather_varying   a different number of values per rank, concatenated in rank order
//   broadcast_vector     a vector of a size only the root knows (a snapshot)
// Transport only: what the values mean is the business of distributed/ and cascade/.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "cascade_rl/comm/communicator.hpp"

namespace cascade_rl {

template <Communicator C, reducible_value T>
[[nodiscard]] T all_reduce_value(C& comm, T value, reduce_op op) {
  comm.all_reduce(std::span<T>(&value, 1), op);
  return value;
}

// Values of every rank concatenated in rank order, when ranks hold different counts.
// counts_out (optional) receives each rank's count.
template <Communicator C, transferable_value T>
[[nodiscard]] std::vector<T> all_gather_varying(C& comm, std::span<const T> mine,
                                                std::vector<std::uint64_t>* counts_out = nullptr) {
  const auto size = static_cast<std::size_t>(comm.size());
  std::vector<std::uint64_t> counts(size);
  const std::uint64_t my_count = mine.size();
  comm.all_gather(std::span<const std::uint64_t>(&my_count, 1), std::span<std::uint64_t>(counts));
  const std::uint64_t widest = *std::max_element(counts.begin(), counts.end());
  // Pad every rank's block to the widest; the padding is dropped below.
  std::vector<T> padded_mine(widest), padded_all(widest * size);
  std::copy(mine.begin(), mine.end(), padded_mine.begin());
  comm.all_gather(std::span<const T>(padded_mine), std::span<T>(padded_all));
  std::vector<T> all;
  all.reserve(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}));
  for (std::size_t r = 0; r < size; ++r)
    all.insert(all.end(), padded_all.begin() + static_cast<std::ptrdiff_t>(r * widest),
               padded_all.begin() + static_cast<std::ptrdiff_t>(r * widest + counts[r]));
  if (counts_out) *counts_out = std::move(counts);
  return all;
}

// Sends root's vector, whatever its size, to every rank (a policy or teacher snapshot).
template <Communicator C, transferable_value T>
void broadcast_vector(C& comm, std::vector<T>& values, int root) {
  std::uint64_t count = values.size();
  comm.broadcast(std::span<std::uint64_t>(&count, 1), root);
  values.resize(static_cast<std::size_t>(count));
  comm.broadcast(std::span<T>(values), root);
}

}  // namespace cascade_rl
