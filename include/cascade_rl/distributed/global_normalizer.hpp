#pragma once
// The step's divisors over every rank: token and sequence counts summed as integers,
// so the normaliser, and with it every token's dL/dlogp, is bit for bit the
// single-process one.

#include <cstddef>
#include <cstdint>
#include <span>

#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"

namespace cascade_rl {

// The step's token and sequence counts over every rank (sum of local_loss_counts).
template <Communicator C>
[[nodiscard]] loss_counts global_loss_counts(C& comm, const loss_counts& local) {
  std::uint64_t counts[2] = {local.tokens, local.sequences};
  comm.all_reduce(std::span<std::uint64_t>(counts), reduce_op::sum);
  return {static_cast<std::size_t>(counts[0]), static_cast<std::size_t>(counts[1])};
}

// The step's normaliser of `mode` from every rank's counts (loss_counts::normalizer):
// seq-mean-token-sum-norm takes the padded response length too.
template <Communicator C>
[[nodiscard]] loss_normalizer global_normalizer(C& comm, const loss_counts& local,
                                                loss_aggregation mode) {
  return global_loss_counts(comm, local).normalizer(mode);
}

template <Communicator C>
[[nodiscard]] loss_normalizer global_normalizer(C& comm, const loss_counts& local,
                                                loss_aggregation mode, double padded_length) {
  return global_loss_counts(comm, local).normalizer(mode, padded_length);
}

}  // namespace cascade_rl
