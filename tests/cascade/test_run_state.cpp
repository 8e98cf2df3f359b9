// The run's state as data (run_state.hpp): one field list gives the checkpoint's JSON,
// its strict reading and the comparison, so a round trip is exact and every field a
// checkpoint holds is checked on the way back in.

#include <gtest/gtest.h>

#include <string>

#include "cascade_rl/cascade/run_state.hpp"
#include "support/expect_error.hpp"

namespace {

namespace cr = cascade_rl;

cr::run_state sample_state() {
  cr::run_state s;
  s.stages = {"if_rl", "mopd"};
  s.position = {
      .stage = 1, .step = 4, .global_step = 14, .baseline_done = true, .stage_stopped = false};
  s.stop = {.best = 0.625, .since_improvement = 2};
  s.stopped_early = {"if_rl"};
  s.rng = cr::rng_type(42);
  for (int i = 0; i < 5; ++i) (void)s.rng();  // a state past the seed
  s.forgetting = cr::forgetting_matrix({"if", "math"});
  s.forgetting.add_row("before", {}, {0.25, 0.5});
  s.forgetting.add_row("if_rl", {"if"}, {0.75, 0.4375});
  s.sequence = 7;
  s.stage_state = {{"source", {{"order", {2, 0, 1}}, {"next", 1}}}};
  return s;
}

TEST(RunState, JsonRoundTripIsExact) {
  const cr::run_state s = sample_state();
  const nlohmann::json j = cr::run_state_to_json(s);
  EXPECT_EQ(j.at("position").at("global_step"), 14);
  EXPECT_EQ(j.at("stop").at("best"), 0.625);
  EXPECT_EQ(j.at("stage_state").at("source").at("next"), 1);
  const cr::run_state back = cr::run_state_from_json(j, "state");
  EXPECT_EQ(cr::run_state_difference(s, back), "");
  // The generator continues the same stream.
  cr::rng_type a = s.rng, b = back.rng;
  EXPECT_EQ(a(), b());
}

TEST(RunState, DifferenceNamesTheFirstFieldThatDiffers) {
  const cr::run_state s = sample_state();
  cr::run_state t = s;
  t.position.stage_stopped = true;
  EXPECT_EQ(cr::run_state_difference(s, t), "position.stage_stopped");
  t = s;
  t.stop.best.reset();
  EXPECT_EQ(cr::run_state_difference(s, t), "stop.best");
  t = s;
  (void)t.rng();
  EXPECT_EQ(cr::run_state_difference(s, t), "rng");
  t = s;
  t.forgetting.add_row("mopd", {"math"}, {0.75, 0.5});
  EXPECT_EQ(cr::run_state_difference(s, t), "forgetting");
  t = s;
  t.stage_state["source"]["next"] = 2;
  EXPECT_EQ(cr::run_state_difference(s, t), "stage_state");
  t = s;
  t.stopped_early.push_back("mopd");
  EXPECT_EQ(cr::run_state_difference(s, t), "stopped_early");
}

TEST(RunState, ReadingRefusesMissingUnknownAndMistypedFieldsByPath) {
  const nlohmann::json good = cr::run_state_to_json(sample_state());
  const auto refused = [&](nlohmann::json j, const std::string& needle) {
    cr::testing::expect_error_naming([&] { (void)cr::run_state_from_json(j, "state"); }, needle);
  };
  nlohmann::json j = good;
  j["position"].erase("step");
  refused(j, "state.position.step: is missing");
  j = good;
  j.erase("forgetting");
  refused(j, "state.forgetting: is missing");
  j = good;
  j["stop"]["bestt"] = 1.0;
  refused(j, "state.stop.bestt: unknown key (did you mean best?)");
  j = good;
  j["sequence"] = -1;
  refused(j, "state.sequence: must be >= 0, got -1");
  j = good;
  j["rng"] = 12;
  refused(j, "state.rng: expected a saved generator state (a string), got number 12");
  j = good;
  j["rng"] = "not a generator";
  refused(j, "state.rng: is not a saved generator state");
  j = good;
  j["forgetting"]["rows"][0]["scores"] = {0.5};
  refused(j, "state.forgetting: forgetting_matrix row scores");
  // Keys another part of the file owns are left alone when named as ignored.
  j = good;
  j["format"] = "cascade_rl.checkpoint";
  refused(j, "state.format: unknown key");
  EXPECT_EQ(
      cr::run_state_difference(cr::run_state_from_json(j, "state", {"format"}), sample_state()),
      "");
}

}  // namespace
