// cascade_rl::math against long double (x87 80-bit: 11 bits beyond double, so the
// reference's own error is below 2^-10 ulp of a double): the maximum error in ulp over
// about 2^22 random points per function across its whole range, within the bound the
// header states; and the special values, thresholds and tiny arguments exactly.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "cascade_rl/core/elementary_functions.hpp"

namespace {
namespace elementary_functions_cases {  // this file's names, apart in the area's unity build

namespace math = cascade_rl::math;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr float inf_f = std::numeric_limits<float>::infinity();
constexpr int points = 1 << 22;

bool reference_is_precise() { return std::numeric_limits<long double>::digits >= 64; }

// |got - ref| in units of the spacing of doubles (or floats) at ref; subnormal results
// in units of the smallest subnormal. Where ref rounds to an infinity, 0 for that
// infinity and "huge" otherwise.
template <class T>
long double ulp_error(T got, long double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0.0L : 1e30L;
  if (std::isinf(static_cast<T>(ref))) return got == static_cast<T>(ref) ? 0.0L : 1e30L;
  if (std::isnan(got)) return 1e30L;
  constexpr int digits = std::numeric_limits<T>::digits;
  constexpr int min_exponent = std::numeric_limits<T>::min_exponent;  // 2^(min-1): smallest normal
  int exponent = min_exponent;
  if (ref != 0) std::frexp(ref, &exponent);
  if (exponent < min_exponent) exponent = min_exponent;
  const long double spacing = std::ldexp(1.0L, exponent - digits);
  return std::fabs(static_cast<long double>(got) - ref) / spacing;
}

template <class T>
bool is_subnormal_result(long double ref) {
  return ref != 0 && std::fabs(ref) < static_cast<long double>(std::numeric_limits<T>::min());
}

struct worst_case {
  long double normal = 0, subnormal = 0;
  double at_normal = 0, at_subnormal = 0;
  std::string where() const {
    char text[160];
    std::snprintf(text, sizeof text, "normal results: max %.4Lf ulp at %a; subnormal results: max %.4Lf ulp at %a",
                  normal, at_normal, subnormal, at_subnormal);
    return text;
  }
};

template <class T, class Gen, class F, class Ref>
worst_case measure(Gen next_input, F f, Ref ref) {
  worst_case w;
  for (int i = 0; i < points; ++i) {
    const T x = next_input(i);
    const long double r = ref(static_cast<long double>(x));
    const long double e = ulp_error<T>(f(x), r);
    if (is_subnormal_result<T>(r)) {
      if (e > w.subnormal) w.subnormal = e, w.at_subnormal = static_cast<double>(x);
    } else if (e > w.normal) {
      w.normal = e, w.at_normal = static_cast<double>(x);
    }
  }
  return w;
}

struct inputs {
  std::mt19937_64 rng{20260101};
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
  // |x| spread over binades 2^-scale .. 2^0, either sign.
  double log_uniform(int scale) { return std::ldexp(uniform(-1.0, 1.0), -static_cast<int>(uniform(0, scale))); }
  // Any positive finite double (every binade equally likely), subnormals included.
  double positive_bits() {
    std::uint64_t u = rng() % 0x7ff0000000000000;
    double x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
  float positive_bits_float() {
    auto u = static_cast<std::uint32_t>(rng() % 0x7f800000);
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
};

#define SKIP_WITHOUT_PRECISE_REFERENCE() \
  if (!reference_is_precise()) GTEST_SKIP() << "long double has fewer than 64 bits: no reference for double"

TEST(ElementaryFunctions, ExpDoubleWithinBound) {
  SKIP_WITHOUT_PRECISE_REFERENCE();
  inputs in;
  const worst_case w = measure<double>(
      [&](int i) { return i % 3 == 0 ? in.uniform(-746.0, 710.0) : i % 3 == 1 ? in.uniform(-2.0, 2.0) : in.log_uniform(60); },
      [](double x) { return math::exp(x); }, [](long double x) { return expl(x); });
  EXPECT_LE(w.normal, 0.60L) << w.where();
  EXPECT_LE(w.subnormal, 1.0L) << w.where();
  std::printf("exp: %s\n", w.where().c_str());
}

TEST(ElementaryFunctions, Expm1DoubleWithinBound) {
  SKIP_WITHOUT_PRECISE_REFERENCE();
  inputs in;
  const worst_case w = measure<double>(
      [&](int i) { return i % 3 == 0 ? in.uniform(-50.0, 710.0) : i % 3 == 1 ? in.uniform(-2.0, 2.0) : in.log_uniform(70); },
      [](double x) { return math::expm1(x); }, [](long double x) { return expm1l(x); });
  EXPECT_LE(w.normal, 0.63L) << w.where();
  std::printf("expm1: %s\n", w.where().c_str());
}

TEST(ElementaryFunctions, LogDoubleWithinBound) {
  SKIP_WITHOUT_PRECISE_REFERENCE();
  inputs in;
  const worst_case w = measure<double>(
      [&](int i) { return i % 2 == 0 ? in.positive_bits() : in.uniform(0.5, 2.0); },
      [](double x) { return math::log(x); }, [](long double x) { return logl(x); });
  EXPECT_LE(w.normal, 0.66L) << w.where();
  std::printf("log: %s\n", w.where().c_str());
}

TEST(ElementaryFunctions, Log1pDoubleWithinBound) {
  SKIP_WITHOUT_PRECISE_REFERENCE();
  inputs in;
  const worst_case w = measure<double>(
      [&](int i) {
        switch (i % 4) {
          case 0: return in.uniform(-1.0, 2.0);
          case 1: return in.log_uniform(70);
          case 2: return -1.0 + std::ldexp(in.uniform(0.0, 1.0), -static_cast<int>(in.uniform(0, 50)));
          default: return in.positive_bits();
        }
      },
      [](double x) { return math::log1p(x); }, [](long double x) { return log1pl(x); });
  EXPECT_LE(w.normal, 0.69L) << w.where();
  std::printf("log1p: %s\n", w.where().c_str());
}

TEST(ElementaryFunctions, ExpFloatWithinBound) {
  inputs in;
  const worst_case w = measure<float>(
      [&](int i) {
        return static_cast<float>(i % 3 == 0 ? in.uniform(-104.0, 89.0) : i % 3 == 1 ? in.uniform(-2.0, 2.0) : in.log_uniform(30));
      },
      [](float x) { return math::exp(x); }, [](long double x) { return expl(x); });
  EXPECT_LE(w.normal, 0.66L) << w.where();
  EXPECT_LE(w.subnormal, 1.0L) << w.where();
  std::printf("exp(float): %s\n", w.where().c_str());
}

TEST(ElementaryFunctions, LogFloatWithinBound) {
  inputs in;
  const worst_case w = measure<float>(
      [&](int i) { return i % 2 == 0 ? in.positive_bits_float() : static_cast<float>(in.uniform(0.5, 2.0)); },
      [](float x) { return math::log(x); }, [](long double x) { return logl(x); });
  EXPECT_LE(w.normal, 0.501L) << w.where();
  std::printf("log(float): %s\n", w.where().c_str());
}

// Bits, not values: -0 and +0 differ, and every NaN is the canonical quiet NaN.
template <class T>
auto bits(T x) {
  if constexpr (sizeof(T) == 8) return __builtin_bit_cast(std::uint64_t, x);
  else return __builtin_bit_cast(std::uint32_t, x);
}
#define EXPECT_BITS(got, want) EXPECT_EQ(bits(got), bits(want)) << #got << " = " << (got) << ", want " << (want)

TEST(ElementaryFunctions, SpecialValuesOfExp) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double payload_nan = __builtin_bit_cast(double, std::uint64_t{0x7ff8000000001234});
  EXPECT_BITS(math::exp(0.0), 1.0);
  EXPECT_BITS(math::exp(-0.0), 1.0);
  EXPECT_BITS(math::exp(inf), inf);
  EXPECT_BITS(math::exp(-inf), 0.0);
  EXPECT_BITS(math::exp(nan), nan);
  EXPECT_BITS(math::exp(-nan), nan);
  EXPECT_BITS(math::exp(payload_nan), nan);
  // Overflow: exp(709.782712893384) = 1.797693134862273e308 < DBL_MAX; the next double overflows.
  EXPECT_TRUE(std::isfinite(math::exp(709.782712893384)));
  EXPECT_BITS(math::exp(709.7827128933841), inf);
  EXPECT_BITS(math::exp(1000.0), inf);
  // Underflow through the subnormals: e^-745.1332191019411 rounds up to 2^-1074, the
  // next double below rounds to +0.
  EXPECT_BITS(math::exp(-745.1332191019411), 0x1p-1074);
  EXPECT_BITS(math::exp(-745.1332191019412), 0.0);
  EXPECT_BITS(math::exp(-1000.0), 0.0);
  const double near_smallest_normal = -708.3964185322641;  // e^it ~ 2^-1022
  EXPECT_LE(ulp_error(math::exp(near_smallest_normal), expl(near_smallest_normal)), 1.0L);
  // Tiny arguments: e^x rounds to 1 (or to the double just below 1).
  EXPECT_BITS(math::exp(0x1p-60), 1.0);
  EXPECT_BITS(math::exp(-0x1p-60), 1.0);
  EXPECT_BITS(math::exp(-0x1p-53), 0x1.fffffffffffffp-1);
  EXPECT_BITS(math::exp(1.0), 0x1.5bf0a8b145769p+1);  // e, correctly rounded
  EXPECT_BITS(math::exp(0x1.62e42fefa39efp-1), 2.0);  // ln 2 rounded: e^it rounds to 2
}

TEST(ElementaryFunctions, SpecialValuesOfExpm1) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_BITS(math::expm1(0.0), 0.0);
  EXPECT_BITS(math::expm1(-0.0), -0.0);
  EXPECT_BITS(math::expm1(inf), inf);
  EXPECT_BITS(math::expm1(-inf), -1.0);
  EXPECT_BITS(math::expm1(nan), nan);
  EXPECT_BITS(math::expm1(-50.0), -1.0);
  EXPECT_BITS(math::expm1(710.0), inf);
  EXPECT_TRUE(std::isfinite(math::expm1(709.782712893384)));
  for (const double x : {0x1p-1074, -0x1p-1074, 0x1p-1022, 0x1p-60, -0x1p-60, 0x1.fffffffffffffp-56, -0x1p-55})
    EXPECT_BITS(math::expm1(x), x);
  // Around |n| = 53, beyond which 2^a - 2^-b is no longer exact (x = +-53.5 ln 2).
  for (const double x : {36.04365338911715, 36.7368005696771, 37.08, 37.42994775023705, 38.0,
                         -36.7368005696771, -37.0, -37.08, -37.1, -37.42994775023705, -38.0})
    EXPECT_LE(ulp_error(math::expm1(x), expm1l(x)), 0.63L) << x;
}

TEST(ElementaryFunctions, SpecialValuesOfLog) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_BITS(math::log(1.0), 0.0);
  EXPECT_BITS(math::log(0.0), -inf);
  EXPECT_BITS(math::log(-0.0), -inf);
  EXPECT_BITS(math::log(inf), inf);
  EXPECT_BITS(math::log(-inf), nan);
  EXPECT_BITS(math::log(-1.0), nan);
  EXPECT_BITS(math::log(-0x1p-1074), nan);
  EXPECT_BITS(math::log(nan), nan);
  EXPECT_BITS(math::log(2.0), 0x1.62e42fefa39efp-1);
  EXPECT_BITS(math::log(0x1p-1074), -0x1.74385446d71c3p+9);  // -1074 ln 2
  for (const double x : {0x1p-1022, 0x1.fffffffffffffp1023})
    EXPECT_BITS(math::log(x), static_cast<double>(logl(x)));
  for (const double x : {0x1p-1070, 0x1.23456789abcdep-1050, 0x1.fffffffffffffp-1023})
    EXPECT_LE(ulp_error(math::log(x), logl(x)), 0.66L) << x;  // subnormal inputs are exact
}

TEST(ElementaryFunctions, SpecialValuesOfLog1p) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_BITS(math::log1p(0.0), 0.0);
  EXPECT_BITS(math::log1p(-0.0), -0.0);
  EXPECT_BITS(math::log1p(-1.0), -inf);
  EXPECT_BITS(math::log1p(-1.5), nan);
  EXPECT_BITS(math::log1p(-inf), nan);
  EXPECT_BITS(math::log1p(inf), inf);
  EXPECT_BITS(math::log1p(nan), nan);
  for (const double x : {0x1p-1074, -0x1p-1074, 0x1p-1022, 0x1p-60, -0x1p-60, 0x1.fffffffffffffp-56, -0x1p-55})
    EXPECT_BITS(math::log1p(x), x);
  // Just above -1: 1 + x is exact and tiny.
  for (const double x : {-0x1.fffffffffffffp-1, 0x1.fffffffffffffp1023})
    EXPECT_BITS(math::log1p(x), static_cast<double>(log1pl(x)));
  EXPECT_BITS(math::log1p(1.0), 0x1.62e42fefa39efp-1);
}

TEST(ElementaryFunctions, SpecialValuesOfFloatFunctions) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_BITS(math::exp(0.0f), 1.0f);
  EXPECT_BITS(math::exp(-0.0f), 1.0f);
  EXPECT_BITS(math::exp(-inf_f), 0.0f);  // exactly 0: an online log-sum-exp adds nothing
  EXPECT_BITS(math::exp(inf_f), inf_f);
  EXPECT_BITS(math::exp(nan), nan);
  EXPECT_TRUE(std::isfinite(math::exp(88.72283f)));
  EXPECT_BITS(math::exp(88.72284f), inf_f);
  EXPECT_BITS(math::exp(-103.97208f), 0x1p-149f);
  EXPECT_BITS(math::exp(-104.0f), 0.0f);
  EXPECT_BITS(math::exp(1.0f), 0x1.5bf0a8p+1f);
  EXPECT_BITS(math::log(0.0f), -inf_f);
  EXPECT_BITS(math::log(-0.0f), -inf_f);
  EXPECT_BITS(math::log(-1.0f), nan);
  EXPECT_BITS(math::log(inf_f), inf_f);
  EXPECT_BITS(math::log(1.0f), 0.0f);
  const float smallest = 0x1p-149f;
  EXPECT_BITS(math::log(smallest), static_cast<float>(logl(smallest)));
}

}  // namespace elementary_functions_cases
}  // namespace
