// core/vector_lanes.hpp: the in-register transpose GRPO's tile moves rewards with, for
// every width it is written out for (2, 4 and 8 doubles; the 8-lane form is what an
// AVX-512 build uses, checked here on any target since GCC lowers a wide vector to
// narrower ones), and the last-bit clearing that keeps products unfused.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cascade_rl/core/vector_lanes.hpp"

namespace {

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

}  // namespace
