// Prints the bits that cascade_rl::math's functions give on a fixed set of inputs, one
// line per fact. tests/core/elementary_functions.cmake builds this one source several
// times with different flags (baseline -O2; -O3 -march=native -ffp-contract=fast; ...)
// and tests/support/bitwise_fingerprint_runner.cpp compares the outputs line by line. The inputs are
// made with integer arithmetic only, so that the flags cannot change them, and go
// through plain loops over arrays, the code that vectorises and that contraction hits.
//
// The last line, `control`, is a plain a * b + c over the same inputs: it must differ
// between a build that contracts and one that does not, which shows that the
// contracting build really fused (the comparison would prove nothing otherwise).

// FINGERPRINT_DEVICE_PATH: the header's device branch (__CUDA_ARCH__) compiled on the
// host, with the CUDA intrinsics it calls modelled here (the rounded operations as calls,
// which no compiler fuses): a check of that branch's logic without a GPU.
#if defined(FINGERPRINT_DEVICE_PATH)
#define __CUDA_ARCH__ 800
[[gnu::noinline]] double __dmul_rn(double a, double b) { return a * b; }
[[gnu::noinline]] float __fmul_rn(float a, float b) { return a * b; }
[[gnu::noinline]] double __ddiv_rn(double a, double b) { return a / b; }
[[gnu::noinline]] double __dsqrt_rn(double x) { return __builtin_sqrt(x); }
long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
#endif

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "cascade_rl/core/elementary_functions.hpp"

namespace {

namespace math = cascade_rl::math;

struct splitmix64 {
  std::uint64_t state;
  std::uint64_t operator()() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }
};

std::uint64_t bits_of(double x) { return __builtin_bit_cast(std::uint64_t, x); }
std::uint32_t bits_of(float x) { return __builtin_bit_cast(std::uint32_t, x); }

// A double spread evenly over [-range, range]: an integer times a power of two (exact).
double uniform(splitmix64& g, double range) {
  const auto k = static_cast<std::int64_t>(g() >> 11) - (std::int64_t{1} << 52);  // |k| <= 2^52
  return static_cast<double>(k) * 0x1p-52 * range;  // range a power of two: exact
}

// Any positive finite double, every binade equally likely.
double positive_bits(splitmix64& g) {
  std::uint64_t u = g() & 0x7fffffffffffffff;
  if ((u >> 52) == 0x7ff) u &= 0x7fefffffffffffff;
  return __builtin_bit_cast(double, u);
}

float positive_bits_float(splitmix64& g) {
  std::uint32_t u = static_cast<std::uint32_t>(g() >> 33);
  if ((u >> 23) == 0xff) u &= 0x7f7fffff;
  return __builtin_bit_cast(float, u);
}

template <class T>
std::uint64_t fnv1a(const std::vector<T>& values) {
  std::uint64_t h = 0xcbf29ce484222325;
  for (const T v : values) {
    std::uint64_t b = bits_of(v);
    for (std::size_t i = 0; i < sizeof(T); ++i, b >>= 8) h = (h ^ (b & 0xff)) * 0x100000001b3;
  }
  return h;
}

// The loops whose bits are compared: plain, so that -O3 vectorises them.
template <class T, class F>
std::vector<T> apply(const std::vector<T>& in, F f) {
  std::vector<T> out(in.size());
  const T* src = in.data();
  T* dst = out.data();
  for (std::size_t i = 0; i < in.size(); ++i) dst[i] = f(src[i]);
  return out;
}

template <class T, class F>
void report(const char* name, const std::vector<T>& inputs, F f) {
  const std::vector<T> out = apply(inputs, f);
  std::printf("%s %zu %016" PRIx64 "\n", name, out.size(), fnv1a(out));
  // The first inputs are the named edge cases: one line each, readable in a failure.
  for (std::size_t i = 0; i < 48 && i < out.size(); ++i)
    std::printf("%s(%a) = %a\n", name, static_cast<double>(inputs[i]), static_cast<double>(out[i]));
}

std::vector<double> edges_double() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  return {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp-1023,
          0x1p-60, -0x1p-60, 0x1p-54, -0x1p-54, 0x1p-30, 1e-10, -1e-10, 0x1.62e42fefa39efp-1,
          -0x1.62e42fefa39efp-1, 0.3465735902799726, -0.3465735902799726, 709.782712893384,
          709.7827128933841, 710.0, -708.3964185322641, -708.4, -744.44, -745.1332191019411,
          -745.1332191019412, -746.0, 40.0, 37.42994775023705, 36.7, -36.7, -45.0, -50.0,
          1e300, 0x1.fffffffffffffp1023, -0x1.fffffffffffffp-1, -0.5, 0.9999999999999999,
          1.0000000000000002, 3.0, 10.0, -inf, inf, nan, -nan, 1e-300};
}

std::vector<float> edges_float() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  return {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 0x1p-149f, 0x1p-126f, 0x1.fffffcp-127f,
          0x1p-30f, -0x1p-30f, 0x1p-25f, 0.34657359f, -0.34657359f, 88.72283f, 88.72284f,
          89.0f, -87.33654f, -87.5f, -103.2789f, -103.97208f, -104.0f, -110.0f, 20.0f, -20.0f,
          3.4028235e38f, 1e-38f, 10.0f, -10.0f, -inf, inf, nan, -nan};
}

}  // namespace

int main() {
  splitmix64 g{20260101};
  constexpr std::size_t count = std::size_t{1} << 18;

  std::vector<double> wide = edges_double(), unit = edges_double(), positive = edges_double(),
                      from_minus_one = edges_double();
  for (std::size_t i = 0; i < count; ++i) {
    wide.push_back(uniform(g, 1024.0));
    unit.push_back(uniform(g, 1.0));
    positive.push_back(positive_bits(g));
    from_minus_one.push_back(uniform(g, 1.0) + uniform(g, 2.0) * 0x1p-40);
  }
  std::vector<float> wide_f = edges_float(), unit_f = edges_float(), positive_f = edges_float();
  for (std::size_t i = 0; i < count; ++i) {
    wide_f.push_back(static_cast<float>(uniform(g, 128.0)));
    unit_f.push_back(static_cast<float>(uniform(g, 1.0)));
    positive_f.push_back(positive_bits_float(g));
  }

  report("exp", wide, [](double x) { return math::exp(x); });
  report("exp_unit", unit, [](double x) { return math::exp(x); });
  report("expm1", wide, [](double x) { return math::expm1(x); });
  report("expm1_unit", unit, [](double x) { return math::expm1(x); });
  report("log", positive, [](double x) { return math::log(x); });
  report("log_negative", wide, [](double x) { return math::log(x); });
  report("log1p", from_minus_one, [](double x) { return math::log1p(x); });
  report("log1p_wide", wide, [](double x) { return math::log1p(x); });
  report("log1p_positive", positive, [](double x) { return math::log1p(x); });
  report("expf", wide_f, [](float x) { return math::exp(x); });
  report("expf_unit", unit_f, [](float x) { return math::exp(x); });
  report("logf", positive_f, [](float x) { return math::log(x); });

  std::vector<double> control(unit.size());
  for (std::size_t i = 0; i < unit.size(); ++i) control[i] = unit[i] * wide[i] + positive[i % 64];
  std::printf("control %zu %016" PRIx64 "\n", control.size(), fnv1a(control));
  return 0;
}
