// The verifiers of the synthetic domains: every demonstration scores 1, typical wrong
// answers get the partial or zero credit the rules give, and the domains differ as
// real ones do (lengths, verification by running programs, a chat judge that wants
// long replies against constraints that want short ones).

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "demo_reward.hpp"
#include "demo_test_support.hpp"
#include "tasks.hpp"

namespace {

namespace cr = cascade_rl;
using demo_test::interpreter;

demo::demo_reward gold_reward() { return {nullptr, interpreter(), demo::chat_judge::gold}; }

double score(const demo::demo_reward& r, const cr::prompt& p, const std::string& reply, bool truncated = false) {
  auto t = demo::encode(reply);
  if (!truncated) t.push_back(demo::eos);
  return r.score(p, t, truncated);
}

cr::prompt make(const std::string& domain, const std::string& text, const std::string& reference = "") {
  return {0, domain, text, reference};
}

TEST(DemoVerifiers, EveryDemonstrationScoresOne) {
  const auto reward = gold_reward();
  for (const auto& d : demo::domains()) {
    if (d == "chat") continue;  // chat demonstrations are mediocre on purpose
    if (d == "swe") continue;   // an episode: test_swe_agent.cpp replays it through the tools
    for (const auto& t : demo::make_tasks(d, 200, 3))
      EXPECT_DOUBLE_EQ(reward.score(t.prompt, t.demonstration, false), 1.0) << d << ": " << t.prompt.text;
  }
}

TEST(DemoVerifiers, ResponseLengthsDifferByDomain) {
  std::map<std::string, double> mean, longest;
  for (const auto& d : demo::domains()) {
    double sum = 0;
    const auto tasks = demo::make_tasks(d, 400, 11);
    for (const auto& t : tasks) {
      sum += static_cast<double>(t.demonstration.size());
      longest[d] = std::max(longest[d], static_cast<double>(t.demonstration.size()));
    }
    mean[d] = sum / static_cast<double>(tasks.size());
  }
  EXPECT_DOUBLE_EQ(mean["mcqa"], 2.0);  // one token and the end of sequence
  EXPECT_DOUBLE_EQ(mean["long_context"], 2.0);
  for (const auto& d : {"instruction_following", "chat", "tool_calling"}) EXPECT_GT(mean["code"], mean[d]) << d;
  EXPECT_GT(mean["code"], 7.0);
  for (const auto& [d, n] : longest) {  // code's answers are the longest single responses
    if (d != "swe") {
      EXPECT_LE(n, longest["code"]) << d;
    }
  }
  // An SWE demonstration is a whole episode: four actions and the observations between.
  EXPECT_GT(mean["swe"], 20.0);
  EXPECT_LE(longest["swe"], 33.0);  // the model's response positions + 1
}

TEST(DemoVerifiers, TruncatedResponsesScoreZero) {
  const auto reward = gold_reward();
  const auto p = make("mcqa", "mcq A c B a C d ? a", "B");
  EXPECT_EQ(score(reward, p, "B"), 1.0);
  EXPECT_EQ(score(reward, p, "B", true), 0.0);
}

TEST(DemoVerifiers, InstructionFollowingConstrainsAChatReply) {
  const auto r = gold_reward();
  const auto p = make("instruction_following", "chat greet len 3 start hi last ok only hi ok sure");
  EXPECT_DOUBLE_EQ(score(r, p, "hi sure ok"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "hi sure sure ok"), 0.75);         // wrong length
  EXPECT_DOUBLE_EQ(score(r, p, "hi please ok"), 0.75);            // please is not allowed
  EXPECT_DOUBLE_EQ(score(r, p, "ok sure hi"), 0.5);               // wrong start and end
  EXPECT_DOUBLE_EQ(score(r, p, "hi hello please thanks sure help ok"), 0.5);  // chatty: long, disallowed words
  EXPECT_DOUBLE_EQ(score(r, p, ""), 0.0);
}

TEST(DemoVerifiers, MultipleChoiceAndRetrievalAreExact) {
  const auto r = gold_reward();
  const auto q = make("mcqa", "mcq A c B a C d ? a", "B");
  EXPECT_EQ(score(r, q, "A"), 0.0);
  EXPECT_EQ(score(r, q, "B B"), 0.0);
  const auto c = make("long_context", "ctx a 3 b 7 . . . ? b", "7");
  EXPECT_EQ(score(r, c, "7"), 1.0);
  EXPECT_EQ(score(r, c, "3"), 0.0);
}

TEST(DemoVerifiers, StructuredOutputNeedsWellFormedJson) {
  const auto r = gold_reward();
  const auto p = make("structured_output", "json b 5 d 2");
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , d : 2 }"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , d : 3 }"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 }"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , d : 2"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b 5 }"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "{ b : 5 , }"), 0.0);
}

TEST(DemoVerifiers, ToolCallFormatNameAndArguments) {
  const auto r = gold_reward();
  const auto p = make("tool_calling", "tool sum 3 4");
  EXPECT_DOUBLE_EQ(score(r, p, "call sum ( 3 , 4 )"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "call get ( 3 , 4 )"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "call sum ( 4 )"), 0.75);
  EXPECT_DOUBLE_EQ(score(r, p, "call put ( 1 )"), 0.5);
  EXPECT_DOUBLE_EQ(score(r, p, "call sum ( 3 , )"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "call sum 3 , 4 )"), 0.0);
  EXPECT_DOUBLE_EQ(score(r, p, "sum ( 3 , 4 )"), 0.0);
}

TEST(DemoVerifiers, CodeRunsTheUnitTestsOfATwoStepSpecification) {
  const auto r = gold_reward();
  // f(x) = 2 (4x - 1) + 3 on the inputs 0, 1, 2, 3, 5.
  const auto p = make("code", "code x * 4 - 1 then * 2 + 3");
  EXPECT_DOUBLE_EQ(score(r, p, "dbl dbl sub 1 dbl add 3"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "rep 2 dbl end dec dbl add 3"), 1.0);
  EXPECT_DOUBLE_EQ(score(r, p, "rep 3 dbl end inc"), 1.0);  // another right program: 8x + 1
  EXPECT_DOUBLE_EQ(score(r, p, "dbl dbl sub 1"), 0.0);     // the first step only
  EXPECT_DOUBLE_EQ(score(r, p, "wnz inc end"), 0.0);       // hits the step bound (and is wrong)
  EXPECT_DOUBLE_EQ(score(r, p, "dbl dbl sub"), 0.0);       // does not parse
}

TEST(DemoVerifiers, ChatIsJudgedByTheRewardModelWhileTrainingAndTheGoldInEvaluation) {
  auto rm = std::make_shared<demo::bt_reward_model>();
  rm->train(demo::make_preference_pairs(2000, 1));
  const demo::demo_reward training{rm, interpreter(), demo::chat_judge::reward_model};
  const demo::demo_reward evaluation{rm, interpreter(), demo::chat_judge::gold};
  const auto p = make("chat", "chat greet");
  const double good = score(training, p, "hi please sure ok thanks hello"), bad = score(training, p, "bad bad no");
  EXPECT_GT(good, bad);
  EXPECT_GT(good, 0.0);
  EXPECT_LT(good, 1.0);  // a sigmoid of the model's score
  // The gold: 1 greeting + 1 polite + 0.25 per distinct polite word, out of 4.
  EXPECT_DOUBLE_EQ(score(evaluation, p, "hi please sure ok thanks hello"), (1 + 1 + 6 * 0.25) / 4);
  EXPECT_DOUBLE_EQ(score(evaluation, p, "bad bad no"), 0.0);
}

TEST(DemoVerifiers, TheChatJudgeAndInstructionFollowingPullApart) {
  // The reply the reward model prefers breaks the constraints, and the reply that meets
  // them is one the reward model likes less.
  auto rm = std::make_shared<demo::bt_reward_model>();
  rm->train(demo::make_preference_pairs(4000, 2));
  const demo::demo_reward training{rm, interpreter(), demo::chat_judge::reward_model};
  const auto chat = make("chat", "chat greet");
  const auto constrained = make("instruction_following", "chat greet len 3 start hi last ok only hi ok sure");
  const std::string chatty = "hi please thanks sure hello ok help", obeying = "hi sure ok";
  EXPECT_GT(score(training, chat, chatty), score(training, chat, obeying));
  EXPECT_DOUBLE_EQ(score(training, constrained, chatty), 0.25);  // only the first word is right
  EXPECT_DOUBLE_EQ(score(training, constrained, obeying), 1.0);
}

}  // namespace
