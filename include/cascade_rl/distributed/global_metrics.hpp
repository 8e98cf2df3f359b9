#pragma once
// Metrics seen alike from every rank:
//   global_metrics          policy-loss metrics summed over ranks (counts as integers,
//                           so the fractions are exact; approx_kl_sum as a double)
//   summarize_across_ranks  one per-rank scalar's sum, mean over ranks, min and max

#include <cstddef>
#include <cstdint>
#include <span>

#include "cascade_rl/comm/collectives.hpp"
#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"

namespace cascade_rl {

// Sums every field of the metrics over ranks; the fractions of the result are global.
template <Communicator C>
[[nodiscard]] policy_loss_metrics global_metrics(C& comm, const policy_loss_metrics& local) {
  std::uint64_t counts[policy_loss_count_fields];
  std::size_t k = 0;
  policy_loss_metrics::for_each_count(
      local, local, [&](const std::size_t& v, const std::size_t&) { counts[k++] = v; });
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

}  // namespace cascade_rl
