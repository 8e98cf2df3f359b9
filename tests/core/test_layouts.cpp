#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {

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
  const auto groups = group_layout::uniform(3, 4);
  EXPECT_EQ(groups.groups(), 3u);
  EXPECT_EQ(groups.sequences(), 12u);
  EXPECT_EQ(groups.begin(2), 8u);
  EXPECT_EQ(groups.end(2), 12u);
  EXPECT_TRUE(groups.is_uniform());
}

TEST(GroupLayout, GroupsFromOffsets) {
  const std::vector<std::int64_t> offsets{0, 5, 6, 9};
  const group_layout groups(offsets);
  EXPECT_EQ(groups.groups(), 3u);
  EXPECT_EQ(groups.sequences(), 9u);
  EXPECT_EQ(groups.size(1), 1u);
  EXPECT_EQ(groups.begin(2), 6u);
}

TEST(GroupLayout, RefusesEmptyAndMalformedGroups) {
  expect_error_naming([] { (void)group_layout::uniform(2, 0); }, "group_size");
  const std::vector<std::int64_t> empty_group{0, 2, 2, 4};
  expect_error_naming([&] { group_layout{empty_group}; }, "group_offsets[2]");
  const std::vector<std::int64_t> not_from_zero{3, 4};
  expect_error_naming([&] { group_layout{not_from_zero}; }, "group_offsets[0]");
  const std::vector<std::int64_t> decreasing{0, 3, 1};
  expect_error_naming([&] { group_layout{decreasing}; }, "group_offsets[2]");
  const std::vector<std::int64_t> offsets{0, 2, 4};
  expect_error_naming([&] { group_layout(offsets).require_sequences(5, "rewards"); }, "rewards");
}

}  // namespace
