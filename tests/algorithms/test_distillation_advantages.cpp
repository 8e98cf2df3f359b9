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

// The one pass notes a non-finite difference per block of 4096 tokens, and only then are
// the inputs checked: a bad valid token deep in a later block is still named, under the
// parallel executor, and a bad masked one is still ignored; the values match the plain
// difference everywhere else.
TEST(Distillation, BadTokenInALaterBlockIsNamedAndMaskedOneIgnored) {
  const std::size_t n = 3 * 4096 + 17;
  const std::vector<std::int64_t> one_row{0, static_cast<std::int64_t>(n)};
  std::vector<std::uint8_t> keep(n, 1);
  keep[9000] = 0;
  const token_layout tokens(one_row, keep);
  std::vector<float> teacher(n), student(n);
  for (std::size_t t = 0; t < n; ++t) {
    teacher[t] = -0.001f * static_cast<float>(t % 97);
    student[t] = -0.002f * static_cast<float>(t % 89);
  }
  teacher[9000] = std::nanf("");  // masked: ignored
  std::vector<float> a(n, 9.0f);
  cascade_rl::distillation_advantages(
      exec::par, tokens, {.teacher_log_probs = teacher, .student_log_probs = student}, a);
  for (std::size_t t = 0; t < n; ++t)
    ASSERT_EQ(a[t], t == 9000 ? 0.0f : teacher[t] - student[t]) << t;
  student[12300] = inf;
  teacher[12301] = -inf;
  expect_error_naming(
      [&] {
        cascade_rl::distillation_advantages(
            exec::par, tokens, {.teacher_log_probs = teacher, .student_log_probs = student}, a);
      },
      "teacher_log_probs[12301]", "infinite");
}

}  // namespace distillation_advantages_cases
}  // namespace
