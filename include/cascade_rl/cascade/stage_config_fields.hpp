#pragma once
// The fields of a stage config and of its nested option structs, by name: the one list
// that the JSON reader, the writer and the comparison walk, so that they cannot
// disagree about which fields exist. The names are the C++ member names.
//
// A static_assert counts each struct's members, so adding a member to one of these
// structs without listing it here fails to compile instead of being silently dropped
// from config files.

#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/cascade/lr_schedule.hpp"
#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl::detail {

template <class S, class M>
struct config_field {
  std::string_view key;
  M S::*member;
};
template <class S, class M>
config_field(std::string_view, M S::*) -> config_field<S, M>;

template <class T>
struct config_fields;  // static constexpr std::tuple list{config_field...}

template <class T>
concept described_config = requires { config_fields<T>::list; };

// A config file may leave out a field (it keeps its default); a saved state may not: a
// struct whose config_fields<T> has `static constexpr bool every_field_required = true`
// is read with every listed key present, a missing one refused by its path.
template <class T>
constexpr bool every_field_required = [] {
  if constexpr (requires { config_fields<T>::every_field_required; })
    return config_fields<T>::every_field_required;
  else
    return false;
}();

// A key that config files of an earlier version held and that now means nothing: the
// reader refuses it by name and says what to set instead (an optional member
// `static constexpr std::array removed{removed_key...}` of config_fields<T>).
struct removed_key {
  std::string_view key;
  std::string_view instead;  // the field that now carries its meaning
};

// A variant of described structs is written as an object with one key, the name of the
// alternative it holds ({"ppo_clip": {...}}): each alternative names itself, once, in
// its config_fields (`static constexpr std::string_view alternative = "ppo_clip";`).
template <class T>
concept variant_alternative = described_config<T> && requires {
  { config_fields<T>::alternative } -> std::convertible_to<std::string_view>;
};

template <class... Names>
constexpr bool distinct_names(const Names&... names) {
  const std::array<std::string_view, sizeof...(Names)> list{names...};
  for (std::size_t i = 0; i < list.size(); ++i)
    for (std::size_t j = i + 1; j < list.size(); ++j)
      if (list[i] == list[j]) return false;
  return true;
}

template <class V>
struct variant_names;  // names: the alternatives' names, in the variant's order

template <class... A>
  requires(variant_alternative<A> && ...)
struct variant_names<std::variant<A...>> {
  static constexpr std::array<std::string_view, sizeof...(A)> names{
      config_fields<A>::alternative...};
  static_assert(distinct_names(config_fields<A>::alternative...),
                "two alternatives of a variant share a name in config_fields");
};

template <class V>
concept described_variant = requires { variant_names<V>::names; };

// "on_policy, ppo_clip": a variant's alternatives, for messages.
template <described_variant V>
std::string alternatives_list() {
  std::string list;
  for (const std::string_view name : variant_names<V>::names)
    list.append(list.empty() ? "" : ", ").append(name);
  return list;
}

template <class T>
constexpr std::span<const removed_key> removed_keys_of() {
  if constexpr (requires { config_fields<T>::removed; })
    return config_fields<T>::removed;
  else
    return {};
}

template <>
struct config_fields<sampling_params> {
  using T = sampling_params;
  static constexpr std::tuple list{config_field{"temperature", &T::temperature},
                                   config_field{"top_p", &T::top_p},
                                   config_field{"max_response_length", &T::max_response_length}};
};

template <>
struct config_fields<prompt> {
  using T = prompt;
  static constexpr std::tuple list{config_field{"id", &T::id}, config_field{"domain", &T::domain},
                                   config_field{"text", &T::text}, config_field{"reference", &T::reference}};
};

template <>
struct config_fields<lr_schedule> {
  using T = lr_schedule;
  static constexpr std::tuple list{config_field{"shape", &T::shape}, config_field{"peak", &T::peak},
                                   config_field{"start", &T::start},
                                   config_field{"warmup_steps", &T::warmup_steps},
                                   config_field{"floor", &T::floor}};
};

template <>
struct config_fields<stop_criteria> {
  using T = stop_criteria;
  static constexpr std::tuple list{config_field{"eval_every", &T::eval_every},
                                   config_field{"target_score", &T::target_score},
                                   config_field{"plateau_patience", &T::plateau_patience},
                                   config_field{"plateau_min_delta", &T::plateau_min_delta}};
};

template <>
struct config_fields<importance_options> {
  using T = importance_options;
  static constexpr std::tuple list{config_field{"mode", &T::mode}, config_field{"cap", &T::cap},
                                   config_field{"band_low", &T::band_low},
                                   config_field{"band_high", &T::band_high}};
};

template <>
struct config_fields<on_policy_update> {
  using T = on_policy_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{config_field{"importance", &T::importance}};
};

template <>
struct config_fields<ppo_clip_update> {
  using T = ppo_clip_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{config_field{"epochs", &T::epochs},
                                   config_field{"mini_batches", &T::mini_batches},
                                   config_field{"clip_low", &T::clip_low},
                                   config_field{"clip_high", &T::clip_high},
                                   config_field{"dual_clip", &T::dual_clip},
                                   config_field{"log_ratio_clamp", &T::log_ratio_clamp},
                                   config_field{"importance", &T::importance}};
  static constexpr std::array removed{
      removed_key{"aggregation", "update.aggregation (one aggregation serves both update rules)"}};
};

template <>
struct config_fields<cispo_update> {
  using T = cispo_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{
      config_field{"epochs", &T::epochs}, config_field{"mini_batches", &T::mini_batches},
      config_field{"clip_low", &T::clip_low}, config_field{"clip_high", &T::clip_high},
      config_field{"log_ratio_clamp", &T::log_ratio_clamp}};
};

template <terms::dppo_divergence D>
struct config_fields<dppo_update<D>> {
  using T = dppo_update<D>;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{config_field{"epochs", &T::epochs},
                                   config_field{"mini_batches", &T::mini_batches},
                                   config_field{"clip_low", &T::clip_low},
                                   config_field{"clip_high", &T::clip_high},
                                   config_field{"truncation", &T::truncation},
                                   config_field{"log_ratio_clamp", &T::log_ratio_clamp}};
};

template <>
struct config_fields<dro_update> {
  using T = dro_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{config_field{"epochs", &T::epochs},
                                   config_field{"mini_batches", &T::mini_batches},
                                   config_field{"beta", &T::beta}};
};

template <>
struct config_fields<sapo_update> {
  using T = sapo_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{
      config_field{"epochs", &T::epochs}, config_field{"mini_batches", &T::mini_batches},
      config_field{"tau_pos", &T::tau_pos}, config_field{"tau_neg", &T::tau_neg},
      config_field{"log_ratio_clamp", &T::log_ratio_clamp}};
};

template <>
struct config_fields<gspo_update> {
  using T = gspo_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{
      config_field{"epochs", &T::epochs}, config_field{"mini_batches", &T::mini_batches},
      config_field{"clip_low", &T::clip_low}, config_field{"clip_high", &T::clip_high},
      config_field{"log_ratio_bound", &T::log_ratio_bound}};
};

template <>
struct config_fields<geo_mean_update> {
  using T = geo_mean_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{
      config_field{"epochs", &T::epochs}, config_field{"mini_batches", &T::mini_batches},
      config_field{"clip_low", &T::clip_low}, config_field{"clip_high", &T::clip_high}};
};

template <>
struct config_fields<clip_cov_update> {
  using T = clip_cov_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{config_field{"epochs", &T::epochs},
                                   config_field{"mini_batches", &T::mini_batches},
                                   config_field{"clip_low", &T::clip_low},
                                   config_field{"clip_high", &T::clip_high},
                                   config_field{"clip_cov_ratio", &T::clip_cov_ratio},
                                   config_field{"clip_cov_lb", &T::clip_cov_lb},
                                   config_field{"clip_cov_ub", &T::clip_cov_ub}};
};

template <>
struct config_fields<kl_cov_update> {
  using T = kl_cov_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{
      config_field{"epochs", &T::epochs}, config_field{"mini_batches", &T::mini_batches},
      config_field{"kl_cov_ratio", &T::kl_cov_ratio}, config_field{"ppo_kl_coef", &T::ppo_kl_coef}};
};

template <>
struct config_fields<bypass_mode_update> {
  using T = bypass_mode_update;
  static constexpr std::string_view alternative = update_rule_name<T>();
  static constexpr std::tuple list{
      config_field{"epochs", &T::epochs},
      config_field{"mini_batches", &T::mini_batches},
      config_field{"loss_type", &T::loss_type},
      config_field{"rollout_is", &T::rollout_is},
      config_field{"rollout_is_threshold", &T::rollout_is_threshold},
      config_field{"rollout_is_batch_normalize", &T::rollout_is_batch_normalize},
      config_field{"rollout_rs", &T::rollout_rs},
      config_field{"rollout_rs_threshold", &T::rollout_rs_threshold},
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high},
      config_field{"dual_clip", &T::dual_clip}};
};

template <>
struct config_fields<update_options> {
  using T = update_options;
  static constexpr std::tuple list{config_field{"aggregation", &T::aggregation},
                                   config_field{"rule", &T::rule}};
  // Before the rule was a variant, its fields sat beside it whichever rule was chosen.
  static constexpr std::array removed{
      removed_key{"epochs",
                  "update.rule.ppo_clip.epochs (only the PPO-clip rule takes several epochs)"},
      removed_key{"mini_batches",
                  "update.rule.ppo_clip.mini_batches (only the PPO-clip rule takes mini-batches)"},
      removed_key{
          "ppo",
          "update.rule.ppo_clip, which holds clip_low, clip_high, dual_clip, log_ratio_clamp "
          "and importance"},
      removed_key{"importance",
                  "update.rule.on_policy.importance (the on-policy rule's correction; PPO's "
                  "is update.rule.ppo_clip.importance)"}};
};

template <>
struct config_fields<overlong_options> {
  using T = overlong_options;
  static constexpr std::tuple list{config_field{"mode", &T::mode},
                                   config_field{"max_length", &T::max_length},
                                   config_field{"buffer_length", &T::buffer_length},
                                   config_field{"penalty_factor", &T::penalty_factor},
                                   config_field{"truncated_is_overlong", &T::truncated_is_overlong}};
};

template <>
struct config_fields<filter_options> {
  using T = filter_options;
  static constexpr std::tuple list{config_field{"drop_zero_variance_groups", &T::drop_zero_variance_groups},
                                   config_field{"overlong", &T::overlong}};
};

template <>
struct config_fields<mopd_settings> {
  using T = mopd_settings;
  static constexpr std::tuple list{config_field{"band_low", &T::band_low},
                                   config_field{"band_high", &T::band_high},
                                   config_field{"outcome_weight", &T::outcome_weight}};
};

template <>
struct config_fields<eval_set> {
  using T = eval_set;
  static constexpr std::tuple list{config_field{"domain", &T::domain}, config_field{"prompts", &T::prompts},
                                   config_field{"samples_per_prompt", &T::samples_per_prompt}};
};

template <>
struct config_fields<stage_config> {
  using T = stage_config;
  static constexpr std::tuple list{
      config_field{"name", &T::name},
      config_field{"kind", &T::kind},
      config_field{"domains", &T::domains},
      config_field{"group_size", &T::group_size},
      config_field{"prompts_per_step", &T::prompts_per_step},
      config_field{"steps", &T::steps},
      config_field{"stop", &T::stop},
      config_field{"lr", &T::lr},
      config_field{"sampling", &T::sampling},
      config_field{"update", &T::update},
      config_field{"filters", &T::filters},
      config_field{"mopd", &T::mopd},
      config_field{"success_threshold", &T::success_threshold},
      config_field{"reward_workers", &T::reward_workers},
      config_field{"evals", &T::evals},
      config_field{"eval_sampling", &T::eval_sampling}};
};

// JSON paths of a member and of an element: "update.rule", "evals[0]".
inline std::string member_path(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
inline std::string element_path(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// f(key, member of `object`) for every listed field, in order.
template <class Object, class F>
  requires described_config<std::remove_const_t<Object>>
void for_each_field(Object& object, F&& f) {
  std::apply([&](const auto&... field) { (f(field.key, object.*field.member), ...); },
             config_fields<std::remove_const_t<Object>>::list);
}

// The keys of T's fields, in order.
template <described_config T>
std::vector<std::string> field_keys() {
  std::vector<std::string> keys;
  std::apply([&](const auto&... field) { (keys.emplace_back(field.key), ...); },
             config_fields<T>::list);
  return keys;
}

// The number of members of an aggregate: the largest N for which T{x_1, ..., x_N}
// compiles, with x_i convertible to anything (each initialises one member; no brace
// elision happens, since the conversion to the member's own type exists).
struct to_any_member {
  template <class M>
  operator M() const;  // never defined: used in unevaluated contexts only
};

template <class T, std::size_t... I>
constexpr bool brace_initialisable(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), to_any_member{})...}; };
}

template <class T, std::size_t N = 0>
constexpr std::size_t member_count() {
  if constexpr (brace_initialisable<T>(std::make_index_sequence<N + 1>{}))
    return member_count<T, N + 1>();
  else
    return N;
}

template <described_config T>
constexpr bool lists_every_member = std::tuple_size_v<decltype(config_fields<T>::list)> == member_count<T>();

static_assert(lists_every_member<sampling_params> && lists_every_member<prompt> &&
                  lists_every_member<lr_schedule> && lists_every_member<stop_criteria> &&
                  lists_every_member<importance_options> && lists_every_member<on_policy_update> &&
                  lists_every_member<ppo_clip_update> && lists_every_member<cispo_update> &&
                  lists_every_member<dppo_tv_update> && lists_every_member<dppo_kl_update> &&
                  lists_every_member<dro_update> && lists_every_member<sapo_update> &&
                  lists_every_member<gspo_update> && lists_every_member<geo_mean_update> &&
                  lists_every_member<clip_cov_update> && lists_every_member<kl_cov_update> &&
                  lists_every_member<bypass_mode_update> && lists_every_member<update_options> &&
                  lists_every_member<overlong_options> && lists_every_member<filter_options> &&
                  lists_every_member<mopd_settings> && lists_every_member<eval_set> &&
                  lists_every_member<stage_config>,
              "a config struct gained a member: list it in config_fields (stage_config_fields.hpp) "
              "so that config files carry it");

}  // namespace cascade_rl::detail
