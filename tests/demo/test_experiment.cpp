// The experiment's variants: every comparison gets the same rollout budget and the same
// evaluation, the two hyperparameter sets differ only in what a stage may set, the
// order variants evaluate the seven single-turn domains, a tiny run goes through the
// stages' evaluation reward (chat judged by the hidden preference, not the reward
// model), and the mixed variant ends with the agentic SWE stage.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "demo_test_support.hpp"
#include "experiment.hpp"

namespace {

namespace cr = cascade_rl;
using demo_test::interpreter;

demo::budget tiny() {
  demo::budget b = demo_test::tiny_budget();
  b.mixed_eval_every = 5;
  return b;
}

std::vector<cr::stage_config> all(const demo::cascade_configs& c, bool with_mopd) {
  if (with_mopd) return {c.if_rl, c.multi, c.mopd, c.rlhf, c.long_context, c.code, c.swe};
  return {c.if_rl, c.multi, c.rlhf, c.long_context, c.code, c.swe};
}

TEST(DemoExperiment, EveryComparisonHasTheCascadesRolloutBudget) {
  demo::budget b;
  b.sft_steps = 0;  // the configs only
  const demo::world w(1, b, interpreter(), 1);
  const std::size_t budget = demo::cascade_rollouts(w);
  EXPECT_EQ(budget, 40960u);  // SWE RL: 40 steps x 16 prompts x 4 episodes
  for (const auto& h : {demo::per_domain_hparams(), demo::shared_hparams()}) {
    EXPECT_EQ(demo::rollouts_of(all(demo::make_cascade_configs(w, h, true), true)), budget) << h.name;
    EXPECT_EQ(demo::rollouts_of(all(demo::make_cascade_configs(w, h, false), false)), budget) << h.name;
  }
  for (const auto& h : {demo::per_domain_hparams(), demo::shared_hparams()})
    EXPECT_EQ(demo::rollouts_of({demo::make_mixed_config(w, h), demo::make_cascade_configs(w, h, true).swe}), budget);
  // Without MOPD, multi-domain RL gets MOPD's 40 x 16 x 4 rollouts: 20 more steps.
  EXPECT_EQ(demo::make_cascade_configs(w, demo::per_domain_hparams(), false).multi.steps, 80u);
}

TEST(DemoExperiment, TheHyperparameterSetsDifferOnlyInWhatAStageMaySet) {
  demo::budget b;
  b.sft_steps = 0;
  const demo::world w(1, b, interpreter(), 1);
  const auto own = all(demo::make_cascade_configs(w, demo::per_domain_hparams(), true), true);
  const auto shared = all(demo::make_cascade_configs(w, demo::shared_hparams(), true), true);
  ASSERT_EQ(own.size(), shared.size());
  std::set<double> own_rates, shared_rates;
  std::set<std::int64_t> own_lengths, shared_lengths;
  for (std::size_t k = 0; k < own.size(); ++k) {
    EXPECT_EQ(own[k].name, shared[k].name);
    EXPECT_EQ(own[k].steps, shared[k].steps);
    EXPECT_EQ(own[k].group_size, shared[k].group_size);
    EXPECT_EQ(own[k].prompts_per_step, shared[k].prompts_per_step);
    EXPECT_EQ(own[k].evals.size(), shared[k].evals.size());
    if (own[k].kind == cr::stage_kind::mopd) continue;  // no evaluation sets
    // Evaluation is the same in every variant: greedy, 16 tokens.
    EXPECT_EQ(own[k].eval_sampling.temperature, 0.0);
    EXPECT_EQ(own[k].eval_sampling.max_response_length, 16);
    EXPECT_EQ(shared[k].eval_sampling.max_response_length, 16);
    own_rates.insert(own[k].lr.at(0, own[k].steps));
    shared_rates.insert(shared[k].lr.at(0, shared[k].steps));
    own_lengths.insert(own[k].sampling.max_response_length);
    shared_lengths.insert(shared[k].sampling.max_response_length);
  }
  EXPECT_EQ(shared_rates, std::set<double>{1e-3 * demo::default_lr_scale});
  EXPECT_EQ(shared_lengths, std::set<std::int64_t>{16});
  EXPECT_EQ(own_rates, (std::set<double>{5e-4 * demo::default_lr_scale, 1e-3 * demo::default_lr_scale}));
  EXPECT_EQ(own_lengths, (std::set<std::int64_t>{3, 8, 10, 12}));
}

TEST(DemoExperiment, BothOrdersEvaluateEverySingleTurnDomain) {
  const demo::world w(1, tiny(), interpreter(), 1);
  for (bool if_first : {true, false}) {
    const auto [first, second] = demo::make_order_configs(w, demo::per_domain_hparams(), if_first);
    EXPECT_EQ(first.kind, if_first ? cr::stage_kind::if_rl : cr::stage_kind::rlhf);
    EXPECT_EQ(second.kind, if_first ? cr::stage_kind::rlhf : cr::stage_kind::if_rl);
    std::set<std::string> evaluated;
    for (const auto* c : {&first, &second})
      for (const auto& e : c->evals) evaluated.insert(e.domain);
    const std::vector<std::string> single_turn = demo::single_turn_domains();
    EXPECT_EQ(evaluated, std::set<std::string>(single_turn.begin(), single_turn.end()));
    EXPECT_EQ(evaluated.size(), 7u);
  }
}

TEST(DemoExperiment, ATinyRunJudgesChatByTheHiddenPreference) {
  demo::budget b = tiny();
  b.sft_steps = 80;  // enough for chat replies that end
  b.sft_batch = 32;
  b.width = 16;
  demo::world w(3, b, interpreter(), 1);
  const demo::variant_result r = demo::run_order_variant(w, demo::per_domain_hparams(), false);
  EXPECT_EQ(r.name, "rlhf_then_if");
  EXPECT_EQ(r.report.warnings.size(), 1u);  // the ordering check: IF-RL after RLHF
  ASSERT_EQ(r.trace.steps.size(), 4u);
  for (const auto& s : r.trace.steps) {
    EXPECT_EQ(s.responses, 4u);
    EXPECT_GE(s.padded, s.tokens);
    EXPECT_FALSE(s.distillation);
  }
  // before, one inside each stage (eval_every 1, two steps), after each stage
  EXPECT_EQ(r.trace.evaluations.size(), 5u);
  EXPECT_EQ(r.rollouts, 16u);

  // The "before" chat score is the gold preference's mean over the SFT model's greedy
  // replies (the reward model would give other numbers).
  w.policy.restore(w.sft_model);
  const auto& prompts = w.data.at("chat").eval;
  double gold = 0, model = 0;
  for (const auto& t : prompts) {
    const auto batch = w.policy.generate(std::span<const cr::prompt>(&t.prompt, 1),
                                         {1, {.temperature = 0.0, .max_response_length = 16}, 0});
    const auto tokens = batch.response_tokens(0);
    const bool truncated = batch.finish_reasons[0] == cr::finish_reason::truncated;
    if (truncated) continue;
    gold += demo::gold_chat_score(demo::chat_topic(t.prompt.text), tokens);
    model += w.reward_model->probability(demo::chat_topic(t.prompt.text), demo::strip_eos(tokens));
  }
  EXPECT_GT(gold, 0.0);
  EXPECT_NE(gold, model);
  EXPECT_NEAR(r.report.forgetting.score(0, "chat"), gold / static_cast<double>(prompts.size()), 1e-6);
}

TEST(DemoExperiment, TheMixedStageVerifiesEverySingleTurnDomainInOneStepThenTheAgentTrains) {
  demo::world w(4, tiny(), interpreter(), 1);
  const demo::variant_result r = demo::run_mixed_variant(w, demo::shared_hparams());
  EXPECT_EQ(r.rollouts, demo::cascade_rollouts(w));
  ASSERT_EQ(r.configs.size(), 2u);
  EXPECT_EQ(r.configs[1].name, "swe_rl");
  const std::size_t mixed_steps = r.configs[0].steps;
  EXPECT_EQ(r.trace.steps.size(), mixed_steps + 2);  // the SWE stage's two steps
  EXPECT_EQ(r.report.forgetting.domains().size(), 8u);
  EXPECT_EQ(r.report.forgetting.rows(), 3u);
  std::size_t verified = 0;
  for (const auto& [d, latencies] : r.trace.latency_by_domain) {
    EXPECT_NE(d, "swe");  // the agent's episodes are graded by its environment
    verified += latencies.size();
  }
  EXPECT_EQ(verified, mixed_steps * 4);
  for (std::size_t k = 0; k < r.trace.steps.size(); ++k)
    EXPECT_EQ(r.trace.steps[k].episodes.has_value(), k >= mixed_steps) << k;  // turns, end reasons, drift
  EXPECT_EQ(r.trace.steps.back().episodes->log_prob_drift, 0.0);
}

}  // namespace
