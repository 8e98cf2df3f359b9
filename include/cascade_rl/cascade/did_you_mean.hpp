#pragma once
// A spelling suggestion for a refused name (a config key, an enum value): the closest
// candidate by edit distance, when it is close enough to be the likely intent.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cascade_rl::detail {

// Levenshtein distance (insertions, deletions, substitutions), one row at a time.
[[nodiscard]] inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean X?)" for the closest candidate within a third of the name's length
// (at least one edit), else "". Long inputs get no suggestion: the cost is quadratic.
template <class Names>
[[nodiscard]] std::string did_you_mean(std::string_view wrong, const Names& candidates) {
  if (wrong.size() > 64) return {};
  std::string_view best;
  std::size_t best_distance = std::max<std::size_t>(1, wrong.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const std::string_view c(candidate);
    const std::size_t d = edit_distance(wrong, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best.empty() ? std::string() : " (did you mean " + std::string(best) + "?)";
}

}  // namespace cascade_rl::detail
