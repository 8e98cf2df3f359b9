// Stage configs and schedules as JSON (stage_config_json.hpp): exact round trips of the
// published schedules and of a config with every field set, a hand-written file, every
// class of refusal with the JSON path it names, the committed example file, and a parsed
// schedule running exactly like the same schedule written in C++.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade.hpp"
#include "support/expect_error.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
namespace fs = std::filesystem;

// The message of the cascade_rl::error that `f` throws; a failure if it throws nothing.
template <class F>
std::string error_of(F f) {
  std::string message = cr::testing::error_message(f);
  if (message.empty()) ADD_FAILURE() << "expected a cascade_rl::error";
  return message;
}

std::string parse_error(const std::string& text) {
  return error_of([&] { (void)cr::parse_schedule(text); });
}

fs::path json_scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("cascade_rl_json_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes, parses and writes again: the configs and the texts must both agree.
void expect_round_trip(const std::vector<cr::stage_config>& stages) {
  const std::string text = cr::schedule_to_string(stages);
  const std::vector<cr::stage_config> back = cr::parse_schedule(text);
  EXPECT_EQ(cr::schedule_difference(stages, back), "");
  EXPECT_EQ(cr::schedule_to_string(back), text);
}

// ---- round trips ----------------------------------------------------------------------

TEST(StageConfigJson, PublishedSchedulesRoundTrip) {
  expect_round_trip(cr::nemotron_cascade2_schedule().configs());
  expect_round_trip(cr::nemotron_cascade1_schedule().configs());
  EXPECT_EQ(cr::parse_schedule(cr::schedule_to_string(cr::nemotron_cascade2_schedule().configs()))[2].lr.start, 2e-7);
}

// Every field differs from its default, doubles included whose shortest decimal form
// needs all 17 digits, and the config still passes the engine's checks.
cr::stage_config every_field_set() {
  return {
      .name = "math_rl",
      .kind = cr::stage_kind::math_rl,
      .domains = {"math", "gsm8k"},
      .group_size = 8,
      .prompts_per_step = 64,
      .steps = 250,
      .stop = {.eval_every = 5,
               .target_score = 0.9,
               .plateau_patience = 3,
               .plateau_min_delta = 1.0 / 3.0},
      .lr = cr::cosine_lr(0.1 + 0.2, 3e-7, 10, 1e-7),
      .sampling = {.temperature = std::nextafter(0.7, 1.0),
                   .top_p = 0.95,
                   .max_response_length = 4096},
      .update = {.aggregation = cr::loss_aggregation::seq_mean_token_sum_norm,
                 .rule =
                     cr::ppo_clip_update{
                         .epochs = 2,
                         .mini_batches = 4,
                         .loss = {.clip_low = 0.1,
                                  .clip_high = 0.28,
                                  .dual_clip = 3.0,
                                  .log_ratio_clamp = 10.0,
                                  .importance = {.mode = cr::importance_sampling::truncated,
                                                 .cap = 1.5,
                                                 .band_low = 0.25,
                                                 .band_high = 4.0}}}},
      .filters = {.drop_zero_variance_groups = false,
                  .overlong = cr::overlong_options{.mode = cr::overlong_mode::soft_penalty,
                                                   .max_length = 4096,
                                                   .buffer_length = 512,
                                                   .penalty_factor = 0.5,
                                                   .truncated_is_overlong = false},
                  .end_reasons = {.done = cr::episode_treatment::mask,
                                  .max_turns = cr::episode_treatment::drop,
                                  .context_full = cr::episode_treatment::mask,
                                  .turn_truncated = cr::episode_treatment::drop,
                                  .timeout = cr::episode_treatment::mask,
                                  .environment_error = cr::episode_treatment::drop}},
      .mopd = {.band_low = 0.3, .band_high = 3.0, .outcome_weight = 5e-324},
      .episodes = {.max_turns = 30,
                   .context_budget = 65536,
                   .max_turn_tokens = 2048,
                   .observation_token_cap = 3000,
                   .observation_text_cap = 100000,
                   .episode_time_budget_ms = 600000},
      .success_threshold = 0.75,
      .reward_workers = 8,
      .evals = {{.domain = "math",
                 .prompts = {{.id = -7,
                              .domain = "math",
                              .text = "2+2? \"quoted\"\n\u00e9",
                              .reference = "4"}},
                 .samples_per_prompt = 4}},
      .eval_sampling = {.temperature = 0.6, .top_p = 0.9, .max_response_length = 2048}};
}

// Paths of leaves (numbers, strings, booleans) equal in both documents: a field the
// every-field config leaves at its default. Arrays and nulls differ as a whole.
void equal_leaves(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b, const std::string& path,
                  std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) equal_leaves(value, b.at(key), path + "." + key, out);
  } else if (a == b) {
    out.push_back(path);
  }
}

TEST(StageConfigJson, EveryFieldSetRoundTrips) {
  const cr::stage_config c = every_field_set();
  // Every leaf is non-default, including those of the optional and repeated structs.
  // (The update rule against the alternative c holds, at its defaults.)
  std::vector<std::string> unchanged;
  cr::stage_config ppo_defaults;
  ppo_defaults.update.rule = cr::ppo_clip_update{};
  equal_leaves(cr::stage_config_to_json(c), cr::stage_config_to_json(ppo_defaults), "", unchanged);
  const nlohmann::ordered_json fields = cr::stage_config_to_json(c);
  cr::stage_config with_defaults;  // optional and repeated structs present, at their defaults
  with_defaults.filters.overlong = cr::overlong_options{};
  with_defaults.evals = {cr::eval_set{.prompts = {cr::prompt{}}}};
  const nlohmann::ordered_json defaults = cr::stage_config_to_json(with_defaults);
  equal_leaves(fields.at("filters").at("overlong"), defaults.at("filters").at("overlong"), ".filters.overlong",
               unchanged);
  equal_leaves(fields.at("evals")[0], defaults.at("evals")[0], ".evals[0]", unchanged);
  equal_leaves(fields.at("evals")[0].at("prompts")[0], defaults.at("evals")[0].at("prompts")[0],
               ".evals[0].prompts[0]", unchanged);
  EXPECT_EQ(unchanged, std::vector<std::string>{});

  EXPECT_EQ(cr::stage_config_difference(c, cr::stage_config_from_json(cr::stage_config_to_json(c))), "");
  expect_round_trip({c, cr::nemotron_cascade2_schedule().mopd});
  // The comparison itself finds a change anywhere, nested ones included.
  cr::stage_config d = c;
  std::get<cr::ppo_clip_update>(d.update.rule).loss.importance.band_high = std::nextafter(4.0, 5.0);
  EXPECT_EQ(cr::stage_config_difference(c, d), "update.rule.ppo_clip.importance.band_high");
  d = c;
  d.evals[0].prompts[0].text += " ";
  EXPECT_EQ(cr::stage_config_difference(c, d), "evals[0].prompts[0].text");
  d = c;
  d.filters.overlong.reset();
  EXPECT_EQ(cr::stage_config_difference(c, d), "filters.overlong");
}

TEST(StageConfigJson, EnumNamesAreUniqueAndReadBack) {
  const auto check = [](const auto& table) {
    for (const auto& [value, name] : table) {
      EXPECT_EQ(cr::parse_enum<std::decay_t<decltype(value)>>(name), value) << name;
      EXPECT_EQ(cr::enum_name(value), name);
    }
  };
  check(cr::enum_names<cr::stage_kind>::table);
  check(cr::enum_names<cr::loss_aggregation>::table);
  check(cr::enum_names<cr::lr_shape>::table);
  check(cr::enum_names<cr::overlong_mode>::table);
  check(cr::enum_names<cr::importance_sampling>::table);
  EXPECT_EQ(cr::enum_name(cr::loss_aggregation::seq_mean_token_sum_norm), "seq-mean-token-sum-norm");
  EXPECT_EQ(cr::enum_name(cr::stage_kind::if_rl), "IF-RL");
  EXPECT_FALSE(cr::parse_enum<cr::stage_kind>("if_rl").has_value());
}

// ---- a hand-written file ----------------------------------------------------------------

constexpr const char* hand_written = R"({
  // Cascade 2's first stages, shortened; unset fields keep their C++ defaults.
  "stages": [
    {"name": "if_rl", "kind": "IF-RL", "domains": ["instruction_following"],
     "group_size": 16, "prompts_per_step": 128, "steps": 180,
     "lr": {"peak": 3e-6},
     "filters": {"overlong": {"mode": "mask", "max_length": 8192}},
     "eval_sampling": {"top_p": 0.9}},
    /* MOPD: 128 x 4, lr 2e-7 -> 2e-6 over 30 steps */
    {"name": "mopd", "kind": "MOPD", "domains": ["instruction_following", "math"],
     "group_size": 4, "prompts_per_step": 128, "steps": 50,
     "lr": {"shape": "linear_warmup", "start": 2e-7, "peak": 2e-6, "warmup_steps": 30},
     "mopd": {"band_low": 0.5, "band_high": 2}},
    {"name": "math_rl", "kind": "math RL", "domains": ["math"], "steps": 200,
     "lr": {"shape": "cosine", "peak": 3e-6, "floor": 3e-7, "warmup_steps": 10},
     "update": {"aggregation": "seq-mean-token-mean",
                "rule": {"ppo_clip": {"epochs": 2, "mini_batches": 4, "clip_high": 0.28, "dual_clip": 3}}},
     "stop": {"eval_every": 10, "target_score": 0.9},
     "evals": [{"domain": "math", "samples_per_prompt": 4,
                "prompts": [{"id": 1, "domain": "math", "text": "1+1", "reference": "2"}]}]}
  ]
})";

TEST(StageConfigJson, HandWrittenFileParsesToTheExpectedValues) {
  const fs::path dir = json_scratch("hand");
  std::ofstream(dir / "schedule.json") << hand_written;
  const std::vector<cr::stage_config> s = cr::load_schedule_file(dir / "schedule.json");
  ASSERT_EQ(s.size(), 3u);

  cr::stage_config if_rl{.name = "if_rl",
                         .kind = cr::stage_kind::if_rl,
                         .domains = {"instruction_following"},
                         .group_size = 16,
                         .prompts_per_step = 128,
                         .steps = 180,
                         .lr = cr::constant_lr(3e-6)};
  if_rl.filters.overlong = cr::overlong_options{.mode = cr::overlong_mode::mask, .max_length = 8192};
  if_rl.eval_sampling.top_p = 0.9;  // temperature stays eval_sampling's default, 0
  EXPECT_EQ(cr::stage_config_difference(s[0], if_rl), "");
  EXPECT_EQ(s[0].eval_sampling.temperature, 0.0);

  cr::stage_config mopd = cr::nemotron_cascade2_schedule().mopd;
  mopd.domains = {"instruction_following", "math"};
  EXPECT_EQ(cr::stage_config_difference(s[1], mopd), "");
  EXPECT_EQ(s[1].lr.at(0, 50), 2e-7);
  EXPECT_EQ(s[1].lr.at(30, 50), 2e-6);

  EXPECT_EQ(s[2].kind, cr::stage_kind::math_rl);
  EXPECT_EQ(s[2].group_size, 16u);  // the C++ default
  EXPECT_EQ(s[2].lr.shape, cr::lr_shape::cosine);
  EXPECT_EQ(s[2].lr.floor, 3e-7);
  ASSERT_TRUE(std::holds_alternative<cr::ppo_clip_update>(s[2].update.rule));
  const auto& ppo = std::get<cr::ppo_clip_update>(s[2].update.rule);
  EXPECT_EQ(ppo.epochs, 2u);
  EXPECT_EQ(ppo.mini_batches, 4u);
  EXPECT_EQ(ppo.loss.clip_low, 0.2);  // the C++ default
  EXPECT_EQ(ppo.loss.clip_high, 0.28);
  EXPECT_EQ(ppo.loss.dual_clip, 3.0);
  EXPECT_EQ(s[2].update.aggregation, cr::loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(s[2].update.ppo_clip().aggregation, cr::loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(s[2].update.ppo_clip().clip_high, 0.28);
  EXPECT_EQ(s[2].stop.target_score, 0.9);
  ASSERT_EQ(s[2].evals.size(), 1u);
  EXPECT_EQ(s[2].evals[0].samples_per_prompt, 4u);
  EXPECT_EQ(s[2].evals[0].prompts[0].reference, "2");

  // The bare-array form reads the same stages.
  const auto array = nlohmann::json::parse(hand_written, nullptr, true, true).at("stages");
  EXPECT_EQ(cr::schedule_difference(cr::parse_schedule(array.dump()), s), "");
  fs::remove_all(dir);
}

TEST(StageConfigJson, OneStageAndOrderedJsonInterchange) {
  const cr::stage_config mopd = cr::nemotron_cascade2_schedule().mopd;
  const nlohmann::ordered_json ordered = cr::stage_config_to_json(mopd);
  EXPECT_EQ(ordered.begin().key(), "name");  // written in declaration order
  const nlohmann::json plain = ordered;      // and readable from either json type
  EXPECT_EQ(cr::stage_config_difference(cr::stage_config_from_json(plain), mopd), "");
  EXPECT_EQ(error_of([&] { (void)cr::stage_config_from_json(nlohmann::json{{"name", 3}}); }),
            "cascade_rl: stage.name: expected a string, got number 3");
  EXPECT_EQ(error_of([&] { (void)cr::stage_config_from_json(nlohmann::json{{"nme", "x"}}, "run.stage"); }),
            "cascade_rl: run.stage.nme: unknown key (did you mean name?)");
}

// ---- refusals, each naming the JSON path --------------------------------------------------

// A schedule whose third stage has `stage_fields` (and one step unless they set steps).
std::string with_third_stage(const std::string& stage_fields) {
  const std::string steps = stage_fields.find("\"steps\"") == std::string::npos ? R"("steps": 1, )" : "";
  return R"({"stages": [{"name": "a", "steps": 1}, {"name": "b", "steps": 1}, {"name": "c", )" + steps +
         stage_fields + "}]}";
}

TEST(StageConfigJsonErrors, UnknownKeyAtDepth) {
  EXPECT_EQ(
      parse_error(with_third_stage(R"("update": {"rule": {"ppo_clip": {"clip_lo": 0.1}}})")),
      "cascade_rl: stages[2].update.rule.ppo_clip.clip_lo: unknown key (did you mean clip_low?)");
  EXPECT_EQ(parse_error(with_third_stage(R"("evals": [{"domain": "x", "prompts": [{"id": 1, "answer": "2"}]}])")),
            "cascade_rl: stages[2].evals[0].prompts[0].answer: unknown key");
  EXPECT_EQ(parse_error(R"({"stage": []})"), "cascade_rl: stage: unknown key (did you mean stages?)");
}

// The PPO rule once had an aggregation of its own that update.aggregation silently
// overwrote. It is gone from the C++ struct, and a config file that still sets it is
// refused by name with the field to set instead, not quietly ignored.
template <class U>
concept has_aggregation = requires(U u) { u.aggregation; };
static_assert(!has_aggregation<cr::ppo_clip_update> && !has_aggregation<cr::on_policy_update>);

TEST(StageConfigJsonErrors, RemovedPpoAggregationIsRefusedByName) {
  EXPECT_EQ(parse_error(with_third_stage(
                R"("update": {"rule": {"ppo_clip": {"aggregation": "token-sum"}}})")),
            "cascade_rl: stages[2].update.rule.ppo_clip.aggregation: removed key: set "
            "update.aggregation (one aggregation serves every rule)");
}

// Before the rule was a variant, epochs, mini-batches, PPO's and the on-policy
// importance options sat beside it: an old file is refused where it sets them, with
// where they live now.
TEST(StageConfigJsonErrors, RemovedUpdateFieldsSayWhereTheyLiveNow) {
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"epochs": 2})")),
            "cascade_rl: stages[2].update.epochs: removed key: set update.rule.ppo_clip.epochs "
            "(only the PPO-clip rule takes several epochs)");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"mini_batches": 1})")),
            "cascade_rl: stages[2].update.mini_batches: removed key: set "
            "update.rule.ppo_clip.mini_batches (only the PPO-clip rule takes mini-batches)");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"ppo": {"clip_low": 0.1}})")),
            "cascade_rl: stages[2].update.ppo: removed key: set update.rule.ppo_clip, which holds "
            "clip_low, clip_high, dual_clip, log_ratio_clamp and importance");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"importance": {"mode": "truncated"}})")),
            "cascade_rl: stages[2].update.importance: removed key: set "
            "update.rule.on_policy.importance (the on-policy rule's correction; PPO's is "
            "update.rule.ppo_clip.importance)");
  // A file the previous version wrote: the first removed key (in key order) is named.
  const std::string old_update =
      R"("update": {"rule": "on_policy", "epochs": 1, "mini_batches": 1, "aggregation": "token-mean",
                    "ppo": {"clip_low": 0.2}, "importance": {"mode": "none"}})";
  EXPECT_EQ(parse_error(with_third_stage(old_update)).substr(0, 53),
            "cascade_rl: stages[2].update.epochs: removed key: set");
  // The old string form of the rule.
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": "ppo_clip"})")),
            "cascade_rl: stages[2].update.rule: expected an object with one key naming the "
            "alternative (one of: on_policy, ppo_clip, cispo, dppo, dro, sapo, gspo, "
            "geo_mean, clip_cov, kl_cov, bypass_mode), got "
            "string \"ppo_clip\"; write "
            "{\"ppo_clip\": {}}");
}

// The rule is an object with exactly one key, the alternative it holds.
TEST(StageConfigJsonErrors, RuleNamesExactlyOneKnownAlternative) {
  EXPECT_EQ(parse_error(with_third_stage(
                R"("update": {"rule": {"on_policy": {}, "ppo_clip": {"epochs": 2}}})")),
            "cascade_rl: stages[2].update.rule: has 2 keys (on_policy, ppo_clip); expected exactly "
            "one, naming the alternative chosen (one of: on_policy, ppo_clip, cispo, dppo, "
            "dro, sapo, gspo, geo_mean, clip_cov, kl_cov, bypass_mode)");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {}})")),
            "cascade_rl: stages[2].update.rule: has no key; expected exactly one, naming the "
            "alternative chosen (one of: on_policy, ppo_clip, cispo, dppo, dro, sapo, "
            "gspo, geo_mean, clip_cov, kl_cov, bypass_mode)");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"ppo_clp": {"epochs": 2}}})")),
            "cascade_rl: stages[2].update.rule.ppo_clp: unknown alternative (did you mean "
            "ppo_clip?); expected one of: on_policy, ppo_clip, cispo, dppo, dro, sapo, "
            "gspo, geo_mean, clip_cov, kl_cov, bypass_mode");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"reinforce": {}}})")),
            "cascade_rl: stages[2].update.rule.reinforce: unknown alternative; expected one of: "
            "on_policy, ppo_clip, cispo, dppo, dro, sapo, gspo, geo_mean, clip_cov, "
            "kl_cov, bypass_mode");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": [1]})")),
            "cascade_rl: stages[2].update.rule: expected an object with one key naming the "
            "alternative (one of: on_policy, ppo_clip, cispo, dppo, dro, sapo, gspo, "
            "geo_mean, clip_cov, kl_cov, bypass_mode), got array");
  // Inside the alternative, its own fields only: epochs mean nothing on policy.
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"on_policy": {"epochs": 2}}})")),
            "cascade_rl: stages[2].update.rule.on_policy.epochs: unknown key");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"ppo_clip": {"epochs": -1}}})")),
            "cascade_rl: stages[2].update.rule.ppo_clip.epochs: must be >= 0, got -1");
}

// Write then read gives the same rule, for each alternative and at its defaults.
TEST(StageConfigJson, UpdateRuleRoundTripsAsOneKeyObject) {
  cr::stage_config on_policy{.name = "a", .steps = 1};
  on_policy.update.rule =
      cr::on_policy_update{.importance = {.mode = cr::importance_sampling::truncated, .cap = 1.5}};
  cr::stage_config ppo{
      .name = "b", .steps = 1, .update = {.rule = cr::ppo_clip_update{.epochs = 3}}};
  cr::stage_config defaults{.name = "c", .steps = 1};
  expect_round_trip({on_policy, ppo, defaults});

  const nlohmann::ordered_json written = cr::stage_config_to_json(ppo).at("update");
  EXPECT_EQ(
      written.dump(),
      R"({"aggregation":"token-mean","rule":{"ppo_clip":{"epochs":3,"mini_batches":1,"clip_low":0.2,)"
      R"("clip_high":0.2,"dual_clip":null,"log_ratio_clamp":20.0,"importance":{"mode":"none","cap":2.0,)"
      R"("band_low":0.5,"band_high":2.0}}}})");
  EXPECT_EQ(
      cr::stage_config_to_json(defaults).at("update").at("rule").dump(),
      R"({"on_policy":{"importance":{"mode":"none","cap":2.0,"band_low":0.5,"band_high":2.0}}})");
  EXPECT_EQ(cr::stage_config_difference(
                cr::stage_config_from_json(cr::stage_config_to_json(on_policy)), on_policy),
            "");

  // A rule of the other alternative differs at update.rule; the same one, at its field.
  cr::stage_config on_policy_b = ppo;
  on_policy_b.update.rule = cr::on_policy_update{};
  EXPECT_EQ(cr::stage_config_difference(on_policy_b, ppo), "update.rule");
  cr::stage_config ppo2 = ppo;
  std::get<cr::ppo_clip_update>(ppo2.update.rule).epochs = 4;
  EXPECT_EQ(cr::stage_config_difference(ppo, ppo2), "update.rule.ppo_clip.epochs");

  // Missing fields of the alternative take its defaults; {"on_policy": {}} is the default.
  const auto parsed = cr::parse_schedule(
      with_third_stage(R"("update": {"rule": {"ppo_clip": {"mini_batches": 1}}})"));
  EXPECT_EQ(cr::stage_config_difference(parsed[2],
                                        [] {
                                          cr::stage_config c{.name = "c", .steps = 1};
                                          c.update.rule = cr::ppo_clip_update{};
                                          return c;
                                        }()),
            "");
  EXPECT_EQ(cr::stage_config_difference(
                cr::parse_schedule(with_third_stage(R"("update": {"rule": {"on_policy": {}}})"))[2],
                defaults),
            "");
}

// veRL's ratio losses as update rules, by veRL's loss_mode names: each reads its fields
// (the rest keep their C++ defaults), round-trips, and a bad value is refused by its
// path in the schedule.
TEST(StageConfigJson, RatioLossRulesReadByVerlNames) {
  const auto rule_of = [](const std::string& rule) {
    std::string fields = R"("update": {"rule": )";
    fields.append(rule).append("}");
    return cr::parse_schedule(with_third_stage(fields))[2].update.rule;
  };
  const auto cispo =
      std::get<cr::cispo_update>(rule_of(R"({"cispo": {"epochs": 2, "clip_high": 0.28}})"));
  EXPECT_EQ(cispo.epochs, 2u);
  EXPECT_EQ(cispo.loss.clip_high, 0.28);
  EXPECT_EQ(cispo.loss.clip_low, cr::cispo_options{}.clip_low);
  const auto tv = std::get<cr::dppo_update>(rule_of(R"({"dppo": {"truncation": 3}})"));
  EXPECT_EQ(tv.loss_options(cr::loss_aggregation::token_sum).divergence,
            cr::dppo_divergence::total_variation);
  EXPECT_EQ(tv.loss_options(cr::loss_aggregation::token_sum).truncation, 3.0);
  const auto kl = std::get<cr::dppo_update>(
      rule_of(R"({"dppo": {"divergence": "binary_kl", "clip_low": 0.1}})"));
  EXPECT_EQ(kl.loss_options(cr::loss_aggregation::token_sum).divergence,
            cr::dppo_divergence::binary_kl);
  EXPECT_EQ(kl.loss.clip_low, 0.1);
  EXPECT_EQ(std::get<cr::dro_update>(rule_of(R"({"dro": {"beta": 0.05}})")).loss.beta, 0.05);
  EXPECT_EQ(std::get<cr::gspo_update>(rule_of(R"({"gspo": {"clip_high": 4e-4}})")).loss.clip_high,
            4e-4);
  EXPECT_EQ(
      std::get<cr::geo_mean_update>(rule_of(R"({"geo_mean": {"clip_low": 0.4}})")).loss.clip_low,
      0.4);
  const auto clip_cov = std::get<cr::clip_cov_update>(
      rule_of(R"({"clip_cov": {"clip_cov_ratio": 0.001, "clip_cov_ub": 4}})"));
  EXPECT_EQ(clip_cov.loss.clip_cov_ratio, 0.001);
  EXPECT_EQ(clip_cov.loss.clip_cov_ub, 4.0);
  EXPECT_EQ(clip_cov.loss.clip_cov_lb, cr::clip_cov_options{}.clip_cov_lb);
  EXPECT_EQ(
      std::get<cr::kl_cov_update>(rule_of(R"({"kl_cov": {"ppo_kl_coef": 0.1}})")).loss.ppo_kl_coef,
      0.1);
  const auto sapo = std::get<cr::sapo_update>(rule_of(R"({"sapo": {"tau_neg": 1.2}})"));
  EXPECT_EQ(sapo.loss.tau_neg, 1.2);
  EXPECT_EQ(sapo.loss_options(cr::loss_aggregation::seq_mean_token_mean).aggregation,
            cr::loss_aggregation::seq_mean_token_mean);

  std::vector<cr::stage_config> stages;
  for (const auto& rule : std::vector<decltype(cr::update_options{}.rule)>{
           cr::cispo_update{.mini_batches = 2}, cr::dppo_update{.loss = {.clip_high = 0.1}},
           cr::dppo_update{.loss = {.divergence = cr::dppo_divergence::binary_kl}},
           cr::dro_update{.loss = {.beta = 0.5}}, cr::sapo_update{.epochs = 3},
           cr::gspo_update{.loss = {.log_ratio_bound = 5}},
           cr::geo_mean_update{.loss = {.clip_high = 0.3}},
           cr::clip_cov_update{.loss = {.clip_cov_ratio = 0.01}}, cr::kl_cov_update{.epochs = 2}})
    stages.push_back({.name = std::string(1, static_cast<char>('a' + stages.size())),
                      .steps = 1,
                      .update = {.rule = rule}});
  expect_round_trip(stages);
  EXPECT_EQ(cr::stage_config_to_json(stages[3]).at("update").at("rule").dump(),
            R"({"dro":{"epochs":1,"mini_batches":1,"beta":0.5}})");
  EXPECT_EQ(cr::stage_config_to_json(stages[2]).at("update").at("rule").dump(),
            R"({"dppo":{"epochs":1,"mini_batches":1,"divergence":"binary_kl","clip_low":0.2,)"
            R"("clip_high":0.2,"truncation":20.0,"log_ratio_clamp":20.0}})");
  // The rules' fields are their losses' own descriptions (options/described.hpp), not
  // a copy: each rule's keys are epochs, mini_batches and its loss's described fields.
  const auto keys_of = [](const auto& rule) {
    using Rule = std::remove_cvref_t<decltype(rule)>;
    return cr::detail::field_keys<Rule>();
  };
  EXPECT_EQ(keys_of(cr::cispo_update{}),
            (std::vector<std::string>{"epochs", "mini_batches", "clip_low", "clip_high",
                                      "log_ratio_clamp"}));
  std::vector<std::string> gspo_keys{"epochs", "mini_batches"};
  for (const auto& k : cr::detail::field_keys<cr::gspo_options>()) gspo_keys.push_back(k);
  EXPECT_EQ(keys_of(cr::gspo_update{}), gspo_keys);
  // veRL's earlier names of the two DPPO rules are one rule now, its divergence a field.
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"dppo_tv": {}}})")),
            "cascade_rl: stages[2].update.rule.dppo_tv: removed alternative: write {\"dppo\": "
            "{\"divergence\": \"total_variation\", ...}}");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"dppo_kl": {}}})")),
            "cascade_rl: stages[2].update.rule.dppo_kl: removed alternative: write {\"dppo\": "
            "{\"divergence\": \"binary_kl\", ...}}");
  EXPECT_EQ(parse_error(with_third_stage(
                R"("update": {"rule": {"dppo": {"divergence": "kl"}}})")).substr(0, 68),
            "cascade_rl: stages[2].update.rule.dppo.divergence: unknown name \"kl\"");

  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"cispo": {"clip_hi": 0.3}}})")),
            "cascade_rl: stages[2].update.rule.cispo.clip_hi: unknown key (did you mean "
            "clip_high?)");
  cr::stage_config no_beta{.name = "d", .steps = 1, .update = {.rule = cr::dro_update{}}};
  cr::testing::expect_error_naming([&] { cr::detail::validate_grpo_config(no_beta); },
                                   "update.rule.dro.beta", "DRO's penalty has no default");
  cr::stage_config bad_ratio{
      .name = "d", .steps = 1, .update = {.rule = cr::kl_cov_update{.loss = {.kl_cov_ratio = 2}}}};
  cr::testing::expect_error_naming([&] { cr::detail::validate_grpo_config(bad_ratio); },
                                   "update.rule.kl_cov.kl_cov_ratio");
  cr::stage_config too_many{.name = "e",
                            .prompts_per_step = 2,
                            .steps = 1,
                            .update = {.rule = cr::sapo_update{.mini_batches = 3}}};
  cr::testing::expect_error_naming([&] { cr::detail::validate_grpo_config(too_many); },
                                   "update.rule.sapo.mini_batches", "more than prompts_per_step");
}

// veRL's bypass mode as a rule, its correction by veRL's policy_loss.rollout_correction
// keys (text where veRL takes text), read into the options presets::verl builds; written
// back and read again unchanged; a bad value refused at its path.
TEST(StageConfigJson, BypassModeRuleReadByVerlNames) {
  const auto rule_of = [](const std::string& rule) {
    return cr::parse_schedule(with_third_stage(R"("update": {"rule": )" + rule + "}"))[2]
        .update.rule;
  };
  const auto bypass = std::get<cr::bypass_mode_update>(rule_of(R"({"bypass_mode": {
      "mini_batches": 2, "loss_type": "reinforce", "rollout_is": "sequence",
      "rollout_is_threshold": "0.5_4.0", "rollout_is_batch_normalize": true,
      "rollout_rs": "token_k1,seq_mean_k3", "rollout_rs_threshold": "0.2_5.0,0.3"}})"));
  EXPECT_EQ(bypass.mini_batches, 2u);
  EXPECT_EQ(bypass.loss.loss_type, "reinforce");
  const cr::bypass_mode_options options =
      bypass.loss_options(cr::loss_aggregation::seq_mean_token_mean);
  const cr::bypass_mode_options verl = cr::presets::verl::bypass_mode(
      cr::presets::verl::rollout_correction("sequence", "0.5_4.0", true, "token_k1,seq_mean_k3",
                                            "0.2_5.0,0.3"),
      "reinforce", cr::loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(options.loss, cr::bypass_loss::reinforce);
  EXPECT_EQ(options.correction.is_level, cr::rollout_is_level::sequence);
  EXPECT_EQ(options.correction.is_lower, 0.5);
  EXPECT_EQ(options.correction.is_upper, 4.0);
  EXPECT_TRUE(options.correction.batch_normalize);
  ASSERT_EQ(options.correction.rejection_count, 2u);
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(cr::to_string(options.correction.rejection[c]),
              cr::to_string(verl.correction.rejection[c]));
    EXPECT_EQ(options.correction.rejection[c].lower, verl.correction.rejection[c].lower);
    EXPECT_EQ(options.correction.rejection[c].upper, verl.correction.rejection[c].upper);
  }
  EXPECT_EQ(options.reinforce.aggregation, cr::loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(options.reinforce.surrogate, verl.reinforce.surrogate);
  // The defaults: veRL's ppo_clip with its dual clip, no weights, no rejection.
  const auto plain = std::get<cr::bypass_mode_update>(rule_of(R"({"bypass_mode": {}})"))
                         .loss_options(cr::loss_aggregation::token_mean);
  EXPECT_EQ(plain.loss, cr::bypass_loss::ppo_clip);
  EXPECT_EQ(plain.ppo.dual_clip, 3.0);
  EXPECT_EQ(plain.correction.is_level, cr::rollout_is_level::none);
  EXPECT_EQ(plain.correction.rejection_count, 0u);

  std::vector<cr::stage_config> stages{
      {.name = "a", .steps = 1, .update = {.rule = bypass}},
      {.name = "b",
       .steps = 1,
       .update = {.rule = cr::bypass_mode_update{.epochs = 2, .loss = {.dual_clip = std::nullopt}}}}};
  expect_round_trip(stages);
  EXPECT_EQ(cr::stage_config_to_json(stages[1]).at("update").at("rule").dump(),
            R"({"bypass_mode":{"epochs":2,"mini_batches":1,"loss_type":"ppo_clip",)"
            R"("rollout_is":null,"rollout_is_threshold":"2.0","rollout_is_batch_normalize":false,)"
            R"("rollout_rs":null,"rollout_rs_threshold":null,"clip_low":0.2,"clip_high":0.2,)"
            R"("dual_clip":null}})");

  EXPECT_EQ(
      parse_error(with_third_stage(
          R"("update": {"rule": {"bypass_mode": {"rollout_rs": "token_k4", "rollout_rs_threshold": "2"}}})")),
      "cascade_rl: stages[2].update.rule.bypass_mode.rollout_rs: names \"token_k4\", not a veRL "
      "criterion (token_k1, token_k2, token_k3, seq_sum_k1, seq_sum_k2, seq_sum_k3, seq_mean_k1, "
      "seq_mean_k2, seq_mean_k3, seq_max_k2, seq_max_k3)");
  EXPECT_EQ(parse_error(with_third_stage(
                R"("update": {"rule": {"bypass_mode": {"rollout_rs": "token_k2"}}})")),
            "cascade_rl: stages[2].update.rule.bypass_mode.rollout_rs_threshold: is not set; "
            "rejection sampling (rollout_rs) needs it");
  EXPECT_EQ(
      parse_error(with_third_stage(R"("update": {"rule": {"bypass_mode": {"loss_type": "ppo"}}})")),
      "cascade_rl: stages[2].update.rule.bypass_mode.rollout_correction.loss_type: is "
      "\"ppo\", expected reinforce or ppo_clip");
  EXPECT_EQ(parse_error(with_third_stage(
                R"("update": {"rule": {"bypass_mode": {"rollout_is_threshold": 2.0}}})")),
            "cascade_rl: stages[2].update.rule.bypass_mode.rollout_is_threshold: expected a "
            "string, got number 2.0");
  cr::stage_config bad_clip{
      .name = "d", .steps = 1, .update = {.rule = cr::bypass_mode_update{.loss = {.clip_low = -1}}}};
  cr::testing::expect_error_naming([&] { cr::detail::validate_grpo_config(bad_clip); },
                                   "update.rule.bypass_mode.clip_low");
  cr::stage_config bad_is{.name = "d",
                          .steps = 1,
                          .update = {.rule = cr::bypass_mode_update{
                                         .loss = {.rollout_is = "token", .rollout_is_threshold = "0"}}}};
  cr::testing::expect_error_naming([&] { cr::detail::validate_grpo_config(bad_is); },
                                   "update.rule.bypass_mode.rollout_is_threshold", "expected > 0");
  // The texts are held in place (config_text), so the rule variant stays trivially
  // copyable; a text beyond the capacity is refused, by path from JSON.
  static_assert(std::is_trivially_copyable_v<cr::bypass_mode_update>);
  static_assert(std::is_trivially_copyable_v<decltype(cr::update_options{}.rule)>);
  const std::string long_spec(cr::bypass_mode_keys::text::capacity + 1, 'k');
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"bypass_mode": {"rollout_rs": ")" +
                                         long_spec + R"("}}})")),
            "cascade_rl: stages[2].update.rule.bypass_mode.rollout_rs: has 121 characters, at "
            "most 120 fit");
  cr::testing::expect_error_naming(
      [&] { (void)cr::bypass_mode_update{.loss = {.rollout_rs = long_spec}}; }, "text",
      "at most 120 fit");
  const cr::bypass_mode_keys::text fits(std::string(120, 'k'));
  EXPECT_EQ(fits.view().size(), 120u);
}

TEST(StageConfigJsonErrors, WrongType) {
  EXPECT_EQ(parse_error(with_third_stage(R"("group_size": "16")")),
            "cascade_rl: stages[2].group_size: expected a non-negative integer, got string \"16\"");
  EXPECT_EQ(parse_error(with_third_stage(R"("steps": 1.5)")),
            "cascade_rl: stages[2].steps: expected a non-negative integer, got number 1.5");
  EXPECT_EQ(parse_error(with_third_stage(R"("filters": {"drop_zero_variance_groups": 1})")),
            "cascade_rl: stages[2].filters.drop_zero_variance_groups: expected true or false, got number 1");
  EXPECT_EQ(parse_error(with_third_stage(R"("lr": [])")), "cascade_rl: stages[2].lr: expected an object, got array");
  EXPECT_EQ(parse_error(with_third_stage(R"("domains": "math")")),
            "cascade_rl: stages[2].domains: expected an array, got string \"math\"");
  EXPECT_EQ(parse_error(with_third_stage(R"("sampling": {"top_p": null})")),
            "cascade_rl: stages[2].sampling.top_p: expected a number, got null");
  EXPECT_EQ(parse_error("42"),
            "cascade_rl: (root): expected an object {\"stages\": [...]} or an array of stages, got number 42");
  EXPECT_EQ(parse_error(R"({"stages": {}})"), "cascade_rl: stages: expected an array of stages, got object");
}

TEST(StageConfigJsonErrors, BadEnumName) {
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"aggregation": "token_mean"})")),
            "cascade_rl: stages[2].update.aggregation: unknown name \"token_mean\" (did you mean token-mean?); "
            "expected one of: token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, "
            "seq-mean-token-sum-norm");
  EXPECT_EQ(parse_error(with_third_stage(R"("kind": "IFRL")")),
            "cascade_rl: stages[2].kind: unknown name \"IFRL\" (did you mean IF-RL?); expected one of: generic, "
            "IF-RL, multi-domain RL, MOPD, RLHF, long-context RL, math RL, code RL, SWE RL");
  EXPECT_EQ(parse_error(with_third_stage(R"("lr": {"shape": 2})")),
            "cascade_rl: stages[2].lr.shape: expected a name, got number 2");
}

TEST(StageConfigJsonErrors, OutOfRangeValues) {
  // Beyond what the field's C++ type holds.
  EXPECT_EQ(parse_error(with_third_stage(R"("prompts_per_step": -4)")),
            "cascade_rl: stages[2].prompts_per_step: must be >= 0, got -4");
  EXPECT_EQ(parse_error(with_third_stage(R"("sampling": {"max_response_length": 9223372036854775808})")),
            "cascade_rl: stages[2].sampling.max_response_length: is 9223372036854775808, beyond the 64-bit "
            "signed range");
  EXPECT_EQ(parse_error(with_third_stage(R"("lr": {"peak": 1e400})")),
            "cascade_rl: stages[2].lr.peak: number overflow parsing '1e400'");
  // Beyond what the stage accepts: the engine's own checks, pointed at the JSON path.
  EXPECT_EQ(parse_error(with_third_stage(R"("sampling": {"top_p": 1.5})")),
            "cascade_rl: stages[2].sampling.top_p: must lie in (0, 1], got 1.500000");
  EXPECT_EQ(parse_error(with_third_stage(R"("group_size": 1)")),
            "cascade_rl: stages[2].group_size: is 1, but GRPO's group baseline (mean and std of a group) needs "
            "at least 2");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"ppo_clip": {"clip_low": 1}}})")),
            "cascade_rl: stages[2].update.rule.ppo_clip.clip_low: is 1.000000, expected 0 <= "
            "clip_low < 1 (the ratio floor 1 - clip_low must stay positive)");
  EXPECT_EQ(
      parse_error(with_third_stage(R"("update": {"rule": {"ppo_clip": {"mini_batches": 200}}})")),
      "cascade_rl: stages[2].update.rule.ppo_clip.mini_batches: is 200, more than "
      "prompts_per_step = 128");
  EXPECT_EQ(parse_error(with_third_stage(R"("update": {"rule": {"ppo_clip": {"epochs": 0}}})")),
            "cascade_rl: stages[2].update.rule.ppo_clip.epochs: is 0");
  EXPECT_EQ(
      parse_error(with_third_stage(
          R"("update": {"rule": {"on_policy": {"importance": {"mode": "truncated", "cap": 0}}}})")),
      "cascade_rl: stages[2].update.rule.on_policy.importance.cap: is 0.000000, expected a "
      "cap > 0");
  EXPECT_EQ(parse_error(with_third_stage(
                R"("kind": "MOPD", "domains": ["x"], "update": {"rule": {"ppo_clip": {}}})")),
            "cascade_rl: stages[2].update.rule: must be on_policy (on_policy_update): MOPD takes "
            "one step per batch");
  EXPECT_EQ(parse_error(with_third_stage(R"("filters": {"overlong": {"mode": "soft_penalty", "max_length": 8}})")),
            "cascade_rl: stages[2].filters.overlong.buffer_length: must lie in (0, max_length = 8], got 0");
  EXPECT_EQ(parse_error(with_third_stage(R"("kind": "MOPD", "mopd": {"band_low": 3})")),
            "cascade_rl: stages[2].domains: is empty: MOPD routes every prompt to its domain's teacher");
  EXPECT_EQ(parse_error(with_third_stage(R"("kind": "MOPD", "domains": ["x"], "mopd": {"band_low": 3})")),
            "cascade_rl: stages[2].mopd.band_low: must satisfy 0 <= band_low <= band_high");
  EXPECT_EQ(parse_error(with_third_stage(R"("steps": 0)")),
            "cascade_rl: stages[2].steps: is 0 (a stage needs at least one step)");
  EXPECT_EQ(parse_error(R"([{"name": "", "steps": 1}])"),
            "cascade_rl: stages[0].name: is empty (every stage needs a name)");
  // Across stages.
  EXPECT_EQ(parse_error(R"([{"name": "a", "steps": 1}, {"name": "a", "steps": 2}])"),
            "cascade_rl: stages[1].name: is used by two stages");
  EXPECT_EQ(parse_error("[]"), "cascade_rl: stages: is empty: a schedule needs at least one stage");
}

TEST(StageConfigJsonErrors, MalformedTextNamesLineAndColumn) {
  EXPECT_EQ(parse_error("{\"stages\": [\n  {\"name\": \"a\",\n   \"steps\": 1,,\n}]}"),
            "cascade_rl: line 3, column 15: invalid JSON: syntax error while parsing object key - unexpected ','; "
            "expected string literal");
  EXPECT_EQ(parse_error(""), "cascade_rl: line 1, column 1: invalid JSON: syntax error while parsing value - "
                             "unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(parse_error(R"([{"name": "a", "steps": 1, "steps": 2}])"),
            "cascade_rl: stages[0].steps: appears twice in one object (JSON would keep the last silently)");
  EXPECT_EQ(parse_error("[{\"name\": \"\xff\"}]").substr(0, 54),
            "cascade_rl: line 1, column 12: invalid JSON: syntax er");
}

TEST(StageConfigJsonErrors, FilesAreNamed) {
  const fs::path dir = json_scratch("files");
  EXPECT_EQ(error_of([&] { (void)cr::load_schedule_file(dir / "missing.json"); }),
            "cascade_rl: schedule file '" + (dir / "missing.json").string() + "': cannot be opened");
  std::ofstream(dir / "bad.json") << with_third_stage(R"("steps": 0)");
  EXPECT_EQ(error_of([&] { (void)cr::load_schedule_file(dir / "bad.json"); }),
            "cascade_rl: schedule file '" + (dir / "bad.json").string() +
                "': stages[2].steps: is 0 (a stage needs at least one step)");
  EXPECT_NE(error_of([&] { cr::save_schedule_file(dir / "no" / "such" / "dir.json", {cr::stage_config{}}); })
                .find("schedule file '"),
            std::string::npos);
  cr::save_schedule_file(dir / "good.json", cr::nemotron_cascade1_schedule().configs());
  EXPECT_EQ(cr::schedule_difference(cr::load_schedule_file(dir / "good.json"),
                                    cr::nemotron_cascade1_schedule().configs()),
            "");
  fs::remove_all(dir);
}

TEST(StageConfigJsonErrors, WriterRefusesWhatJsonCannotHold) {
  cr::stage_config c = every_field_set();
  c.lr.peak = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_of([&] { (void)cr::schedule_to_string({c}); }),
            "cascade_rl: stages[0].lr.peak: is not finite, which JSON cannot hold");
  c = every_field_set();
  c.evals[0].prompts[0].text = "\xc3";
  EXPECT_EQ(error_of([&] { (void)cr::schedule_to_string({c}); }),
            "cascade_rl: stages[0].evals[0].prompts[0].text: is not valid UTF-8, which JSON text cannot hold");
  c = every_field_set();
  c.kind = static_cast<cr::stage_kind>(42);
  EXPECT_EQ(error_of([&] { (void)cr::stage_config_to_json(c); }),
            "cascade_rl: stage.kind: holds value 42, which is not an enumerator");
  // A json built in C++ can hold what text cannot; the reader refuses it by path.
  nlohmann::json j = cr::stage_config_to_json(every_field_set());
  j["stop"]["plateau_min_delta"] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_of([&] { (void)cr::stage_config_from_json(j); }), "cascade_rl: stage.stop.plateau_min_delta: "
                                                                     "is not finite");
}

// ---- the committed example --------------------------------------------------------------

// examples/schedules/nemotron_cascade2.json and the fuzzer's seed are what the writer
// gives for the preset. CASCADE_RL_REGENERATE_EXAMPLES=1 rewrites both.
TEST(StageConfigJson, CommittedExampleMatchesTheWriter) {
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const std::string expected = cr::schedule_to_string(cr::nemotron_cascade2_schedule().configs());
  for (const fs::path& file : {root / "examples/schedules/nemotron_cascade2.json",
                               root / "fuzz/corpus/stage_config/seed-00"}) {
    if (const char* regenerate = std::getenv("CASCADE_RL_REGENERATE_EXAMPLES"); regenerate && *regenerate == '1')
      std::ofstream(file, std::ios::binary | std::ios::trunc) << expected;
    EXPECT_EQ(read_file(file), expected) << file << " drifted from the writer; regenerate it with "
                                                    "CASCADE_RL_REGENERATE_EXAMPLES=1";
  }
  EXPECT_EQ(cr::schedule_difference(cr::load_schedule_file(root / "examples/schedules/nemotron_cascade2.json"),
                                    cr::nemotron_cascade2_schedule().configs()),
            "");
}

// ---- through the engine -----------------------------------------------------------------

// The shared test cascade's GRPO stage and MOPD stage, written by hand.
constexpr const char* test_schedule = R"({"stages": [
  {"name": "stage_a", "domains": ["a"], "group_size": 8, "prompts_per_step": 4, "steps": 12,
   "lr": {"peak": 0.05}, "sampling": {"temperature": 1.0, "max_response_length": 6},
   "reward_workers": 2,
   "evals": [{"domain": "a", "prompts": [{"id": 0, "domain": "a"}, {"id": 1, "domain": "a"},
                                         {"id": 2, "domain": "a"}, {"id": 3, "domain": "a"}]}]},
  {"name": "mopd", "kind": "MOPD", "domains": ["a"], "group_size": 4, "prompts_per_step": 4,
   "steps": 30, "lr": {"shape": "linear_warmup", "start": 0.01, "peak": 0.2, "warmup_steps": 3},
   "sampling": {"temperature": 1.0, "max_response_length": 6}}
]})";

struct run_result {
  cr::testing::tabular_snapshot final_policy;
  std::vector<double> lrs;
  std::string forgetting;
  std::size_t steps = 0;
};

run_result run(const cr::stage_config& grpo, const cr::stage_config& mopd) {
  const auto prompts = cr::testing::domain_prompts("a", 0, 4);
  auto cascade = cr::make_cascade(
      cr::make_grpo_stage(grpo, cr::prompt_pool(prompts), cr::testing::exact_answer_reward{}),
      cr::make_mopd_stage(mopd, cr::prompt_pool(prompts)));
  cr::testing::tabular_policy policy;
  const cr::cascade_report report = cr::run_cascade(cascade, policy, {.seed = 3});
  run_result r{.final_policy = policy.snapshot(), .lrs = {}, .forgetting = report.forgetting.to_json().dump(),
               .steps = report.global_step};
  for (const auto& u : policy.update_calls) r.lrs.push_back(u.lr);
  return r;
}

TEST(StageConfigJson, ParsedScheduleRunsLikeTheCxxOne) {
  const auto cxx_grpo = cr::testing::test_grpo_config("stage_a", "a", 12, 0.05, 8, 4,
                                                      cr::testing::domain_prompts("a", 0, 4));
  const auto cxx_mopd = cr::testing::test_mopd_config(30);
  const std::vector<cr::stage_config> parsed = cr::parse_schedule(test_schedule);
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(cr::stage_config_difference(parsed[0], cxx_grpo), "");
  EXPECT_EQ(cr::stage_config_difference(parsed[1], cxx_mopd), "");

  const run_result from_cxx = run(cxx_grpo, cxx_mopd);
  const run_result from_json = run(parsed[0], parsed[1]);
  EXPECT_EQ(from_json.steps, 42u);
  EXPECT_EQ(from_json.steps, from_cxx.steps);
  EXPECT_EQ(from_json.lrs, from_cxx.lrs);
  EXPECT_EQ(from_json.forgetting, from_cxx.forgetting);
  EXPECT_TRUE(from_json.final_policy == from_cxx.final_policy);
}

}  // namespace
