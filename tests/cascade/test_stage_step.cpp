// One GRPO step at a time: what reaches the policy (request, filtered batch, dL/dlogp
// with the step's global normaliser), the PPO mini-batch path, the reward worker pool.

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/cascade.hpp"
#include "support/expect_error.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::domain_prompts;
using cr::testing::exact_answer_reward;
using cr::testing::tabular_policy;
using cr::testing::tabular_snapshot;

cr::stage_config config(std::size_t group = 4, std::size_t prompts = 4) {
  return {.name = "s", .domains = {"a"}, .group_size = group, .prompts_per_step = prompts, .steps = 10,
          .lr = cr::constant_lr(0.05), .sampling = {.temperature = 1.0, .max_response_length = 6},
          .reward_workers = 3};
}

template <class Stage>
cr::step_metrics step(Stage& stage, tabular_policy& policy, cr::rng_type& rng, std::size_t index = 0) {
  const cr::teacher_registry<tabular_snapshot> none;
  cr::step_context<tabular_snapshot> context{index, stage.config().lr.at(index, stage.config().steps), rng, none};
  return stage.step(policy, context);
}

TEST(GrpoStep, RequestFollowsTheConfigAndSeedsComeFromTheCascadeGenerator) {
  auto c = config(5, 3);
  c.sampling = {.temperature = 0.7, .top_p = 0.9, .max_response_length = 4};
  auto stage = cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 8)), exact_answer_reward{});
  tabular_policy policy;
  cr::rng_type rng(1);
  step(stage, policy, rng);
  step(stage, policy, rng);
  ASSERT_EQ(policy.generate_calls.size(), 2u);
  const auto& r = policy.generate_calls[0].request;
  EXPECT_EQ(policy.generate_calls[0].prompts, 3u);
  EXPECT_EQ(r.group_size, 5u);
  EXPECT_EQ(r.sampling.temperature, 0.7);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.max_response_length, 4);
  EXPECT_NE(policy.generate_calls[0].request.seed, policy.generate_calls[1].request.seed);
}

TEST(GrpoStep, OnPolicyGradientUsesTheWholeFilteredBatchAsNormaliser) {
  auto stage = cr::make_grpo_stage(config(), cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
  tabular_policy policy;
  cr::rng_type rng(7);
  const cr::step_metrics m = step(stage, policy, rng);

  // Replay: same prompts and seed on a fresh policy, then GRPO by hand.
  tabular_policy replay;
  cr::rng_type rng2(7);
  cr::prompt_pool pool(domain_prompts("a", 0, 4));
  std::vector<cr::prompt> prompts;
  for (auto i : pool.next(4, rng2)) prompts.push_back(pool.at(i));
  const auto batch = replay.generate(prompts, {4, {.temperature = 1.0, .max_response_length = 6}, rng2()});
  std::vector<float> rewards;
  for (std::size_t i = 0; i < batch.response_count(); ++i)
    rewards.push_back(exact_answer_reward{}({batch.prompts[batch.group_of(i)], batch.response_tokens(i), {},
                                             batch.finish_reasons[i], i}));
  const auto kept = cr::drop_zero_variance_groups(cr::exec::seq, batch.groups(), rewards);
  ASSERT_GT(kept.kept_sequences.size(), 0u);
  const auto sub = cr::subset(batch, kept);
  std::vector<float> sub_rewards(kept.kept_sequences.size()), adv(kept.kept_sequences.size());
  cr::gather_sequences(cr::exec::seq, kept, rewards, sub_rewards);
  cr::grpo_advantages(cr::exec::seq, sub.groups(), sub_rewards, adv);
  double expected = 0;
  for (std::size_t i = 0; i < sub.response_count(); ++i)
    expected -= adv[i] * static_cast<double>(sub.length(i)) / static_cast<double>(sub.token_count());

  ASSERT_EQ(policy.update_calls.size(), 1u);
  EXPECT_EQ(policy.update_calls[0].responses, sub.response_count());
  EXPECT_EQ(policy.update_calls[0].tokens, sub.token_count());
  EXPECT_NEAR(policy.update_calls[0].dlogp_sum, expected, 1e-6);
  EXPECT_EQ(m.filtered_groups, kept.dropped_groups);
  EXPECT_EQ(m.zero_variance_groups, kept.dropped_groups);
  EXPECT_EQ(m.tokens, sub.token_count());
  EXPECT_EQ(m.updates, 1u);
  double reward_mean = 0;
  for (float r : rewards) reward_mean += r;
  EXPECT_NEAR(m.reward_mean, reward_mean / static_cast<double>(rewards.size()), 1e-9);
}

TEST(GrpoStep, NoUpdateWhenEveryGroupHasZeroVariance) {
  auto stage = cr::make_grpo_stage(config(), cr::prompt_pool(domain_prompts("a", 0, 4)),
                                   [](const cr::response_view&) { return 1.0; });
  tabular_policy policy;
  cr::rng_type rng(3);
  const auto m = step(stage, policy, rng);
  EXPECT_TRUE(policy.update_calls.empty());
  EXPECT_EQ(m.updates, 0u);
  EXPECT_EQ(m.zero_variance_fraction, 1.0);
  EXPECT_EQ(m.filtered_sequences, 16u);
  EXPECT_EQ(m.accuracy, 1.0);
}

TEST(GrpoStep, OverlongResponsesAreDroppedOrMasked) {
  auto c = config(8, 4);
  c.filters = {.drop_zero_variance_groups = false,
               .overlong = cr::overlong_options{.mode = cr::overlong_mode::drop, .max_length = 3,
                                                .truncated_is_overlong = false}};
  auto drop = cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
  tabular_policy p1;
  cr::rng_type rng(5);
  const auto m1 = step(drop, p1, rng);
  EXPECT_GT(m1.overlong, 0u);
  EXPECT_EQ(m1.filtered_sequences, m1.overlong);
  ASSERT_EQ(p1.update_calls.size(), 1u);
  EXPECT_EQ(p1.update_calls[0].responses, 32u - m1.overlong);
  EXPECT_LE(p1.update_calls[0].tokens, 3 * p1.update_calls[0].responses);

  c.filters.overlong->mode = cr::overlong_mode::mask;
  auto mask = cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
  tabular_policy p2;
  cr::rng_type rng2(5);
  const auto m2 = step(mask, p2, rng2);
  EXPECT_EQ(m2.overlong, m1.overlong);  // same seed, same samples
  EXPECT_EQ(m2.filtered_sequences, 0u);
  ASSERT_EQ(p2.update_calls.size(), 1u);
  EXPECT_EQ(p2.update_calls[0].responses, 32u);
  EXPECT_LT(m2.tokens, p2.update_calls[0].tokens);  // masked tokens are not valid
}

TEST(GrpoStep, PpoTakesOneOptimizerStepPerMiniBatchAndEpoch) {
  auto c = config(4, 6);
  c.update = {.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 3}};
  c.filters.drop_zero_variance_groups = false;
  auto stage = cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 6)), exact_answer_reward{});
  tabular_policy policy;
  cr::rng_type rng(2);
  const auto m = step(stage, policy, rng);
  ASSERT_EQ(policy.update_calls.size(), 6u);
  EXPECT_EQ(m.updates, 6u);
  for (const auto& u : policy.update_calls) EXPECT_EQ(u.prompts, 2u);
  EXPECT_GE(m.clip_fraction, 0.0);
}

// veRL's ratio losses as update rules run PPO's schedule (epochs x mini-batches). At the
// first update the policy is the sampler, so every ratio is 1, and each loss's dL/dlogp
// is REINFORCE's -A (CISPO and DPPO's weight 1, DRO's penalty 0, SAPO's 4 s (1 - s) at
// s = 1/2, GSPO's sequence ratio 1, GMPO's row of n tokens each carrying -A exp(0) with a
// 1/n derivative, KL-Cov's penalty |logp - old| with its zero gradient at 0, Clip-Cov with
// a covariance band no token reaches): the first update equals the PPO rule's, which is
// equally -A there. Later updates see the changed policy, where the losses part ways.
TEST(GrpoStep, RatioLossRulesRunPpoScheduleAndAgreeAtRatioOne) {
  const auto run = [](cr::update_options update) {
    auto c = config(4, 6);
    c.update = update;
    c.filters.drop_zero_variance_groups = false;
    auto stage =
        cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 6)), exact_answer_reward{});
    tabular_policy policy;
    cr::rng_type rng(2);
    const auto m = step(stage, policy, rng);
    return std::pair{m, policy.update_calls};
  };
  const auto [ppo_metrics, ppo] =
      run({.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 3}});
  ASSERT_EQ(ppo.size(), 6u);
  std::vector<double> later_sums;
  for (const auto& rule : std::vector<decltype(cr::update_options{}.rule)>{
           cr::cispo_update{.epochs = 2, .mini_batches = 3},
           cr::dppo_update{.epochs = 2, .mini_batches = 3},
           cr::dppo_update{.epochs = 2,
                           .mini_batches = 3,
                           .loss = {.divergence = cr::dppo_divergence::binary_kl}},
           cr::dro_update{.epochs = 2, .mini_batches = 3, .loss = {.beta = 5.0}},
           cr::sapo_update{.epochs = 2, .mini_batches = 3},
           cr::gspo_update{.epochs = 2, .mini_batches = 3},
           cr::geo_mean_update{.epochs = 2, .mini_batches = 3},
           cr::kl_cov_update{.epochs = 2, .mini_batches = 3, .loss = {.kl_cov_ratio = 0.5}},
           cr::clip_cov_update{.epochs = 2,
                               .mini_batches = 3,
                               .loss = {.clip_cov_lb = 1e9, .clip_cov_ub = 2e9}}}) {
    const auto [m, calls] = run({.rule = rule});
    const std::string name = std::visit(
        []<class Rule>(const Rule&) {
          return std::string(cr::detail::config_fields<Rule>::alternative);
        },
        rule);
    ASSERT_EQ(calls.size(), 6u) << name;
    EXPECT_EQ(m.updates, 6u) << name;
    EXPECT_EQ(m.tokens, ppo_metrics.tokens) << name;
    for (const auto& u : calls) EXPECT_EQ(u.prompts, 2u) << name;
    EXPECT_NE(calls[0].dlogp_sum, 0.0) << name;
    EXPECT_NEAR(calls[0].dlogp_sum, ppo[0].dlogp_sum, 1e-6 * std::abs(ppo[0].dlogp_sum)) << name;
    later_sums.push_back(calls[5].dlogp_sum);
  }
  // After five updates the losses differ (DRO's penalty and SAPO's gate act on r != 1).
  EXPECT_NE(later_sums[3], later_sums[0]);
  EXPECT_NE(later_sums[4], later_sums[0]);
}

// The covariance losses select in each mini-batch's call: Clip-Cov with every token a
// candidate stops the gradient of half of them (so the first update is no longer PPO's),
// with a seed drawn from the stage's generator: the same generator, the same run.
TEST(GrpoStep, ClipCovRuleSelectsPerMiniBatchFromTheStageGenerator) {
  const auto run = [](cr::update_options update, std::uint64_t seed) {
    auto c = config(4, 6);
    c.update = update;
    c.filters.drop_zero_variance_groups = false;
    auto stage =
        cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 6)), exact_answer_reward{});
    tabular_policy policy;
    cr::rng_type rng(seed);
    step(stage, policy, rng);
    return policy.update_calls;
  };
  const auto ppo = run({.rule = cr::ppo_clip_update{.mini_batches = 3}}, 2);
  const cr::clip_cov_update every_candidate{
      .mini_batches = 3, .loss = {.clip_cov_ratio = 0.5, .clip_cov_lb = -1e9, .clip_cov_ub = 1e9}};
  const auto first = run({.rule = every_candidate}, 2);
  const auto again = run({.rule = every_candidate}, 2);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_NE(first[0].dlogp_sum, ppo[0].dlogp_sum);
  for (std::size_t k = 0; k < first.size(); ++k) EXPECT_EQ(first[k].dlogp_sum, again[k].dlogp_sum);
}

// veRL's bypass mode as a rule. Without weights or rejection, its ppo_clip loss is the PPO
// rule's (old = the sampler's log-probs, the same clip and dual clip, the same normaliser)
// in every update, bit for bit; its REINFORCE with token-level IS weights is -w A, so at
// the first update (the policy is the sampler: w = 1) it is PPO's there too, and then
// parts ways.
TEST(GrpoStep, BypassModeRuleIsPpoWithoutCorrection) {
  const auto run = [](cr::update_options update) {
    auto c = config(4, 6);
    c.update = update;
    c.filters.drop_zero_variance_groups = false;
    auto stage =
        cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 6)), exact_answer_reward{});
    tabular_policy policy;
    cr::rng_type rng(2);
    const auto m = step(stage, policy, rng);
    return std::pair{m, policy.update_calls};
  };
  const auto [ppo_metrics, ppo] =
      run({.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 3, .loss = {.dual_clip = 3.0}}});
  const auto [m, bypass] = run({.rule = cr::bypass_mode_update{.epochs = 2, .mini_batches = 3}});
  ASSERT_EQ(ppo.size(), 6u);
  ASSERT_EQ(bypass.size(), 6u);
  for (std::size_t k = 0; k < ppo.size(); ++k)
    EXPECT_EQ(bypass[k].dlogp_sum, ppo[k].dlogp_sum) << k;
  EXPECT_NE(ppo[5].dlogp_sum, ppo[0].dlogp_sum);
  EXPECT_EQ(m.tokens, ppo_metrics.tokens);
  EXPECT_EQ(m.loss, ppo_metrics.loss);
  EXPECT_EQ(m.clip_fraction, ppo_metrics.clip_fraction);
  const auto [rm, reinforce] = run({.rule = cr::bypass_mode_update{
                                         .epochs = 2,
                                         .mini_batches = 3,
                                         .loss = {.loss_type = "reinforce",
                                                  .rollout_is = "token",
                                                  .rollout_is_threshold = "2.0"}}});
  ASSERT_EQ(reinforce.size(), 6u);
  EXPECT_NE(reinforce[0].dlogp_sum, 0.0);
  EXPECT_NEAR(reinforce[0].dlogp_sum, ppo[0].dlogp_sum, 1e-6 * std::abs(ppo[0].dlogp_sum));
  EXPECT_NE(reinforce[5].dlogp_sum, ppo[5].dlogp_sum);
  EXPECT_EQ(rm.tokens, ppo_metrics.tokens);
}

// A policy that records, at each optimizer step, dL/dlogp and the log-ratio of its
// current log-probs (those the loss just read) to the sampler's.
struct recording_policy : tabular_policy {
  std::vector<std::vector<float>> dlogps;
  std::vector<std::vector<double>> log_ratios;
  void apply_gradient(const cr::rollout_batch& batch, std::span<const float> dlogp, double lr) {
    std::vector<float> logp(batch.token_count());
    log_probs(batch, std::span<float>(logp));
    std::vector<double> d(batch.token_count());
    for (std::size_t t = 0; t < d.size(); ++t)
      d[t] = static_cast<double>(logp[t]) - static_cast<double>(batch.behaviour_log_probs[t]);
    dlogps.emplace_back(dlogp.begin(), dlogp.end());
    log_ratios.push_back(std::move(d));
    tabular_policy::apply_gradient(batch, dlogp, lr);
  }
};

// With a rejection threshold (token_k2: kept where d^2 / 2 <= 1e-4), the tokens whose
// policy moved past it since sampling carry no gradient, and they leave the normaliser:
// the step counts fewer tokens than PPO's. Tokens within it keep their gradient.
TEST(GrpoStep, BypassModeRuleRejectedTokensCarryNoGradient) {
  auto c = config(4, 6);
  c.update = {.rule = cr::bypass_mode_update{
                   .epochs = 3,
                   .mini_batches = 3,
                   .loss = {.rollout_rs = "token_k2", .rollout_rs_threshold = "1e-4"}}};
  c.filters.drop_zero_variance_groups = false;
  auto stage =
      cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 6)), exact_answer_reward{});
  recording_policy policy;
  cr::rng_type rng(2);
  const cr::teacher_registry<tabular_snapshot> none;
  cr::step_context<tabular_snapshot> context{0, c.lr.at(0, c.steps), rng, none};
  const auto m = stage.step(policy, context);
  ASSERT_EQ(policy.dlogps.size(), 9u);
  std::size_t rejected = 0, kept_moving = 0, tokens = 0;
  for (std::size_t k = 0; k < policy.dlogps.size(); ++k)
    for (std::size_t t = 0; t < policy.dlogps[k].size(); ++t) {
      const double d = policy.log_ratios[k][t];
      ++tokens;
      if (0.5 * d * d > 1e-4) {
        ++rejected;
        EXPECT_EQ(policy.dlogps[k][t], 0.0f) << "update " << k << " token " << t;
      } else {
        kept_moving += policy.dlogps[k][t] != 0.0f;
      }
    }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(kept_moving, 0u);
  EXPECT_EQ(m.tokens, tokens - rejected);
}

// The kept tokens are the normaliser (token-mean over the kept count): the first two
// updates of a run with a rejection threshold and of one without start from the same
// policy (nothing is rejected before the policy first moves), and in the second update
// every kept token's gradient is the unrejected run's scaled by all tokens / kept tokens.
TEST(GrpoStep, BypassModeRuleNormalisesByTheKeptTokens) {
  const auto run = [](const char* threshold) {
    auto c = config(4, 6);
    cr::bypass_mode_update rule{.epochs = 2, .mini_batches = 1};
    if (threshold != nullptr) {
      rule.loss.rollout_rs = "token_k2";
      rule.loss.rollout_rs_threshold = threshold;
    }
    c.update = {.rule = rule};
    c.filters.drop_zero_variance_groups = false;
    auto stage =
        cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 6)), exact_answer_reward{});
    recording_policy policy;
    cr::rng_type rng(2);
    const cr::teacher_registry<tabular_snapshot> none;
    cr::step_context<tabular_snapshot> context{0, c.lr.at(0, c.steps), rng, none};
    (void)stage.step(policy, context);
    return policy;
  };
  const recording_policy rejecting = run("1e-4"), plain = run(nullptr);
  ASSERT_EQ(rejecting.dlogps.size(), 2u);
  ASSERT_EQ(plain.dlogps.size(), 2u);
  EXPECT_EQ(rejecting.dlogps[0], plain.dlogps[0]);  // nothing moved yet: nothing rejected
  const std::vector<float>& with = rejecting.dlogps[1];
  const std::vector<float>& without = plain.dlogps[1];
  ASSERT_EQ(with.size(), without.size());
  ASSERT_EQ(rejecting.log_ratios[1], plain.log_ratios[1]);
  std::size_t kept = 0;
  for (const double d : rejecting.log_ratios[1]) kept += 0.5 * d * d <= 1e-4;
  ASSERT_GT(kept, 0u);
  ASSERT_LT(kept, with.size());
  const double scale = static_cast<double>(with.size()) / static_cast<double>(kept);
  std::size_t compared = 0;
  for (std::size_t t = 0; t < with.size(); ++t) {
    const double d = rejecting.log_ratios[1][t];
    if (0.5 * d * d > 1e-4 || without[t] == 0.0f) continue;
    // Two float roundings of the same double product: 2^-23 relative each.
    EXPECT_NEAR(with[t] / (without[t] * scale), 1.0, 4e-7) << "token " << t;
    ++compared;
  }
  EXPECT_GT(compared, 0u);
}

TEST(GrpoStep, TrainingImprovesTheReward) {
  auto stage = cr::make_grpo_stage(config(8, 4), cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
  tabular_policy policy;
  cr::rng_type rng(4);
  const auto prompts = domain_prompts("a", 0, 4);
  const double before = policy.greedy_reward(prompts);
  for (std::size_t k = 0; k < 10; ++k) step(stage, policy, rng, k);
  EXPECT_GT(policy.greedy_reward(prompts), before + 0.5);
}

TEST(Rewards, WorkerCountDoesNotChangeResults) {
  std::vector<tabular_snapshot> results;
  for (std::size_t workers : {1u, 2u, 8u}) {
    auto c = config(8, 4);
    c.reward_workers = workers;
    auto stage = cr::make_grpo_stage(c, cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
    tabular_policy policy;
    cr::rng_type rng(8);
    for (std::size_t k = 0; k < 5; ++k) step(stage, policy, rng, k);
    results.push_back(policy.snapshot());
  }
  EXPECT_TRUE(results[0] == results[1]);
  EXPECT_TRUE(results[0] == results[2]);
}

TEST(Rewards, BatchedRewardIsCalledOnceAndPerResponseRewardRunsConcurrently) {
  struct batched {
    std::atomic<int>* calls;
    void score_batch(const cr::rollout_batch& b, std::span<float> out) const {
      ++*calls;
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(b.length(i) % 2);
    }
  };
  static_assert(cr::Reward<batched> && !cr::per_response_reward<batched>);
  std::atomic<int> calls{0};
  tabular_policy policy;
  const auto batch = policy.generate(domain_prompts("a", 0, 3), {4, {}, 1});
  const auto r = cr::score_rewards(batched{&calls}, batch, 4);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(r.rewards.size(), 12u);
  EXPECT_GE(r.seconds, 0.0);

  std::atomic<int> concurrent{0}, peak{0};
  const auto slow = [&](const cr::response_view&) {
    const int now = ++concurrent;
    int seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    --concurrent;
    return 0.5;
  };
  const auto r2 = cr::score_rewards(slow, batch, 3);
  EXPECT_EQ(r2.rewards, std::vector<float>(12, 0.5f));
  EXPECT_LE(peak.load(), 3);  // bounded pool
  EXPECT_GE(peak.load(), 2);  // and really parallel
}

TEST(Rewards, ExceptionOfTheFirstFailingResponseIsRethrown) {
  tabular_policy policy;
  const auto batch = policy.generate(domain_prompts("a", 0, 3), {4, {}, 1});
  const auto failing = [](const cr::response_view& r) -> double {
    if (r.index == 4 || r.index == 9) throw std::runtime_error("verifier failed on " + std::to_string(r.index));
    return 0.0;
  };
  try {
    (void)cr::score_rewards(failing, batch, 4);
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "verifier failed on 4");
  }
}

TEST(RolloutBatch, BuildsLayoutsAndSubsets) {
  tabular_policy policy;
  const auto batch = policy.generate(domain_prompts("a", 0, 3), {2, {}, 4});
  cr::validate_rollout_batch(batch, "test", 3, 2);
  EXPECT_EQ(batch.groups().groups(), 3u);
  EXPECT_EQ(batch.layout().sequences(), 6u);
  EXPECT_EQ(batch.group_of(5), 2u);
  const std::vector<std::uint8_t> keep{1, 0, 1};
  const auto sub = cr::subset_groups(batch, keep);
  EXPECT_EQ(sub.prompt_count(), 2u);
  EXPECT_EQ(sub.prompts[1].id, 2);
  EXPECT_EQ(sub.token_count(), batch.length(0) + batch.length(1) + batch.length(4) + batch.length(5));
  EXPECT_TRUE(std::equal(sub.response_tokens(2).begin(), sub.response_tokens(2).end(),
                         batch.response_tokens(4).begin(), batch.response_tokens(4).end()));
}

TEST(RolloutBatch, ValidationNamesTheProducerAndTheField) {
  tabular_policy policy;
  auto batch = policy.generate(domain_prompts("a", 0, 2), {3, {}, 4});
  cr::testing::expect_error_naming([&] { cr::validate_rollout_batch(batch, "policy.generate", 3, 3); },
                                   "policy.generate result .prompts", "3 were requested");
  cr::testing::expect_error_naming([&] { cr::validate_rollout_batch(batch, "policy.generate", 2, 4); },
                                   "group_offsets[0]", "asked for 4");
  batch.behaviour_log_probs.pop_back();
  cr::testing::expect_error_naming([&] { cr::validate_rollout_batch(batch, "policy.generate"); },
                                   "behaviour_log_probs");
  cr::rollout_batch empty;
  cr::testing::expect_error_naming([&] { empty.add_response({}, {}, cr::finish_reason::stopped); }, "add_prompt");
}

}  // namespace
