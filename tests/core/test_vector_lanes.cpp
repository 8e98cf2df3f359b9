// core/vector_lanes.hpp: the in-register transpose GRPO's tile moves rewards with, for
// every width it is written out for (2, 4 and 8 doubles; the 8-lane form is what an
// AVX-512 build uses, checked here on any target since GCC lowers a wide vector to
// narrower ones), the last-bit clearing that keeps products unfused, and the square root
// lane by lane (the x86 vector instruction where there is one) that GRPO's tile takes its
// stds with.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>

#include "cascade_rl/core/vector_lanes.hpp"

namespace {
namespace vector_lanes_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;

template <std::size_t W>
void expect_transposed() {
  typedef double lanes __attribute__((vector_size(W * sizeof(double))));
  lanes v[W];
  for (std::size_t j = 0; j < W; ++j)
    for (std::size_t l = 0; l < W; ++l) v[j][l] = static_cast<double>(10 * j + l);
  cr::detail::transpose_lanes(v);
  for (std::size_t j = 0; j < W; ++j)
    for (std::size_t l = 0; l < W; ++l)
      EXPECT_EQ(v[j][l], static_cast<double>(10 * l + j)) << "W " << W << ", vector " << j << ", lane " << l;
  cr::detail::transpose_lanes(v);  // a transpose undoes itself
  for (std::size_t j = 0; j < W; ++j)
    for (std::size_t l = 0; l < W; ++l) EXPECT_EQ(v[j][l], static_cast<double>(10 * j + l));
}

TEST(VectorLanes, TransposeMovesLaneLOfVectorJToLaneJOfVectorL) {
  expect_transposed<2>();
  expect_transposed<4>();
  expect_transposed<8>();
}

TEST(VectorLanes, ClearLastBitClearsOnlyTheLastSignificandBit) {
  typedef double lanes __attribute__((vector_size(4 * sizeof(double))));
  const double values[4] = {1.0 / 3.0, -2.0 / 7.0, 1.0, 0x1.0000000000001p0};
  lanes v;
  std::memcpy(&v, values, sizeof v);
  cr::detail::clear_last_bit(v);
  for (std::size_t l = 0; l < 4; ++l) {
    std::uint64_t before = 0, after = 0;
    std::memcpy(&before, &values[l], sizeof before);
    const double cleared = v[l];
    std::memcpy(&after, &cleared, sizeof after);
    EXPECT_EQ(after, before & ~std::uint64_t{1}) << "lane " << l;
  }
  float f = 0x1.000002p0f;  // last significand bit set
  cr::detail::clear_last_bit(f);
  EXPECT_EQ(f, 1.0f);
}

typedef double two_lanes __attribute__((vector_size(2 * sizeof(double))));
typedef double four_lanes __attribute__((vector_size(4 * sizeof(double))));
typedef double eight_lanes __attribute__((vector_size(8 * sizeof(double))));

// The widths are named: GCC 12 drops the vector attribute of a typedef whose size depends
// on a template parameter in some uses (a call to the sqrt_lanes overloads was one).
template <class lanes>
void expect_sqrt_lanes_bits() {
  constexpr std::size_t W = sizeof(lanes) / sizeof(double);
  const double values[] = {0.0,        -0.0,        2.0,  1.0 / 3.0,
                           0x1.fffffffffffffp1023,  0x0.0000000000001p-1022,
                           std::numeric_limits<double>::infinity(),
                           7.25e-300,  1e300,       0.5,  123456.789,
                           3.0,        1e-5,        2.5e10, 0x1.8p-1000, 42.0};
  for (std::size_t first = 0; first + W <= std::size(values); first += W) {
    lanes v;
    std::memcpy(&v, values + first, sizeof v);
    cr::detail::sqrt_lanes(v);
    for (std::size_t l = 0; l < W; ++l) {
      double one = values[first + l];
      cr::detail::sqrt_lanes(one);  // math::sqrt, the scalar reference
      const double lane = v[l];
      EXPECT_EQ(std::memcmp(&lane, &one, sizeof one), 0)
          << "W " << W << ", sqrt(" << values[first + l] << "): " << lane << " vs " << one;
    }
  }
}

TEST(VectorLanes, SqrtLanesGivesTheScalarSqrtsBits) {
  expect_sqrt_lanes_bits<two_lanes>();
  expect_sqrt_lanes_bits<four_lanes>();
  expect_sqrt_lanes_bits<eight_lanes>();
  double x = 2.0;
  cr::detail::sqrt_lanes(x);
  EXPECT_EQ(x, 0x1.6a09e667f3bcdp0);  // sqrt(2) correctly rounded
}

}  // namespace vector_lanes_cases
}  // namespace
