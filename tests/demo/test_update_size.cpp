// The forgetting study's measurements (update_size.hpp, study.hpp): the KL of two
// next-token distributions and of an update, the other domains' change and the worst
// backward transfer of a forgetting matrix, Pearson's correlation, Adam's reset at a
// stage boundary, the grid, and a tiny study point and MOPD-at-the-end run end to end.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "demo_test_support.hpp"
#include "study.hpp"

namespace {

namespace cr = cascade_rl;

TEST(DemoUpdateSize, SoftmaxKlMatchesTheHandComputedValue) {
  // p = (1/4, 3/4), q = (1/2, 1/2): KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.130812...
  const std::vector<double> p{0.0, std::log(3.0)}, q{0.0, 0.0};
  const double expected = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
  EXPECT_NEAR(demo::softmax_kl(p, q), expected, 1e-15);
  EXPECT_NEAR(expected, 0.1308120, 1e-7);
  // Logits are defined up to a shift, and a shift of 1000 must not overflow exp.
  const std::vector<double> p_shifted{1000.0, 1000.0 + std::log(3.0)}, q_shifted{-500.0, -500.0};
  EXPECT_NEAR(demo::softmax_kl(p_shifted, q_shifted), expected, 1e-12);
  EXPECT_EQ(demo::softmax_kl(p, p), 0.0);
  // KL(q || p) = 1/2 ln(2/1) + 1/2 ln(2/3) = 0.143841...: not symmetric.
  EXPECT_NEAR(demo::softmax_kl(q, p), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-15);
}

TEST(DemoUpdateSize, SoftmaxKlRefusesMismatchedOrNonFiniteLogits) {
  const std::vector<double> two{0.0, 1.0}, three{0.0, 1.0, 2.0}, bad{0.0, NAN}, none{};
  EXPECT_THROW((void)demo::softmax_kl(two, three), cr::error);
  EXPECT_THROW((void)demo::softmax_kl(none, none), cr::error);
  try {
    (void)demo::softmax_kl(two, bad);
    FAIL() << "no error";
  } catch (const cr::error& e) {
    EXPECT_NE(std::string(e.what()).find("q_logits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find('1'), std::string::npos) << e.what();
  }
}

demo::lm_weights<double> small_model(std::uint64_t seed) {
  return demo::lm_weights<double>({.vocab = demo::vocabulary_size(), .d = 8, .heads = 2, .ffn = 16}, seed);
}

TEST(DemoUpdateSize, AnUpdatesKlIsZeroWithoutAChangeAndTheFirstPositionsKlForOneToken) {
  const auto before = small_model(3), after = small_model(4);
  const std::vector<cr::prompt> prompts{{.text = "add 2 3"}, {.text = "json a 1"}};
  EXPECT_EQ(demo::update_kl(before, before, prompts, 8), 0.0);
  EXPECT_EQ(demo::update_kl(before, after, std::vector<cr::prompt>{}, 8), 0.0);
  // One token each: the mean of the two prompts' first-position KLs.
  double expected = 0;
  for (const auto& p : prompts) {
    const auto tokens = demo::encode(p.text);
    demo::row_vector<double> lb, la;
    before.logits(before.start(tokens), lb);
    after.logits(after.start(tokens), la);
    expected += demo::softmax_kl(std::vector<double>(lb.data(), lb.data() + lb.size()),
                                 std::vector<double>(la.data(), la.data() + la.size())) / 2;
  }
  EXPECT_GT(expected, 0.0);
  EXPECT_NEAR(demo::update_kl(before, after, prompts, 1), expected, 1e-12);
  // Longer responses average more positions; the same on one thread or two.
  const double one = demo::update_kl(before, after, prompts, 8, 1), two = demo::update_kl(before, after, prompts, 8, 2);
  EXPECT_EQ(one, two);
  EXPECT_GT(one, 0.0);
  EXPECT_THROW((void)demo::update_kl(before, after, prompts, 0), cr::error);
}

cr::forgetting_matrix hand_matrix() {
  cr::forgetting_matrix m({"a", "b", "c"});
  m.add_row("before", {}, {0.5, 0.5, 0.5});
  m.add_row("s1", {"a"}, {0.9, 0.4, 0.2});
  m.add_row("s2", {"b"}, {0.6, 0.8, 0.3});
  return m;
}

TEST(DemoUpdateSize, TheOtherDomainsChangeIsTheMeanOverTheDomainsTheStageDidNotTrain) {
  const auto m = hand_matrix();
  // s1 trained a: b 0.5 -> 0.4, c 0.5 -> 0.2, mean -0.2.
  EXPECT_NEAR(*demo::change_of_others(m, 1, {"a"}), -0.2, 1e-15);
  // s2 trained b: a 0.9 -> 0.6, c 0.2 -> 0.3, mean -0.1.
  EXPECT_NEAR(*demo::change_of_others(m, 2, {"b"}), -0.1, 1e-15);
  EXPECT_FALSE(demo::change_of_others(m, 2, {"a", "b", "c"}).has_value());
  EXPECT_THROW((void)demo::change_of_others(m, 0, {"a"}), cr::error);
  EXPECT_THROW((void)demo::change_of_others(m, 3, {"a"}), cr::error);
}

TEST(DemoUpdateSize, BackwardTransferAndTheWorstDropOfAHandMatrix) {
  const auto m = hand_matrix();
  // a: last trained by s1 (0.9), final 0.6: -0.3. b: trained by the last stage (0, and
  // left out of the mean). c: never trained.
  EXPECT_NEAR(*m.backward_transfer("a"), -0.3, 1e-15);
  EXPECT_NEAR(*m.backward_transfer(), -0.3, 1e-15);
  EXPECT_FALSE(m.backward_transfer("c").has_value());
  EXPECT_NEAR(demo::worst_backward_transfer(m), -0.3, 1e-15);
  cr::forgetting_matrix rising({"a"});
  rising.add_row("before", {}, {0.1});
  rising.add_row("s1", {"a"}, {0.2});
  rising.add_row("s2", {}, {0.5});
  EXPECT_EQ(demo::worst_backward_transfer(rising), 0.0);  // nothing fell
}

TEST(DemoUpdateSize, PearsonOfHandValues) {
  EXPECT_NEAR(demo::pearson(std::vector<double>{1, 2, 3}, std::vector<double>{2, 4, 6}), 1.0, 1e-15);
  EXPECT_NEAR(demo::pearson(std::vector<double>{1, 2, 3}, std::vector<double>{3, 2, 1}), -1.0, 1e-15);
  // x = (0, 1, 2, 3), y = (0, 1, 0, 1): cov sum 1, sd 1.291 and 0.577 (n - 1): r = 1 / (3 * 0.7454) = 0.4472
  EXPECT_NEAR(demo::pearson(std::vector<double>{0, 1, 2, 3}, std::vector<double>{0, 1, 0, 1}), 1 / std::sqrt(5.0), 1e-15);
  EXPECT_EQ(demo::pearson(std::vector<double>{1, 1}, std::vector<double>{0, 2}), 0.0);
  EXPECT_THROW((void)demo::pearson(std::vector<double>{1, 2}, std::vector<double>{1}), cr::error);
}

TEST(DemoUpdateSize, AdamResetZeroesTheMomentsAndTheStepCount) {
  demo::eigen_policy policy({.vocab = demo::vocabulary_size(), .d = 8, .heads = 2, .ffn = 8}, 1, {}, 1);
  std::vector<float> grad(policy.weights().params.size(), 0.5f);
  policy.adam_step(grad, 1e-3);
  ASSERT_EQ(policy.weights().adam_steps, 1);
  ASSERT_NE(policy.weights().m[0], 0.0f);
  const auto params = policy.weights().params;
  demo::adam_reset(policy).on_stage_begin(cr::stage_config{}, 3);
  EXPECT_EQ(policy.weights().adam_steps, 0);
  for (std::size_t k = 0; k < params.size(); ++k) {
    ASSERT_EQ(policy.weights().m[k], 0.0f) << k;
    ASSERT_EQ(policy.weights().v[k], 0.0f) << k;
  }
  EXPECT_EQ(policy.weights().params, params);  // the weights stay
}

TEST(DemoStudy, TheGridIsTheFullProductOfThreeWidthsThreeRatesOverTenfoldAndBothAdamStates) {
  const auto points = demo::study_points();
  std::set<int> widths;
  std::set<double> rates;
  std::set<bool> adam;
  for (const auto& p : points) {
    widths.insert(p.width);
    rates.insert(p.lr_scale);
    adam.insert(p.reset_adam);
  }
  EXPECT_EQ(widths, (std::set<int>{32, 64, 128}));
  EXPECT_EQ(rates.size(), 3u);
  EXPECT_GE(*rates.rbegin() / *rates.begin(), 10.0 - 1e-12);
  EXPECT_EQ(adam.size(), 2u);
  // Every combination once: 3 x 3 x 2 distinct points.
  ASSERT_EQ(points.size(), 18u);
  for (std::size_t i = 0; i < points.size(); ++i)
    for (std::size_t j = i + 1; j < points.size(); ++j) EXPECT_NE(points[i], points[j]) << i << " " << j;
  // The demo's former default and its present one are among them.
  const auto has = [&](const demo::study_point& p) { return std::find(points.begin(), points.end(), p) != points.end(); };
  EXPECT_TRUE(has({64, 1.0, false}));
  EXPECT_TRUE(has({64, demo::default_lr_scale, false}));
  // By width first: one SFT model per width and seed serves a contiguous run of points.
  EXPECT_TRUE(std::is_sorted(points.begin(), points.end(),
                             [](const demo::study_point& a, const demo::study_point& b) { return a.width < b.width; }));
}

TEST(DemoStudy, ScalingMultipliesEveryRateAndKeepsTheRest) {
  const demo::hparams h = demo::swept_hparams(), s = demo::scaled(h, 0.1);
  EXPECT_DOUBLE_EQ(s.multi.lr, 5e-5);
  EXPECT_DOUBLE_EQ(s.if_rl.lr, 1e-4);
  EXPECT_DOUBLE_EQ(s.mopd_lr, 1e-4);
  EXPECT_EQ(s.code.max_length, h.code.max_length);
  EXPECT_THROW((void)demo::scaled(h, 0.0), cr::error);
  // The demo's default: the swept rates times 0.3 (what the study supports).
  EXPECT_DOUBLE_EQ(demo::per_domain_hparams().if_rl.lr, 3e-4);
  EXPECT_DOUBLE_EQ(demo::per_domain_hparams().multi.lr, 1.5e-4);
  EXPECT_DOUBLE_EQ(demo::shared_hparams().rlhf.lr, 3e-4);
  const demo::budget b = demo::study_budget({}, 128);
  EXPECT_EQ(b.width, 128);
  EXPECT_EQ(b.ffn, 256);
  EXPECT_EQ(b.heads, 4);
}

TEST(DemoUpdateSize, TheProbeRecordsAStagesUpdateOnTheOtherDomainsPromptsBesideTheirChange) {
  demo::eigen_policy policy({.vocab = demo::vocabulary_size(), .d = 8, .heads = 2, .ffn = 8}, 2, {}, 1);
  const std::vector<cr::prompt> a_prompts{{.text = "code x * 4"}}, b_prompts{{.text = "json b 4"}},
      c_prompts{{.text = "tool sum 3 4"}};
  std::vector<demo::stage_update> out;
  const demo::update_probe probe(policy, {{"a", a_prompts}, {"b", b_prompts}, {"c", c_prompts}}, out, 6);
  cr::stage_config s1;
  s1.name = "s1";
  s1.domains = {"a"};
  probe.on_stage_begin(s1, 0);
  const auto before = policy.weights();
  std::vector<float> grad(before.params.size());
  for (std::size_t k = 0; k < grad.size(); ++k) grad[k] = (k % 3 == 0) ? 1.0f : -0.5f;
  policy.adam_step(grad, 0.05);
  cr::forgetting_matrix m({"a", "b", "c"});
  m.add_row("before", {}, {0.5, 0.5, 0.5});
  m.add_row("s1", {"a"}, {0.9, 0.4, 0.2});
  probe.on_stage_end(s1, m);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].stage, "s1");
  const std::vector<cr::prompt> others{b_prompts[0], c_prompts[0]};  // not a's
  EXPECT_EQ(out[0].kl_others, demo::update_kl(before, policy.weights(), others, 6));
  EXPECT_GT(out[0].kl_others, 0.0);
  EXPECT_NEAR(out[0].others_change, -0.2, 1e-15);
  EXPECT_NEAR(out[0].own_change, 0.4, 1e-15);
  // A stage of every domain has no other domains: nothing recorded.
  cr::stage_config all;
  all.name = "all";
  all.domains = {"a", "b", "c"};
  probe.on_stage_begin(all, 1);
  m.add_row("all", {"a", "b", "c"}, {0.9, 0.9, 0.9});
  probe.on_stage_end(all, m);
  EXPECT_EQ(out.size(), 1u);
}

TEST(DemoStudy, ATinyStudyPointRecordsEveryStageAndRepeatsFromTheSameSftModel) {
  const auto programs = std::make_shared<const demo::program_verifier>(false);
  demo::world w(5, demo_test::tiny_budget(), programs, 1);
  const demo::study_run kept = demo::run_study_point(w, {8, 1.0, false}, 2);
  ASSERT_EQ(kept.stages.size(), 7u);
  EXPECT_EQ(kept.stages[0].stage, "if_rl");
  EXPECT_EQ(kept.stages[2].stage, "mopd");
  EXPECT_EQ(kept.stages[6].stage, "swe_rl");
  for (const auto& u : kept.stages) EXPECT_GE(u.kl_others, 0.0) << u.stage;
  EXPECT_LE(kept.worst_drop, kept.backward_transfer);
  EXPECT_EQ(kept.parameters, w.policy.weights().params.size());
  EXPECT_EQ(kept.final.size(), 8u);
  const demo::study_run again = demo::run_study_point(w, {8, 1.0, false}, 2);
  EXPECT_EQ(again.final, kept.final);  // from the same SFT model: the same run
  EXPECT_EQ(again.backward_transfer, kept.backward_transfer);
}

TEST(DemoStudy, MopdAtTheEndAddsAStageOfEverySingleTurnDomainAfterSwe) {
  const auto programs = std::make_shared<const demo::program_verifier>(false);
  demo::world w(6, demo_test::tiny_budget(), programs, 1);
  const demo::variant_result r = demo::run_mopd_end_variant(w, demo::per_domain_hparams());
  const auto& m = r.report.forgetting;
  ASSERT_EQ(m.rows(), 9u);
  EXPECT_EQ(m.label(7), "swe_rl");
  EXPECT_EQ(m.label(8), "mopd_end");
  EXPECT_EQ(r.configs.back().domains, demo::single_turn_domains());  // SWE's are episodes
  // The cascade's rollouts and one more MOPD stage's.
  EXPECT_EQ(r.rollouts, demo::cascade_rollouts(w) + 2 * 2 * 2);
  // Only SWE has a domain left untrained after its last stage: the overall backward
  // transfer is its alone.
  ASSERT_TRUE(r.report.backward_transfer_overall.has_value());
  EXPECT_EQ(r.report.backward_transfer_overall, r.report.forgetting.backward_transfer("swe"));
}

}  // namespace
