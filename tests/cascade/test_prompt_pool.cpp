// The prompt pool: shuffled epochs, the Cascade 1 curriculum hook (drop prompts solved
// by every sample, reinsert with a probability), and its checkpointed state.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "cascade_rl/cascade/prompt_pool.hpp"
#include "support/expect_error.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::domain_prompts;

TEST(PromptPool, EachEpochVisitsEveryPromptOnceInAShuffledOrder) {
  cr::prompt_pool pool(domain_prompts("a", 0, 10));
  cr::rng_type rng(1);
  const auto first = pool.next(10, rng);
  const auto second = pool.next(10, rng);
  EXPECT_EQ(std::set<std::size_t>(first.begin(), first.end()).size(), 10u);
  EXPECT_EQ(std::set<std::size_t>(second.begin(), second.end()).size(), 10u);
  EXPECT_NE(first, second);
  EXPECT_EQ(pool.epoch(), 2u);
  // A batch spanning an epoch boundary.
  const auto spanning = pool.next(15, rng);
  EXPECT_EQ(spanning.size(), 15u);
  EXPECT_EQ(pool.epoch(), 4u);
}

TEST(PromptPool, DropsPromptsSolvedByEverySampleAtTheirLastVisit) {
  cr::prompt_pool pool(domain_prompts("a", 0, 6), {.drop_solved = true, .reinsert_probability = 0.0});
  cr::rng_type rng(2);
  for (std::size_t i : pool.next(6, rng)) pool.record(i, i < 2);  // 0 and 1 solved
  const auto next = pool.next(4, rng);
  EXPECT_EQ(std::set<std::size_t>(next.begin(), next.end()), (std::set<std::size_t>{2, 3, 4, 5}));
  // Still dropped in the following epoch (no visit clears it).
  const auto after = pool.next(4, rng);
  EXPECT_EQ(std::set<std::size_t>(after.begin(), after.end()), (std::set<std::size_t>{2, 3, 4, 5}));
}

TEST(PromptPool, ReinsertsDroppedPromptsWithTheGivenProbability) {
  cr::prompt_pool always(domain_prompts("a", 0, 4), {.drop_solved = true, .reinsert_probability = 1.0});
  cr::rng_type rng(3);
  for (std::size_t i : always.next(4, rng)) always.record(i, true);
  EXPECT_EQ(always.next(4, rng).size(), 4u);
  EXPECT_EQ(always.epoch(), 2u);  // all four came back: one epoch of four

  // With p = 0.25 over many epochs about a quarter of a solved prompt's epochs see it.
  cr::prompt_pool some(domain_prompts("a", 0, 2), {.drop_solved = true, .reinsert_probability = 0.25});
  cr::rng_type rng2(4);
  std::size_t seen_solved = 0;
  const std::size_t epochs = 4000;
  for (std::size_t e = 0; e < epochs; ++e) {
    const std::size_t before = some.epoch();
    while (some.epoch() == before || some.epoch() == 0) {
      for (std::size_t i : some.next(1, rng2)) {
        seen_solved += i == 0;
        some.record(i, i == 0);  // prompt 0 is always solved, prompt 1 never
      }
    }
  }
  const double rate = static_cast<double>(seen_solved) / static_cast<double>(epochs);
  EXPECT_NEAR(rate, 0.25, 0.05);
}

TEST(PromptPool, EverythingSolvedFallsBackToTheWholePool) {
  cr::prompt_pool pool(domain_prompts("a", 0, 3), {.drop_solved = true});
  cr::rng_type rng(5);
  for (std::size_t i : pool.next(3, rng)) pool.record(i, true);
  EXPECT_EQ(pool.next(3, rng).size(), 3u);
}

TEST(PromptPool, StateRoundTripContinuesTheSameSequence) {
  cr::prompt_pool a(domain_prompts("a", 0, 7), {.drop_solved = true, .reinsert_probability = 0.3});
  cr::rng_type rng(6);
  for (std::size_t i : a.next(9, rng)) a.record(i, i % 2 == 0);
  cr::prompt_pool b(domain_prompts("a", 0, 7), {.drop_solved = true, .reinsert_probability = 0.3});
  b.load_state(a.state());
  cr::rng_type rng_b = rng;
  for (int k = 0; k < 5; ++k) EXPECT_EQ(a.next(5, rng), b.next(5, rng_b));
}

TEST(PromptPool, RefusesBadInput) {
  cr::testing::expect_error_naming([] { cr::prompt_pool({}); }, "prompt_pool", "no prompt");
  cr::testing::expect_error_naming(
      [] { cr::prompt_pool(domain_prompts("a", 0, 2), {.reinsert_probability = 2}); }, "reinsert_probability");
  cr::prompt_pool pool(domain_prompts("a", 0, 2));
  cr::testing::expect_error_naming([&] { pool.load_state({{"order", {0}}}); }, "prompt_pool state", "malformed");
}

}  // namespace
