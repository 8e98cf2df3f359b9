#pragma once
// SWE RL's reward: apply the response's unified diff to a scratch copy of the task's
// repository and run its tests in the sandbox. Four outcomes, each with its own reward:
// resolved (tests pass), tests fail, the patch does not apply, and the response holds
// no parsable patch at all; like Cascade 1's SWE reward, a malformed patch scores
// below a wrong one, so that the format is learnt. The diff is parsed and applied by
// this process (see unified_diff.hpp), never by the untrusted code; only the tests run
// in the sandbox. Satisfies the engine's Reward concept.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/extract.hpp"
#include "cascade_rl/verify/sandbox.hpp"
#include "cascade_rl/verify/unified_diff.hpp"

namespace cascade_rl::verify {

// A repository and the command that runs its tests (exit status 0: they pass).
struct swe_task {
  std::filesystem::path repository;
  std::vector<std::string> test_command;
};

enum class patch_outcome { resolved, tests_failed, does_not_apply, unparsable };

[[nodiscard]] constexpr std::string_view to_string(patch_outcome o) {
  switch (o) {
    case patch_outcome::resolved: return "resolved";
    case patch_outcome::tests_failed: return "tests_failed";
    case patch_outcome::does_not_apply: return "does_not_apply";
    case patch_outcome::unparsable: return "unparsable";
  }
  return "?";
}

struct patch_test_options {
  double resolved_reward = 1.0;
  double tests_failed_reward = 0.0;
  double does_not_apply_reward = 0.0;
  double unparsable_reward = -1.0;
  std::optional<struct limits> test_limits{};
};

struct patch_test_report {
  patch_outcome outcome = patch_outcome::unparsable;
  std::string detail{};             // the parse or apply error
  std::optional<run_result> tests{};  // when the tests ran
  double reward = 0.0;
};

class patch_test_reward {
 public:
  using task_lookup = std::function<swe_task(const prompt&)>;

  patch_test_reward(sandbox box, task_lookup task_for, patch_test_options options = {})
      : box_(std::move(box)), task_for_(std::move(task_for)), options_(std::move(options)) {
    if (!task_for_) cascade_rl::detail::fail("task_for", "is empty");
  }

  [[nodiscard]] const patch_test_options& options() const { return options_; }

  [[nodiscard]] patch_test_report evaluate(std::string_view patch_text, const swe_task& task) const {
    if (task.test_command.empty()) cascade_rl::detail::fail("swe_task.test_command", "is empty");
    if (!std::filesystem::is_directory(task.repository))
      cascade_rl::detail::fail("swe_task.repository", "'" + task.repository.string() + "' is not a directory");
    patch_test_report report;
    const parsed_diff diff = parse_unified_diff(patch_text);
    if (!diff.ok()) {
      report.outcome = patch_outcome::unparsable;
      report.detail = diff.error;
      report.reward = options_.unparsable_reward;
      return report;
    }
    const scratch_directory scratch = box_.make_scratch();
    scratch.copy_tree(task.repository);
    if (const apply_result applied = apply_unified_diff(diff, scratch.host_path()); !applied.ok) {
      report.outcome = patch_outcome::does_not_apply;
      report.detail = applied.error;
      report.reward = options_.does_not_apply_reward;
      return report;
    }
    report.tests = box_.run({.argv = task.test_command, .limits = options_.test_limits}, scratch);
    const bool passed = report.tests->succeeded();
    report.outcome = passed ? patch_outcome::resolved : patch_outcome::tests_failed;
    report.reward = passed ? options_.resolved_reward : options_.tests_failed_reward;
    return report;
  }

  // The Reward: the patch in the response's text against the prompt's task.
  [[nodiscard]] double operator()(const response_view& response) const {
    return evaluate(extract_patch(response.text), task_for_(response.input)).reward;
  }

 private:
  sandbox box_;
  task_lookup task_for_;
  patch_test_options options_;
};

static_assert(Reward<patch_test_reward>);

}  // namespace cascade_rl::verify
