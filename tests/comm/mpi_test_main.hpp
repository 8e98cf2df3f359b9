#pragma once
// main() of the gtest programs run under mpiexec: every rank runs every test (the
// collectives inside must match), rank 0 prints the usual report, other ranks print
// only their failures, and all ranks exit non-zero when any rank failed.
// world(): the communicator the tests use, with a timeout short enough that a rank
// leaving a test early (a failed ASSERT) fails the job well within ctest's TIMEOUT.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>

#include "cascade_rl/comm/mpi_communicator.hpp"

namespace cascade_rl::testing {

inline std::unique_ptr<mpi_communicator>& world_slot() {
  static std::unique_ptr<mpi_communicator> slot;
  return slot;
}

inline mpi_communicator& world() { return *world_slot(); }

class rank_failure_printer : public ::testing::EmptyTestEventListener {
 public:
  explicit rank_failure_printer(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                   result.file_name() ? result.file_name() : "?", result.line_number(),
                   result.summary());
  }

 private:
  int rank_;
};

inline int run_mpi_tests(int argc, char** argv) {
  mpi_session mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  world_slot() = std::make_unique<mpi_communicator>(
      mpi_communicator::world({.timeout = std::chrono::seconds(30)}));
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (mpi.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new rank_failure_printer(mpi.rank()));
  }
  const int failed = RUN_ALL_TESTS();
  try {
    std::int64_t any = failed != 0 ? 1 : 0;
    world().all_reduce(std::span<std::int64_t>(&any, 1), reduce_op::max);
    world_slot().reset();
    if (any != 0 && mpi.rank() == 0)
      std::fprintf(stderr, "cascade_rl: a test failed on at least one rank (see above)\n");
    return any != 0 ? 1 : 0;
  } catch (const std::exception& e) {
    mpi.abort(e.what());
  }
}

}  // namespace cascade_rl::testing
