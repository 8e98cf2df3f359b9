#pragma once
// A workspace that lives for one agentic episode (issue 36): a copy of a task's
// repository in a size-capped scratch that persists across the episode's runs, the
// tools' runs under the sandbox's caps, an episode time budget, the agent's changes as a
// unified diff against the original tree, and grading in a fresh scratch.
//
// Grading never trusts the workspace: a fresh copy of the original tree gets the
// agent's diff minus every change to a protected path (the hidden tests' files and
// workspace_options::protected_paths), then the hidden tests, then the test command
// runs. The hidden tests are never in the workspace or its view, so an agent that edits
// or deletes tests, or searches the disk for the oracle, gains nothing.
//
// The diff is GNU diff's (`diff -ruN --no-dereference -a`, run in the sandbox with the
// original tree in its view, read-only): headers are rewritten to a/ and b/ paths
// relative to the tree, /dev/null for created and deleted files, so that the text is
// what `git apply` or unified_diff.hpp take. Files whose type changed (a symbolic link
// for a file) are not in it.

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/patch_test_reward.hpp"
#include "cascade_rl/verify/pool.hpp"
#include "cascade_rl/verify/sandbox.hpp"
#include "cascade_rl/verify/unified_diff.hpp"

namespace cascade_rl::verify {

struct workspace_options {
  // Wall time of all the tools' runs of the episode together; a run is stopped where
  // the budget ends (wall_time_limit), and further runs are refused. Grading has its
  // own limits (grade_options::test_limits), so it never pays for the agent's time.
  std::chrono::milliseconds episode_budget{120'000};
  // Each tool run's limits (default: the sandbox's, with its output truncated at the
  // caps and the run going on, instead of ended: a tool's long output is no failure).
  std::optional<struct limits> tool_limits{};
  // Bytes of diff() kept; a longer diff is refused (diff() throws, grade() says so).
  std::size_t diff_bytes = 1u << 20;
  // Paths (relative, a file or a directory) whose changes grading drops, besides the
  // hidden tests' own files: e.g. "tests" or "conftest.py".
  std::vector<std::string> protected_paths{};
};

// What grading found: the outcome and reward of patch_test_reward (resolved, tests
// failed, does not apply), and the changed paths it dropped as protected.
struct workspace_grade {
  patch_test_report report{};
  std::vector<std::string> dropped_paths{};
};

class workspace {
 public:
  // Copies `original` (a directory) into a fresh scratch of `box`. The original tree is
  // in the view of the workspace's runs, read-only, at its own path.
  workspace(const sandbox& box, std::filesystem::path original, workspace_options options = {})
      : workspace(box, std::move(original), std::move(options), nullptr) {}

  workspace(workspace&&) = default;
  workspace& operator=(workspace&&) = default;

  [[nodiscard]] const std::filesystem::path& original() const { return original_; }
  [[nodiscard]] const workspace_options& options() const { return options_; }
  [[nodiscard]] const scratch_directory& scratch() const { return *scratch_; }
  // Budget left for the tools' runs.
  [[nodiscard]] std::chrono::milliseconds remaining() const {
    return std::max(std::chrono::milliseconds(0), options_.episode_budget - spent_);
  }
  [[nodiscard]] bool spent() const { return remaining() == std::chrono::milliseconds(0); }

  // A tool's run in the workspace (files it leaves stay for the next), stopped where the
  // episode budget ends. Refused once the budget is spent.
  [[nodiscard]] run_result run(command cmd) {
    if (spent())
      cascade_rl::detail::fail("workspace", "its episode budget of " + std::to_string(options_.episode_budget.count()) +
                                                " ms is spent");
    struct limits lim = cmd.limits ? *cmd.limits : tool_limits();
    lim.wall_time = std::min(lim.wall_time, remaining());
    cmd.limits = lim;
    const auto charge = reserve(lim.memory_bytes);
    run_result r = box_.run(cmd, *scratch_);
    spent_ += std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(r.wall_seconds));
    return r;
  }

  // Applies a unified diff to the workspace (an agent's edit), all or nothing (a write
  // the scratch refuses undoes the ones before it), reading and writing through the
  // scratch: never through a symbolic link the agent planted, and the files stay the
  // runs' own. A file it rewrites loses its executable bit.
  [[nodiscard]] apply_result apply(std::string_view patch) {
    const parsed_diff d = parse_unified_diff(patch);
    if (!d.ok()) return {false, "the patch did not parse: " + d.error};
    for (const file_diff& f : d.files)
      for (const std::string& name : {f.old_path, f.new_path}) {
        try {
          if (!name.empty()) (void)detail::relative_inside(name, "patch path");
        } catch (const cascade_rl::error&) {
          return {false, "'" + name + "' is not a relative path inside the repository"};
        }
      }
    const auto read = [&](const std::string& name) -> std::optional<std::string> {
      try {
        return scratch_->read(name);
      } catch (const cascade_rl::error&) {
        return std::nullopt;
      }
    };
    diff_writes writes;
    if (const std::optional<std::string> error = plan_unified_diff(d, read, writes)) return {false, *error};
    const auto put = [&](const std::string& name, const std::optional<std::string>& contents) {
      if (contents) (void)scratch_->write({.path = name, .contents = *contents});
      else (void)scratch_->erase(name);
    };
    diff_writes before;
    for (const auto& entry : writes) before[entry.first] = read(entry.first);
    try {
      for (const auto& [name, contents] : writes) put(name, contents);
    } catch (const cascade_rl::error& e) {  // a symbolic link on a written path: undo the rest
      for (const auto& [name, contents] : before) {
        try {
          put(name, contents);
        } catch (const cascade_rl::error&) {  // the refused path itself
        }
      }
      return {false, e.what()};
    }
    return {true, {}};
  }

  // The agent's changes against the original tree, as a unified diff (empty: none).
  [[nodiscard]] std::string diff() const {
    std::string text;
    if (const std::optional<std::string> error = diff_into(text)) cascade_rl::detail::fail("workspace.diff", *error);
    return text;
  }

  // Grades the workspace: the original tree, the agent's diff without its changes to
  // protected paths, then `hidden_tests`, then `test_command` in a fresh scratch of the
  // same sandbox (its own limits: `options.test_limits`; rewards from `options`).
  [[nodiscard]] workspace_grade grade(const std::vector<file>& hidden_tests, const std::vector<std::string>& test_command,
                                      const patch_test_options& options = {}) const {
    if (test_command.empty()) cascade_rl::detail::fail("test_command", "is empty");
    workspace_grade grade;
    patch_test_report& report = grade.report;
    std::string text;
    if (const std::optional<std::string> error = diff_into(text)) {
      report.outcome = patch_outcome::does_not_apply;
      report.detail = *error;
      report.reward = options.does_not_apply_reward;
      return grade;
    }
    parsed_diff changes;
    if (!text.empty()) {
      changes = parse_unified_diff(text);
      if (!changes.ok()) cascade_rl::detail::fail("workspace.grade", "the workspace's own diff did not parse: " + changes.error);
    }
    std::vector<file_diff> kept;
    for (file_diff& f : changes.files) {
      if (is_protected(f.old_path, hidden_tests) || is_protected(f.new_path, hidden_tests))
        grade.dropped_paths.push_back(f.new_path.empty() ? f.old_path : f.new_path);
      else
        kept.push_back(std::move(f));
    }
    changes.files = std::move(kept);
    const scratch_directory fresh = box_.make_scratch();
    fresh.copy_tree(original_);
    if (!changes.files.empty()) {
      if (const apply_result applied = apply_unified_diff(changes, fresh.host_path()); !applied.ok) {
        report.outcome = patch_outcome::does_not_apply;
        report.detail = applied.error;
        report.reward = options.does_not_apply_reward;
        return grade;
      }
    }
    for (const file& test : hidden_tests) fresh.write(test);
    const auto charge = reserve(options.test_limits ? options.test_limits->memory_bytes : box_.options().limits.memory_bytes);
    report.tests = box_.run({.argv = test_command, .limits = options.test_limits}, fresh);
    const bool passed = report.tests->succeeded();
    report.outcome = passed ? patch_outcome::resolved : patch_outcome::tests_failed;
    report.reward = passed ? options.resolved_reward : options.tests_failed_reward;
    return grade;
  }

 private:
  friend workspace open_workspace(const verify_pool& pool, std::filesystem::path original, workspace_options options);
  using budget_pointer = std::shared_ptr<detail::memory_budget>;

  workspace(const sandbox& box, std::filesystem::path original, workspace_options options, budget_pointer budget)
      : box_(with_original(box, original)), original_(std::move(original)), options_(std::move(options)),
        budget_(std::move(budget)) {
    if (options_.episode_budget <= std::chrono::milliseconds(0))
      cascade_rl::detail::fail("workspace_options.episode_budget", "is not positive");
    for (std::size_t i = 0; i < options_.protected_paths.size(); ++i)
      (void)detail::relative_inside(options_.protected_paths[i], "workspace_options.protected_paths");
    // The scratch's pages are memory for as long as the workspace lives: held of the
    // pool's budget, leaving a run's memory cap beside every workspace's hold.
    if (budget_) {
      const std::uint64_t scratch = box_.options().limits.scratch_bytes, cap = box_.options().limits.memory_bytes;
      if (!budget_->hold(scratch, cap))
        cascade_rl::detail::fail("verify_pool", "cannot hold another workspace's scratch (" + std::to_string(scratch) +
                                                    " bytes) beside the " + std::to_string(budget_->held()) +
                                                    " bytes live workspaces hold and one run's memory cap (" +
                                                    std::to_string(cap) + " bytes)");
      scratch_reservation_ = std::shared_ptr<void>(nullptr, [budget = budget_, scratch](void*) { budget->unhold(scratch); });
    }
    scratch_ = std::make_unique<scratch_directory>(box_.make_scratch());
    scratch_->copy_tree(original_);
  }

  static sandbox with_original(const sandbox& box, const std::filesystem::path& original) {
    if (!original.is_absolute() || !std::filesystem::is_directory(original))
      cascade_rl::detail::fail("original", "'" + original.string() + "' is not an absolute path of a directory");
    sandbox_options o = box.options();
    o.read_only_paths.push_back(original);
    return sandbox(std::move(o));
  }

  [[nodiscard]] struct limits tool_limits() const {
    if (options_.tool_limits) return *options_.tool_limits;
    struct limits lim = box_.options().limits;
    lim.kill_on_output_overflow = false;
    return lim;
  }

  // `bytes` of the pool's memory budget (when the workspace came from a pool) until the
  // returned handle goes; refused when the live workspaces' holds leave less than that
  // (it would wait for ever).
  [[nodiscard]] std::shared_ptr<void> reserve(std::uint64_t bytes) const {
    if (!budget_) return nullptr;
    if (bytes + budget_->held() > budget_->total())
      cascade_rl::detail::fail("limits.memory_bytes", std::to_string(bytes) + " bytes for a run do not fit beside the " +
                                                          std::to_string(budget_->held()) +
                                                          " bytes live workspaces hold of the pool's " +
                                                          std::to_string(budget_->total()));
    budget_->acquire(bytes);
    return std::shared_ptr<void>(nullptr, [budget = budget_, bytes](void*) { budget->release(bytes); });
  }

  [[nodiscard]] bool is_protected(const std::string& path, const std::vector<file>& hidden_tests) const {
    if (path.empty()) return false;
    const auto under = [&](const std::string& p) {
      const std::string clean = std::filesystem::path(p).lexically_normal().string();
      return path == clean || path.starts_with(clean + "/");
    };
    return std::any_of(hidden_tests.begin(), hidden_tests.end(), [&](const file& f) { return under(f.path); }) ||
           std::any_of(options_.protected_paths.begin(), options_.protected_paths.end(), under);
  }

  // GNU diff of the original tree against the workspace, run in the sandbox, with its
  // headers rewritten (see the top of this file); an error when it cannot be made.
  [[nodiscard]] std::optional<std::string> diff_into(std::string& text) const {
    struct limits lim = box_.options().limits;
    lim.stdout_bytes = options_.diff_bytes;
    lim.kill_on_output_overflow = true;
    const run_result r = box_.run({.argv = {"diff", "-ruN", "--no-dereference", "-a", original_.string(), "."},
                                   .limits = lim},
                                  *scratch_);
    if (r.reason == termination::output_limit || r.stdout_truncated)
      return "the diff is longer than workspace_options.diff_bytes (" + std::to_string(options_.diff_bytes) + ")";
    // diff's exit status: 0 no differences, 1 differences, 2 trouble.
    if (r.reason != termination::exited || r.exit_code > 1)
      return "diff failed (" + std::string(to_string(r.reason)) + ", exit " + std::to_string(r.exit_code) +
             "): " + r.stderr_text.substr(0, 400);
    text.clear();
    const std::string old_prefix = original_.string() + "/";
    std::size_t start = 0;
    while (start < r.stdout_text.size()) {
      std::size_t end = r.stdout_text.find('\n', start);
      if (end == std::string::npos) end = r.stdout_text.size();
      std::string_view line(r.stdout_text.data() + start, end - start);
      start = end + 1;
      if (line.starts_with("diff -ruN ")) continue;  // diff's own command line per file
      const bool old_side = line.starts_with("--- "), new_side = line.starts_with("+++ ");
      if (old_side || new_side) {
        std::string_view path = line.substr(4, line.find('\t') == std::string_view::npos ? std::string_view::npos
                                                                                       : line.find('\t') - 4);
        if (old_side && path.starts_with(old_prefix)) path.remove_prefix(old_prefix.size());
        if (new_side && path.starts_with("./")) path.remove_prefix(2);
        // -N writes an absent side as an empty file: it is a created or deleted one.
        bool present = false;
        try {
          present = old_side ? std::filesystem::exists(original_ / path) : scratch_->read(path).has_value();
        } catch (const std::exception&) {  // a path the scratch refuses to read: absent
        }
        text += std::string(old_side ? "--- " : "+++ ") +
                (present ? std::string(old_side ? "a/" : "b/") + std::string(path) : std::string("/dev/null")) + "\n";
        continue;
      }
      text.append(line);
      text += '\n';
    }
    return std::nullopt;
  }

  sandbox box_;
  std::filesystem::path original_;
  workspace_options options_;
  budget_pointer budget_;
  std::shared_ptr<void> scratch_reservation_;
  std::unique_ptr<scratch_directory> scratch_;
  std::chrono::milliseconds spent_{0};
};

// A workspace whose scratch and runs count against `pool`'s memory budget while it
// lives (refused when its scratch would leave less than one run's memory cap free).
[[nodiscard]] inline workspace open_workspace(const verify_pool& pool, std::filesystem::path original,
                                              workspace_options options = {}) {
  return workspace(pool.box(), std::move(original), std::move(options), pool.budget());
}

}  // namespace cascade_rl::verify
