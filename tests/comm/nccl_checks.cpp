// The NCCL and CUDA check macros and error types: no GPU needed. A failing call
// throws an error naming the call, its file and line, and the library's error string;
// the no-throw forms report and return false (for destructors).

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "cascade_rl/comm/nccl_communicator.hpp"

namespace {

namespace cr = cascade_rl;

ncclResult_t failing_nccl_call(int) { return ncclInvalidArgument; }
cudaError_t failing_cuda_call(int) { return cudaErrorInvalidValue; }

static_assert(cr::Communicator<cr::nccl_communicator>);
static_assert(!std::is_copy_constructible_v<cr::nccl_communicator>);
static_assert(!std::is_copy_assignable_v<cr::nccl_communicator>);
static_assert(std::is_nothrow_move_constructible_v<cr::nccl_communicator>);
static_assert(std::is_nothrow_move_assignable_v<cr::nccl_communicator>);

TEST(NcclChecks, ThrowingFormsNameTheCall) {
  try {
    CASCADE_RL_NCCL_CHECK(failing_nccl_call(42));
    FAIL() << "expected nccl_error";
  } catch (const cr::nccl_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("failing_nccl_call(42)"), std::string::npos) << message;
    EXPECT_NE(message.find("nccl_checks.cpp:"), std::string::npos) << message;
    EXPECT_NE(message.find(ncclGetErrorString(ncclInvalidArgument)), std::string::npos) << message;
    EXPECT_EQ(e.code(), ncclInvalidArgument);
  }
  try {
    CASCADE_RL_CUDA_CHECK(failing_cuda_call(7));
    FAIL() << "expected cuda_error";
  } catch (const cr::cuda_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("failing_cuda_call(7)"), std::string::npos) << message;
    EXPECT_NE(message.find("cudaErrorInvalidValue"), std::string::npos) << message;
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
  }
  EXPECT_NO_THROW(CASCADE_RL_NCCL_CHECK(ncclSuccess));
  EXPECT_NO_THROW(CASCADE_RL_NCCL_CHECK(ncclInProgress));  // a non-blocking call still running
  EXPECT_NO_THROW(CASCADE_RL_CUDA_CHECK(cudaSuccess));
}

TEST(NcclChecks, ErrorsAreCommErrors) {
  static_assert(std::is_base_of_v<cr::comm_error, cr::nccl_error>);
  static_assert(std::is_base_of_v<cr::comm_error, cr::cuda_error>);
  static_assert(std::is_base_of_v<std::runtime_error, cr::comm_error>);
}

TEST(NcclChecks, NoThrowFormsReportAndReturnFalse) {
  ::testing::internal::CaptureStderr();
  const bool nccl_ok = CASCADE_RL_NCCL_CHECK_NO_THROW(failing_nccl_call(1));
  const bool cuda_ok = CASCADE_RL_CUDA_CHECK_NO_THROW(failing_cuda_call(2));
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(nccl_ok);
  EXPECT_FALSE(cuda_ok);
  EXPECT_NE(printed.find("failing_nccl_call(1)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("failing_cuda_call(2)"), std::string::npos) << printed;
  EXPECT_TRUE(CASCADE_RL_NCCL_CHECK_NO_THROW(ncclSuccess));
}

}  // namespace
