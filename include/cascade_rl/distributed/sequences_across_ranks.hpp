#pragma once
// Per-sequence values of a batch whose sequences are sharded over ranks in order, and
// whole-batch algorithms run on them. A group's statistics need its rewards in one
// fixed order: gathering them (a value per sequence is small) and running the
// single-process algorithm on the whole batch on every rank gives the single
// process's bits, which a sum across ranks in MPI's or NCCL's order would not.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "cascade_rl/comm/collectives.hpp"
#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/core/checks.hpp"

namespace cascade_rl {

// Rank r holds global sequences [first, first + local count), rank 0 the first ones.
template <class T>
struct gathered_sequences {
  std::vector<T> values;  // every rank's values, in global sequence order
  std::size_t first = 0;  // this rank's first global sequence
  std::size_t count = 0;  // this rank's number of sequences

  [[nodiscard]] std::span<const T> all() const { return values; }
  // This rank's slice of a whole-batch result `whole` (one entry per global sequence).
  template <class U>
  [[nodiscard]] std::span<const U> mine_of(std::span<const U> whole) const {
    return whole.subspan(first, count);
  }
};

template <Communicator C, transferable_value T>
[[nodiscard]] gathered_sequences<T> sequences_across_ranks(C& comm, std::span<const T> local) {
  std::vector<std::uint64_t> counts;
  gathered_sequences<T> result;
  result.values = all_gather_varying(comm, local, &counts);
  const auto rank = static_cast<std::size_t>(comm.rank());
  result.first = static_cast<std::size_t>(std::accumulate(
      counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(rank), std::uint64_t{0}));
  result.count = local.size();
  return result;
}

// Runs a whole-batch per-sequence algorithm on values sharded over ranks:
// whole(all_in, all_out) sees every rank's inputs in global order (e.g. a lambda calling
// grpo_advantages with the global group layout), and local_out receives this rank's
// slice of its result, bit for bit what a single process computes.
template <Communicator C, transferable_value T, class U, class Whole>
void per_sequence_across_ranks(C& comm, std::span<const T> local_in, std::span<U> local_out,
                               Whole&& whole) {
  detail::require_size(local_out.size(), local_in.size(), "local_out", "one per local sequence");
  const gathered_sequences<T> gathered = sequences_across_ranks(comm, local_in);
  std::vector<U> all_out(gathered.values.size());
  whole(std::span<const T>(gathered.values), std::span<U>(all_out));
  std::copy_n(all_out.begin() + static_cast<std::ptrdiff_t>(gathered.first), gathered.count,
              local_out.begin());
}

}  // namespace cascade_rl
