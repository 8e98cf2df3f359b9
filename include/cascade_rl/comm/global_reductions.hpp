#pragma once
// What the cascade runner reduces across ranks in a data-parallel step, over any
// Communicator:
//   global_loss_counts / global_normalizer   the step's divisors (exact: integers)
//   global_metrics                           policy-loss metrics summed over ranks
//   all_reduce_value, summarize_across_ranks one scalar (a loss, a reward mean)
//   all_gather_varying                       a different number of values per rank
//   sequences_across_ranks                   values of sequences spread over ranks,
//                                            e.g. rewards of groups split by the sharding
//   broadcast_vector                         a snapshot of unknown size from one rank
//
// Exactness. Integer counts are summed exactly, so the normaliser, and with it every
// token's dL/dlogp, is bit for bit the single-process one. Group statistics need the
// rewards of a whole group in one fixed order: sequences_across_ranks gathers them (a
// reward per sequence is small) and every rank runs the single-process algorithm on
// the whole batch, so advantages are also bit for bit. Floating-point sums across
// ranks (a loss, approx_kl_sum) are exact up to the reduction order MPI or NCCL picks.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"

namespace cascade_rl {

template <Communicator C, reducible_value T>
[[nodiscard]] T all_reduce_value(C& comm, T value, reduce_op op) {
  comm.all_reduce(std::span<T>(&value, 1), op);
  return value;
}

// The step's token and sequence counts over every rank (sum of local_loss_counts).
template <Communicator C>
[[nodiscard]] loss_counts global_loss_counts(C& comm, const loss_counts& local) {
  std::uint64_t counts[2] = {local.tokens, local.sequences};
  comm.all_reduce(std::span<std::uint64_t>(counts), reduce_op::sum);
  return {static_cast<std::size_t>(counts[0]), static_cast<std::size_t>(counts[1])};
}

template <Communicator C>
[[nodiscard]] loss_normalizer global_normalizer(C& comm, const loss_counts& local,
                                                double scale = 1) {
  return global_loss_counts(comm, local).normalizer(scale);
}

// Sums every field of the metrics over ranks; the fractions of the result are global.
template <Communicator C>
[[nodiscard]] policy_loss_metrics global_metrics(C& comm, const policy_loss_metrics& local) {
  std::uint64_t counts[policy_loss_count_fields];
  std::size_t k = 0;
  policy_loss_metrics::for_each_count(local, local, [&](const std::size_t& v, const std::size_t&) {
    counts[k++] = v;
  });
  comm.all_reduce(std::span<std::uint64_t>(counts), reduce_op::sum);
  policy_loss_metrics total;
  k = 0;
  policy_loss_metrics::for_each_count(total, total, [&](std::size_t& v, std::size_t&) {
    v = static_cast<std::size_t>(counts[k++]);
  });
  total.approx_kl_sum = all_reduce_value(comm, local.approx_kl_sum, reduce_op::sum);
  return total;
}

// A per-rank scalar seen from every rank: its sum, mean over ranks, min and max.
struct rank_summary {
  double sum = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
};

template <Communicator C>
[[nodiscard]] rank_summary summarize_across_ranks(C& comm, double local) {
  double sum = local, low = local, high = local;
  comm.all_reduce(std::span<double>(&sum, 1), reduce_op::sum);
  comm.all_reduce(std::span<double>(&low, 1), reduce_op::min);
  comm.all_reduce(std::span<double>(&high, 1), reduce_op::max);
  return {sum, sum / comm.size(), low, high};
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

// Per-sequence values of a batch whose sequences are sharded over ranks in order:
// rank r holds global sequences [first, first + local count), rank 0 the first ones.
template <class T>
struct gathered_sequences {
  std::vector<T> values;   // every rank's values, in global sequence order
  std::size_t first = 0;   // this rank's first global sequence
  std::size_t count = 0;   // this rank's number of sequences

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
  result.first = static_cast<std::size_t>(
      std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(rank),
                      std::uint64_t{0}));
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

// Group statistics when a group's sequences are spread over ranks: `groups` is the
// layout of the whole batch (sequences in global order), local_rewards this rank's
// contiguous shard. Every rank gets every group's statistics.
template <exec::host_policy Policy, Communicator C, std::floating_point T>
void group_statistics_across_ranks(const Policy& policy, C& comm, std::span<const T> local_rewards,
                                   const group_layout& groups,
                                   std::span<group_statistic> statistics,
                                   const group_statistics_options& options = {}) {
  const gathered_sequences<T> gathered = sequences_across_ranks(comm, local_rewards);
  group_statistics(policy, groups, gathered.all(), statistics, options);
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
