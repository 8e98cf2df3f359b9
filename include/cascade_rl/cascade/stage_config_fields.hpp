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
#include "cascade_rl/options/described.hpp"

namespace cascade_rl::detail {

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

// veRL's two DPPO loss modes were two rules; they are one, its divergence a field.
template <>
struct removed_alternatives<decltype(update_options::rule)> {
  static constexpr std::array list{
      removed_key{"dppo_tv", "{\"dppo\": {\"divergence\": \"total_variation\", ...}}"},
      removed_key{"dppo_kl", "{\"dppo\": {\"divergence\": \"binary_kl\", ...}}"}};
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
struct config_fields<end_reason_filter> {
  using T = end_reason_filter;
  static constexpr std::tuple list{config_field{"done", &T::done},
                                   config_field{"max_turns", &T::max_turns},
                                   config_field{"context_full", &T::context_full},
                                   config_field{"turn_truncated", &T::turn_truncated},
                                   config_field{"timeout", &T::timeout},
                                   config_field{"environment_error", &T::environment_error}};
};

template <>
struct config_fields<filter_options> {
  using T = filter_options;
  static constexpr std::tuple list{config_field{"drop_zero_variance_groups", &T::drop_zero_variance_groups},
                                   config_field{"overlong", &T::overlong},
                                   config_field{"end_reasons", &T::end_reasons}};
};

template <>
struct config_fields<mopd_settings> {
  using T = mopd_settings;
  static constexpr std::tuple list{config_field{"band_low", &T::band_low},
                                   config_field{"band_high", &T::band_high},
                                   config_field{"outcome_weight", &T::outcome_weight}};
};

template <>
struct config_fields<episode_settings> {
  using T = episode_settings;
  static constexpr std::tuple list{
      config_field{"max_turns", &T::max_turns},
      config_field{"context_budget", &T::context_budget},
      config_field{"max_turn_tokens", &T::max_turn_tokens},
      config_field{"observation_token_cap", &T::observation_token_cap},
      config_field{"observation_text_cap", &T::observation_text_cap},
      config_field{"episode_time_budget_ms", &T::episode_time_budget_ms}};
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
      config_field{"episodes", &T::episodes},
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

static_assert(lists_every_member<sampling_params> && lists_every_member<prompt> &&
                  lists_every_member<lr_schedule> && lists_every_member<stop_criteria> &&
                  lists_every_member<on_policy_update> && lists_every_member<update_options> &&
                  lists_every_member<overlong_options> && lists_every_member<filter_options> &&
                  lists_every_member<end_reason_filter> &&
                  lists_every_member<mopd_settings> && lists_every_member<episode_settings> &&
                  lists_every_member<eval_set> &&
                  lists_every_member<stage_config>,
              "a config struct gained a member: list it in config_fields (stage_config_fields.hpp) "
              "so that config files carry it");

}  // namespace cascade_rl::detail
