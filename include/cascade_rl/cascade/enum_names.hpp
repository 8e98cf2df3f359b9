#pragma once
// How a config file spells the enums of a stage config, and the way back from a name.
// Where the library already names an enum for people (to_string: "IF-RL", veRL's
// "token-mean"), that name is the spelling, so logs, metrics and config files agree;
// the other enums are spelt as their C++ enumerators ("linear_warmup", "soft_penalty").

#include <array>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/cascade/lr_schedule.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl {

// Every enumerator of E with its name; specialised below for the stage config's enums.
template <class E>
struct enum_names;

namespace detail {
// An enumerator with the name the library already gives it.
template <class E>
constexpr std::pair<E, std::string_view> named(E value) {
  return {value, to_string(value)};
}
}  // namespace detail

template <>
struct enum_names<stage_kind> {
  static constexpr std::array table{
      detail::named(stage_kind::generic), detail::named(stage_kind::if_rl),
      detail::named(stage_kind::multi_domain_rl), detail::named(stage_kind::mopd),
      detail::named(stage_kind::rlhf), detail::named(stage_kind::long_context_rl),
      detail::named(stage_kind::math_rl), detail::named(stage_kind::code_rl),
      detail::named(stage_kind::swe_rl)};
};

template <>
struct enum_names<loss_aggregation> {
  static constexpr std::array table{
      detail::named(loss_aggregation::token_mean), detail::named(loss_aggregation::token_sum),
      detail::named(loss_aggregation::seq_mean_token_sum), detail::named(loss_aggregation::seq_mean_token_mean),
      detail::named(loss_aggregation::seq_mean_token_sum_norm)};
};

template <>
struct enum_names<lr_shape> {
  static constexpr std::array<std::pair<lr_shape, std::string_view>, 3> table{
      {{lr_shape::constant, "constant"}, {lr_shape::linear_warmup, "linear_warmup"}, {lr_shape::cosine, "cosine"}}};
};

template <>
struct enum_names<overlong_mode> {
  static constexpr std::array<std::pair<overlong_mode, std::string_view>, 3> table{
      {{overlong_mode::drop, "drop"}, {overlong_mode::mask, "mask"}, {overlong_mode::soft_penalty, "soft_penalty"}}};
};

template <>
struct enum_names<episode_treatment> {
  static constexpr std::array<std::pair<episode_treatment, std::string_view>, 3> table{
      {{episode_treatment::keep, "keep"}, {episode_treatment::mask, "mask"}, {episode_treatment::drop, "drop"}}};
};

template <>
struct enum_names<importance_sampling> {
  static constexpr std::array<std::pair<importance_sampling, std::string_view>, 3> table{
      {{importance_sampling::none, "none"},
       {importance_sampling::truncated, "truncated"},
       {importance_sampling::band_mask, "band_mask"}}};
};

// DPPO's divergence (update.rule.dppo.divergence): veRL's loss modes dppo_tv and dppo_kl.
template <>
struct enum_names<dppo_divergence> {
  static constexpr std::array<std::pair<dppo_divergence, std::string_view>, 2> table{
      {{dppo_divergence::total_variation, "total_variation"},
       {dppo_divergence::binary_kl, "binary_kl"}}};
};

template <class E>
concept named_enum = std::is_enum_v<E> && requires { enum_names<E>::table; };

// The config-file name of `value`; empty for a value outside the enumeration.
template <named_enum E>
[[nodiscard]] constexpr std::string_view enum_name(E value) {
  for (const auto& [v, name] : enum_names<E>::table)
    if (v == value) return name;
  return {};
}

// The enumerator spelt `name` (exactly, case included); nullopt for any other name.
template <named_enum E>
[[nodiscard]] constexpr std::optional<E> parse_enum(std::string_view name) {
  for (const auto& [v, n] : enum_names<E>::table)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace cascade_rl
