// The program verifier: the Python translation of the tiny language, the harness, and
// python3 in cascade_rl::verify's sandbox agreeing with the bounded interpreter on every
// program (loops, runaway loops, overflow, wrong answers); without python3 the
// interpreter alone, with each program timed.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "program_verifier.hpp"

namespace {

demo::program parse_valid(const char* text) {
  const auto p = demo::parse_program(demo::encode(text));
  EXPECT_TRUE(p.has_value()) << text;
  return p.value_or(demo::program{});
}

demo::program_job job(const char* text, const demo::specification& spec) {
  return {parse_valid(text), demo::expected_outputs(spec)};
}

// A random program of the tiny language, loops included (some never stop).
demo::program random_program(std::mt19937_64& rng, int depth = 0) {
  const char* ops[] = {"inc", "dec", "dbl", "add", "sub", "rep", "wnz"};
  demo::program p;
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng() % (depth < 2 ? 7 : 5));
    demo::instruction ins;
    ins.code = static_cast<demo::instruction::op>(k);
    (void)ops;
    if (k == 3 || k == 4 || k == 5) ins.argument = static_cast<int>(rng() % 10);
    if (k == 5 || k == 6) ins.body = random_program(rng, depth + 1);
    p.push_back(std::move(ins));
  }
  return p;
}

TEST(DemoProgramVerifier, TranslatesToPythonWithTheInterpretersBounds) {
  const std::string f = demo::python_function(parse_valid("dbl rep 2 inc end wnz dec end"), 3, 50);
  EXPECT_EQ(f,
            "def f3(x):\n"
            "    global s\n"
            "    s = 0\n"
            "    s += 1\n"
            "    if s > 50: return None\n"
            "    x *= 2\n"
            "    if x > 1000000 or x < -1000000: return None\n"
            "    s += 1\n"
            "    if s > 50: return None\n"
            "    for _ in range(2):\n"
            "        s += 1\n"
            "        if s > 50: return None\n"
            "        x += 1\n"
            "        if x > 1000000 or x < -1000000: return None\n"
            "    if x > 1000000 or x < -1000000: return None\n"
            "    s += 1\n"
            "    if s > 50: return None\n"
            "    while x != 0:\n"
            "        s += 1\n"
            "        if s > 50: return None\n"
            "        s += 1\n"
            "        if s > 50: return None\n"
            "        x -= 1\n"
            "        if x > 1000000 or x < -1000000: return None\n"
            "    if x > 1000000 or x < -1000000: return None\n"
            "    return x\n");
  const std::vector<demo::program_job> jobs{job("dbl", {{2, 0}}), job("", {{1, 1}})};
  const std::string script = demo::python_harness(jobs);
  EXPECT_NE(script.find("def f0(x):"), std::string::npos);
  EXPECT_NE(script.find("def f1(x):\n    global s\n    s = 0\n    pass\n    return x\n"), std::string::npos);
  EXPECT_NE(script.find("(f0, (0, 2, 4, 6, 10, )),"), std::string::npos);
  EXPECT_NE(script.find("(f1, (1, 2, 3, 4, 6, )),"), std::string::npos);
}

TEST(DemoProgramVerifier, TheInterpreterAloneTimesEveryProgram) {
  const demo::program_verifier v(false);
  EXPECT_FALSE(v.sandboxed());
  EXPECT_NE(v.description().find("interpreter"), std::string::npos);
  const std::vector<demo::program_job> jobs{job("dbl add 3", {{2, 3}}), job("inc", {{2, 1}}),
                                            job("wnz inc end", {{1, 0}})};
  const demo::program_results r = v.verify(jobs);
  EXPECT_EQ(r.passed, (std::vector<int>{5, 1, 1}));  // inc for 2x + 1: right at x = 0 only; the loop too
  ASSERT_EQ(r.latency.size(), 3u);
  for (double t : r.latency) EXPECT_GE(t, 0.0);
  EXPECT_FALSE(r.sandboxed);
  EXPECT_EQ(v.sandbox_runs(), 0u);
}

TEST(DemoProgramVerifier, PythonInTheSandboxAgreesWithTheInterpreter) {
  const demo::program_verifier v(true);
  if (!v.sandboxed()) GTEST_SKIP() << v.description();
  std::mt19937_64 rng(17);
  std::vector<demo::program_job> jobs;
  for (int i = 0; i < 300; ++i) {
    const demo::specification spec = demo::random_spec(rng, 1 + rng() % 2);
    demo::program_job j{random_program(rng), demo::expected_outputs(spec)};
    if (i % 3 == 0) {  // a right answer now and then
      std::string text;
      for (const auto& line : demo::canonical_lines(spec)) text += line + " ";
      j.code = *demo::parse_program(demo::encode(text));
    }
    jobs.push_back(std::move(j));
  }
  jobs.push_back(job("rep 9 rep 9 dbl end end", {{1, 0}}));  // overflow
  jobs.push_back(job("wnz inc end", {{1, 0}}));              // the step bound, except at x = 0
  const demo::program_results expected = demo::program_verifier::interpret(jobs);
  const demo::program_results got = v.verify(jobs);
  EXPECT_TRUE(got.sandboxed);
  EXPECT_EQ(got.passed, expected.passed);
  EXPECT_EQ(v.disagreements(), 0u);
  EXPECT_EQ(v.sandbox_runs(), 1u);
  EXPECT_EQ(v.sandbox_failures(), 0u);
  // Every job's result was known when the run ended.
  for (double t : got.latency) EXPECT_DOUBLE_EQ(t, got.latency.front());
  EXPECT_GT(got.latency.front(), 0.0);
  std::size_t all_right = 0, none_right = 0;
  for (int n : got.passed) {
    all_right += n == 5;
    none_right += n == 0;
  }
  EXPECT_GT(all_right, 90u);   // the right answers (and a few lucky ones)
  EXPECT_GT(none_right, 50u);  // most random programs
}

}  // namespace
