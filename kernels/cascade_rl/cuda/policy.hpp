#pragma once
// exec::cuda: the execution policy of the device overloads, and the exception the
// throwing convenience layer raises for CUDA runtime failures.
//
//   cr::grpo_advantages(cr::exec::cuda{stream}, groups, rewards, advantages);
//
// exec::cuda is an alias of exec::cuda_policy, an aggregate holding the stream, so
// `exec::cuda{}` is the legacy default stream and `exec::cuda{s}` runs on s.

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace cascade_rl {

namespace exec {

struct cuda_policy {
  cudaStream_t stream = nullptr;
};

using cuda = cuda_policy;

}  // namespace exec

// A CUDA runtime call failed (not bad input: that is cascade_rl::error).
class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, std::string_view what)
      : std::runtime_error("cascade_rl: " + std::string(what) + ": " + cudaGetErrorName(code) +
                           " (" + cudaGetErrorString(code) + ")"),
        code_(code) {}
  [[nodiscard]] cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

namespace cuda {

// Throws cuda_error unless `code` is cudaSuccess.
inline void check(cudaError_t code, std::string_view what) {
  if (code != cudaSuccess) throw cuda_error(code, what);
}

}  // namespace cuda
}  // namespace cascade_rl

// Returns the error of a runtime call from a function that returns cudaError_t.
#define CASCADE_RL_CUDA_TRY(call)                       \
  do {                                                  \
    const cudaError_t cascade_rl_status_ = (call);      \
    if (cascade_rl_status_ != cudaSuccess) return cascade_rl_status_; \
  } while (0)
