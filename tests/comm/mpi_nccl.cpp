// NCCL bootstrapped over MPI, one GPU per rank (rank r on device r): the unique id
// travels over the MPI communicator, then the NCCL communicator's host collectives
// and the global reductions work across ranks. Skipped where there are fewer GPUs
// than ranks (every rank skips alike: they see the same devices).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/comm/collectives.hpp"
#include "cascade_rl/comm/nccl_communicator.hpp"
#include "cascade_rl/distributed/global_normalizer.hpp"
#include "mpi_test_main.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::world;

TEST(MpiNccl, BootstrapAndCollectives) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < world().size())
    GTEST_SKIP() << "needs one CUDA device per rank (" << world().size() << "), found " << devices;
  auto comm = cr::nccl_communicator::from(world(), world().rank(), {.timeout = std::chrono::seconds(60)});
  EXPECT_EQ(comm.rank(), world().rank());
  EXPECT_EQ(comm.size(), world().size());
  const auto n = static_cast<std::int64_t>(comm.size());
  std::vector<std::int64_t> values{comm.rank(), 10};
  comm.all_reduce(std::span<std::int64_t>(values), cr::reduce_op::sum);
  EXPECT_EQ(values, (std::vector<std::int64_t>{n * (n - 1) / 2, 10 * n}));
  double high = comm.rank();
  comm.all_reduce(std::span<double>(&high, 1), cr::reduce_op::max);
  EXPECT_EQ(high, static_cast<double>(n - 1));
  const cr::loss_counts counts = cr::global_loss_counts(comm, {static_cast<std::size_t>(comm.rank() + 1), 1});
  EXPECT_EQ(counts.tokens, static_cast<std::size_t>(n * (n + 1) / 2));
  EXPECT_EQ(counts.sequences, static_cast<std::size_t>(n));
  std::vector<float> mine{static_cast<float>(comm.rank())}, all(static_cast<std::size_t>(n));
  comm.all_gather(std::span<const float>(mine), std::span<float>(all));
  for (std::int64_t r = 0; r < n; ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], static_cast<float>(r));
  std::vector<std::byte> snapshot;
  if (comm.rank() == 0) snapshot.assign(1000, std::byte{9});
  cr::broadcast_vector(comm, snapshot, 0);
  EXPECT_EQ(snapshot, std::vector<std::byte>(1000, std::byte{9}));
  comm.barrier();
}

}  // namespace

int main(int argc, char** argv) { return cascade_rl::testing::run_mpi_tests(argc, argv); }
