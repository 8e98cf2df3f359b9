// cascade_rl::math on the GPU gives the host's bits: each function on the same inputs
// (edge cases, random bit patterns, the ranges the losses use), once in a kernel and
// once on the host, compared bit for bit. Without a device every case skips; building
// this file is itself the check that the header compiles as device code (nvcc, default
// -fmad=true: the header must not depend on it). Registered by
// tests/core/elementary_functions.cmake.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cascade_rl/core/elementary_functions.hpp"

namespace {

namespace math = cascade_rl::math;

enum class function { exp, expm1, log, log1p };

template <function F>
__host__ __device__ double apply(double x) {
  if constexpr (F == function::exp) return math::exp(x);
  if constexpr (F == function::expm1) return math::expm1(x);
  if constexpr (F == function::log) return math::log(x);
  return math::log1p(x);
}

template <function F>
__global__ void apply_kernel(const double* in, double* out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = apply<F>(in[i]);
}

__global__ void float_kernel(const float* in, float* exp_out, float* log_out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    exp_out[i] = math::exp(in[i]);
    log_out[i] = math::log(in[i]);
  }
}

bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

template <class T>
struct device_buffer {
  T* data = nullptr;
  explicit device_buffer(std::size_t n) { EXPECT_EQ(cudaMalloc(&data, n * sizeof(T)), cudaSuccess); }
  ~device_buffer() { cudaFree(data); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

std::vector<double> double_inputs() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x = {0.0, -0.0, 1.0, -1.0, 0x1p-1074, 0x1p-1022, 0x1p-60, -0x1p-60,
                           709.782712893384, 709.7827128933841, -745.1332191019411,
                           -745.1332191019412, -0x1.fffffffffffffp-1, 37.42994775023705,
                           0x1.fffffffffffffp1023, inf, -inf,
                           std::numeric_limits<double>::quiet_NaN()};
  std::mt19937_64 rng(7);
  for (int i = 0; i < (1 << 20); ++i) {
    std::uint64_t u = rng();
    double v;
    std::memcpy(&v, &u, sizeof v);
    x.push_back(v);  // any bit pattern
    x.push_back(std::uniform_real_distribution<double>(-750.0, 750.0)(rng));
    x.push_back(std::uniform_real_distribution<double>(-2.0, 2.0)(rng));
  }
  return x;
}

template <function F>
void expect_device_equals_host(const std::vector<double>& x) {
  const std::size_t n = x.size();
  device_buffer<double> in(n), out(n);
  ASSERT_EQ(cudaMemcpy(in.data, x.data(), n * sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
  apply_kernel<F><<<static_cast<unsigned>((n + 255) / 256), 256>>>(in.data, out.data, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> device(n);
  ASSERT_EQ(cudaMemcpy(device.data(), out.data, n * sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
  int differences = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double host = apply<F>(x[i]);
    if (__builtin_bit_cast(std::uint64_t, host) != __builtin_bit_cast(std::uint64_t, device[i]) &&
        ++differences <= 5)
      ADD_FAILURE() << "function " << static_cast<int>(F) << " at " << x[i] << " (index " << i
                    << "): host " << host << ", device " << device[i];
  }
  EXPECT_EQ(differences, 0);
}

TEST(ElementaryFunctionsDevice, DoubleFunctionsGiveHostBits) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device";
  const std::vector<double> x = double_inputs();
  expect_device_equals_host<function::exp>(x);
  expect_device_equals_host<function::expm1>(x);
  expect_device_equals_host<function::log>(x);
  expect_device_equals_host<function::log1p>(x);
}

TEST(ElementaryFunctionsDevice, FloatFunctionsGiveHostBits) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 4099) {  // every 4099th float
    float v;
    const auto bits = static_cast<std::uint32_t>(u);
    std::memcpy(&v, &bits, sizeof v);
    x.push_back(v);
  }
  const std::size_t n = x.size();
  device_buffer<float> in(n), exp_out(n), log_out(n);
  ASSERT_EQ(cudaMemcpy(in.data, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  float_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(in.data, exp_out.data, log_out.data, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> device_exp(n), device_log(n);
  ASSERT_EQ(cudaMemcpy(device_exp.data(), exp_out.data, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_log.data(), log_out.data, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  int differences = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float host_exp = math::exp(x[i]), host_log = math::log(x[i]);
    const bool same = __builtin_bit_cast(std::uint32_t, host_exp) == __builtin_bit_cast(std::uint32_t, device_exp[i]) &&
                      __builtin_bit_cast(std::uint32_t, host_log) == __builtin_bit_cast(std::uint32_t, device_log[i]);
    if (!same && ++differences <= 5)
      ADD_FAILURE() << "at " << x[i] << ": exp host " << host_exp << " device " << device_exp[i]
                    << ", log host " << host_log << " device " << device_log[i];
  }
  EXPECT_EQ(differences, 0);
}

}  // namespace
