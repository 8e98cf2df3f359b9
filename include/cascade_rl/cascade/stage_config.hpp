#pragma once
// The configuration of one stage, written with designated initializers:
//   {.name = "if_rl", .kind = stage_kind::if_rl, .domains = {"if"}, .group_size = 16,
//    .prompts_per_step = 128, .steps = 180, .lr = constant_lr(3e-6)}
// One struct serves GRPO and MOPD stages; MOPD reads .mopd, GRPO reads .update and
// .filters.

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/cascade/config_text.hpp"
#include "cascade_rl/cascade/episode_summary.hpp"
#include "cascade_rl/cascade/lr_schedule.hpp"
#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/options/described.hpp"
#include "cascade_rl/presets/verl_losses.hpp"

namespace cascade_rl {

// What a stage trains, for the ordering check and the metrics. generic: anything else.
enum class stage_kind {
  generic, if_rl, multi_domain_rl, mopd, rlhf, long_context_rl, math_rl, code_rl, swe_rl,
};

[[nodiscard]] constexpr std::string_view to_string(stage_kind kind) {
  switch (kind) {
    case stage_kind::generic: return "generic";
    case stage_kind::if_rl: return "IF-RL";
    case stage_kind::multi_domain_rl: return "multi-domain RL";
    case stage_kind::mopd: return "MOPD";
    case stage_kind::rlhf: return "RLHF";
    case stage_kind::long_context_rl: return "long-context RL";
    case stage_kind::math_rl: return "math RL";
    case stage_kind::code_rl: return "code RL";
    case stage_kind::swe_rl: return "SWE RL";
  }
  return "unknown";
}

// Ends a stage before its step budget. Both criteria read the mean score of the
// stage's own evaluation sets, measured every eval_every steps.
struct stop_criteria {
  std::size_t eval_every = 0;             // 0: no evaluation inside the stage
  std::optional<double> target_score{};   // stop once the score reaches it
  std::size_t plateau_patience = 0;       // stop after so many evaluations without
  double plateau_min_delta = 0.0;         //   an improvement larger than min_delta (0: off)
};

// The strictly on-policy rule (Cascade RL's GRPO): one optimizer step per batch,
// REINFORCE at ratio 1, so PPO's clip would be inert.
struct on_policy_update {
  // A correction against the behaviour log-probs (e.g. truncated IS for sampler/trainer
  // mismatch); when not none the trainer's log-probs are recomputed.
  importance_options importance{};

  // The options of reinforce_loss under this rule.
  [[nodiscard]] reinforce_options loss_options(loss_aggregation aggregation) const {
    return {.aggregation = aggregation,
            .surrogate = reinforce_surrogate::ratio,
            .importance = importance};
  }
};

// veRL's bypass mode as its policy_loss.rollout_correction keys, as text where veRL takes
// text: rollout_is "token" / "sequence" (unset: no weights), rollout_is_threshold "2.0"
// (truncated) or "0.5_5.0" (IcePop), rollout_rs "token_k1,seq_mean_k3",
// rollout_rs_threshold one spec or one per criterion; loss_type "ppo_clip" or
// "reinforce" (presets::verl::rollout_correction and bypass_mode read them). The
// rollout correction of the trainer's log-probs against the sampler's (the batch's
// behaviour log-probs, veRL's rollout_log_probs, used as old_log_prob: no recomputed old
// policy), then PPO's clipped loss (the ratio to the sampler is the correction) or
// REINFORCE with the correction's IS weights, on the tokens the rejection keeps, divided
// by the counts that mask leaves (veRL's agg_loss on the modified mask).
struct bypass_mode_keys {
  // Texts in place (config_text): the rule stays trivially copyable, as the others.
  using text = config_text<120>;
  text loss_type = "ppo_clip";
  std::optional<text> rollout_is{};
  text rollout_is_threshold = "2.0";
  bool rollout_is_batch_normalize = false;
  std::optional<text> rollout_rs{};
  std::optional<text> rollout_rs_threshold{};
  // loss_type ppo_clip: veRL's clip_ratio_low / clip_ratio_high / clip_ratio_c.
  double clip_low = ppo_clip_options{}.clip_low;
  double clip_high = ppo_clip_options{}.clip_high;
  std::optional<double> dual_clip = 3.0;

  [[nodiscard]] bypass_mode_options options(loss_aggregation aggregation) const {
    const auto view = [](const std::optional<text>& s) {
      return s ? std::optional<std::string_view>(s->view()) : std::nullopt;
    };
    bypass_mode_options options = presets::verl::bypass_mode(
        presets::verl::rollout_correction(view(rollout_is), rollout_is_threshold.view(),
                                          rollout_is_batch_normalize, view(rollout_rs),
                                          view(rollout_rs_threshold)),
        loss_type.view(), aggregation, clip_low, clip_high);
    options.ppo.dual_clip = dual_clip;
    return options;
  }
};

namespace detail {
template <>
struct config_fields<bypass_mode_keys> {
  using T = bypass_mode_keys;
  static constexpr std::string_view alternative = "bypass_mode";
  static constexpr std::tuple list{
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
static_assert(lists_every_member<bypass_mode_keys>);
}  // namespace detail

// The losses a mini-batch rule can hold: every policy loss's options (their description,
// options/described.hpp, names the rule and its fields) and veRL's bypass mode keys.
template <class Loss>
concept mini_batch_loss =
    (detail::described_loss_options<Loss> && !std::same_as<Loss, reinforce_options>) ||
    std::same_as<Loss, bypass_mode_keys>;

// A loss under PPO's schedule: `epochs` passes; each shuffles the groups (the stage's
// generator) and cuts them into `mini_batches` mini-batches, each one optimizer step of
// the loss against the behaviour log-probs as its old log-probs, normalised over that
// mini-batch. `loss` holds the loss's own options, whose aggregation is the stage's
// update.aggregation (one for every rule; leave loss.aggregation at its default):
//   .update = {.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 4}}
//   .update = {.rule = cr::cispo_update{.loss = {.clip_high = 0.28}}}
//   .update = {.rule = cr::mini_batch_update<cr::cispo_options>{
//                  .loss = cr::presets::verl::cispo(actor)}}
// In a JSON schedule the rule is named by its loss's description (veRL's loss_mode:
// "ppo_clip", "cispo", "dppo", "dro", "sapo", "gspo", "geo_mean", "clip_cov", "kl_cov",
// "bypass_mode") and the loss's fields sit beside epochs and mini_batches. The
// covariance losses select their tokens in each mini-batch's call; Clip-Cov's draw takes
// a seed the stage's generator gives each mini-batch (every rank draws it, so their
// shuffles stay the same).
template <mini_batch_loss Loss>
struct mini_batch_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  Loss loss{};

  // The options the loss is called with under the stage's aggregation.
  [[nodiscard]] auto loss_options(loss_aggregation aggregation) const {
    if constexpr (std::same_as<Loss, bypass_mode_keys>) {
      return loss.options(aggregation);
    } else {
      Loss options = loss;
      options.*detail::config_fields<Loss>::aggregation = aggregation;
      return options;
    }
  }
};

using ppo_clip_update = mini_batch_update<ppo_clip_options>;
using cispo_update = mini_batch_update<cispo_options>;
using dppo_update = mini_batch_update<dppo_options>;
using dro_update = mini_batch_update<dro_options>;  // loss.beta has no default: > 0
using sapo_update = mini_batch_update<sapo_options>;
using gspo_update = mini_batch_update<gspo_options>;
using geo_mean_update = mini_batch_update<geo_mean_options>;
using clip_cov_update = mini_batch_update<clip_cov_options>;
using kl_cov_update = mini_batch_update<kl_cov_options>;
using bypass_mode_update = mini_batch_update<bypass_mode_keys>;

namespace detail {

template <>
struct config_fields<on_policy_update> {
  using T = on_policy_update;
  static constexpr std::string_view alternative = "on_policy";
  static constexpr std::tuple list{config_field{"importance", &T::importance}};
};

// A mini-batch rule: its schedule's two fields, then its loss's own, as its loss's
// description names them (the rule's name is the loss's: "cispo", "ppo_clip", ...).
template <class Loss>
struct config_fields<mini_batch_update<Loss>> {
  using T = mini_batch_update<Loss>;
  static constexpr std::string_view alternative = config_fields<Loss>::alternative;
  static constexpr auto list =
      std::tuple_cat(std::tuple{config_field{"epochs", &T::epochs},
                                config_field{"mini_batches", &T::mini_batches}},
                     nested_fields(&T::loss));
  // The PPO rule once had an aggregation of its own, which update.aggregation silently
  // overrode; the loss's aggregation is the stage's.
  static constexpr std::array removed{
      removed_key{"aggregation", "update.aggregation (one aggregation serves every rule)"}};
};

}  // namespace detail

// The rules that take optimizer steps over mini-batches and epochs.
template <class Rule>
concept mini_batch_rule = requires(const Rule& rule) {
  { rule.epochs } -> std::convertible_to<std::size_t>;
  { rule.mini_batches } -> std::convertible_to<std::size_t>;
  rule.loss_options(loss_aggregation::token_mean);
};

// How a GRPO stage turns its batch into optimizer steps. The rule is one of these
// structs, so that a field of another rule cannot be set.
struct update_options {
  loss_aggregation aggregation = loss_aggregation::token_mean;  // every rule
  std::variant<on_policy_update, ppo_clip_update, cispo_update, dppo_update, dro_update,
               sapo_update, gspo_update, geo_mean_update, clip_cov_update, kl_cov_update,
               bypass_mode_update>
      rule{};

  // The options of ppo_clip_loss; the rule must be ppo_clip_update.
  [[nodiscard]] ppo_clip_options ppo_clip() const {
    const ppo_clip_update* ppo = std::get_if<ppo_clip_update>(&rule);
    if (ppo == nullptr)
      detail::fail("update.rule", "is not ppo_clip_update, so it has no PPO-clip options");
    return ppo->loss_options(aggregation);
  }
};

// What a step does with an episode of an agentic stage, by the reason it ended: keep it,
// mask it (its tokens get no gradient, its reward still counts in its group's baseline,
// as DAPO's overlong masking does), or drop it (it leaves its group before the
// advantages are computed; a group left empty leaves the step). Masking or dropping
// `timeout` and `environment_error` keeps a policy from being pushed away from actions
// that an environment's failure, not the policy, scored 0.
enum class episode_treatment { keep, mask, drop };

struct end_reason_filter {
  episode_treatment done = episode_treatment::keep;
  episode_treatment max_turns = episode_treatment::keep;
  episode_treatment context_full = episode_treatment::keep;
  episode_treatment turn_truncated = episode_treatment::keep;
  episode_treatment timeout = episode_treatment::keep;
  episode_treatment environment_error = episode_treatment::keep;

  [[nodiscard]] episode_treatment of(end_reason reason) const {
    switch (reason) {
      case end_reason::done: return done;
      case end_reason::max_turns: return max_turns;
      case end_reason::context_full: return context_full;
      case end_reason::turn_truncated: return turn_truncated;
      case end_reason::timeout: return timeout;
      case end_reason::environment_error: return environment_error;
    }
    return episode_treatment::keep;
  }
  [[nodiscard]] bool keeps_all() const { return *this == end_reason_filter{}; }
  bool operator==(const end_reason_filter&) const = default;
};

struct filter_options {
  // Groups whose rewards are all equal carry no signal (IF-RL filters them).
  bool drop_zero_variance_groups = true;
  // Overlong responses dropped, masked or softly penalised (DAPO); nullopt: kept.
  std::optional<overlong_options> overlong{};
  // Agentic stages: episodes masked or dropped by their end reason (applied first, before
  // the overlong and zero-variance filters); a single-turn stage refuses any but keep.
  end_reason_filter end_reasons{};
};

struct mopd_settings {
  // Truncated importance band against the behaviour log-probs (Nemotron-Cascade 2).
  double band_low = 0.5;
  double band_high = 2.0;
  // 0: pure distillation. Otherwise the token advantage is
  // (log pi_teacher - log pi_student) + outcome_weight * A_GRPO(reward).
  double outcome_weight = 0.0;
};

// Agentic stages (agentic_stage.hpp): how the episodes of a step, and of an evaluation,
// run. Single-turn stages do not read these. The environments' steps run on
// reward_workers threads.
struct episode_settings {
  std::size_t max_turns = 8;
  std::size_t context_budget = 4096;          // tokens of the whole context, prompt included
  std::size_t max_turn_tokens = 512;          // tokens one action may add
  std::size_t observation_token_cap = 1024;   // an observation's tokens past this are cut
  std::size_t observation_text_cap = 1 << 16; // bytes of an observation read at most
  // The time an episode's environment may spend in its steps, summed over its turns; 0:
  // no limit. An episode ended by it is the one part of a step a resumed run need not
  // repeat bit for bit.
  std::size_t episode_time_budget_ms = 0;
};

// An evaluation set: the score of `domain` is the mean reward over its prompts, with
// samples_per_prompt responses each, sampled with the stage's eval_sampling.
struct eval_set {
  std::string domain{};
  std::vector<prompt> prompts{};
  std::size_t samples_per_prompt = 1;
};

struct stage_config {
  std::string name{};
  stage_kind kind = stage_kind::generic;
  std::vector<std::string> domains{};   // MOPD: the domains routed to teachers
  std::size_t group_size = 16;          // responses per prompt
  std::size_t prompts_per_step = 128;
  std::size_t steps = 0;                // step budget, > 0
  stop_criteria stop{};
  lr_schedule lr = constant_lr(1e-6);
  sampling_params sampling{};
  update_options update{};
  filter_options filters{};
  mopd_settings mopd{};
  episode_settings episodes{};
  double success_threshold = 1.0;       // a response with reward >= this counts as solved
  std::size_t reward_workers = 4;       // threads verifying rewards
  std::vector<eval_set> evals{};
  sampling_params eval_sampling{.temperature = 0.0};
};

namespace detail {

inline std::string stage_field(const stage_config& c, std::string_view field) {
  return "stage '" + c.name + "'." + std::string(field);
}

// Where a stage's errors point: "stage 'if_rl'.steps" in the engine; a parser passes the
// JSON path of the stage as `at` ("stages[2]") so that the message names the value to fix.
struct stage_where {
  const stage_config& c;
  std::string_view at;  // empty: "stage '<name>'"
  [[nodiscard]] std::string operator()(std::string_view field) const {
    return at.empty() ? stage_field(c, field) : std::string(at) + "." + std::string(field);
  }
};

// Runs an algorithm's option check, whose messages name its own argument
// ("options.clip_low", "max_length"), and re-points them at the stage field `field`
// ("stage 's'.update.rule.ppo_clip.clip_low"): the user edits the config, not the call.
template <class Check>
void check_nested(const std::string& field, std::string_view own_prefix, Check check) {
  try {
    check();
  } catch (const error& e) {
    throw e.relocated(field, own_prefix);
  }
}

inline void validate_sampling(const sampling_params& s, const std::string& field) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    fail(field + ".temperature", "must be finite and >= 0, got " + std::to_string(s.temperature));
  if (!(s.top_p > 0 && s.top_p <= 1))
    fail(field + ".top_p", "must lie in (0, 1], got " + std::to_string(s.top_p));
  if (s.max_response_length <= 0)
    fail(field + ".max_response_length", "must be > 0, got " + std::to_string(s.max_response_length));
}

// The checks every stage makes; `min_group_size` is 2 where a group baseline is needed.
inline void validate_stage_config(const stage_config& c, std::size_t min_group_size,
                                  std::string_view why_group, std::string_view at = {}) {
  const stage_where where{c, at};
  if (c.name.empty())
    fail(at.empty() ? std::string("stage.name") : where("name"), "is empty (every stage needs a name)");
  if (c.steps == 0) fail(where("steps"), "is 0 (a stage needs at least one step)");
  if (c.prompts_per_step == 0) fail(where("prompts_per_step"), "is 0");
  if (c.group_size < min_group_size)
    fail(where("group_size"), "is " + std::to_string(c.group_size) + ", but " +
                                  std::string(why_group) + " needs at least " +
                                  std::to_string(min_group_size));
  c.lr.validate(where("lr"));
  validate_sampling(c.sampling, where("sampling"));
  validate_sampling(c.eval_sampling, where("eval_sampling"));
  if (c.reward_workers == 0) fail(where("reward_workers"), "is 0");
  if (!std::isfinite(c.success_threshold)) fail(where("success_threshold"), "is not finite");
  for (std::size_t e = 0; e < c.evals.size(); ++e) {
    const std::string f = where("evals[" + std::to_string(e) + "]");
    if (c.evals[e].domain.empty()) fail(f + ".domain", "is empty");
    if (c.evals[e].prompts.empty()) fail(f + ".prompts", "is empty");
    if (c.evals[e].samples_per_prompt == 0) fail(f + ".samples_per_prompt", "is 0");
  }
  const bool stops = c.stop.target_score.has_value() || c.stop.plateau_patience > 0;
  if (stops && (c.stop.eval_every == 0 || c.evals.empty()))
    fail(where("stop"), "has a target score or plateau, which need stop.eval_every > 0 "
                        "and at least one evaluation set");
}

// A single-turn stage's responses end by no reason: an end-reason filter there would
// silently do nothing, so it is refused.
inline void refuse_end_reason_filter(const stage_config& c, std::string_view at = {}) {
  if (!c.filters.end_reasons.keeps_all())
    fail(stage_where{c, at}("filters.end_reasons"),
         "masks or drops episodes, but this stage trains on single-turn responses; the "
         "filter applies to agentic stages (make_agentic_stage)");
}

// What a GRPO stage checks in its config (grpo_stage::validate). The options of the
// update rule in use are checked here too, so that a bad clip range is refused before
// the first generation rather than at the first loss.
inline void validate_grpo_config(const stage_config& c, std::string_view at = {}) {
  validate_stage_config(c, 2, "GRPO's group baseline (mean and std of a group)", at);
  const stage_where where{c, at};
  if (c.filters.overlong)
    check_nested(where("filters.overlong"), "", [&] {
      require_overlong_options(*c.filters.overlong, c.filters.overlong->mode == overlong_mode::soft_penalty);
    });
  if (c.update.rule.valueless_by_exception())
    fail(where("update.rule"), "holds no rule (left empty by an exception)");
  std::visit(
      [&]<class Rule>(const Rule& rule) {
        if constexpr (std::is_same_v<Rule, on_policy_update>) {
          validate_importance(rule.importance, where("update.rule.on_policy.importance"));
        } else {
          // Appended rather than "..." + std::string(...): GCC 12 at -O3 reports a false
          // -Warray-bounds on that operator+ when this is inlined (-Werror trainers).
          std::string rule_path = "update.rule.";
          rule_path += config_fields<Rule>::alternative;
          const std::string field = where(rule_path);
          if (rule.epochs == 0) fail(field + ".epochs", "is 0");
          if (rule.mini_batches == 0) fail(field + ".mini_batches", "is 0");
          if (rule.mini_batches > c.prompts_per_step)
            fail(field + ".mini_batches",
                 "is " + std::to_string(rule.mini_batches) +
                     ", more than prompts_per_step = " + std::to_string(c.prompts_per_step));
          if constexpr (detail::described_loss_options<decltype(rule.loss)>) {
            using Loss = decltype(rule.loss);
            const loss_aggregation own = rule.loss.*config_fields<Loss>::aggregation;
            if (own != Loss{}.*config_fields<Loss>::aggregation && own != c.update.aggregation)
              fail(field + ".loss.aggregation",
                   "is " + std::string(to_string(own)) +
                       ", but a stage's aggregation is update.aggregation (" +
                       std::string(to_string(c.update.aggregation)) +
                       "), one for every rule: set it there");
          }
          check_nested(field, "options.", [&] {
            const auto options = rule.loss_options(c.update.aggregation);
            if constexpr (std::is_same_v<Rule, bypass_mode_update>) {
              validate_rollout_correction_options(options.correction);
              validate_ppo_options(options.ppo);
            } else {
              validate_policy_loss_options(options);
            }
          });
        }
      },
      c.update.rule);
}

// What a MOPD stage checks in its config (mopd_stage::validate, which also checks its
// prompts' domains). `has_reward`: whether the stage scores responses; a parsed config
// does not know yet, passes true, and the stage checks again when it is built.
inline void validate_mopd_config(const stage_config& c, bool has_reward, std::string_view at = {}) {
  const bool mixes = c.mopd.outcome_weight != 0.0;
  validate_stage_config(c, mixes ? 2 : 1, "mixing the outcome reward (a GRPO group baseline)", at);
  const stage_where where{c, at};
  if (c.domains.empty())
    fail(where("domains"), "is empty: MOPD routes every prompt to its domain's teacher");
  if (!(c.mopd.band_low >= 0 && c.mopd.band_high >= c.mopd.band_low))
    fail(where("mopd.band_low"), "must satisfy 0 <= band_low <= band_high");
  if (!std::isfinite(c.mopd.outcome_weight)) fail(where("mopd.outcome_weight"), "is not finite");
  if (mixes && !has_reward) fail(where("mopd.outcome_weight"), "is non-zero, but the stage has no reward");
  if (!c.evals.empty() && !has_reward)
    fail(where("evals"), "are set, but the stage has no reward to score them");
  if (!std::holds_alternative<on_policy_update>(c.update.rule))
    fail(where("update.rule"),
         "must be on_policy (on_policy_update): MOPD takes one step per batch");
}

// Checks across the stages of a schedule: unique names, and one evaluation set per
// domain (a forgetting-matrix column must mean one thing). `array_path` non-empty:
// stage i's errors point at array_path[i] (a parsed schedule) instead of its name.
inline void validate_stage_set(const std::vector<stage_config>& configs, std::string_view array_path = {}) {
  std::set<std::string> names, domains;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const stage_config& c = configs[i];
    const std::string at = array_path.empty() ? std::string() : std::string(array_path) + "[" + std::to_string(i) + "]";
    const stage_where where{c, at};
    if (!names.insert(c.name).second) fail(where("name"), "is used by two stages");
    for (std::size_t e = 0; e < c.evals.size(); ++e)
      if (!domains.insert(c.evals[e].domain).second)
        fail(where("evals[" + std::to_string(e) + "].domain"),
             "evaluates domain '" + c.evals[e].domain + "', which an earlier evaluation set already does");
  }
}

}  // namespace detail
}  // namespace cascade_rl
