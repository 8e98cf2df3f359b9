// What the demo measures per step and over seeds: generated and padded tokens, the
// padding waste, the wait for the slowest verifier, totals, and mean / sample standard
// deviation over seeds; the observer that records them from the training reward's
// ledger.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "measurements.hpp"

namespace {

namespace cr = cascade_rl;

TEST(DemoMeasurements, WaitForTheSlowestVerifierIsMaxMinusMean) {
  EXPECT_DOUBLE_EQ(demo::wait_for_slowest(std::vector<double>{}), 0.0);
  EXPECT_DOUBLE_EQ(demo::wait_for_slowest(std::vector<double>{0.5, 0.5, 0.5}), 0.0);  // uniform: no wait
  // Three instant verifications and one sandbox run of 0.04 s: mean 0.01, wait 0.03.
  EXPECT_NEAR(demo::wait_for_slowest(std::vector<double>{0, 0, 0, 0.04}), 0.03, 1e-15);
}

TEST(DemoMeasurements, AStepsTokensPaddingAndWaitComeFromItsMetrics) {
  cr::step_metrics m;
  m.stage = "mixed";
  m.global_step = 7;
  m.responses = 4;
  m.length_mean = 4.5;  // lengths 1, 2, 3, 12
  m.length_min = 1;
  m.length_max = 12;
  m.reward_mean = 0.25;
  m.reward_seconds = 0.05;
  const demo::verification_record v{{"mcqa", "mcqa", "code", "code"}, {0.0, 0.0, 0.04, 0.04}, 1};
  const demo::step_compute s = demo::compute_of(m, v);
  EXPECT_EQ(s.stage, "mixed");
  EXPECT_EQ(s.global_step, 7u);
  EXPECT_DOUBLE_EQ(s.tokens, 18.0);
  EXPECT_DOUBLE_EQ(s.padded, 48.0);
  EXPECT_DOUBLE_EQ(s.waste(), 30.0);
  EXPECT_DOUBLE_EQ(s.verify_seconds, 0.05);
  EXPECT_NEAR(s.wait_seconds, 0.02, 1e-15);
  EXPECT_FALSE(s.distillation);
  EXPECT_DOUBLE_EQ(s.curve, 0.25);

  // MOPD: no reward; the curve is the KL to the teachers.
  m.rewarded = false;
  m.kl_to_teacher = 0.125;
  const demo::step_compute d = demo::compute_of(m, {});
  EXPECT_TRUE(d.distillation);
  EXPECT_DOUBLE_EQ(d.curve, 0.125);
  EXPECT_DOUBLE_EQ(d.wait_seconds, 0.0);

  const std::vector<demo::step_compute> steps{s, d};
  const demo::compute_totals t = demo::totals_of(steps);
  EXPECT_EQ(t.steps, 2u);
  EXPECT_EQ(t.rollouts, 8u);
  EXPECT_DOUBLE_EQ(t.tokens, 36.0);
  EXPECT_DOUBLE_EQ(t.padded, 96.0);
  EXPECT_DOUBLE_EQ(t.waste_fraction(), 60.0 / 96.0);
  EXPECT_DOUBLE_EQ(t.verify_seconds, 0.1);
}

TEST(DemoMeasurements, SpreadOverSeeds) {
  const demo::spread s = demo::spread_of(std::vector<double>{0.7, 0.8, 0.9});
  EXPECT_EQ(s.n, 3u);
  EXPECT_NEAR(s.mean, 0.8, 1e-15);
  EXPECT_NEAR(s.sd, 0.1, 1e-15);  // sample standard deviation (n - 1)
  EXPECT_DOUBLE_EQ(s.min, 0.7);
  EXPECT_DOUBLE_EQ(s.max, 0.9);
  const demo::spread one = demo::spread_of(std::vector<double>{0.5});
  EXPECT_DOUBLE_EQ(one.mean, 0.5);
  EXPECT_DOUBLE_EQ(one.sd, 0.0);
  EXPECT_EQ(demo::spread_of(std::vector<double>{}).n, 0u);
}

TEST(DemoMeasurements, TheRecorderTakesEachStepsVerificationFromTheLedger) {
  demo::run_trace trace;
  const auto ledger = std::make_shared<demo::verification_ledger>();
  const demo::trace_recorder recorder(trace, ledger);
  cr::step_metrics m;
  m.stage = "code_rl";
  m.global_step = 1;
  m.responses = 2;
  m.length_mean = 3;
  m.length_max = 4;
  ledger->put({{"code", "code"}, {0.03, 0.03}, 1});
  recorder.on_step(m);
  m.global_step = 2;
  recorder.on_step(m);  // nothing in the ledger: no verification recorded
  recorder.on_evaluation({"code_rl", 0, 2, true, {{"code", 0.5}}});
  ASSERT_EQ(trace.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(trace.steps[0].tokens, 6.0);
  EXPECT_DOUBLE_EQ(trace.steps[0].padded, 8.0);
  EXPECT_EQ(trace.sandbox_runs, 1u);
  EXPECT_EQ(trace.latency_by_domain["code"], (std::vector<double>{0.03, 0.03}));
  ASSERT_EQ(trace.evaluations.size(), 1u);
  EXPECT_EQ(trace.evaluations[0].global_step, 2u);
  EXPECT_TRUE(trace.evaluations[0].stage_end);
  EXPECT_DOUBLE_EQ(trace.evaluations[0].scores[0].score, 0.5);
}

}  // namespace
