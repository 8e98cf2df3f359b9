// cascade_rl::error keeps its parts (argument, index, problem) beside its message, and
// re-pointing an error at another location goes through them, never through the text.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/stage_config_json.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace {
namespace error_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace fs = std::filesystem;

// The cascade_rl::error that `f` throws; fails the test when it throws none.
template <class F>
cr::error caught(F f) {
  try {
    f();
  } catch (const cr::error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a cascade_rl::error";
  return cr::error("(none)", "(none)");
}

static_assert(std::is_base_of_v<std::invalid_argument, cr::error>);
static_assert(std::is_nothrow_copy_constructible_v<cr::error>);
// Built from its parts only: a message is composed, never passed in.
static_assert(!std::is_constructible_v<cr::error, std::string>);
static_assert(!std::is_constructible_v<cr::error, const char*>);

TEST(Error, FailKeepsArgumentAndProblem) {
  const cr::error e = caught([] { cr::detail::fail("rewards", "is empty"); });
  EXPECT_EQ(e.argument(), "rewards");
  EXPECT_EQ(e.index(), std::nullopt);
  EXPECT_EQ(e.problem(), "is empty");
  EXPECT_STREQ(e.what(), "cascade_rl: rewards: is empty");
}

TEST(Error, FailAtKeepsTheIndex) {
  const cr::error e = caught([] { cr::detail::fail_at("rewards", 5000, "is infinite"); });
  EXPECT_EQ(e.argument(), "rewards");
  EXPECT_EQ(e.index(), std::optional<std::size_t>(5000));
  EXPECT_EQ(e.problem(), "is infinite");
  EXPECT_STREQ(e.what(), "cascade_rl: rewards[5000]: is infinite");
}

TEST(Error, PartsMayHoldColonsAndBrackets) {
  // A problem with ": " in it, an argument with a path index written into it.
  const cr::error e("stages[2].update.ppo", "is not an object: got 3");
  EXPECT_EQ(e.argument(), "stages[2].update.ppo");
  EXPECT_EQ(e.index(), std::nullopt);
  EXPECT_EQ(e.problem(), "is not an object: got 3");
  EXPECT_STREQ(e.what(), "cascade_rl: stages[2].update.ppo: is not an object: got 3");
  const cr::error empty("", "");
  EXPECT_EQ(empty.argument(), "");
  EXPECT_EQ(empty.problem(), "");
  EXPECT_STREQ(empty.what(), "cascade_rl: : ");
}

TEST(Error, ALibraryRefusalHasItsParts) {
  const std::vector<std::int64_t> offsets{0, 3, 2, 7};
  const cr::error e = caught([&] { (void)cr::token_layout(offsets); });
  EXPECT_EQ(e.argument(), "offsets");
  EXPECT_EQ(e.index(), std::optional<std::size_t>(2));
  EXPECT_EQ(e.problem(), "decreases: 2 after 3");
  EXPECT_STREQ(e.what(), "cascade_rl: offsets[2]: decreases: 2 after 3");
}

TEST(Error, CopiesViewTheirOwnMessage) {
  std::optional<cr::error> copy;
  {
    const cr::error original("options.clip_low", 1, "is negative");
    copy.emplace(original);
  }
  EXPECT_EQ(copy->argument(), "options.clip_low");
  EXPECT_EQ(copy->index(), std::optional<std::size_t>(1));
  EXPECT_EQ(copy->problem(), "is negative");
  EXPECT_STREQ(copy->what(), "cascade_rl: options.clip_low[1]: is negative");
}

TEST(Error, RelocatedReplacesTheOwnPrefix) {
  const cr::error e("options.clip_low", "is 1.000000, expected 0 <= clip_low < 1");
  const cr::error moved = e.relocated("stage 'if_rl'.update.ppo", "options.");
  EXPECT_EQ(moved.argument(), "stage 'if_rl'.update.ppo.clip_low");
  EXPECT_EQ(moved.index(), std::nullopt);
  EXPECT_EQ(moved.problem(), "is 1.000000, expected 0 <= clip_low < 1");
  EXPECT_STREQ(
      moved.what(),
      "cascade_rl: stage 'if_rl'.update.ppo.clip_low: is 1.000000, expected 0 <= clip_low < 1");
  EXPECT_STREQ(e.what(), "cascade_rl: options.clip_low: is 1.000000, expected 0 <= clip_low < 1");
}

TEST(Error, RelocatedKeepsTheIndex) {
  const cr::error moved =
      cr::error("options.weights", 3, "is NaN").relocated("stage 's'.mix", "options.");
  EXPECT_EQ(moved.argument(), "stage 's'.mix.weights");
  EXPECT_EQ(moved.index(), std::optional<std::size_t>(3));
  EXPECT_EQ(moved.problem(), "is NaN");
  EXPECT_STREQ(moved.what(), "cascade_rl: stage 's'.mix.weights[3]: is NaN");
}

TEST(Error, RelocatedWithoutTheOwnPrefixKeepsTheWholeArgument) {
  const cr::error e("max_length", "must be > 0, got 0");
  EXPECT_EQ(e.relocated("stage 's'.filters.overlong").argument(),
            "stage 's'.filters.overlong.max_length");
  EXPECT_EQ(e.relocated("stage 's'.filters.overlong", "options.").argument(),
            "stage 's'.filters.overlong.max_length");
  // Nothing left after the own prefix: the field itself.
  const cr::error whole =
      cr::error("options", 2, "is empty").relocated("stage 's'.update", "options");
  EXPECT_EQ(whole.argument(), "stage 's'.update");
  EXPECT_STREQ(whole.what(), "cascade_rl: stage 's'.update[2]: is empty");
}

TEST(Error, WithContextPutsTheContextFirst) {
  const cr::error e = cr::error("stages[1].steps", "is 0").with_context("schedule file 'a.json'");
  EXPECT_EQ(e.argument(), "schedule file 'a.json': stages[1].steps");
  EXPECT_EQ(e.index(), std::nullopt);
  EXPECT_EQ(e.problem(), "is 0");
  EXPECT_STREQ(e.what(), "cascade_rl: schedule file 'a.json': stages[1].steps: is 0");
  const cr::error at = cr::error("rewards", 7, "is NaN").with_context("batch 3");
  EXPECT_EQ(at.argument(), "batch 3: rewards");
  EXPECT_EQ(at.index(), std::optional<std::size_t>(7));
  EXPECT_STREQ(at.what(), "cascade_rl: batch 3: rewards[7]: is NaN");
}

TEST(Error, CheckNestedRelocatesAnAlgorithmsError) {
  const cr::error e = caught([] {
    cr::detail::check_nested("stage 'if_rl'.update.ppo", "options.",
                             [] { cr::detail::fail("options.clip_low", "is negative"); });
  });
  EXPECT_EQ(e.argument(), "stage 'if_rl'.update.ppo.clip_low");
  EXPECT_EQ(e.problem(), "is negative");
  EXPECT_STREQ(e.what(), "cascade_rl: stage 'if_rl'.update.ppo.clip_low: is negative");
}

TEST(Error, AStageCheckPointsAtTheConfigField) {
  // The overlong filter's own check names "max_length"; the stage's names the field.
  cr::stage_config c{.name = "if_rl", .steps = 1};
  c.filters.overlong = cr::overlong_options{.mode = cr::overlong_mode::drop, .max_length = 0};
  const cr::error e = caught([&] { cr::detail::validate_grpo_config(c); });
  EXPECT_EQ(e.argument(), "stage 'if_rl'.filters.overlong.max_length");
  EXPECT_EQ(e.index(), std::nullopt);
  EXPECT_EQ(e.problem(), "must be > 0, got 0");
  EXPECT_STREQ(e.what(),
               "cascade_rl: stage 'if_rl'.filters.overlong.max_length: must be > 0, got 0");

  c.filters.overlong =
      cr::overlong_options{.mode = cr::overlong_mode::soft_penalty, .max_length = 8};
  const cr::error soft = caught([&] { cr::detail::validate_grpo_config(c, "stages[2]"); });
  EXPECT_EQ(soft.argument(), "stages[2].filters.overlong.buffer_length");
  EXPECT_EQ(soft.problem(), "must lie in (0, max_length = 8], got 0");
}

TEST(Error, AScheduleFileErrorNamesTheFileThenThePath) {
  const fs::path dir =
      fs::temp_directory_path() / ("cascade_rl_error_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "bad.json";
  std::ofstream(file) << R"([{"name": "a", "steps": 1},
 {"name": "b", "steps": 1, "filters": {"overlong": {"mode": "soft_penalty", "max_length": 8}}}])";
  const cr::error e = caught([&] { (void)cr::load_schedule_file(file); });
  const std::string in_file = "schedule file '" + file.string() + "'";
  EXPECT_EQ(e.argument(), in_file + ": stages[1].filters.overlong.buffer_length");
  EXPECT_EQ(e.index(), std::nullopt);
  EXPECT_EQ(e.problem(), "must lie in (0, max_length = 8], got 0");
  EXPECT_EQ(std::string(e.what()),
            "cascade_rl: " + in_file +
                ": stages[1].filters.overlong.buffer_length: must lie in (0, "
                "max_length = 8], got 0");

  std::ofstream(file) << R"([{"name": "a", "steps": 0}])";
  const cr::error steps = caught([&] { (void)cr::load_schedule_file(file); });
  EXPECT_EQ(steps.argument(), in_file + ": stages[0].steps");
  EXPECT_EQ(steps.problem(), "is 0 (a stage needs at least one step)");

  const cr::error missing = caught([&] { (void)cr::load_schedule_file(dir / "missing.json"); });
  EXPECT_EQ(missing.argument(), "schedule file '" + (dir / "missing.json").string() + "'");
  EXPECT_EQ(missing.problem(), "cannot be opened");
  fs::remove_all(dir);
}

}  // namespace error_cases
}  // namespace
