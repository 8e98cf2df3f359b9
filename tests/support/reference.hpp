#pragma once
// Loading the peer conformance vectors of tests/reference (see its READMEs) and
// comparing against them with the float32 tolerance those READMEs state.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl::testing {

inline constexpr double reference_rtol = 1e-5;
inline constexpr double reference_atol = 1e-6;

// Parses CASCADE_RL_REFERENCE_DIR/<file> (tests/reference unless configured otherwise).
// A missing file is a test failure, not a skip: the vectors are part of the repository.
inline nlohmann::json load_reference(const std::string& file) {
  const std::string path = std::string(CASCADE_RL_REFERENCE_DIR) + "/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("reference file not found: " + path);
  return nlohmann::json::parse(in);
}

// Whether the vectors under test are the repository's own (tests/reference), rather than
// a draw regenerated with another seed (../shared/refgen) and configured in with
// -DCASCADE_RL_REFERENCE_DIR.
inline bool shipped_reference() {
  return std::filesystem::equivalent(std::filesystem::path(CASCADE_RL_REFERENCE_DIR),
                                     std::filesystem::path(CASCADE_RL_SHIPPED_REFERENCE_DIR));
}

// A branch that the value comparisons against a file are meant to exercise (a clip, a
// bound, an empty row). The shipped vectors are known to hold it, and losing it there is
// a failure; a regenerated draw need not (a random batch may never reach GSPO's bound),
// so there it is reported as a coverage line and the test built by hand for that branch
// covers it. A value mismatch fails whatever the draw.
inline void expect_reference_exercises(bool exercised, const std::string& branch) {
  if (shipped_reference()) {
    EXPECT_TRUE(exercised) << "the shipped vectors no longer exercise " << branch;
    return;
  }
  ::testing::Test::RecordProperty("coverage." + branch, exercised ? "exercised" : "not exercised");
  if (!exercised)
    std::cout << "[ COVERAGE ] this draw (" << CASCADE_RL_REFERENCE_DIR
              << ") does not exercise " << branch << "; the hand-built case covers it\n";
}

// Row-major flattening of a [N][T] nested list.
template <class T>
std::vector<T> flatten(const nlohmann::json& rows) {
  std::vector<T> out;
  for (const auto& row : rows)
    for (const auto& value : row) out.push_back(value.get<T>());
  return out;
}

// A padded [N][T] batch as a ragged layout: offsets {0, T, 2T, ...} and the mask bytes.
struct padded_batch {
  std::size_t rows = 0;
  std::size_t width = 0;
  std::vector<std::int64_t> offsets;
  std::vector<std::uint8_t> mask;

  [[nodiscard]] token_layout layout() const { return token_layout(offsets, mask); }
};

inline padded_batch padded_from_mask(const nlohmann::json& mask) {
  padded_batch batch;
  batch.rows = mask.size();
  batch.width = batch.rows == 0 ? 0 : mask[0].size();
  batch.offsets = padded_offsets(batch.rows, batch.width);
  for (const auto& row : mask)
    for (const auto& value : row) batch.mask.push_back(value.get<double>() != 0.0 ? 1 : 0);
  return batch;
}

// EXPECTs |actual - expected| <= atol + rtol * |expected| elementwise, naming the
// first few mismatches with `context`.
template <class A>
void expect_all_close(std::span<const A> actual, const std::vector<double>& expected,
                      const std::string& context, double rtol = reference_rtol,
                      double atol = reference_atol) {
  ASSERT_EQ(actual.size(), expected.size()) << context;
  int reported = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    const double tolerance = atol + rtol * std::abs(expected[i]);
    if (!(std::abs(a - expected[i]) <= tolerance) && reported++ < 5)
      ADD_FAILURE() << context << " [" << i << "]: got " << a << ", expected " << expected[i];
  }
}

inline void expect_close(double actual, double expected, const std::string& context,
                         double rtol = reference_rtol, double atol = reference_atol) {
  EXPECT_LE(std::abs(actual - expected), atol + rtol * std::abs(expected))
      << context << ": got " << actual << ", expected " << expected;
}

}  // namespace cascade_rl::testing
