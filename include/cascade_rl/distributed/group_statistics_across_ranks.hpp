#pragma once
// Group statistics when a group's sequences are spread over ranks: the rewards are
// gathered in global order and every rank runs the single-process group_statistics, so
// every rank gets every group's statistics with the single process's bits.

#include <concepts>
#include <span>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/distributed/sequences_across_ranks.hpp"

namespace cascade_rl {

// `groups` is the layout of the whole batch (sequences in global order), local_rewards
// this rank's contiguous shard.
template <exec::host_policy Policy, Communicator C, std::floating_point T>
void group_statistics_across_ranks(const Policy& policy, C& comm, std::span<const T> local_rewards,
                                   const group_layout& groups,
                                   std::span<group_statistic> statistics,
                                   const group_statistics_options& options = {}) {
  const gathered_sequences<T> gathered = sequences_across_ranks(comm, local_rewards);
  group_statistics(policy, groups, gathered.all(), statistics, options);
}

}  // namespace cascade_rl
