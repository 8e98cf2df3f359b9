#pragma once
// Equality of stage configs that says where they differ: the path of the first field
// that differs ("update.rule.ppo_clip.clip_low"; "update.rule" when the rules are
// different alternatives), or "" when equal. It walks the same field lists
// as the JSON reader and writer (stage_config_fields.hpp), so "equal" means "the same
// in every field a config file carries": the property round trips keep. Doubles compare
// with ==.

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/stage_config_fields.hpp"

namespace cascade_rl {
namespace detail {

template <class T>
constexpr bool is_vector = false;
template <class T, class A>
constexpr bool is_vector<std::vector<T, A>> = true;

// The path of the first field where a and b differ, or "" when they are equal. Types
// that are neither described, optional nor vectors compare with == as a whole.
template <class T>
std::string config_difference(const T& a, const T& b, const std::string& path);

template <class T>
std::string config_difference_of_optionals(const std::optional<T>& a, const std::optional<T>& b, const std::string& path) {
  if (a.has_value() != b.has_value()) return path;
  return a ? config_difference(*a, *b, path) : std::string();
}

template <class T>
std::string config_difference(const T& a, const T& b, const std::string& path) {
  if constexpr (described_config<T>) {
    std::string first;
    std::apply(
        [&](const auto&... field) {
          ((first.empty() ? (void)(first = config_difference(field.of(a), field.of(b),
                                                      member_path(path, field.key)))
                          : (void)0),
           ...);
        },
        config_fields<T>::list);
    return first;
  } else if constexpr (described_variant<T>) {
    // Another alternative differs as a whole; the same one, in its fields.
    if (a.index() != b.index()) return path.empty() ? std::string("(root)") : path;
    if (a.valueless_by_exception()) return {};
    return std::visit(
        [&](const auto& alternative) {
          using A = std::remove_cvref_t<decltype(alternative)>;
          return config_difference(alternative, std::get<A>(b),
                                   member_path(path, config_fields<A>::alternative));
        },
        a);
  } else if constexpr (requires { a.has_value(); }) {
    return config_difference_of_optionals(a, b, path);
  } else if constexpr (is_vector<T>) {
    if (a.size() != b.size()) return path;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::string d = config_difference(a[i], b[i], element_path(path, i)); !d.empty()) return d;
    return {};
  } else {
    return a == b ? std::string() : (path.empty() ? std::string("(root)") : path);
  }
}

}  // namespace detail

[[nodiscard]] inline std::string stage_config_difference(const stage_config& a, const stage_config& b) {
  return detail::config_difference(a, b, "");
}

// Paths start "stages[i]"; a different number of stages is "stages".
[[nodiscard]] inline std::string schedule_difference(const std::vector<stage_config>& a,
                                                     const std::vector<stage_config>& b) {
  return detail::config_difference(a, b, "stages");
}

}  // namespace cascade_rl
