#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace filters_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::overlong_options;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {1, 0, 1}, {0.5, 0.5}, {2}, {0, 0, 0, 3}.
const std::vector<float> rewards{1, 0, 1, 0.5f, 0.5f, 2, 0, 0, 0, 3};
const std::vector<std::int64_t> offsets{0, 3, 5, 6, 10};

TEST(ZeroVarianceFilter, FlagsConstantGroupsAndSingletons) {
  std::vector<std::uint8_t> flags(4);
  cascade_rl::zero_variance_groups(exec::seq, group_layout(offsets), rewards,
                                   std::span<std::uint8_t>(flags));
  EXPECT_EQ(flags, (std::vector<std::uint8_t>{0, 1, 1, 0}));
}

TEST(ZeroVarianceFilter, SelectionCompactsSequencesAndGroups) {
  const auto selection =
      cascade_rl::drop_zero_variance_groups(exec::seq, group_layout(offsets), rewards);
  EXPECT_EQ(selection.kept_groups, (std::vector<std::uint8_t>{1, 0, 0, 1}));
  EXPECT_EQ(selection.kept_sequences, (std::vector<std::size_t>{0, 1, 2, 6, 7, 8, 9}));
  EXPECT_EQ(selection.group_offsets, (std::vector<std::int64_t>{0, 3, 7}));
  EXPECT_EQ(selection.dropped_groups, 2u);
  EXPECT_EQ(selection.dropped_sequences, 3u);
  EXPECT_EQ(selection.kept_group_count(), 2u);
  const group_layout kept = selection.groups();
  EXPECT_EQ(kept.groups(), 2u);
  EXPECT_EQ(kept.size(1), 4u);

  std::vector<float> gathered(7);
  cascade_rl::gather_sequences(exec::seq, selection, rewards, gathered);
  EXPECT_EQ(gathered, (std::vector<float>{1, 0, 1, 0, 0, 0, 3}));
  std::vector<float> wrong(6);
  expect_error_naming([&] { cascade_rl::gather_sequences(exec::seq, selection, rewards, wrong); },
                      "out");
  const std::vector<float> shorter(5);
  expect_error_naming(
      [&] { cascade_rl::gather_sequences(exec::seq, selection, shorter, gathered); }, "in[6]");
}

TEST(ZeroVarianceFilter, AllDroppedGivesAnEmptyLayout) {
  const std::vector<float> constant{1, 1, 0, 0};
  const auto selection = cascade_rl::drop_zero_variance_groups(
      exec::seq, group_layout::uniform({.groups = 2, .size = 2}), constant);
  EXPECT_TRUE(selection.kept_sequences.empty());
  EXPECT_EQ(selection.group_offsets, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(selection.groups().groups(), 0u);
  EXPECT_EQ(selection.dropped_groups, 2u);
}

TEST(ZeroVarianceFilter, NonfiniteRewards) {
  std::vector<float> bad = rewards;
  bad[8] = std::nanf("");
  expect_error_naming(
      [&] { cascade_rl::drop_zero_variance_groups(exec::seq, group_layout(offsets), bad); },
      "rewards[8]", "NaN");
  const auto selection = cascade_rl::drop_zero_variance_groups(
      exec::seq, group_layout(offsets), bad, {.nonfinite = cascade_rl::nonfinite_rule::zero_group});
  EXPECT_EQ(selection.kept_groups, (std::vector<std::uint8_t>{1, 0, 0, 0}));
  std::vector<std::uint8_t> flags(3);
  expect_error_naming(
      [&] {
        cascade_rl::zero_variance_groups(exec::seq, group_layout(offsets), rewards,
                                         std::span<std::uint8_t>(flags));
      },
      "flags");
}

TEST(Selection, SelectSequencesShrinksGroupsAndDropsEmptyOnes) {
  const std::vector<std::uint8_t> keep{1, 0, 1, 0, 0, 1, 0, 0, 0, 1};
  const auto selection = cascade_rl::select_sequences(group_layout(offsets), keep);
  EXPECT_EQ(selection.kept_sequences, (std::vector<std::size_t>{0, 2, 5, 9}));
  EXPECT_EQ(selection.group_offsets, (std::vector<std::int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(selection.kept_groups, (std::vector<std::uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(selection.dropped_groups, 1u);
  EXPECT_EQ(selection.dropped_sequences, 6u);
  const std::vector<std::uint8_t> short_keep{1, 1};
  expect_error_naming([&] { cascade_rl::select_sequences(group_layout(offsets), short_keep); },
                      "keep_sequence");
  expect_error_naming([&] { cascade_rl::select_groups(group_layout(offsets), short_keep); },
                      "keep_group");
}

// Overlong: L_max = 10, L_cache = 4, so the soft penalty ramps over (6, 10].
const overlong_options soft{.mode = cascade_rl::overlong_mode::soft_penalty,
                            .max_length = 10,
                            .buffer_length = 4,
                            .penalty_factor = 2.0};

TEST(Overlong, SoftPenaltyFollowsDapo) {
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(0, false, soft), 0.0);
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(6, false, soft), 0.0);
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(7, false, soft), -0.5);   // (6 - 7) / 4 * 2
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(9, false, soft), -1.5);
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(10, false, soft), -2.0);
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(11, false, soft), -2.0);
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(3, true, soft), -2.0);  // truncated
  overlong_options lenient = soft;
  lenient.truncated_is_overlong = false;
  EXPECT_EQ(cascade_rl::soft_overlong_penalty(3, true, lenient), 0.0);

  const std::vector<std::int64_t> lengths{5, 8, 12, 4};
  const std::vector<std::uint8_t> truncated{0, 0, 0, 1};
  std::vector<double> r{1, 1, 1, 1};
  cascade_rl::add_soft_overlong_penalty(exec::seq, std::span<const std::int64_t>(lengths),
                                        std::span<const std::uint8_t>(truncated),
                                        std::span<double>(r), soft);
  EXPECT_EQ(r, (std::vector<double>{1, 0, -1, -1}));
}

TEST(Overlong, DetectDropAndMask) {
  const overlong_options hard{.max_length = 10};
  const std::vector<std::int64_t> lengths{5, 11, 10, 3, 12, 7};
  const std::vector<std::uint8_t> truncated{0, 0, 0, 1, 0, 0};
  std::vector<std::uint8_t> flags(6);
  EXPECT_EQ(cascade_rl::overlong_sequences(exec::seq, std::span<const std::int64_t>(lengths),
                                           std::span<const std::uint8_t>(truncated),
                                           std::span<std::uint8_t>(flags), hard),
            3u);
  EXPECT_EQ(flags, (std::vector<std::uint8_t>{0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(cascade_rl::overlong_sequences(exec::seq, std::span<const std::int64_t>(lengths),
                                           std::span<const std::uint8_t>(),
                                           std::span<std::uint8_t>(flags), hard),
            2u);

  const auto groups = group_layout::uniform({.groups = 2, .size = 3});
  const auto selection = cascade_rl::drop_overlong(
      exec::seq, std::span<const std::int64_t>(lengths), std::span<const std::uint8_t>(truncated),
      groups, hard);
  EXPECT_EQ(selection.kept_sequences, (std::vector<std::size_t>{0, 2, 5}));
  EXPECT_EQ(selection.group_offsets, (std::vector<std::int64_t>{0, 2, 3}));
  EXPECT_EQ(selection.dropped_sequences, 3u);
  EXPECT_EQ(selection.dropped_groups, 0u);

  // Six sequences of 2 tokens each.
  const std::vector<std::int64_t> token_offsets = cascade_rl::padded_offsets(6, 2);
  std::vector<std::uint8_t> mask{1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1};
  const token_layout tokens(token_offsets, mask);  // the layout views the same mask
  EXPECT_EQ(cascade_rl::mask_overlong(exec::seq, std::span<const std::int64_t>(lengths),
                                      std::span<const std::uint8_t>(truncated), tokens,
                                      std::span<std::uint8_t>(mask), hard),
            3u);
  EXPECT_EQ(mask, (std::vector<std::uint8_t>{1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1}));
}

TEST(Overlong, ApplyDispatchesOnMode) {
  const std::vector<std::int64_t> lengths{5, 11, 8, 3};
  const std::vector<std::uint8_t> truncated;
  const auto groups = group_layout::uniform({.groups = 2, .size = 2});
  const std::vector<std::int64_t> token_offsets = cascade_rl::padded_offsets(4, 1);
  const token_layout tokens(token_offsets);
  std::vector<std::uint8_t> mask{1, 1, 1, 1};
  std::vector<float> r{1, 1, 1, 1};

  overlong_options options = soft;
  options.mode = cascade_rl::overlong_mode::drop;
  auto report = cascade_rl::apply_overlong(exec::seq, std::span<const std::int64_t>(lengths),
                                           std::span<const std::uint8_t>(truncated), groups,
                                           tokens, std::span<std::uint8_t>(mask),
                                           std::span<float>(r), options);
  EXPECT_EQ(report.overlong, 1u);
  EXPECT_EQ(report.selection.kept_sequences, (std::vector<std::size_t>{0, 2, 3}));
  EXPECT_EQ(mask, (std::vector<std::uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ(r, (std::vector<float>{1, 1, 1, 1}));

  options.mode = cascade_rl::overlong_mode::mask;
  report = cascade_rl::apply_overlong(exec::seq, std::span<const std::int64_t>(lengths),
                                      std::span<const std::uint8_t>(truncated), groups, tokens,
                                      std::span<std::uint8_t>(mask), std::span<float>(r), options);
  EXPECT_EQ(report.selection.kept_sequences.size(), 4u);
  EXPECT_EQ(mask, (std::vector<std::uint8_t>{1, 0, 1, 1}));

  options.mode = cascade_rl::overlong_mode::soft_penalty;
  report = cascade_rl::apply_overlong(exec::seq, std::span<const std::int64_t>(lengths),
                                      std::span<const std::uint8_t>(truncated), groups, tokens,
                                      std::span<std::uint8_t>(), std::span<float>(r), options);
  EXPECT_EQ(r, (std::vector<float>{1, -1, 0, 1}));
}

TEST(Overlong, RefusesBadOptionsAndLengths) {
  const std::vector<std::int64_t> lengths{5, -1, 8};
  const std::vector<std::int64_t> good{5, 1, 8};
  std::vector<std::uint8_t> flags(3);
  std::vector<double> r(3);
  const auto detect = [&](const std::vector<std::int64_t>& l, const overlong_options& o) {
    cascade_rl::overlong_sequences(exec::seq, std::span<const std::int64_t>(l),
                                   std::span<const std::uint8_t>(), std::span<std::uint8_t>(flags), o);
  };
  const auto penalise = [&](const overlong_options& o) {
    cascade_rl::add_soft_overlong_penalty(exec::seq, std::span<const std::int64_t>(good),
                                          std::span<const std::uint8_t>(), std::span<double>(r), o);
  };
  expect_error_naming([&] { detect(lengths, soft); }, "lengths[1]", "negative");
  expect_error_naming([&] { detect(good, {.max_length = 0}); }, "max_length");
  expect_error_naming([&] { penalise({.max_length = 10, .buffer_length = 0}); }, "buffer_length");
  expect_error_naming([&] { penalise({.max_length = 10, .buffer_length = 11}); }, "buffer_length");
  expect_error_naming([&] { penalise({.max_length = 10, .buffer_length = 4, .penalty_factor = -1}); },
                      "penalty_factor");
  const std::vector<std::uint8_t> short_truncated{0, 1};
  expect_error_naming([&] {
    cascade_rl::overlong_sequences(exec::seq, std::span<const std::int64_t>(good),
                                   std::span<const std::uint8_t>(short_truncated),
                                   std::span<std::uint8_t>(flags), soft);
  }, "truncated");
  std::vector<double> short_r(2);
  expect_error_naming([&] {
    cascade_rl::add_soft_overlong_penalty(exec::seq, std::span<const std::int64_t>(good),
                                          std::span<const std::uint8_t>(), std::span<double>(short_r),
                                          soft);
  }, "rewards");
}

}  // namespace filters_cases
}  // namespace
