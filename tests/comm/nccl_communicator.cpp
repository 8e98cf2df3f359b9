// The NCCL communicator on one GPU (skipped without one): host collectives of the
// Communicator concept, device collectives on an explicit stream, move-only RAII with
// the owning flag, and a bounded initialisation when a peer never joins.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/comm/nccl_communicator.hpp"

namespace {

namespace cr = cascade_rl;

#define REQUIRE_GPU()                                                                      \
  do {                                                                                     \
    int count_ = 0;                                                                        \
    const cudaError_t probe_ = cudaGetDeviceCount(&count_);                                \
    if (probe_ != cudaSuccess || count_ == 0)                                              \
      GTEST_SKIP() << "needs a CUDA device (cudaGetDeviceCount: "                          \
                   << (probe_ != cudaSuccess ? cudaGetErrorString(probe_) : "0 devices") \
                   << ")";                                                                 \
  } while (0)

cr::nccl_communicator single_rank(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  ncclUniqueId id{};
  CASCADE_RL_NCCL_CHECK(ncclGetUniqueId(&id));
  return cr::nccl_communicator::create(id, 0, 1, 0, {.timeout = timeout});
}

TEST(NcclCommunicator, HostCollectivesOnOneRank) {
  REQUIRE_GPU();
  auto comm = single_rank();
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_TRUE(comm.owning());
  std::vector<double> d{1.5, -2.0, 3.0};
  for (const auto op : {cr::reduce_op::sum, cr::reduce_op::max, cr::reduce_op::min}) {
    comm.all_reduce(std::span<double>(d), op);
    EXPECT_EQ(d, (std::vector<double>{1.5, -2.0, 3.0}));
  }
  std::vector<std::uint64_t> u{7, 8};
  comm.all_reduce(std::span<std::uint64_t>(u), cr::reduce_op::sum);
  EXPECT_EQ(u, (std::vector<std::uint64_t>{7, 8}));
  std::vector<float> mine{1, 2}, all(2);
  comm.all_gather(std::span<const float>(mine), std::span<float>(all));
  EXPECT_EQ(all, mine);
  std::vector<std::byte> bytes{std::byte{3}, std::byte{4}};
  comm.broadcast(std::span<std::byte>(bytes), 0);
  EXPECT_EQ(bytes, (std::vector<std::byte>{std::byte{3}, std::byte{4}}));
  comm.barrier();
}

TEST(NcclCommunicator, DeviceCollectiveOnAnExplicitStream) {
  REQUIRE_GPU();
  auto comm = single_rank();
  cudaStream_t stream = nullptr;
  CASCADE_RL_CUDA_CHECK(cudaStreamCreate(&stream));
  const std::vector<float> host{1, 2, 3, 4};
  float* send = nullptr;
  float* recv = nullptr;
  CASCADE_RL_CUDA_CHECK(cudaMalloc(&send, host.size() * sizeof(float)));
  CASCADE_RL_CUDA_CHECK(cudaMalloc(&recv, host.size() * sizeof(float)));
  CASCADE_RL_CUDA_CHECK(cudaMemcpyAsync(send, host.data(), host.size() * sizeof(float),
                                        cudaMemcpyHostToDevice, stream));
  comm.all_reduce(send, recv, host.size(), cr::reduce_op::sum, stream);
  comm.sync_stream(stream);
  std::vector<float> back(host.size());
  CASCADE_RL_CUDA_CHECK(cudaMemcpy(back.data(), recv, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
  CASCADE_RL_CUDA_CHECK(cudaFree(send));
  CASCADE_RL_CUDA_CHECK(cudaFree(recv));
  CASCADE_RL_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(NcclCommunicator, MoveOnlyAndOwningFlag) {
  REQUIRE_GPU();
  auto first = single_rank();
  cr::nccl_communicator second(std::move(first));
  EXPECT_EQ(first.native(), nullptr);  // NOLINT: moved-from state is documented
  EXPECT_THROW(first.barrier(), cr::comm_error);
  second.barrier();

  // Non-owning: the wrapper goes, the communicator stays for its owner to destroy.
  ncclUniqueId id{};
  CASCADE_RL_NCCL_CHECK(ncclGetUniqueId(&id));
  CASCADE_RL_CUDA_CHECK(cudaSetDevice(0));
  ncclComm_t raw = nullptr;
  CASCADE_RL_NCCL_CHECK(ncclCommInitRank(&raw, 1, id, 0));
  {
    cr::nccl_communicator borrowed(raw, 0, /*owning=*/false);
    EXPECT_FALSE(borrowed.owning());
    borrowed.barrier();
  }
  int count = 0;
  CASCADE_RL_NCCL_CHECK(ncclCommCount(raw, &count));
  EXPECT_EQ(count, 1);
  CASCADE_RL_NCCL_CHECK(ncclCommDestroy(raw));
}

TEST(NcclCommunicator, InitialisationWithoutPeersTimesOut) {
  REQUIRE_GPU();
  // Rank 0 of 2, and rank 1 never joins: the non-blocking init must give up.
  ncclUniqueId id{};
  CASCADE_RL_NCCL_CHECK(ncclGetUniqueId(&id));
  const auto start = std::chrono::steady_clock::now();
  try {
    auto comm = cr::nccl_communicator::create(id, 0, 2, 0, {.timeout = std::chrono::seconds(2)});
    FAIL() << "init completed without its peer";
  } catch (const cr::comm_error& e) {
    EXPECT_NE(std::string(e.what()).find("ncclCommInitRankConfig"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
