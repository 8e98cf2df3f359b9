#pragma once
// An agentic SWE environment (issue 36): one episode of an agent fixing a repository
// with tools, over a verify::workspace, rewarded by the hidden tests. It satisfies the
// engine's Environment concept, so cr::run_episodes and cr::make_agentic_stage run it.
//
// The agent's action names a tool on its first line; the rest of the action is the
// tool's input:
//   ls                      the workspace's files
//   show PATH [FIRST LAST]  lines FIRST to LAST of a file (default 1 to 200), numbered
//   apply                   a unified diff on the following lines, applied all or nothing
//   test                    the task's visible test command, in the sandbox
//   submit                  ends the episode
// Observations are cut to swe_environment_options::observation_bytes. The episode also
// ends when the workspace's time budget is spent. The outcome grades the workspace
// (workspace::grade: the hidden tests in a fresh copy, changes to tests dropped).

#include <charconv>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cascade_rl/cascade/environment.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/sandbox.hpp"
#include "cascade_rl/verify/workspace.hpp"

namespace cascade_rl::verify {

// A task as the agent works on it: the repository, the hidden tests and the command
// that grades with them, and the command the agent's `test` tool runs (its visible
// tests; empty: no such tool).
struct swe_agent_task {
  std::filesystem::path repository;
  std::vector<file> hidden_tests;
  std::vector<std::string> test_command;
  std::vector<std::string> visible_test_command{};
};

struct swe_environment_options {
  workspace_options workspace{};
  patch_test_options grading{};
  std::size_t observation_bytes = 8192;
};

class swe_environment {
 public:
  swe_environment(sandbox box, swe_agent_task task, swe_environment_options options = {})
      : box_(std::move(box)), task_(std::move(task)), options_(std::move(options)) {
    if (task_.test_command.empty()) cascade_rl::detail::fail("swe_agent_task.test_command", "is empty");
    if (options_.observation_bytes == 0) cascade_rl::detail::fail("swe_environment_options.observation_bytes", "is 0");
  }

  // Opens the workspace; the first observation lists its files and the tools.
  std::string reset(const prompt&) {
    workspace_.emplace(box_, task_.repository, options_.workspace);
    grade_.reset();
    return cut("files:\n" + list_files() + "tools: ls | show PATH [FIRST LAST] | apply (a unified diff below) | " +
               (task_.visible_test_command.empty() ? std::string() : "test | ") + "submit\n");
  }

  environment_step step(std::string_view action) {
    if (!workspace_) cascade_rl::detail::fail("swe_environment", "step before reset");
    const std::size_t eol = action.find('\n');
    const std::string_view head = action.substr(0, eol);
    const std::string_view body = eol == std::string_view::npos ? std::string_view() : action.substr(eol + 1);
    std::istringstream words{std::string(head)};
    std::string tool;
    words >> tool;
    if (tool == "submit") return {.observation = "submitted\n", .done = true};
    if (workspace_->spent()) return {.observation = "the episode's time is spent\n", .done = true};
    if (tool == "ls") return {.observation = cut(list_files())};
    if (tool == "show") {
      std::string path;
      long first = 1, last = 200;
      words >> path;
      if (!(words >> first)) first = 1;
      if (!(words >> last)) last = first + 199;
      if (path.empty() || first < 1 || last < first) return {.observation = "usage: show PATH [FIRST LAST]\n"};
      const run_result r = workspace_->run({.argv = {"sh", "-c", "cat -n -- \"$1\" | sed -n \"$2,$3p\"", "show", path,
                                                     std::to_string(first), std::to_string(last)}});
      return {.observation = cut(r.stdout_text + r.stderr_text)};
    }
    if (tool == "apply") {
      const apply_result applied = workspace_->apply(body);
      return {.observation = applied.ok ? std::string("applied\n") : "not applied: " + applied.error + "\n"};
    }
    if (tool == "test" && !task_.visible_test_command.empty()) {
      // No bytecode caches: python3 trusts a .pyc whose source has the same size and
      // mtime second, which an edit made within the same second as a test run has.
      const run_result r =
          workspace_->run({.argv = task_.visible_test_command, .environment = {"PYTHONDONTWRITEBYTECODE=1"}});
      return {.observation = cut(std::string(to_string(r.reason)) + " " + std::to_string(r.exit_code) + "\n" +
                                 r.stdout_text + r.stderr_text)};
    }
    return {.observation = "unknown tool '" + tool + "'\n"};
  }

  // The hidden tests' verdict on the workspace, graded once.
  double outcome() {
    if (!workspace_) cascade_rl::detail::fail("swe_environment", "outcome before reset");
    if (!grade_) grade_ = workspace_->grade(task_.hidden_tests, task_.test_command, options_.grading);
    return grade_->report.reward;
  }

  [[nodiscard]] const std::optional<workspace>& current_workspace() const { return workspace_; }
  [[nodiscard]] const std::optional<workspace_grade>& grade() const { return grade_; }

 private:
  [[nodiscard]] std::string cut(std::string text) const {
    if (text.size() > options_.observation_bytes) {
      text.resize(options_.observation_bytes);
      text += "\n[cut at " + std::to_string(options_.observation_bytes) + " bytes]\n";
    }
    return text;
  }

  [[nodiscard]] std::string list_files() {
    const run_result r = workspace_->run({.argv = {"sh", "-c", "find . -type f | sed 's|^\\./||' | LC_ALL=C sort"}});
    return r.stdout_text;
  }

  sandbox box_;
  swe_agent_task task_;
  swe_environment_options options_;
  std::optional<workspace> workspace_{};
  std::optional<workspace_grade> grade_{};
};

static_assert(Environment<swe_environment>);

}  // namespace cascade_rl::verify
