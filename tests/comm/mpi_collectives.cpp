// Under mpiexec with 1, 2 and 4 processes: the MPI communicator's collectives, the
// global reductions, and distributed exactness: a batch sharded over R ranks at
// arbitrary sequence boundaries (groups split between ranks), with global normalisers
// and group statistics of gathered rewards, gives every token's dL/dlogp and every
// advantage bit for bit as one process does, and reduced scalars within 1e-6.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/comm/mpi_communicator.hpp"
#include "cascade_rl/distributed/global_reductions.hpp"
#include "mpi_test_main.hpp"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"

namespace {

namespace cr = cascade_rl;
namespace exec = cascade_rl::exec;
using cr::reduce_op;
using cr::testing::world;

template <class T>
void expect_all_reduce_each_op() {
  auto& comm = world();
  const auto n = static_cast<std::int64_t>(comm.size());
  const auto r = static_cast<std::int64_t>(comm.rank());
  for (const reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
    std::vector<T> values(5);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<T>(r + 3 * i);
    comm.all_reduce(std::span<T>(values), op);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto base = static_cast<std::int64_t>(3 * i);
      const std::int64_t expected = op == reduce_op::sum   ? n * base + n * (n - 1) / 2
                                    : op == reduce_op::max ? base + n - 1
                                                           : base;
      EXPECT_EQ(values[i], static_cast<T>(expected))
          << cr::value_type_name<T>() << " " << cr::to_string(op) << " [" << i << "]";
    }
  }
}

TEST(MpiCommunicator, AllReduceSumMaxMinEveryType) {
  expect_all_reduce_each_op<float>();
  expect_all_reduce_each_op<double>();
  expect_all_reduce_each_op<std::int64_t>();
  expect_all_reduce_each_op<std::uint64_t>();
}

template <class T>
void expect_all_gather_and_broadcast() {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<T> mine{static_cast<T>(10 * r), static_cast<T>(10 * r + 1), static_cast<T>(10 * r + 2)};
  std::vector<T> all(3 * static_cast<std::size_t>(n));
  comm.all_gather(std::span<const T>(mine), std::span<T>(all));
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(all[static_cast<std::size_t>(3 * q + i)], static_cast<T>(10 * q + i))
          << cr::value_type_name<T>();
  for (int root = 0; root < n; ++root) {
    std::vector<T> values(4, static_cast<T>(99));
    if (r == root)
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<T>(root + 7 * i);
    comm.broadcast(std::span<T>(values), root);
    for (std::size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(values[i], static_cast<T>(root + 7 * i)) << cr::value_type_name<T>() << " root " << root;
  }
}

TEST(MpiCommunicator, AllGatherAndBroadcastEveryType) {
  expect_all_gather_and_broadcast<float>();
  expect_all_gather_and_broadcast<double>();
  expect_all_gather_and_broadcast<std::int64_t>();
  expect_all_gather_and_broadcast<std::uint64_t>();
  expect_all_gather_and_broadcast<std::int32_t>();
  expect_all_gather_and_broadcast<std::uint8_t>();
  expect_all_gather_and_broadcast<std::byte>();
}

TEST(MpiCommunicator, EmptySpansAndBarrier) {
  auto& comm = world();
  comm.all_reduce(std::span<double>{}, reduce_op::sum);
  comm.all_gather(std::span<const float>{}, std::span<float>{});
  comm.broadcast(std::span<std::byte>{}, 0);
  comm.barrier();
  EXPECT_TRUE(comm.usable());
}

TEST(MpiCommunicator, RefusesBadArgumentsOnEveryRankThenStillWorks) {
  auto& comm = world();
  std::vector<double> mine(2), all(2 * static_cast<std::size_t>(comm.size()) + 1);
  cr::testing::expect_error_naming(
      [&] { comm.all_gather(std::span<const double>(mine), std::span<double>(all)); }, "all",
      "size()");
  cr::testing::expect_error_naming([&] { comm.broadcast(std::span<double>(mine), comm.size()); },
                                   "root");
  double x = 1;
  comm.all_reduce(std::span<double>(&x, 1), reduce_op::sum);
  EXPECT_EQ(x, comm.size());
}

TEST(MpiCommunicator, MoveOnlyAndOwning) {
  static_assert(!std::is_copy_constructible_v<cr::mpi_communicator>);
  static_assert(std::is_nothrow_move_constructible_v<cr::mpi_communicator>);
  auto dup = cr::mpi_communicator::world({.timeout = std::chrono::seconds(30)});
  EXPECT_TRUE(dup.owning());
  cr::mpi_communicator moved(std::move(dup));
  EXPECT_FALSE(dup.usable());  // NOLINT: moved-from state is documented
  EXPECT_THROW(dup.barrier(), cr::comm_error);
  EXPECT_EQ(moved.rank(), world().rank());
  cr::mpi_communicator borrowed(MPI_COMM_WORLD, /*owning=*/false);
  EXPECT_FALSE(borrowed.owning());
  std::int64_t one = 1;
  borrowed.all_reduce(std::span<std::int64_t>(&one, 1), reduce_op::sum);
  EXPECT_EQ(one, moved.size());
}

TEST(GlobalReductions, VaryingGatherBroadcastVectorAndSummary) {
  auto& comm = world();
  const int r = comm.rank();
  // Rank r holds r values (rank 0 none): the concatenation is 0, 1,1, 2,2,2, ...
  std::vector<std::int64_t> mine(static_cast<std::size_t>(r), r);
  std::vector<std::uint64_t> counts;
  const auto all = cr::all_gather_varying(comm, std::span<const std::int64_t>(mine), &counts);
  std::vector<std::int64_t> expected;
  for (int q = 0; q < comm.size(); ++q) expected.insert(expected.end(), static_cast<std::size_t>(q), q);
  EXPECT_EQ(all, expected);
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(comm.size()));

  std::vector<std::byte> snapshot;
  if (r == comm.size() - 1) snapshot = {std::byte{1}, std::byte{2}, std::byte{3}};
  cr::broadcast_vector(comm, snapshot, comm.size() - 1);
  EXPECT_EQ(snapshot, (std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}}));

  const cr::rank_summary s = cr::summarize_across_ranks(comm, r + 1.0);
  const double n = comm.size();
  EXPECT_EQ(s.sum, n * (n + 1) / 2);
  EXPECT_EQ(s.mean, (n + 1) / 2);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, n);
}

// ---- distributed exactness ----------------------------------------------------------

// Shard boundaries of `sequences` over `ranks`: random (same seed on every rank), not
// aligned with groups, some shards possibly empty.
std::vector<std::size_t> shard_cuts(std::size_t sequences, int ranks, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> cut(0, sequences);
  std::vector<std::size_t> cuts{0, sequences};
  for (int k = 1; k < ranks; ++k) cuts.push_back(cut(rng));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

template <class T>
bool same_bits(T a, T b) {
  if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  else return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

template <class T>
void expect_same_bits(std::span<const T> actual, std::span<const T> expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!same_bits(actual[i], expected[i])) {
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", one process: " << expected[i]
                    << " (rank " << world().rank() << " of " << world().size() << ")";
      return;
    }
}

void expect_relative(double actual, double expected, double tolerance, const std::string& what) {
  EXPECT_LE(std::abs(actual - expected), tolerance * std::max(1.0, std::abs(expected)))
      << what << ": " << actual << " vs one process " << expected;
}

constexpr std::size_t group_size = 4;

// One data-parallel step against the single-process step on the same batch: GRPO
// advantages of rewards sharded over ranks, then a policy loss with the global
// normaliser. `loss` runs the loss on a (sub)batch and returns its result.
template <class T, class Loss>
void expect_step_exact(std::uint64_t seed, cr::loss_aggregation mode, Loss&& loss,
                       const std::string& name) {
  auto& comm = world();
  const std::string context = name + " " + std::string(cr::to_string(mode)) + " seed " +
                              std::to_string(seed) + " on " + std::to_string(comm.size()) + " ranks";
  SCOPED_TRACE(context);
  // The whole batch, identical on every rank: 12 groups of 4 responses.
  const auto batch = cr::testing::make_random_batch<T>(
      seed, {.sequences = 12 * group_size, .max_length = 24, .log_ratio_spread = 0.5});
  const cr::token_layout whole_layout = batch.layout();
  const cr::group_layout groups = cr::group_layout::uniform({.groups = 12, .size = group_size});
  std::mt19937_64 rng(seed * 7919 + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> rewards(whole_layout.sequences());
  for (std::size_t s = 0; s < rewards.size(); ++s)
    rewards[s] = s % 8 < 4 ? static_cast<T>(s % 3 == 0) : static_cast<T>(normal(rng));

  // ---- one process ----
  std::vector<T> whole_adv(rewards.size()), whole_token_adv(batch.tokens()), whole_grad(batch.tokens());
  cr::grpo_advantages(exec::seq, groups, rewards, whole_adv);
  cr::broadcast_to_tokens(exec::seq, whole_layout, whole_adv, whole_token_adv);
  const cr::loss_counts whole_counts = cr::local_loss_counts(exec::seq, whole_layout);
  const cr::loss_normalizer whole_norm = whole_counts.normalizer(mode, 24.0);
  const cr::policy_loss_result whole =
      loss(batch, whole_layout, 0, batch.tokens(), std::span<const T>(whole_token_adv),
           std::span<T>(whole_grad), whole_norm);
  std::vector<cr::group_statistic> whole_stats(groups.groups());
  cr::group_statistics(exec::seq, groups, rewards, std::span<cr::group_statistic>(whole_stats));

  // ---- this rank's shard of sequences [first, last) ----
  const auto cuts = shard_cuts(whole_layout.sequences(), comm.size(), seed + 17);
  const std::size_t first = cuts[static_cast<std::size_t>(comm.rank())];
  const std::size_t last = cuts[static_cast<std::size_t>(comm.rank()) + 1];
  const auto shard = cr::testing::slice_sequences(whole_layout, first, last);
  const cr::token_layout layout = shard.layout();
  const std::span<const T> local_rewards = std::span<const T>(rewards).subspan(first, last - first);

  // Advantages: gather the rewards, run GRPO on the whole batch, keep this shard.
  std::vector<T> adv(last - first), token_adv(layout.tokens()), grad(layout.tokens());
  cr::per_sequence_across_ranks(comm, local_rewards, std::span<T>(adv),
                                [&](std::span<const T> all, std::span<T> out) {
                                  cr::grpo_advantages(exec::seq, groups, all, out);
                                });
  expect_same_bits(std::span<const T>(adv), std::span<const T>(whole_adv).subspan(first, last - first),
                   "advantages");
  std::vector<cr::group_statistic> stats(groups.groups());
  cr::group_statistics_across_ranks(exec::seq, comm, local_rewards, groups,
                                    std::span<cr::group_statistic>(stats));
  for (std::size_t g = 0; g < groups.groups(); ++g) {
    EXPECT_TRUE(same_bits(stats[g].mean, whole_stats[g].mean) && same_bits(stats[g].std, whole_stats[g].std) &&
                stats[g].min == whole_stats[g].min && stats[g].max == whole_stats[g].max &&
                stats[g].count == whole_stats[g].count &&
                stats[g].zero_variance == whole_stats[g].zero_variance)
        << "group " << g;
  }
  cr::broadcast_to_tokens(exec::seq, layout, adv, token_adv);

  // The step's normaliser from the global counts: exactly the single-process one.
  const cr::loss_counts counts =
      cr::global_loss_counts(comm, cr::local_loss_counts(exec::seq, layout));
  EXPECT_EQ(counts.tokens, whole_counts.tokens);
  EXPECT_EQ(counts.sequences, whole_counts.sequences);
  const cr::loss_normalizer norm =
      cr::global_normalizer(comm, cr::local_loss_counts(exec::seq, layout), mode, 24.0);
  const cr::policy_loss_result part = loss(batch, layout, shard.token_begin, shard.token_end,
                                           std::span<const T>(token_adv), std::span<T>(grad), norm);

  // dL/dlogp: this shard, and every shard gathered, bit for bit.
  expect_same_bits(std::span<const T>(grad),
                   std::span<const T>(whole_grad).subspan(shard.token_begin, layout.tokens()),
                   "dlogp (this rank)");
  const std::vector<T> all_grad = cr::all_gather_varying(comm, std::span<const T>(grad));
  expect_same_bits(std::span<const T>(all_grad), std::span<const T>(whole_grad), "dlogp (all ranks)");

  // Reduced scalars.
  const double loss_sum = cr::all_reduce_value(comm, part.loss, reduce_op::sum);
  expect_relative(loss_sum, whole.loss, 1e-6, "loss");
  const cr::policy_loss_metrics metrics = cr::global_metrics(comm, part.metrics);
  EXPECT_EQ(metrics.valid_tokens, whole.metrics.valid_tokens);
  EXPECT_EQ(metrics.clipped, whole.metrics.clipped);
  EXPECT_EQ(metrics.dual_clipped, whole.metrics.dual_clipped);
  EXPECT_EQ(metrics.importance_truncated, whole.metrics.importance_truncated);
  EXPECT_EQ(metrics.importance_masked, whole.metrics.importance_masked);
  expect_relative(metrics.approx_kl_sum, whole.metrics.approx_kl_sum, 1e-6, "approx_kl_sum");
  expect_relative(metrics.clip_fraction(), whole.metrics.clip_fraction(), 1e-6, "clip_fraction");
}

template <class T>
auto sub(const std::vector<T>& v, std::size_t b, std::size_t e) {
  return std::span<const T>(v).subspan(b, e - b);
}

template <class T>
void run_exactness() {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    for (const auto mode : cr::testing::all_aggregation_modes) {
      expect_step_exact<T>(
          seed, mode,
          [&](const cr::testing::random_batch<T>& batch, const cr::token_layout& layout,
              std::size_t b, std::size_t e, std::span<const T> adv, std::span<T> grad,
              const cr::loss_normalizer& norm) {
            return cr::reinforce_loss(exec::seq, layout,
                                      {.log_probs = sub(batch.log_probs, b, e), .advantages = adv},
                                      grad, norm, {.aggregation = mode});
          },
          "reinforce");
      expect_step_exact<T>(
          seed, mode,
          [&](const cr::testing::random_batch<T>& batch, const cr::token_layout& layout,
              std::size_t b, std::size_t e, std::span<const T> adv, std::span<T> grad,
              const cr::loss_normalizer& norm) {
            return cr::ppo_clip_loss(
                exec::seq, layout,
                {.log_probs = sub(batch.log_probs, b, e),
                 .old_log_probs = sub(batch.old_log_probs, b, e),
                 .advantages = adv,
                 .behaviour_log_probs = sub(batch.behaviour_log_probs, b, e)},
                grad, norm,
                {.clip_high = 0.28,
                 .dual_clip = 3.0,
                 .aggregation = mode,
                 .importance = {.mode = cr::importance_sampling::truncated, .cap = 2.0}});
          },
          "ppo_clip");
    }
    // MOPD: token advantages are teacher - student log-probs (per token, no groups).
    expect_step_exact<T>(
        seed, cr::loss_aggregation::token_mean,
        [&](const cr::testing::random_batch<T>& batch, const cr::token_layout& layout,
            std::size_t b, std::size_t e, std::span<const T>, std::span<T> grad,
            const cr::loss_normalizer& norm) {
          std::vector<T> distill(e - b);
          for (std::size_t t = b; t < e; ++t)
            distill[t - b] = batch.ref_log_probs[t] - batch.log_probs[t];
          return cr::reinforce_loss(exec::seq, layout,
                                    {.log_probs = sub(batch.log_probs, b, e),
                                     .advantages = distill,
                                     .behaviour_log_probs = sub(batch.behaviour_log_probs, b, e)},
                                    grad, norm, cr::mopd_options());
        },
        "mopd");
  }
}

TEST(DistributedExactness, FloatStepEqualsOneProcess) { run_exactness<float>(); }
TEST(DistributedExactness, DoubleStepEqualsOneProcess) { run_exactness<double>(); }

}  // namespace

int main(int argc, char** argv) { return cascade_rl::testing::run_mpi_tests(argc, argv); }
