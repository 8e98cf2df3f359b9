#pragma once
// The configuration of one stage, written with designated initializers:
//   {.name = "if_rl", .kind = stage_kind::if_rl, .domains = {"if"}, .group_size = 16,
//    .prompts_per_step = 128, .steps = 180, .lr = constant_lr(3e-6)}
// One struct serves GRPO and MOPD stages; MOPD reads .mopd, GRPO reads .update and
// .filters.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/cascade/config_text.hpp"
#include "cascade_rl/cascade/lr_schedule.hpp"
#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/core/error.hpp"
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

// PPO's clipped surrogate against the behaviour log-probs: `epochs` passes over
// `mini_batches` mini-batches, each mini-batch one optimizer step. The clip fields are
// ppo_clip_options' without the aggregation, which is update_options::aggregation for
// both rules (one field, one meaning).
struct ppo_clip_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double clip_low = ppo_clip_options{}.clip_low;
  double clip_high = ppo_clip_options{}.clip_high;
  std::optional<double> dual_clip = ppo_clip_options{}.dual_clip;
  double log_ratio_clamp = ppo_clip_options{}.log_ratio_clamp;
  importance_options importance{};  // target of the ratio is the behaviour log-probs

  // The options of ppo_clip_loss under this rule.
  [[nodiscard]] ppo_clip_options loss_options(loss_aggregation aggregation) const {
    return {.clip_low = clip_low,
            .clip_high = clip_high,
            .dual_clip = dual_clip,
            .log_ratio_clamp = log_ratio_clamp,
            .aggregation = aggregation,
            .importance = importance};
  }
};

// veRL's ratio losses under PPO's schedule: `epochs` passes over `mini_batches`
// mini-batches, each one optimizer step, the loss taken against the behaviour log-probs
// as its old log-probs (policy_loss.hpp). Each holds its loss options' fields without
// the aggregation, which is update_options::aggregation for every rule; in a JSON
// schedule each is named by veRL's loss_mode ("cispo", "dppo_tv", "dppo_kl", "dro",
// "sapo").
struct cispo_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double clip_low = cispo_options{}.clip_low;
  double clip_high = cispo_options{}.clip_high;
  double log_ratio_clamp = cispo_options{}.log_ratio_clamp;

  [[nodiscard]] cispo_options loss_options(loss_aggregation aggregation) const {
    return {.clip_low = clip_low,
            .clip_high = clip_high,
            .log_ratio_clamp = log_ratio_clamp,
            .aggregation = aggregation};
  }
};

template <terms::dppo_divergence D>
struct dppo_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double clip_low = dppo_options{}.clip_low;
  double clip_high = dppo_options{}.clip_high;
  double truncation = dppo_options{}.truncation;
  double log_ratio_clamp = dppo_options{}.log_ratio_clamp;

  [[nodiscard]] dppo_options loss_options(loss_aggregation aggregation) const {
    return {.divergence = D,
            .clip_low = clip_low,
            .clip_high = clip_high,
            .truncation = truncation,
            .log_ratio_clamp = log_ratio_clamp,
            .aggregation = aggregation};
  }
};
using dppo_tv_update = dppo_update<terms::dppo_divergence::total_variation>;
using dppo_kl_update = dppo_update<terms::dppo_divergence::binary_kl>;

struct dro_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double beta = 0;               // no default, as veRL's dro_beta: must be > 0

  [[nodiscard]] dro_options loss_options(loss_aggregation aggregation) const {
    return {.beta = beta, .aggregation = aggregation};
  }
};

struct sapo_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double tau_pos = sapo_options{}.tau_pos;
  double tau_neg = sapo_options{}.tau_neg;
  double log_ratio_clamp = sapo_options{}.log_ratio_clamp;

  [[nodiscard]] sapo_options loss_options(loss_aggregation aggregation) const {
    return {.tau_pos = tau_pos,
            .tau_neg = tau_neg,
            .log_ratio_clamp = log_ratio_clamp,
            .aggregation = aggregation};
  }
};

// veRL's sequence-level ratio losses under the same schedule ("gspo", "geo_mean").
struct gspo_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double clip_low = gspo_options{}.clip_low;
  double clip_high = gspo_options{}.clip_high;
  double log_ratio_bound = gspo_options{}.log_ratio_bound;

  [[nodiscard]] gspo_options loss_options(loss_aggregation aggregation) const {
    return {.clip_low = clip_low,
            .clip_high = clip_high,
            .log_ratio_bound = log_ratio_bound,
            .aggregation = aggregation};
  }
};

struct geo_mean_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double clip_low = geo_mean_options{}.clip_low;
  double clip_high = geo_mean_options{}.clip_high;

  [[nodiscard]] geo_mean_options loss_options(loss_aggregation aggregation) const {
    return {.clip_low = clip_low, .clip_high = clip_high, .aggregation = aggregation};
  }
};

// veRL's covariance-selection losses under the same schedule ("clip_cov", "kl_cov"): the
// tokens are selected in each mini-batch's loss call, on each rank, as veRL selects them
// in each micro-batch's; Clip-Cov's draw is token_selection::seeded with a seed the
// stage's generator gives each mini-batch (every rank draws it, so their shuffles stay
// the same).
struct clip_cov_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double clip_low = clip_cov_options{}.clip_low;
  double clip_high = clip_cov_options{}.clip_high;
  double clip_cov_ratio = clip_cov_options{}.clip_cov_ratio;
  double clip_cov_lb = clip_cov_options{}.clip_cov_lb;
  double clip_cov_ub = clip_cov_options{}.clip_cov_ub;

  [[nodiscard]] clip_cov_options loss_options(loss_aggregation aggregation) const {
    return {.clip_low = clip_low,
            .clip_high = clip_high,
            .clip_cov_ratio = clip_cov_ratio,
            .clip_cov_lb = clip_cov_lb,
            .clip_cov_ub = clip_cov_ub,
            .aggregation = aggregation};
  }
};

struct kl_cov_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
  double kl_cov_ratio = kl_cov_options{}.kl_cov_ratio;
  double ppo_kl_coef = kl_cov_options{}.ppo_kl_coef;

  [[nodiscard]] kl_cov_options loss_options(loss_aggregation aggregation) const {
    return {.kl_cov_ratio = kl_cov_ratio, .ppo_kl_coef = ppo_kl_coef, .aggregation = aggregation};
  }
};

// veRL's bypass mode under the same schedule ("bypass_mode"): the rollout correction of
// the trainer's log-probs against the sampler's, then PPO's clipped loss (the ratio to the
// sampler is the correction) or REINFORCE with the correction's IS weights, on the tokens
// the rejection keeps, divided by the counts that mask leaves (veRL's agg_loss on the
// modified mask). The batch's behaviour log-probs are the sampler's: veRL's
// rollout_log_probs, which bypass mode uses as old_log_prob (no recomputed old policy).
// The correction's fields are veRL's policy_loss.rollout_correction keys, as text where
// veRL takes text: rollout_is "token" / "sequence" (unset: no weights),
// rollout_is_threshold "2.0" (truncated) or "0.5_5.0" (IcePop), rollout_rs
// "token_k1,seq_mean_k3", rollout_rs_threshold one spec or one per criterion; loss_type
// "ppo_clip" or "reinforce" (presets::verl::rollout_correction and bypass_mode read them).
struct bypass_mode_update {
  std::size_t epochs = 1;
  std::size_t mini_batches = 1;  // at most prompts_per_step (whole groups)
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

  [[nodiscard]] bypass_mode_options loss_options(loss_aggregation aggregation) const {
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

// The rules that take optimizer steps over mini-batches and epochs.
template <class Rule>
concept mini_batch_rule = requires(const Rule& rule) {
  { rule.epochs } -> std::convertible_to<std::size_t>;
  { rule.mini_batches } -> std::convertible_to<std::size_t>;
  rule.loss_options(loss_aggregation::token_mean);
};

// How a GRPO stage turns its batch into optimizer steps. The rule is one of these
// structs, so that a field of another rule cannot be set:
//   .update = {.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 4}}
//   .update = {.rule = cr::cispo_update{.clip_high = 0.28}}
struct update_options {
  loss_aggregation aggregation = loss_aggregation::token_mean;  // every rule
  std::variant<on_policy_update, ppo_clip_update, cispo_update, dppo_tv_update, dppo_kl_update,
               dro_update, sapo_update, gspo_update, geo_mean_update, clip_cov_update,
               kl_cov_update, bypass_mode_update>
      rule{};

  // The options of ppo_clip_loss; the rule must be ppo_clip_update.
  [[nodiscard]] ppo_clip_options ppo_clip() const {
    const ppo_clip_update* ppo = std::get_if<ppo_clip_update>(&rule);
    if (ppo == nullptr)
      detail::fail("update.rule", "is not ppo_clip_update, so it has no PPO-clip options");
    return ppo->loss_options(aggregation);
  }
};

// Each rule's name in a JSON schedule (stage_config_fields.hpp) and in error paths
// ("update.rule.cispo.clip_low"): ours for the two Cascade rules, veRL's loss_mode for
// the others.
template <class Rule>
constexpr std::string_view update_rule_name() {
  if constexpr (std::is_same_v<Rule, on_policy_update>) return "on_policy";
  if constexpr (std::is_same_v<Rule, ppo_clip_update>) return "ppo_clip";
  if constexpr (std::is_same_v<Rule, cispo_update>) return "cispo";
  if constexpr (std::is_same_v<Rule, dppo_tv_update>) return "dppo_tv";
  if constexpr (std::is_same_v<Rule, dppo_kl_update>) return "dppo_kl";
  if constexpr (std::is_same_v<Rule, dro_update>) return "dro";
  if constexpr (std::is_same_v<Rule, sapo_update>) return "sapo";
  if constexpr (std::is_same_v<Rule, gspo_update>) return "gspo";
  if constexpr (std::is_same_v<Rule, geo_mean_update>) return "geo_mean";
  if constexpr (std::is_same_v<Rule, clip_cov_update>) return "clip_cov";
  if constexpr (std::is_same_v<Rule, kl_cov_update>) return "kl_cov";
  if constexpr (std::is_same_v<Rule, bypass_mode_update>) return "bypass_mode";
}

struct filter_options {
  // Groups whose rewards are all equal carry no signal (IF-RL filters them).
  bool drop_zero_variance_groups = true;
  // Overlong responses dropped, masked or softly penalised (DAPO); nullopt: kept.
  std::optional<overlong_options> overlong{};
};

struct mopd_settings {
  // Truncated importance band against the behaviour log-probs (Nemotron-Cascade 2).
  double band_low = 0.5;
  double band_high = 2.0;
  // 0: pure distillation. Otherwise the token advantage is
  // (log pi_teacher - log pi_student) + outcome_weight * A_GRPO(reward).
  double outcome_weight = 0.0;
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
          const std::string field = where("update.rule." + std::string(update_rule_name<Rule>()));
          if (rule.epochs == 0) fail(field + ".epochs", "is 0");
          if (rule.mini_batches == 0) fail(field + ".mini_batches", "is 0");
          if (rule.mini_batches > c.prompts_per_step)
            fail(field + ".mini_batches",
                 "is " + std::to_string(rule.mini_batches) +
                     ", more than prompts_per_step = " + std::to_string(c.prompts_per_step));
          check_nested(field, "options.", [&] {
            const auto options = rule.loss_options(c.update.aggregation);
            if constexpr (std::is_same_v<Rule, ppo_clip_update>)
              validate_ppo_options(options);
            else if constexpr (std::is_same_v<Rule, gspo_update>)
              validate_gspo_options(options);
            else if constexpr (std::is_same_v<Rule, geo_mean_update>)
              validate_geo_mean_options(options);
            else if constexpr (std::is_same_v<Rule, clip_cov_update>)
              validate_clip_cov_options(options);
            else if constexpr (std::is_same_v<Rule, kl_cov_update>)
              validate_kl_cov_options(options);
            else if constexpr (std::is_same_v<Rule, bypass_mode_update>) {
              validate_rollout_correction_options(options.correction);
              validate_ppo_options(options.ppo);
            } else
              validate_ratio_options(options);
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
