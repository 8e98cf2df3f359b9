#pragma once
// Argument checks shared by the algorithms. Each names the argument and the first
// offending index in its message (see error.hpp).

#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace cascade_rl::detail {

inline void require_size(std::size_t actual, std::size_t expected, std::string_view argument,
                         std::string_view what_expected) {
  if (actual != expected)
    fail(argument, "has " + std::to_string(actual) + " entries, expected " +
                       std::to_string(expected) + " (" + std::string(what_expected) + ")");
}

inline constexpr std::size_t no_index = std::numeric_limits<std::size_t>::max();

// Index of the first element for which bad(i) holds, or no_index. Deterministic under
// any policy: the smallest such index wins.
template <class Policy, class Bad>
std::size_t first_index_where(const Policy& policy, std::size_t n, Bad&& bad) {
  return blocked_reduce(
      policy, n, no_index,
      [&](std::size_t& first, std::size_t i) {
        if (first == no_index && bad(i)) first = i;
      },
      [](std::size_t& total, std::size_t part) {
        if (part < total) total = part;
      });
}

// Throws when a value is NaN or infinite, naming the first such index.
template <class Policy, std::floating_point T>
void require_finite(const Policy& policy, std::span<const T> values, std::string_view argument) {
  const std::size_t bad =
      first_index_where(policy, values.size(), [&](std::size_t i) { return !std::isfinite(values[i]); });
  if (bad != no_index)
    fail_at(argument, bad, std::isnan(values[bad]) ? "is NaN" : "is infinite");
}

// As require_finite, but only over tokens the mask keeps (masked tokens may hold
// anything, as padded tensors often do).
template <class Policy, std::floating_point T, class Layout>
void require_finite_where_valid(const Policy& policy, std::span<const T> values,
                                const Layout& layout, std::string_view argument) {
  const std::size_t bad = first_index_where(policy, values.size(), [&](std::size_t i) {
    return layout.valid(i) && !std::isfinite(values[i]);
  });
  if (bad != no_index)
    fail_at(argument, bad, std::isnan(values[bad]) ? "is NaN" : "is infinite");
}

}  // namespace cascade_rl::detail
