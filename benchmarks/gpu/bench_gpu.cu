// GPU benchmarks of the CUDA executors: each kernel's bytes moved over its time, as a
// fraction of the device's peak memory bandwidth (peak from the memory clock and bus
// width, a table by name, or CASCADE_RL_PEAK_GBPS). Plain CUDA events, no framework:
// run by benchmarks/gpu_check.sh. `--quick` runs small sizes only (a smoke test).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cascade_rl/cuda/cuda.cuh"

namespace {

namespace cr = cascade_rl;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "bench_gpu: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(2);
  }
}

double peak_bytes_per_second(int device) {
  if (const char* env = std::getenv("CASCADE_RL_PEAK_GBPS")) return std::atof(env) * 1e9;
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess &&
      clock_khz > 0 && bus_bits > 0)
    return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);  // double data rate
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const std::string name = prop.name;
  struct entry { const char* name; double gbps; };
  for (const entry e : {entry{"H200", 4800}, entry{"H100", 3350}, entry{"A100", 2039}, entry{"L40", 864}})
    if (name.find(e.name) != std::string::npos) return e.gbps * 1e9;
  return 0;
}

double g_peak = 0;

// Times `iterations` calls of f after two warm-ups; returns seconds per call.
template <class F>
double time_it(F f, int iterations) {
  f();
  f();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start), "record");
  for (int i = 0; i < iterations; ++i) f();
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3 / iterations;
}

void report(const char* name, double elements, double bytes, double seconds, double target) {
  const double fraction = g_peak > 0 ? bytes / seconds / g_peak : 0;
  std::printf("%-34s %12.0f elements %10.2f us %9.1f GB/s  fraction_of_peak %.3f  (target %.2f)%s\n", name,
              elements, seconds * 1e6, bytes / seconds / 1e9, fraction, target,
              target > 0 && fraction < target ? "  BELOW TARGET" : "");
}

template <class T>
T* device_fill(std::size_t n, T value) {
  T* p = nullptr;
  check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  std::vector<T> host(n, value);
  check(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "copy");
  return p;
}

void* device_temp(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
  return p;
}

void bench_group_advantages(std::size_t n, std::size_t group_size, double target) {
  std::vector<float> rewards(n);
  for (std::size_t i = 0; i < n; ++i) rewards[i] = static_cast<float>((i * 2654435761u >> 7) % 3) * 0.5f;
  float* d_rewards = device_fill(n, 0.0f);
  check(cudaMemcpy(d_rewards, rewards.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy");
  float* d_adv = device_fill(n, 0.0f);
  const auto groups =
      cr::cuda::device_group_layout::uniform({.groups = n / group_size, .size = group_size});
  std::size_t bytes = 0;
  check(cr::cuda::grpo_advantages<cr::cuda::default_tuning, float>(nullptr, bytes, d_rewards, groups, d_adv, nullptr, {}, nullptr), "query");
  void* temp = device_temp(bytes);
  const double seconds = time_it([&] {
    check(cr::cuda::grpo_advantages<cr::cuda::default_tuning, float>(temp, bytes, d_rewards, groups, d_adv, nullptr, {}, nullptr), "grpo");
  }, n > 1000000 ? 20 : 200);
  const std::string name = "grpo_advantages/G" + std::to_string(group_size);
  report(name.c_str(), static_cast<double>(n), 2.0 * n * sizeof(float), seconds, target);
  cudaFree(temp);
  cudaFree(d_rewards);
  cudaFree(d_adv);
}

// End-to-end latency of one small call (memset of the report + one kernel), synchronised.
void bench_small_batch_latency(std::size_t n) {
  float* d_rewards = device_fill(n, 1.0f);
  float* d_adv = device_fill(n, 0.0f);
  const auto groups = cr::cuda::device_group_layout::uniform({.groups = n / 16, .size = 16});
  std::size_t bytes = 0;
  check(cr::cuda::grpo_advantages<cr::cuda::default_tuning, float>(nullptr, bytes, d_rewards, groups, d_adv, nullptr, {}, nullptr), "query");
  void* temp = device_temp(bytes);
  const double seconds = time_it([&] {
    check(cr::cuda::grpo_advantages<cr::cuda::default_tuning, float>(temp, bytes, d_rewards, groups, d_adv, nullptr, {}, nullptr), "grpo");
  }, 1000);
  std::printf("%-34s %12zu elements %10.2f us per call (stream-ordered; target < 10 us)%s\n",
              "grpo_advantages/small_batch", n, seconds * 1e6, seconds * 1e6 >= 10 ? "  ABOVE TARGET" : "");
  cudaFree(temp);
  cudaFree(d_rewards);
  cudaFree(d_adv);
}

void bench_ppo_loss(std::size_t tokens, double target) {
  const std::size_t length = 1024;
  const std::size_t sequences = tokens / length;
  std::vector<std::int64_t> offsets(sequences + 1);
  for (std::size_t s = 0; s <= sequences; ++s) offsets[s] = static_cast<std::int64_t>(s * length);
  std::int64_t* d_offsets = device_fill<std::int64_t>(sequences + 1, 0);
  check(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "copy");
  std::uint8_t* d_mask = device_fill<std::uint8_t>(tokens, 1);
  float* logp = device_fill(tokens, -1.0f);
  float* old = device_fill(tokens, -1.1f);
  float* adv = device_fill(tokens, 0.5f);
  float* grad = device_fill(tokens, 0.0f);
  const cr::cuda::device_token_layout layout{d_offsets, d_mask, sequences, tokens};
  const cr::loss_normalizer normalizer{.mode = cr::loss_aggregation::token_mean,
                                       .tokens = static_cast<double>(tokens),
                                       .sequences = static_cast<double>(sequences)};
  cr::cuda::loss_tally* result = nullptr;
  check(cudaMalloc(&result, sizeof(*result)), "cudaMalloc");
  std::size_t bytes = 0;
  const cr::ppo_clip_options options{};
  check(cr::cuda::ppo_clip_loss<cr::cuda::default_tuning, float>(nullptr, bytes, layout, logp, old, adv, nullptr, nullptr,
                                       grad, normalizer, options, result, nullptr),
        "query");
  void* temp = device_temp(bytes);
  const double seconds = time_it(
      [&] {
        check(cr::cuda::ppo_clip_loss<cr::cuda::default_tuning, float>(temp, bytes, layout, logp, old, adv, nullptr, nullptr,
                                             grad, normalizer, options, result, nullptr),
              "ppo");
      },
      20);
  // Read: log-probs, old log-probs, advantages (4 B each), mask (1 B); write: dL/dlogp.
  report("ppo_clip_loss/token_mean", static_cast<double>(tokens), tokens * (3 * 4.0 + 1 + 4), seconds, target);
  for (void* p : {static_cast<void*>(d_offsets), static_cast<void*>(d_mask), static_cast<void*>(logp),
                  static_cast<void*>(old), static_cast<void*>(adv), static_cast<void*>(grad),
                  static_cast<void*>(result), temp})
    cudaFree(p);
}

// REINFORCE++ on a padded batch: discounted returns (a warp per sequence), then the
// batch whitening (count/sum, squares, apply).
void bench_reinforce_plus_plus(std::size_t tokens, double target) {
  const std::size_t length = 1024;
  const std::size_t sequences = tokens / length;
  std::vector<std::int64_t> offsets(sequences + 1);
  for (std::size_t s = 0; s <= sequences; ++s) offsets[s] = static_cast<std::int64_t>(s * length);
  std::int64_t* d_offsets = device_fill<std::int64_t>(sequences + 1, 0);
  check(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "copy");
  std::uint8_t* d_mask = device_fill<std::uint8_t>(tokens, 1);
  float* rewards = device_fill(tokens, 0.01f);
  float* adv = device_fill(tokens, 0.0f);
  const cr::cuda::device_token_layout layout{d_offsets, d_mask, sequences, tokens};
  const cr::reinforce_plus_plus_options options{.gamma = 0.99};
  std::size_t bytes = 0;
  check(cr::cuda::reinforce_plus_plus_advantages<cr::cuda::default_tuning, float>(nullptr, bytes, rewards, layout, adv, options, nullptr), "query");
  void* temp = device_temp(bytes);
  const double seconds = time_it([&] {
    check(cr::cuda::reinforce_plus_plus_advantages<cr::cuda::default_tuning, float>(temp, bytes, rewards, layout, adv, options, nullptr), "r++");
  }, 20);
  // Returns: read rewards and mask, write returns; whitening: read returns and mask three
  // times, write once.
  report("reinforce_plus_plus/gamma0.99", static_cast<double>(tokens), tokens * (9.0 + 5 + 5 + 9), seconds, target);
  for (void* p : {static_cast<void*>(d_offsets), static_cast<void*>(d_mask), static_cast<void*>(rewards),
                  static_cast<void*>(adv), temp})
    cudaFree(p);
}

template <class T>
void bench_log_probs(std::size_t rows, std::size_t vocab, const char* name, double target) {
  T* logits = nullptr;
  const std::size_t n = rows * vocab;
  check(cudaMalloc(&logits, n * sizeof(T)), "cudaMalloc logits");
  check(cudaMemset(logits, 0x3c, n * sizeof(T)), "memset");  // finite values in both types
  std::int64_t* labels = device_fill<std::int64_t>(rows, 7);
  float* logp = device_fill(rows, 0.0f);
  float* entropy = device_fill(rows, 0.0f);
  std::size_t bytes = 0;
  check(cr::cuda::log_probs_from_logits<cr::cuda::default_tuning, T>(nullptr, bytes, logits, rows, vocab, vocab, labels, logp, entropy,
                                           1.0f, nullptr), "query");
  void* temp = device_temp(bytes);
  const double seconds = time_it([&] {
    check(cr::cuda::log_probs_from_logits<cr::cuda::default_tuning, T>(temp, bytes, logits, rows, vocab, vocab, labels, logp, entropy,
                                             1.0f, nullptr), "log_probs");
  }, 10);
  report(name, static_cast<double>(n), static_cast<double>(n) * sizeof(T), seconds, target);
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(labels), static_cast<void*>(logp),
                  static_cast<void*>(entropy), temp})
    cudaFree(p);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int device = 0, devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_gpu: no CUDA device\n");
    return 77;
  }
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  g_peak = peak_bytes_per_second(device);
  std::printf("device: %s, peak memory bandwidth %.0f GB/s%s\n", prop.name, g_peak / 1e9,
              g_peak > 0 ? "" : " (unknown: set CASCADE_RL_PEAK_GBPS)");
  if (quick) {
    bench_group_advantages(1 << 20, 16, 0);
    bench_ppo_loss(1 << 20, 0);
    bench_reinforce_plus_plus(1 << 20, 0);
    bench_log_probs<float>(64, 32768, "log_probs/fp32/quick", 0);
    return 0;
  }
  bench_small_batch_latency(128 * 16);
  bench_group_advantages(std::size_t{1} << 27, 16, 0.85);   // 1.3e8 rewards
  bench_group_advantages(std::size_t{1} << 27, 4, 0.85);
  bench_group_advantages(std::size_t{1} << 27, 64, 0.85);
  bench_ppo_loss(std::size_t{1} << 20, 0.70);
  bench_ppo_loss(std::size_t{1} << 26, 0.70);
  bench_reinforce_plus_plus(std::size_t{1} << 26, 0);  // no target yet: not measured on a GPU
  bench_log_probs<float>(8192, 131072, "log_probs/fp32/8192x131072", 0.80);
  bench_log_probs<__nv_bfloat16>(8192, 131072, "log_probs/bf16/8192x131072", 0.80);
  bench_log_probs<__nv_bfloat16>(4096, 262144, "log_probs/bf16/4096x262144", 0.80);
  bench_log_probs<float>(1 << 20, 1024, "log_probs/fp32/1048576x1024", 0.80);
  return 0;
}
