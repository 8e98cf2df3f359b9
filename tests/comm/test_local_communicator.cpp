// The single-process communicator and the global reductions over it: code written
// against the Communicator concept runs, and gives one process's results, without
// MPI or NCCL.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/comm/local_communicator.hpp"
#include "cascade_rl/distributed/global_reductions.hpp"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"

namespace {

namespace cr = cascade_rl;
namespace exec = cascade_rl::exec;

struct not_a_communicator {
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier() {}
};

static_assert(cr::Communicator<cr::local_communicator>);
static_assert(!cr::Communicator<not_a_communicator>);
static_assert(!cr::Communicator<int>);

TEST(LocalCommunicator, CollectivesOfOneRank) {
  cr::local_communicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<double> values{1.5, -2.0};
  for (const auto op : {cr::reduce_op::sum, cr::reduce_op::max, cr::reduce_op::min}) {
    comm.all_reduce(std::span<double>(values), op);
    EXPECT_EQ(values, (std::vector<double>{1.5, -2.0}));
  }
  std::vector<std::int64_t> mine{4, 5}, all(2);
  comm.all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
  EXPECT_EQ(all, mine);
  comm.broadcast(std::span<double>(values), 0);
  comm.barrier();
}

TEST(LocalCommunicator, RefusesBadArguments) {
  cr::local_communicator comm;
  std::vector<float> mine(2), all(3);
  cr::testing::expect_error_naming(
      [&] { comm.all_gather(std::span<const float>(mine), std::span<float>(all)); }, "all",
      "expected 2");
  cr::testing::expect_error_naming([&] { comm.broadcast(std::span<float>(mine), 1); }, "root",
                                   "[0, 1)");
}

TEST(GlobalReductions, OneRankIsTheLocalResult) {
  cr::local_communicator comm;
  const auto batch = cr::testing::make_random_batch<float>(3);
  const cr::loss_counts local = cr::local_loss_counts(exec::seq, batch.layout());
  const cr::loss_counts global = cr::global_loss_counts(comm, local);
  EXPECT_EQ(global.tokens, local.tokens);
  EXPECT_EQ(global.sequences, local.sequences);
  const cr::loss_normalizer n =
      cr::global_normalizer(comm, local, cr::loss_aggregation::seq_mean_token_sum_norm, 3.0);
  EXPECT_EQ(n.mode, cr::loss_aggregation::seq_mean_token_sum_norm);
  EXPECT_EQ(n.tokens, static_cast<double>(local.tokens));
  EXPECT_EQ(n.scale, 3.0);

  cr::policy_loss_metrics m;
  m.valid_tokens = 10;
  m.clipped = 3;
  m.approx_kl_sum = 0.25;
  const auto g = cr::global_metrics(comm, m);
  EXPECT_EQ(g.valid_tokens, 10u);
  EXPECT_EQ(g.clipped, 3u);
  EXPECT_EQ(g.approx_kl_sum, 0.25);

  const auto s = cr::summarize_across_ranks(comm, 2.5);
  EXPECT_EQ(s.sum, 2.5);
  EXPECT_EQ(s.mean, 2.5);
  EXPECT_EQ(s.min, 2.5);
  EXPECT_EQ(s.max, 2.5);

  const std::vector<float> rewards{1, 0, 0, 1, 1, 0};
  const auto groups = cr::group_layout::uniform({.groups = 2, .size = 3});
  std::vector<float> expected(6), actual(6);
  cr::grpo_advantages(exec::seq, groups, rewards, expected);
  cr::per_sequence_across_ranks(comm, std::span<const float>(rewards), std::span<float>(actual),
                                [&](std::span<const float> all, std::span<float> out) {
                                  cr::grpo_advantages(exec::seq, groups, all, out);
                                });
  EXPECT_EQ(actual, expected);

  std::vector<std::byte> snapshot{std::byte{7}};
  cr::broadcast_vector(comm, snapshot, 0);
  EXPECT_EQ(snapshot.size(), 1u);
  const std::vector<double> mine{1, 2, 3};
  EXPECT_EQ(cr::all_gather_varying(comm, std::span<const double>(mine)), mine);
}

}  // namespace
