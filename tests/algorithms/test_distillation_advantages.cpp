#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "support/expect_error.hpp"

namespace {
namespace distillation_advantages_cases {  // this file's names, apart in the area's unity build

using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

const std::vector<std::int64_t> offsets{0, 3, 5};
const std::vector<std::uint8_t> mask{1, 1, 0, 1, 1};
constexpr float inf = std::numeric_limits<float>::infinity();

TEST(Distillation, TeacherMinusStudentOnValidTokens) {
  const token_layout tokens(offsets, mask);
  // Masked token 2 holds -inf in both: padding, ignored.
  const std::vector<float> teacher{-0.5f, -2.0f, -inf, -0.25f, -3.0f};
  const std::vector<float> student{-1.0f, -0.5f, -inf, -0.25f, -1.0f};
  std::vector<float> a(5, 9.0f);
  cascade_rl::distillation_advantages(
      exec::seq, tokens, {.teacher_log_probs = teacher, .student_log_probs = student}, a);
  EXPECT_EQ(a, (std::vector<float>{0.5f, -1.5f, 0.0f, 0.0f, -2.0f}));
}

TEST(Distillation, RefusesNonfiniteValidTokensAndBadSizes) {
  const token_layout tokens(offsets, mask);
  const std::vector<float> good{-1, -1, -1, -1, -1};
  std::vector<float> bad = good;
  bad[3] = -inf;
  std::vector<float> a(5);
  expect_error_naming(
      [&] {
        cascade_rl::distillation_advantages(
            exec::seq, tokens, {.teacher_log_probs = good, .student_log_probs = bad}, a);
      },
      "student_log_probs[3]", "infinite");
  bad[3] = std::nanf("");
  expect_error_naming(
      [&] {
        cascade_rl::distillation_advantages(
            exec::seq, tokens, {.teacher_log_probs = bad, .student_log_probs = good}, a);
      },
      "teacher_log_probs[3]", "NaN");
  const std::vector<float> four{-1, -1, -1, -1};
  expect_error_naming(
      [&] {
        cascade_rl::distillation_advantages(
            exec::seq, tokens, {.teacher_log_probs = four, .student_log_probs = good}, a);
      },
      "teacher_log_probs");
  std::vector<float> short_a(4);
  expect_error_naming(
      [&] {
        cascade_rl::distillation_advantages(
            exec::seq, tokens, {.teacher_log_probs = good, .student_log_probs = good}, short_a);
      },
      "advantages");
}

}  // namespace distillation_advantages_cases
}  // namespace
