// Learning-rate schedules: constant, linear warm-up (the Cascade 2 MOPD warm-up),
// cosine with and without warm-up.

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "cascade_rl/cascade/lr_schedule.hpp"
#include "support/expect_error.hpp"

namespace {

namespace cr = cascade_rl;

TEST(LrSchedule, ConstantIsConstant) {
  const auto s = cr::constant_lr(3e-6);
  for (std::size_t step : {0u, 1u, 179u, 500u}) EXPECT_EQ(s.at(step, 180), 3e-6);
}

TEST(LrSchedule, LinearWarmupFrom2e7To2e6Over30Steps) {
  const auto s = cr::linear_warmup_lr(2e-7, 2e-6, 30);
  EXPECT_DOUBLE_EQ(s.at(0, 50), 2e-7);
  EXPECT_DOUBLE_EQ(s.at(1, 50), 2e-7 + 1.8e-6 / 30);
  EXPECT_DOUBLE_EQ(s.at(15, 50), 1.1e-6);
  EXPECT_DOUBLE_EQ(s.at(29, 50), 2e-7 + 1.8e-6 * 29 / 30);
  for (std::size_t step = 30; step < 50; ++step) EXPECT_EQ(s.at(step, 50), 2e-6);
  for (std::size_t step = 1; step < 30; ++step) EXPECT_GT(s.at(step, 50), s.at(step - 1, 50));
}

TEST(LrSchedule, CosineRunsFromPeakToFloorOverTheStage) {
  const auto s = cr::cosine_lr(1e-5, 1e-6);
  EXPECT_DOUBLE_EQ(s.at(0, 11), 1e-5);
  EXPECT_DOUBLE_EQ(s.at(5, 11), 1e-6 + 9e-6 * 0.5);
  EXPECT_DOUBLE_EQ(s.at(10, 11), 1e-6);
  EXPECT_DOUBLE_EQ(s.at(20, 11), 1e-6);  // past the end: the floor
  EXPECT_DOUBLE_EQ(s.at(3, 11), 1e-6 + 9e-6 * 0.5 * (1 + std::cos(std::numbers::pi * 0.3)));
}

TEST(LrSchedule, CosineWithWarmup) {
  const auto s = cr::cosine_lr(1e-5, 0.0, 4, 1e-6);
  // 13 steps: warm-up over steps 0-3, cosine over steps 4-12.
  EXPECT_DOUBLE_EQ(s.at(0, 13), 1e-6);
  EXPECT_DOUBLE_EQ(s.at(2, 13), 1e-6 + 9e-6 * 0.5);
  EXPECT_DOUBLE_EQ(s.at(4, 13), 1e-5);        // end of warm-up = start of the cosine
  EXPECT_DOUBLE_EQ(s.at(8, 13), 1e-5 * 0.5);  // half way through the cosine
  EXPECT_DOUBLE_EQ(s.at(12, 13), 0.0);
}

TEST(LrSchedule, RefusesUnusableSchedules) {
  cr::testing::expect_error_naming([] { cr::constant_lr(0).validate("lr"); }, "lr.peak");
  cr::testing::expect_error_naming([] { cr::linear_warmup_lr(1e-7, 1e-6, 0).validate("lr"); },
                                   "lr.warmup_steps");
  cr::testing::expect_error_naming([] { cr::cosine_lr(1e-6, 1e-5).validate("lr"); }, "lr.floor");
  cr::testing::expect_error_naming([] { cr::linear_warmup_lr(-1, 1e-6, 3).validate("lr"); }, "lr.start");
}

}  // namespace
