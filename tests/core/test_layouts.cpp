#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace layouts_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;

TEST(TokenLayout, ReportsSequencesTokensAndValidCounts) {
  const std::vector<std::int64_t> offsets{0, 3, 3, 7};
  const std::vector<std::uint8_t> mask{1, 0, 1, 1, 1, 0, 0};
  const token_layout layout(offsets, mask);
  EXPECT_EQ(layout.sequences(), 3u);
  EXPECT_EQ(layout.tokens(), 7u);
  EXPECT_EQ(layout.length(0), 3u);
  EXPECT_EQ(layout.length(1), 0u);
  EXPECT_EQ(layout.valid_tokens(0), 2u);
  EXPECT_EQ(layout.valid_tokens(1), 0u);
  EXPECT_EQ(layout.valid_tokens(2), 2u);
  EXPECT_FALSE(layout.valid(1));
  EXPECT_TRUE(layout.valid(4));
}

TEST(TokenLayout, WithoutMaskEveryTokenIsValid) {
  const std::vector<std::int64_t> offsets = cascade_rl::padded_offsets(2, 4);
  EXPECT_EQ(offsets, (std::vector<std::int64_t>{0, 4, 8}));
  const token_layout layout(offsets);
  EXPECT_FALSE(layout.has_mask());
  EXPECT_EQ(layout.valid_tokens(1), 4u);
}

TEST(TokenLayout, PaddedLayoutNeedsNoOffsetsArray) {
  const std::vector<std::uint8_t> mask{1, 1, 0, 0, 1, 0, 1, 1, 1};
  const auto layout = token_layout::padded(3, 3, mask);
  EXPECT_TRUE(layout.is_padded());
  EXPECT_EQ(layout.sequences(), 3u);
  EXPECT_EQ(layout.tokens(), 9u);
  EXPECT_EQ(layout.begin(1), 3u);
  EXPECT_EQ(layout.end(2), 9u);
  EXPECT_EQ(layout.valid_tokens(0), 2u);
  EXPECT_EQ(layout.valid_tokens(1), 1u);
  EXPECT_EQ(layout.valid_tokens(2), 3u);
  // The same layout through an offsets array answers every question the same way.
  const std::vector<std::int64_t> offsets = cascade_rl::padded_offsets(3, 3);
  const token_layout ragged(offsets, mask);
  EXPECT_FALSE(ragged.is_padded());
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(layout.begin(s), ragged.begin(s));
    EXPECT_EQ(layout.end(s), ragged.end(s));
    EXPECT_EQ(layout.valid_tokens(s), ragged.valid_tokens(s));
  }
  const auto empty = token_layout::padded(0, 5);
  EXPECT_EQ(empty.tokens(), 0u);
  expect_error_naming([&] { (void)token_layout::padded(2, 4, mask); }, "mask");
}

// A layout views its offsets and mask; built from a temporary container it would read
// freed memory after the statement (`token_layout t(padded_offsets(4, 8));` compiled and
// was a heap-use-after-free under AddressSanitizer). Such calls must not compile, while
// lvalues and spans (views the caller vouches for) still bind.
using offsets_vector = std::vector<std::int64_t>;
using mask_vector = std::vector<std::uint8_t>;
static_assert(!std::is_constructible_v<token_layout, offsets_vector>);
static_assert(!std::is_constructible_v<token_layout, offsets_vector&&>);
static_assert(!std::is_constructible_v<token_layout, offsets_vector, const mask_vector&>);
static_assert(!std::is_constructible_v<token_layout, const offsets_vector&, mask_vector>);
static_assert(!std::is_constructible_v<token_layout, offsets_vector, mask_vector>);
static_assert(std::is_constructible_v<token_layout, const offsets_vector&>);
static_assert(std::is_constructible_v<token_layout, offsets_vector&, mask_vector&>);
static_assert(std::is_constructible_v<token_layout, std::span<const std::int64_t>>);
static_assert(std::is_constructible_v<token_layout, std::span<const std::int64_t>,
                                      std::span<const std::uint8_t>>);
template <class Mask>
concept padded_accepts_mask = requires(Mask&& mask) {
  token_layout::padded(1, 1, static_cast<Mask&&>(mask));
};
static_assert(!padded_accepts_mask<mask_vector>);
static_assert(padded_accepts_mask<const mask_vector&>);
static_assert(padded_accepts_mask<std::span<const std::uint8_t>>);
// group_layout views its offsets the same way.
static_assert(!std::is_constructible_v<group_layout, offsets_vector>);
static_assert(std::is_constructible_v<group_layout, const offsets_vector&>);

TEST(TokenLayout, RefusesBadOffsetsAndMasks) {
  const std::vector<std::int64_t> none;
  expect_error_naming([&] { token_layout{none}; }, "offsets");
  const std::vector<std::int64_t> not_from_zero{1, 3};
  expect_error_naming([&] { token_layout{not_from_zero}; }, "offsets[0]");
  const std::vector<std::int64_t> decreasing{0, 4, 2, 6};
  expect_error_naming([&] { token_layout{decreasing}; }, "offsets[2]");
  const std::vector<std::int64_t> offsets{0, 2, 5};
  const std::vector<std::uint8_t> short_mask{1, 1, 1};
  expect_error_naming([&] { token_layout(offsets, short_mask); }, "mask");
}

TEST(TokenLayout, ErrorIsAStandardInvalidArgument) {
  const std::vector<std::int64_t> decreasing{0, 4, 2};
  EXPECT_THROW(token_layout{decreasing}, std::invalid_argument);
}

TEST(GroupLayout, UniformGroups) {
  const auto groups = group_layout::uniform({.groups = 3, .size = 4});
  EXPECT_EQ(groups.groups(), 3u);
  EXPECT_EQ(groups.sequences(), 12u);
  EXPECT_EQ(groups.begin(2), 8u);
  EXPECT_EQ(groups.end(2), 12u);
  EXPECT_TRUE(groups.is_uniform());
}

// The counts go by name: two bare counts, which a swap would pass unnoticed, do not compile.
template <class Layout>
concept takes_two_bare_counts = requires {
  Layout::uniform(std::size_t{2}, std::size_t{3});
};
template <class Layout>
concept takes_named_shape = requires {
  Layout::uniform({.groups = 2, .size = 3});
};
static_assert(!takes_two_bare_counts<group_layout>);
static_assert(takes_named_shape<group_layout>);

TEST(GroupLayout, GroupsFromOffsets) {
  const std::vector<std::int64_t> offsets{0, 5, 6, 9};
  const group_layout groups(offsets);
  EXPECT_EQ(groups.groups(), 3u);
  EXPECT_EQ(groups.sequences(), 9u);
  EXPECT_EQ(groups.size(1), 1u);
  EXPECT_EQ(groups.begin(2), 6u);
}

TEST(GroupLayout, RefusesEmptyAndMalformedGroups) {
  expect_error_naming([] { (void)group_layout::uniform({.groups = 2, .size = 0}); },
                      "uniform_groups.size");
  expect_error_naming([] { (void)group_layout::uniform({.groups = 2}); }, "uniform_groups.size");
  const std::vector<std::int64_t> empty_group{0, 2, 2, 4};
  expect_error_naming([&] { group_layout{empty_group}; }, "group_offsets[2]");
  const std::vector<std::int64_t> not_from_zero{3, 4};
  expect_error_naming([&] { group_layout{not_from_zero}; }, "group_offsets[0]");
  const std::vector<std::int64_t> decreasing{0, 3, 1};
  expect_error_naming([&] { group_layout{decreasing}; }, "group_offsets[2]");
  const std::vector<std::int64_t> offsets{0, 2, 4};
  expect_error_naming([&] { group_layout(offsets).require_sequences(5, "rewards"); }, "rewards");
}

}  // namespace layouts_cases
}  // namespace
