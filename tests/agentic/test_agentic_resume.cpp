// An agentic stage inside a cascade, killed and resumed (issue 36): two agentic stages
// on the guessing game (the second's prompts share the policy's table slots with the
// first's but hide other digits, so training it makes the policy forget the first),
// run straight through and run in pieces, each piece a fresh cascade, policy and runner
// resumed from the latest checkpoint, as a new process after a kill. The pieces must
// end with the uninterrupted run's policy bit for bit, the same forgetting matrix, and
// report the same steps: the episodes drawn after a resume (prompts, seeds, sampled
// actions) are the ones the uninterrupted run drew.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "agentic/guessing_game.hpp"
#include "cascade_rl/cascade.hpp"

namespace {
namespace agentic_resume_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace fs = std::filesystem;
using cr::testing::guessing::guess_snapshot;
using cr::testing::guessing::guessing_policy;

std::vector<cr::prompt> guess_prompts(const std::string& domain, std::int64_t first) {
  std::vector<cr::prompt> prompts;
  for (std::int64_t id = first; id < first + 6; ++id)
    prompts.push_back({.id = id, .domain = domain, .text = "guess " + std::to_string(id)});
  return prompts;
}

cr::stage_config guess_config(const std::string& name, const std::string& domain, std::int64_t first) {
  cr::stage_config c = cr::testing::guessing::game_config();
  c.name = name;
  c.domains = {domain};
  c.steps = 9;
  c.evals = {{.domain = domain, .prompts = guess_prompts(domain, first), .samples_per_prompt = 1}};
  return c;
}

// Six prompts a domain, four drawn a step, so where the pool stands matters on resume.
// The second domain's ids 6-11 use the first's table slots (slot = id % 4) with other
// secrets.
auto make_guess_cascade() {
  return cr::make_cascade(
      cr::make_agentic_stage(guess_config("swe_a", "guess_a", 0), cr::prompt_pool(guess_prompts("guess_a", 0)),
                             cr::testing::guessing::make_game),
      cr::make_agentic_stage(guess_config("swe_b", "guess_b", 6), cr::prompt_pool(guess_prompts("guess_b", 6)),
                             cr::testing::guessing::make_game));
}

// What a step reports that a resumed run must reproduce exactly.
struct step_record {
  double loss = 0, reward_mean = 0, turns_mean = 0;
  std::size_t responses = 0, tokens = 0;
  bool operator==(const step_record&) const = default;
};

struct step_log {
  std::vector<step_record> steps;
  void on_step(const cr::step_metrics& m) {
    steps.push_back({m.loss, m.reward_mean, m.episodes ? m.episodes->turns_mean : -1.0, m.responses, m.tokens});
  }
};

struct outcome {
  guess_snapshot policy;
  std::string forgetting;
  std::vector<step_record> steps;
  std::size_t runs = 0;
};

outcome run_straight(std::uint64_t seed) {
  auto cascade = make_guess_cascade();
  guessing_policy policy;
  step_log log;
  auto runner = cr::make_runner(cascade, policy, {.seed = seed});
  const auto report = runner.run(log);
  EXPECT_TRUE(report.finished);
  return {policy.snapshot(), report.forgetting.to_json().dump(), log.steps, 1};
}

// Each iteration is a new process: new objects, resume, at most `chunk` steps.
outcome run_in_pieces(std::uint64_t seed, const fs::path& dir, std::size_t chunk) {
  outcome o;
  for (;;) {
    auto cascade = make_guess_cascade();
    guessing_policy policy;
    step_log log;
    auto runner = cr::make_runner(cascade, policy, {.seed = seed, .checkpoint_dir = dir, .max_steps = chunk});
    runner.resume();
    const auto report = runner.run(log);
    o.steps.insert(o.steps.end(), log.steps.begin(), log.steps.end());
    ++o.runs;
    if (report.finished) {
      o.policy = policy.snapshot();
      o.forgetting = report.forgetting.to_json().dump();
      return o;
    }
    if (o.runs > 100) {
      ADD_FAILURE() << "did not finish";
      return o;
    }
  }
}

TEST(AgenticResume, KilledAndResumedCascadeEqualsAnUninterruptedRunBitForBit) {
  const outcome straight = run_straight(17);
  ASSERT_EQ(straight.steps.size(), 18u);
  // The run learnt something and the second stage moved the first domain's scores.
  EXPECT_NE(straight.policy, guessing_policy().snapshot());
  for (const std::size_t chunk : {1u, 4u, 7u}) {
    const fs::path dir = fs::temp_directory_path() /
                         ("cascade_rl_agentic_resume_" + std::to_string(chunk) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const outcome pieces = run_in_pieces(17, dir, chunk);
    EXPECT_GE(pieces.runs, 18 / chunk) << "chunk " << chunk;
    EXPECT_TRUE(pieces.policy == straight.policy) << "chunk " << chunk;
    EXPECT_EQ(pieces.forgetting, straight.forgetting) << "chunk " << chunk;
    EXPECT_TRUE(pieces.steps == straight.steps) << "chunk " << chunk;
    fs::remove_all(dir);
  }
}

}  // namespace agentic_resume_cases
}  // namespace
