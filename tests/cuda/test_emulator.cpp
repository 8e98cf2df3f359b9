// The CPU emulator that runs the kernels in cuda_emulated (tests/cuda/emulator): the
// intrinsics' lane arithmetic against hand-computed values, shared memory across a
// block, and the undefined behaviour it must refuse rather than run.

#include <cuda_runtime.h>  // the emulator's

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

namespace emu = cascade_rl_cuda_emulator;

template <class... Params, class... Args>
cudaError_t run(void (*kernel)(Params...), unsigned blocks, unsigned threads, Args... args) {
  return emu::launch(kernel, dim3(blocks), dim3(threads), static_cast<Params>(args)...);
}

unsigned global_thread() { return blockIdx.x * blockDim.x + threadIdx.x; }

// Launches in a given scheduling order while it lives (the tests that depend on which
// thread runs first), whatever CASCADE_RL_EMULATOR_ORDER says.
class order_scope {
 public:
  explicit order_scope(emu::schedule_order order) : saved_(emu::order()) { emu::order() = order; }
  order_scope(const order_scope&) = delete;
  order_scope& operator=(const order_scope&) = delete;
  ~order_scope() { emu::order() = saved_; }

 private:
  emu::schedule_order saved_;
};

__global__ void shuffles(int* xor_sum, int* down, int* from_lane, unsigned* ballot) {
  const unsigned t = global_thread();
  const int lane = static_cast<int>(threadIdx.x % 32);
  int v = lane;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  xor_sum[t] = v;
  down[t] = __shfl_down_sync(0xffffffffu, lane * 10, 3, 8);
  from_lane[t] = __shfl_sync(0xffffffffu, lane * 10, 2, 4);
  ballot[t] = __ballot_sync(0xffffffffu, lane % 3 == 0);
}

TEST(CudaEmulator, ShufflesAndBallotFollowTheLaneRules) {
  std::vector<int> xor_sum(64), down(64), from_lane(64);
  std::vector<unsigned> ballot(64);
  ASSERT_EQ(cudaSuccess, run(shuffles, 1, 64, xor_sum.data(), down.data(), from_lane.data(), ballot.data()));
  unsigned every_third = 0;
  for (unsigned lane = 0; lane < 32; lane += 3) every_third |= 1u << lane;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(xor_sum[t], 31 * 32 / 2) << t;
    // Down by 3 within segments of 8: the last 3 lanes of a segment keep their own value.
    EXPECT_EQ(down[t], (lane % 8 + 3 < 8 ? lane + 3 : lane) * 10) << t;
    // Lane 2 of each segment of 4.
    EXPECT_EQ(from_lane[t], (lane / 4 * 4 + 2) * 10) << t;
    EXPECT_EQ(ballot[t], every_third) << t;
  }
}

__global__ void reverse_in_shared(const int* in, int* out) {
  __shared__ int tile[256];
  tile[threadIdx.x] = in[global_thread()];
  __syncthreads();
  out[global_thread()] = tile[blockDim.x - 1 - threadIdx.x];
}

TEST(CudaEmulator, SharedMemoryIsTheBlocksAfterSyncthreads) {
  std::vector<int> in(3 * 128), out(3 * 128);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
  ASSERT_EQ(cudaSuccess, run(reverse_in_shared, 3, 128, in.data(), out.data()));
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 128; ++t) EXPECT_EQ(out[b * 128 + t], b * 128 + 127 - t);
}

__global__ void builtins(unsigned* seen) {
  seen[4 * global_thread()] = threadIdx.x;
  seen[4 * global_thread() + 1] = blockIdx.x;
  seen[4 * global_thread() + 2] = blockDim.x;
  seen[4 * global_thread() + 3] = gridDim.x;
}

TEST(CudaEmulator, EveryThreadOfEveryBlockRunsWithItsIndices) {
  std::vector<unsigned> seen(4 * 5 * 96);
  ASSERT_EQ(cudaSuccess, run(builtins, 5, 96, seen.data()));
  for (unsigned t = 0; t < 5 * 96; ++t) {
    EXPECT_EQ(seen[4 * t], t % 96);
    EXPECT_EQ(seen[4 * t + 1], t / 96);
    EXPECT_EQ(seen[4 * t + 2], 96u);
    EXPECT_EQ(seen[4 * t + 3], 5u);
  }
}

// ---- undefined behaviour on a GPU: refused, with the reason --------------------------

void expect_refused(cudaError_t status, const std::string& reason) {
  EXPECT_EQ(status, cudaErrorLaunchFailure);
  EXPECT_NE(emu::last_launch_error().find(reason), std::string::npos) << emu::last_launch_error();
  EXPECT_NE(std::string(cudaGetErrorString(status)).find(reason), std::string::npos);
}

__global__ void shuffle_after_early_exit(int* out) {
  if (threadIdx.x == 0) return;  // forward order: lane 0 is gone before the others arrive
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmulator, RefusesAFullMaskShuffleAfterALaneHasExited) {
  const order_scope forward(emu::schedule_order::forward);
  std::vector<int> out(32);
  expect_refused(run(shuffle_after_early_exit, 1, 32, out.data()), "after a lane of the warp has exited");
}

__global__ void exit_while_others_shuffle(int* out) {
  // Forward order: lanes 0-30 reach the shuffle first; lane 31 exits while they wait.
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmulator, RefusesALaneThatExitsWhileItsWarpWaits) {
  std::vector<int> out(32);
  const order_scope forward(emu::schedule_order::forward);
  expect_refused(run(exit_while_others_shuffle, 1, 32, out.data()), "exited while others of its warp wait");
  // In any order it is divergence.
  const order_scope reverse(emu::schedule_order::reverse);
  expect_refused(run(exit_while_others_shuffle, 1, 32, out.data()), "divergence");
}

__global__ void different_collectives(int* out) {
  out[threadIdx.x] = threadIdx.x < 16 ? __shfl_xor_sync(0xffffffffu, 1, 1) : __shfl_down_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmulator, RefusesLanesAtDifferentCollectives) {
  std::vector<int> out(32);
  expect_refused(run(different_collectives, 1, 32, out.data()), "different collectives");
}

__global__ void syncthreads_after_exit(int* out) {
  if (threadIdx.x >= 64) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmulator, RefusesSyncthreadsAfterThreadsHaveExited) {
  std::vector<int> out(128);
  expect_refused(run(syncthreads_after_exit, 1, 128, out.data()), "__syncthreads");
}

__global__ void warps_wait_apart(int* out) {
  // Warp 0 and thread 63 wait at __syncthreads, the other lanes of warp 1 for a shuffle
  // that needs thread 63: nobody can go on.
  if (threadIdx.x < 32 || threadIdx.x == 63)
    __syncthreads();
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmulator, ReportsADeadlockInsteadOfHanging) {
  std::vector<int> out(64);
  expect_refused(run(warps_wait_apart, 1, 64, out.data()), "deadlock");
}

__global__ void racy_read(int* cell, int* out) {
  if (threadIdx.x == 0) *cell = 1;
  out[threadIdx.x] = *cell;  // no barrier between thread 0's write and the others' reads
}

TEST(CudaEmulator, ARaceShowsAsResultsThatChangeWithTheOrder) {
  auto seen_by_last = [](emu::schedule_order order) {
    const order_scope scope(order);
    int cell = 0;
    std::vector<int> out(64);
    EXPECT_EQ(cudaSuccess, run(racy_read, 1, 64, &cell, out.data()));
    return out[63];
  };
  EXPECT_EQ(seen_by_last(emu::schedule_order::forward), 1);
  EXPECT_EQ(seen_by_last(emu::schedule_order::reverse), 0);
}

__global__ void odd_width(int* out) { out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0, 12); }

TEST(CudaEmulator, RefusesAWidthThatIsNotAPowerOfTwo) {
  std::vector<int> out(32);
  expect_refused(run(odd_width, 1, 32, out.data()), "width 12");
}

__global__ void load_vector(const uint4* p, unsigned* out) { out[threadIdx.x] = __ldg(p).x; }

TEST(CudaEmulator, RefusesAMisalignedVectorLoad) {
  alignas(16) unsigned bytes[8] = {7, 1, 2, 3, 4, 5, 6, 8};
  std::vector<unsigned> out(32);
  ASSERT_EQ(cudaSuccess, run(load_vector, 1, 32, reinterpret_cast<const uint4*>(bytes), out.data()));
  EXPECT_EQ(out[31], 7u);
  expect_refused(run(load_vector, 1, 32, reinterpret_cast<const uint4*>(bytes + 1), out.data()), "misaligned");
}

__global__ void nothing(int*) {}

TEST(CudaEmulator, RefusesAnEmptyGrid) {
  EXPECT_EQ(run(nothing, 0, 32, static_cast<int*>(nullptr)), cudaErrorInvalidConfiguration);
}

}  // namespace
