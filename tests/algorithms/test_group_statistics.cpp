#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace group_statistics_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::group_statistic;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

// Groups {1, 2, 3, 4}, {5, 5}, {7}.
const std::vector<double> rewards{1, 2, 3, 4, 5, 5, 7};
const std::vector<std::int64_t> offsets{0, 4, 6, 7};

std::vector<group_statistic> stats_of(const cascade_rl::group_statistics_options& options = {}) {
  std::vector<group_statistic> out(3);
  cascade_rl::group_statistics(exec::seq, group_layout(offsets), rewards,
                               std::span<group_statistic>(out), options);
  return out;
}

TEST(GroupStatistics, MeanStdMinMaxCountPerGroup) {
  const auto s = stats_of();
  EXPECT_DOUBLE_EQ(s[0].mean, 2.5);
  EXPECT_DOUBLE_EQ(s[0].std, std::sqrt(5.0 / 3.0));  // unbiased: 5 / (4 - 1)
  EXPECT_EQ(s[0].min, 1.0);
  EXPECT_EQ(s[0].max, 4.0);
  EXPECT_EQ(s[0].count, 4u);
  EXPECT_FALSE(s[0].zero_variance);
  EXPECT_EQ(s[1].mean, 5.0);
  EXPECT_EQ(s[1].std, 0.0);
  EXPECT_TRUE(s[1].zero_variance);
  EXPECT_EQ(s[2].mean, 7.0);
  EXPECT_EQ(s[2].std, 0.0);  // a group of one has no spread
  EXPECT_EQ(s[2].count, 1u);
  EXPECT_TRUE(s[2].zero_variance);
}

TEST(GroupStatistics, BiasedEstimatorDividesByN) {
  const auto s = stats_of({.estimator = cascade_rl::std_estimator::biased});
  EXPECT_DOUBLE_EQ(s[0].std, std::sqrt(1.25));
}

TEST(GroupStatistics, ZeroVarianceIsExactNotThresholded) {
  // A spread of one ulp is a spread: not zero variance.
  const float a = 0.35f;
  const float b = std::nextafter(a, 1.0f);
  const std::vector<float> r{a, a, b};
  const std::vector<std::int64_t> one_group{0, 3};
  std::vector<group_statistic> s(1);
  cascade_rl::group_statistics(exec::seq, group_layout(one_group), r,
                               std::span<group_statistic>(s));
  EXPECT_FALSE(s[0].zero_variance);
  EXPECT_GT(s[0].std, 0.0);
  EXPECT_LT(s[0].std, 1e-7);
}

TEST(GroupStatistics, Float32SequentialMeanReproducesTorchRounding) {
  // Seven 0.35f and one 0.35f + 1 ulp: float32 sequential sum / 8 is 0.35f - 1 ulp,
  // below every element, while the double mean is 0.35f + ulp / 8.
  const float a = 0.35f;
  const float b = std::nextafter(a, 1.0f);
  std::vector<float> r(7, a);
  r.push_back(b);
  const auto groups = group_layout::uniform({.groups = 1, .size = 8});
  std::vector<group_statistic> f32(1), f64(1);
  cascade_rl::group_statistics(exec::seq, groups, r, std::span<group_statistic>(f32),
                               {.accumulation = cascade_rl::mean_accumulation::float32_sequential});
  cascade_rl::group_statistics(exec::seq, groups, r, std::span<group_statistic>(f64));
  const double ulp = static_cast<double>(b) - static_cast<double>(a);
  EXPECT_EQ(f32[0].mean, static_cast<double>(std::nextafter(a, 0.0f)));
  EXPECT_DOUBLE_EQ(f64[0].mean, static_cast<double>(a) + ulp / 8);
  // Deviations from the float32 mean: seven of 1 ulp, one of 2 ulp.
  EXPECT_DOUBLE_EQ(f32[0].std, ulp * std::sqrt(11.0 / 7.0));
}

TEST(GroupStatistics, LeaveOneOutMeanAndStd) {
  const std::vector<double> r{1, 2, 3, 4, 5, 5};
  const std::vector<std::int64_t> two_groups{0, 4, 6};
  std::vector<double> mean(6), std(6);
  cascade_rl::leave_one_out_statistics(exec::seq, group_layout(two_groups), r, mean, std);
  EXPECT_DOUBLE_EQ(mean[0], 3.0);  // mean of {2, 3, 4}
  EXPECT_DOUBLE_EQ(mean[1], 8.0 / 3.0);
  EXPECT_DOUBLE_EQ(mean[2], 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(mean[3], 2.0);
  EXPECT_EQ(mean[4], 5.0);
  EXPECT_NEAR(std[0], 1.0, 1e-15);                      // std of {2, 3, 4}
  EXPECT_NEAR(std[1], std::sqrt(7.0 / 3.0), 1e-15);     // std of {1, 3, 4}
  EXPECT_NEAR(std[3], 1.0, 1e-15);
  EXPECT_EQ(std[4], 0.0);  // one other value
  // Skipping the std.
  std::vector<double> mean_only(6);
  cascade_rl::leave_one_out_statistics(exec::seq, group_layout(two_groups), r, mean_only,
                                       std::span<double>());
  EXPECT_EQ(mean_only, mean);
}

// When the other values of a group are all equal, their std is exactly 0 and their mean
// exactly their value, whatever rounding the downdate would leave: in {1, 0, 1} the
// downdated M2 of the 0's others is 1.1e-16 (a std of 1e-8, which an estimator dividing
// by std + 1e-6 blows up to 1e6). Also for non-dyadic values, where the downdated mean
// is not exact either, and in float.
template <class T>
void expect_lone_values_get_exact_statistics() {
  const std::vector<T> r{T(1), T(0), T(1),                  // the 0's others are {1, 1}
                         T(0.1), T(0.7), T(0.1), T(0.1),    // the 0.7's others are 0.1
                         T(0.3), T(0.1),                    // a group of two
                         T(1), T(1), T(0), T(0)};           // no lone value
  const std::vector<std::int64_t> groups{0, 3, 7, 9, 13};
  std::vector<T> mean(r.size()), std(r.size());
  for (auto estimator : {cascade_rl::std_estimator::unbiased, cascade_rl::std_estimator::biased}) {
    cascade_rl::leave_one_out_statistics(exec::seq, group_layout(groups), r, mean, std,
                                         {.estimator = estimator});
    EXPECT_EQ(mean[1], T(1));
    EXPECT_EQ(std[1], T(0));
    EXPECT_EQ(mean[4], T(0.1));
    EXPECT_EQ(std[4], T(0));
    EXPECT_EQ(mean[7], T(0.1));
    EXPECT_EQ(mean[8], T(0.3));
    EXPECT_EQ(std[7], T(0));
    // The 1s of {1, 0, 1}: others {0, 1}; the 0.1s of the second group: {0.7, 0.1, 0.1}.
    const double divisor = estimator == cascade_rl::std_estimator::unbiased ? 1.0 : 2.0;
    const double tolerance = std::is_same_v<T, float> ? 1e-6 : 1e-14;
    EXPECT_NEAR(static_cast<double>(mean[0]), 0.5, tolerance);
    EXPECT_NEAR(static_cast<double>(std[0]), std::sqrt(0.5 / divisor), tolerance);
    EXPECT_NEAR(static_cast<double>(mean[3]), 0.3, tolerance);
    EXPECT_NEAR(static_cast<double>(std[3]), std::sqrt(0.24 / (divisor + 1.0)), tolerance);
    // {1, 1, 0, 0}: every member's others hold both values.
    EXPECT_NEAR(static_cast<double>(mean[9]), 1.0 / 3.0, tolerance);
    EXPECT_NEAR(static_cast<double>(std[12]), std::sqrt((2.0 / 3.0) / (divisor + 1.0)), tolerance);
  }
}

TEST(GroupStatistics, LeaveOneOutOfALoneValueIsExact) {
  expect_lone_values_get_exact_statistics<double>();
  expect_lone_values_get_exact_statistics<float>();
}

TEST(GroupStatistics, RefusesBadInput) {
  std::vector<group_statistic> out(3);
  std::vector<double> bad = rewards;
  bad[2] = std::numeric_limits<double>::quiet_NaN();
  expect_error_naming(
      [&] {
        cascade_rl::group_statistics(exec::seq, group_layout(offsets), bad,
                                     std::span<group_statistic>(out));
      },
      "rewards[2]", "NaN");
  bad[2] = std::numeric_limits<double>::infinity();
  expect_error_naming(
      [&] {
        cascade_rl::group_statistics(exec::seq, group_layout(offsets), bad,
                                     std::span<group_statistic>(out));
      },
      "rewards[2]", "infinite");
  std::vector<group_statistic> short_out(2);
  expect_error_naming(
      [&] {
        cascade_rl::group_statistics(exec::seq, group_layout(offsets), rewards,
                                     std::span<group_statistic>(short_out));
      },
      "statistics");
  const std::vector<double> too_few{1, 2, 3};
  expect_error_naming(
      [&] {
        cascade_rl::group_statistics(exec::seq, group_layout(offsets), too_few,
                                     std::span<group_statistic>(out));
      },
      "rewards");
  std::vector<double> mean(7);
  expect_error_naming(
      [&] {
        cascade_rl::leave_one_out_statistics(exec::seq, group_layout(offsets), rewards, mean,
                                             std::span<double>());
      },
      "groups[2]", "leave-one-out");
  std::vector<double> short_std(3);
  expect_error_naming(
      [&] {
        cascade_rl::leave_one_out_statistics(exec::seq, group_layout(offsets), rewards, mean,
                                             short_std);
      },
      "loo_std");
}

}  // namespace group_statistics_cases
}  // namespace
