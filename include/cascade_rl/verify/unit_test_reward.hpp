#pragma once
// Code RL's reward: run the response's program on test inputs in the sandbox and
// compare its stdout with the expected outputs; 1 if all pass (or the fraction that
// pass), else 0. A compiled language is compiled once per response, in the same
// scratch directory, with its own limits; a compile error scores compile_error_reward.
// Satisfies the engine's Reward concept (a const, thread-safe call per response).

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/extract.hpp"
#include "cascade_rl/verify/sandbox.hpp"

namespace cascade_rl::verify {

struct test_case {
  std::string input;            // the program's stdin
  std::string expected_output;  // what it must print
};

// How to build and run a program: the source file it is written to, an optional
// compile command, the run command (all run in the scratch directory).
struct language {
  std::string source_file;
  std::vector<std::string> compile{};
  std::vector<std::string> run;
  std::vector<std::string> fence_names{};  // info strings of its fenced code blocks

  [[nodiscard]] static language python3() {
    return {.source_file = "main.py", .compile = {}, .run = {"python3", "-I", "main.py"}, .fence_names = {"python", "py", "python3"}};
  }
  [[nodiscard]] static language cpp() {
    return {.source_file = "main.cpp",
            .compile = {"g++", "-std=c++20", "-O1", "-pipe", "-o", "main", "main.cpp"},
            .run = {"./main"},
            .fence_names = {"cpp", "c++", "cxx"}};
  }
};

enum class output_match {
  exact,   // byte for byte
  lines,   // trailing whitespace of each line and trailing blank lines ignored
  tokens,  // the same whitespace-separated tokens
};

enum class test_scoring { all_or_nothing, fraction_passed };

struct unit_test_options {
  language lang = language::python3();
  test_scoring scoring = test_scoring::all_or_nothing;
  output_match match = output_match::lines;
  bool stop_at_first_failure = true;  // with all_or_nothing, skip the remaining tests
  std::optional<struct limits> compile_limits{};
  std::optional<struct limits> test_limits{};
  double compile_error_reward = 0.0;
};

struct unit_test_report {
  std::optional<run_result> compile{};  // when the language compiles
  std::vector<run_result> runs{};       // one per test run (fewer when stopped early)
  std::vector<bool> passed{};
  std::size_t passed_count = 0;
  std::size_t total = 0;
  double reward = 0.0;
};

[[nodiscard]] inline bool outputs_match(std::string_view got, std::string_view expected, output_match how) {
  const auto normalise_lines = [](std::string_view s) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start <= s.size()) {
      std::size_t end = s.find('\n', start);
      if (end == std::string_view::npos) end = s.size();
      std::string_view l = s.substr(start, end - start);
      while (!l.empty() && (l.back() == ' ' || l.back() == '\t' || l.back() == '\r')) l.remove_suffix(1);
      lines.push_back(l);
      start = end + 1;
    }
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  };
  const auto tokens = [](std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::string_view(" \t\r\n\v\f").find(s[i]) != std::string_view::npos) ++i;
      const std::size_t start = i;
      while (i < s.size() && std::string_view(" \t\r\n\v\f").find(s[i]) == std::string_view::npos) ++i;
      if (i > start) out.push_back(s.substr(start, i - start));
    }
    return out;
  };
  switch (how) {
    case output_match::exact: return got == expected;
    case output_match::lines: return normalise_lines(got) == normalise_lines(expected);
    case output_match::tokens: return tokens(got) == tokens(expected);
  }
  return false;
}

// Tests from prompt.reference written as JSON: [{"input": "...", "output": "..."}, ...].
[[nodiscard]] inline std::vector<test_case> tests_from_reference(const prompt& p) {
  std::vector<test_case> tests;
  try {
    const auto json = nlohmann::json::parse(p.reference);
    if (!json.is_array()) throw std::runtime_error("not an array");
    for (const auto& t : json) tests.push_back({t.at("input").get<std::string>(), t.at("output").get<std::string>()});
  } catch (const std::exception& e) {
    cascade_rl::detail::fail("prompt.reference", "of prompt id " + std::to_string(p.id) +
                                                     " is not a JSON array of {\"input\", \"output\"} tests: " + e.what());
  }
  return tests;
}

class unit_test_reward {
 public:
  using test_lookup = std::function<std::vector<test_case>(const prompt&)>;

  explicit unit_test_reward(sandbox box, unit_test_options options = {}, test_lookup tests = tests_from_reference)
      : box_(std::move(box)), options_(std::move(options)), tests_(std::move(tests)) {
    if (options_.lang.run.empty()) cascade_rl::detail::fail("unit_test_options.lang.run", "is empty");
    if (options_.lang.source_file.empty()) cascade_rl::detail::fail("unit_test_options.lang.source_file", "is empty");
    if (!tests_) cascade_rl::detail::fail("tests", "is empty");
  }

  [[nodiscard]] const unit_test_options& options() const { return options_; }

  // Runs `code` on every test; the report says what happened to each.
  [[nodiscard]] unit_test_report evaluate(std::string_view code, std::span<const test_case> tests) const {
    if (tests.empty()) cascade_rl::detail::fail("tests", "is empty: nothing to verify the program against");
    unit_test_report report;
    report.total = tests.size();
    const scratch_directory scratch = box_.make_scratch();
    scratch.write({.path = options_.lang.source_file, .contents = std::string(code)});
    if (!options_.lang.compile.empty()) {
      report.compile = box_.run({.argv = options_.lang.compile, .limits = options_.compile_limits}, scratch);
      if (!report.compile->succeeded()) {
        report.reward = options_.compile_error_reward;
        return report;
      }
    }
    for (const test_case& t : tests) {
      run_result r = box_.run({.argv = options_.lang.run, .stdin_data = t.input, .limits = options_.test_limits}, scratch);
      const bool ok = r.succeeded() && !r.stdout_truncated && outputs_match(r.stdout_text, t.expected_output, options_.match);
      report.passed.push_back(ok);
      report.passed_count += ok;
      report.runs.push_back(std::move(r));
      if (!ok && options_.stop_at_first_failure && options_.scoring == test_scoring::all_or_nothing) break;
    }
    report.reward = options_.scoring == test_scoring::fraction_passed
                        ? static_cast<double>(report.passed_count) / static_cast<double>(report.total)
                        : (report.passed_count == report.total ? 1.0 : 0.0);
    return report;
  }

  // The Reward: the program in the response's text against the prompt's tests.
  [[nodiscard]] double operator()(const response_view& response) const {
    const std::vector<test_case> tests = tests_(response.input);
    return evaluate(extract_code(response.text, options_.lang.fence_names), tests).reward;
  }

 private:
  sandbox box_;
  unit_test_options options_;
  test_lookup tests_;
};

static_assert(Reward<unit_test_reward>);

}  // namespace cascade_rl::verify
