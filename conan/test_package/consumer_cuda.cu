// A consumer of the installed cascade_rl::cuda component: GRPO advantages on the device
// for the same two groups as consumer.cpp. Without a CUDA device it says so and exits 0:
// on such a machine the test is that it compiles and links against the installed package.
#include <cascade_rl/cuda/cuda.cuh>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

int main() {
  namespace cr = cascade_rl;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("consumer_cuda: no CUDA device; built and linked only\n");
    return 0;
  }
  const std::vector<float> rewards{1, 0, 0, 1, 1, 0};
  float* d_rewards = nullptr;
  float* d_advantages = nullptr;
  cr::cuda::check(cudaMalloc(&d_rewards, rewards.size() * sizeof(float)), "cudaMalloc");
  cr::cuda::check(cudaMalloc(&d_advantages, rewards.size() * sizeof(float)), "cudaMalloc");
  cr::cuda::check(cudaMemcpy(d_rewards, rewards.data(), rewards.size() * sizeof(float),
                             cudaMemcpyHostToDevice), "cudaMemcpy");
  cr::grpo_advantages(cr::exec::cuda{},
                      cr::cuda::device_group_layout::uniform({.groups = 2, .size = 3}),
                      std::span<const float>(d_rewards, rewards.size()),
                      std::span<float>(d_advantages, rewards.size()));
  std::vector<float> advantages(rewards.size());
  cr::cuda::check(cudaMemcpy(advantages.data(), d_advantages, advantages.size() * sizeof(float),
                             cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d_rewards);
  cudaFree(d_advantages);

  const double a = 1.0 / std::sqrt(3.0);  // as consumer.cpp: unbiased std sqrt(1/3)
  const double expected[] = {2 * a, -a, -a, a, a, -2 * a};
  bool ok = true;
  for (std::size_t i = 0; i < advantages.size(); ++i) {
    std::printf("sequence %zu: advantage %+.6f\n", i, advantages[i]);
    ok = ok && std::abs(advantages[i] - expected[i]) < 1e-5;
  }
  return ok ? 0 : 1;
}
