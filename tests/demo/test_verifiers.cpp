// The verifiers of the synthetic domains: every demonstration scores 1, and typical
// wrong answers get the partial or zero credit the rules give.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tasks.hpp"

namespace {

namespace cr = cascade_rl;

double score(const demo::task_reward& r, const cr::prompt& p, const std::string& reply, bool truncated = false) {
  auto t = demo::encode(reply);
  if (!truncated) t.push_back(demo::eos);
  return r.score(p, t, truncated);
}

cr::prompt make(const std::string& domain, const std::string& text, const std::string& reference = "") {
  return {0, domain, text, reference};
}

TEST(DemoVerifiers, EveryDemonstrationScoresOne) {
  const demo::task_reward reward{};  // chat falls back to the gold preference
  for (const auto& d : demo::domains()) {
    if (d == "chat") continue;  // chat demonstrations are random on purpose
    for (const auto& t : demo::make_tasks(d, 200, 3))
      EXPECT_DOUBLE_EQ(reward.score(t.prompt, t.demonstration, false), 1.0) << d << ": " << t.prompt.text;
  }
}

TEST(DemoVerifiers, TruncatedResponsesScoreZero) {
  const demo::task_reward reward{};
  const auto p = make("mcqa", "mcq A c B a C d ? a", "B");
  EXPECT_EQ(score(reward, p, "B"), 1.0);
  EXPECT_EQ(score(reward, p, "B", true), 0.0);
}

TEST(DemoVerifiers, InstructionFollowingCountsRules) {
  const demo::task_reward r{};
  const auto p = make("instruction_following", "if len 4 start b last c only b c d");
  EXPECT_DOUBLE_EQ(score(r, p, "b d d c"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "b d c"), 0.75);     // wrong length
  EXPECT_DOUBLE_EQ(score(r, p, "b a d c"), 0.75);   // a is not allowed
  EXPECT_DOUBLE_EQ(score(r, p, "c d d b"), 0.5);    // wrong start and end
  EXPECT_DOUBLE_EQ(score(r, p, ""), 0.0);
}

TEST(DemoVerifiers, MultipleChoiceAndRetrievalAreExact) {
  const demo::task_reward r{};
  const auto q = make("mcqa", "mcq A c B a C d ? a", "B");
  EXPECT_EQ(score(r, q, "A"), 0.0);
  EXPECT_EQ(score(r, q, "B B"), 0.0);
  const auto c = make("long_context", "ctx a 3 b 7 . . . ? b", "7");
  EXPECT_EQ(score(r, c, "7"), 1.0);
  EXPECT_EQ(score(r, c, "3"), 0.0);
}

TEST(DemoVerifiers, StructuredOutputNeedsWellFormedJson) {
  const demo::task_reward r{};
  const auto p = make("structured_output", "json b 5 d 2");
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , d : 2 }"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , d : 3 }"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 }"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , d : 2"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b 5 }"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , }"), 0.0);
}

TEST(DemoVerifiers, ToolCallFormatNameAndArguments) {
  const demo::task_reward r{};
  const auto p = make("tool_calling", "tool sum 3 4");
  EXPECT_DOUBLE_EQ(score(r, p, "call sum ( 3 , 4 )"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "call get ( 3 , 4 )"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "call sum ( 4 )"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "call put ( 1 )"), 0.5);
  EXPECT_DOUBLE_EQ(score(r, p, "call sum ( 3 , )"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "call sum 3 , 4 )"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "sum ( 3 , 4 )"), 0.0);
}

TEST(DemoVerifiers, CodeRunsTheUnitTests) {
  const demo::task_reward r{};
  const auto p = make("code", "code x * 4 - 1");
  EXPECT_DOUBLE_EQ(score(r, p, "dbl dbl sub 1"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "rep 2 dbl end dec"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "dbl dbl"), 0.0);       // off by one everywhere
  EXPECT_DOUBLE_EQ(score(r, p, "wnz inc end"), 0.0);   // hits the step bound (and is wrong)
  EXPECT_DOUBLE_EQ(score(r, p, "dbl dbl sub"), 0.0);   // does not parse
}

TEST(DemoVerifiers, SwePatchesOneLine) {
  const demo::task_reward r{};
  const auto p = make("swe", "swe x * 2 + 3 | dbl sub 3");
  EXPECT_DOUBLE_EQ(score(r, p, "fix 2 add 3"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "fix 2 sub 3"), 0.0);   // no change: every test fails
  EXPECT_DOUBLE_EQ(score(r, p, "fix 1 dbl"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "fix 3 add 3"), 0.0);   // no line 3
  EXPECT_DOUBLE_EQ(score(r, p, "fix 2 add"), 0.0);     // patched program does not parse
  EXPECT_DOUBLE_EQ(score(r, p, "fix 1 add 6"), 0.2);   // x + 3: right at x = 0 only
}

TEST(DemoVerifiers, ChatUsesTheRewardModelOnTrainingPromptsAndGoldOnEvaluation) {
  auto rm = std::make_shared<demo::bt_reward_model>();
  rm->train(demo::make_preference_pairs(2000, 1));
  const demo::task_reward r{rm};
  const auto train = make("chat", "chat greet");
  const auto eval = make("chat", "chat greet", "gold");
  const double good = score(r, train, "hi please sure ok"), bad = score(r, train, "bad bad no");
  EXPECT_GT(good, bad);
  EXPECT_GT(good, 0.0);
  EXPECT_LT(good, 1.0);  // a sigmoid of the model's score
  EXPECT_DOUBLE_EQ(score(r, eval, "hi please sure ok"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, eval, "bad bad no"), 0.0);
}

}  // namespace
