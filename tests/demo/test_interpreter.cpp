// The tiny language: parsing, semantics, the step bound, overflow, and test pass rates.

#include <gtest/gtest.h>

#include "interpreter.hpp"
#include "vocabulary.hpp"

namespace {

std::optional<demo::program> parse(const char* text) { return demo::parse_program(demo::encode(text)); }

std::int64_t run(const char* text, std::int64_t x) {
  const auto p = parse(text);
  EXPECT_TRUE(p.has_value()) << text;
  const auto r = demo::run_program(*p, x);
  EXPECT_TRUE(r.ok()) << text;
  return r.value;
}

TEST(DemoInterpreter, StraightLineInstructions) {
  EXPECT_EQ(run("inc", 3), 4);
  EXPECT_EQ(run("dec dec", 3), 1);
  EXPECT_EQ(run("dbl add 3", 5), 13);
  EXPECT_EQ(run("sub 7", 2), -5);
  EXPECT_EQ(run("", 9), 9);
}

TEST(DemoInterpreter, Loops) {
  EXPECT_EQ(run("rep 3 dbl end", 1), 8);
  EXPECT_EQ(run("rep 2 rep 2 inc end end", 0), 4);
  EXPECT_EQ(run("wnz dec end", 6), 0);
  EXPECT_EQ(run("rep 0 inc end add 1", 0), 1);
}

TEST(DemoInterpreter, RejectsMalformedPrograms) {
  EXPECT_FALSE(parse("add").has_value());        // missing argument
  EXPECT_FALSE(parse("add x").has_value());      // not a digit
  EXPECT_FALSE(parse("rep 2 inc").has_value());  // block left open
  EXPECT_FALSE(parse("inc end").has_value());    // end without a block
  EXPECT_FALSE(parse("call").has_value());       // not an instruction
  EXPECT_TRUE(demo::parse_program(std::vector<std::int32_t>{demo::token_id("inc"), demo::eos}).has_value());
}

TEST(DemoInterpreter, StepBoundStopsRunawayLoops) {
  const auto p = parse("wnz inc end");
  ASSERT_TRUE(p.has_value());
  const auto r = demo::run_program(*p, 1, 50);
  EXPECT_EQ(r.state, demo::run_result::status::step_limit);
  EXPECT_LE(r.steps, 51u);
  // A terminating loop within the bound is fine; the same loop with a smaller bound is not.
  const auto down = parse("wnz dec end");
  EXPECT_TRUE(demo::run_program(*down, 10, 50).ok());
  EXPECT_EQ(demo::run_program(*down, 10, 15).state, demo::run_result::status::step_limit);
}

TEST(DemoInterpreter, OverflowStops) {
  const auto p = parse("rep 9 rep 9 dbl end end");
  EXPECT_EQ(demo::run_program(*p, 1, 1000).state, demo::run_result::status::overflow);
}

TEST(DemoInterpreter, PassRateCountsUnitTests) {
  // f(x) = 2x + 3 on the inputs 0, 1, 2, 3, 5.
  EXPECT_DOUBLE_EQ(demo::pass_rate(demo::encode("dbl add 3"), 2, 3), 1.0);
  EXPECT_DOUBLE_EQ(demo::pass_rate(demo::encode("add 3 dbl sub 3"), 2, 3), 1.0);  // another correct program
  EXPECT_DOUBLE_EQ(demo::pass_rate(demo::encode("inc add 3"), 2, 3), 0.2);        // right at x = 1 only
  EXPECT_DOUBLE_EQ(demo::pass_rate(demo::encode("dbl add"), 2, 3), 0.0);          // does not parse
  EXPECT_DOUBLE_EQ(demo::pass_rate(demo::encode("wnz inc end"), 1, 0), 0.2);      // hangs except at x = 0
}

}  // namespace
