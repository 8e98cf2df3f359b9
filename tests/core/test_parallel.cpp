#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace {
namespace parallel_cases {  // this file's names, apart in the area's unity build

namespace exec = cascade_rl::exec;
namespace detail = cascade_rl::detail;

std::vector<double> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1e3);
  std::vector<double> values(n);
  for (auto& v : values) v = normal(rng);
  return values;
}

// Bit equality: floating-point sums depend on order, so equal bits prove equal order.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(BlockedSum, SameBitsForEveryThreadCount) {
  const auto values = random_values(10 * detail::reduce_block_size + 17, 1);
  const auto term = [&](std::size_t i) { return values[i]; };
  const double sequential = detail::blocked_sum(exec::seq, values.size(), term);
  for (int threads : {1, 2, 7}) {
    const double parallel = detail::blocked_sum(exec::par.with_threads(threads), values.size(), term);
    EXPECT_TRUE(same_bits(sequential, parallel)) << threads << " threads";
  }
}

// The canonical order (canonical_sum.hpp), written out plainly: in each block of
// reduce_block_size terms, lane j sums terms j, j + 32, ... from 0.0; the lanes fold by
// the tree 16, 8, 4, 2, 1; the block sums are added in block order. Sizes cover a partial
// lane row, whole blocks, more than eight blocks and a partial last block.
double canonical_reference(const std::vector<double>& values) {
  const std::size_t block = detail::reduce_block_size;
  double total = 0.0;
  for (std::size_t first = 0; first < values.size(); first += block) {
    double lane[32] = {};
    for (std::size_t i = first; i < std::min(first + block, values.size()); ++i)
      lane[(i - first) % 32] += values[i];
    for (std::size_t width = 16; width > 0; width /= 2)
      for (std::size_t j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
    total += lane[0];
  }
  return total;
}

TEST(BlockedSum, IsTheCanonicalOrder) {
  const std::size_t block = detail::reduce_block_size;
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{47}, block, 3 * block + 1,
                              9 * block + 300}) {
    const auto values = random_values(n, 3);
    const double expected = canonical_reference(values);
    const auto term = [&](std::size_t i) { return values[i]; };
    EXPECT_TRUE(same_bits(detail::blocked_sum(exec::seq, n, term), expected)) << n;
    for (int threads : {1, 2, 7})
      EXPECT_TRUE(same_bits(detail::blocked_sum(exec::par.with_threads(threads), n, term), expected))
          << n << " terms, " << threads << " threads";
    // The one-block statement the per-block executors use is the same order.
    double blocks = 0.0;
    for (std::size_t first = 0; first < n; first += block)
      blocks += detail::canonical_block_sum(first, std::min(first + block, n), term);
    EXPECT_TRUE(same_bits(blocks, expected)) << n;
  }
}

// The order is a real constraint, not a tautology: the in-order sum of the same terms
// (the library's order before the canonical one) gives other bits on these values.
TEST(BlockedSum, DiffersFromTheInOrderSum) {
  const auto values = random_values(3 * detail::reduce_block_size + 1, 3);
  double in_order = 0.0;
  for (double v : values) in_order += v;
  EXPECT_FALSE(same_bits(canonical_reference(values), in_order));
}

// chunked_blocked_sum hands each block's indices to `terms` in order, chunk after chunk,
// with that block's own state, and joins the states in block order.
TEST(ChunkedBlockedSum, EachBlockSeesItsIndicesInOrder) {
  struct visits {
    std::size_t first = detail::no_index;  // first index seen
    std::size_t next = 0;                  // index expected next
    std::size_t count = 0;
    bool in_order = true;
  };
  const std::size_t n = 18 * detail::reduce_block_size + 9;
  for (int threads : {1, 3}) {
    std::vector<visits> joined;
    const auto result = detail::chunked_blocked_sum(
        exec::par.with_threads(threads), n, visits{},
        [&](visits& v, std::size_t first, std::size_t last, double* out) {
          if (v.first == detail::no_index) v.first = first;
          else if (first != v.next) v.in_order = false;
          for (std::size_t i = first; i < last; ++i) out[i - first] = 1.0;
          v.count += last - first;
          v.next = last;
        },
        [&](visits& total, const visits& block) {
          joined.push_back(block);
          total.count += block.count;
        });
    EXPECT_EQ(result.sums[0], static_cast<double>(n));
    EXPECT_EQ(result.state.count, n);
    ASSERT_EQ(joined.size(), (n + detail::reduce_block_size - 1) / detail::reduce_block_size);
    for (std::size_t b = 0; b < joined.size(); ++b) {
      EXPECT_EQ(joined[b].first, b * detail::reduce_block_size) << b;
      EXPECT_EQ(joined[b].next, std::min(n, (b + 1) * detail::reduce_block_size)) << b;
      EXPECT_TRUE(joined[b].in_order) << b;
    }
  }
}

TEST(BlockedSum, MatchesAPlainSumWithinRounding) {
  const auto values = random_values(3 * detail::reduce_block_size, 2);
  double plain = 0;
  for (double v : values) plain += v;
  const double blocked =
      detail::blocked_sum(exec::par, values.size(), [&](std::size_t i) { return values[i]; });
  EXPECT_NEAR(blocked, plain, 1e-9 * std::abs(plain) + 1e-6);
  EXPECT_EQ(detail::blocked_sum(exec::seq, 0, [](std::size_t) { return 1.0; }), 0.0);
}

TEST(ForEachIndex, VisitsEveryIndexOnceUnderEachPolicy) {
  const std::size_t n = 5 * detail::parallel_threshold + 3;
  for (int threads : {1, 2, 7}) {
    std::vector<int> visits(n, 0);
    detail::for_each_index(exec::par.with_threads(threads), n, [&](std::size_t i) { ++visits[i]; });
    EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), static_cast<long>(n)) << threads;
  }
  std::vector<int> visits(n, 0);
  detail::for_each_index(exec::seq, n, [&](std::size_t i) { ++visits[i]; });
  EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), static_cast<long>(n));
}

TEST(FirstIndexWhere, FindsTheSmallestIndexAcrossBlocks) {
  const std::size_t n = 6 * detail::reduce_block_size;
  const std::size_t first = 2 * detail::reduce_block_size + 5;
  const auto bad = [&](std::size_t i) { return i == first || i == first + 7 || i > 5 * detail::reduce_block_size; };
  for (int threads : {1, 2, 7})
    EXPECT_EQ(detail::first_index_where(exec::par.with_threads(threads), n, bad), first);
  EXPECT_EQ(detail::first_index_where(exec::seq, n, [](std::size_t) { return false; }),
            detail::no_index);
}

TEST(RequireFinite, NamesTheArgumentAndTheFirstBadIndex) {
  std::vector<float> values(9000, 1.0f);
  values[5000] = std::numeric_limits<float>::infinity();
  values[8000] = std::numeric_limits<float>::quiet_NaN();
  try {
    detail::require_finite(exec::par.with_threads(2), std::span<const float>(values), "rewards");
    FAIL() << "expected cascade_rl::error";
  } catch (const cascade_rl::error& e) {
    EXPECT_EQ(std::string(e.what()), "cascade_rl: rewards[5000]: is infinite");
  }
  values[5000] = 1.0f;
  try {
    detail::require_finite(exec::seq, std::span<const float>(values), "rewards");
    FAIL() << "expected cascade_rl::error";
  } catch (const cascade_rl::error& e) {
    EXPECT_EQ(std::string(e.what()), "cascade_rl: rewards[8000]: is NaN");
  }
}

TEST(RequireSize, StatesBothCounts) {
  try {
    detail::require_size(3, 4, "advantages", "one per sequence");
    FAIL() << "expected cascade_rl::error";
  } catch (const cascade_rl::error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cascade_rl: advantages: has 3 entries, expected 4 (one per sequence)");
  }
}

}  // namespace parallel_cases
}  // namespace
