#pragma once
// The demo's SWE RL as an agent (issue 36): an environment for cascade_rl's agentic
// stage. The task is a one-file repository (program.txt, wrong on one line) and a
// prompt that says only what the program must compute; the agent shows the file,
// applies a hunk, runs the visible tests and submits (the tools: tasks.hpp, "SWE").
// The outcome is the hidden tests' verdict on the submitted repository: the fraction of
// the unit-test inputs on which the program gives the specified output (as code RL's
// reward; 0 when the grading run fails).
//
// Where each part runs. With python3 in cascade_rl::verify's sandbox (program_verifier
// found it), each episode works in its own verify::workspace: a copy of the task's
// repository in a capped tmpfs scratch. `show` and `test` read program.txt from that
// scratch and the hunk is applied to it as a unified diff (workspace::apply), all in
// process; `test` runs the visible tests with the demo's bounded interpreter (a
// sandboxed run per tool call would not fit the demo's time). Grading is
// workspace::grade: GNU diff, in the sandbox, gives the agent's changes; a fresh copy of
// the repository gets them and the hidden test (tests/test_hidden.py, never in the
// workspace or its view), which python3 runs there. Without the sandbox the same tools
// act on the lines in memory and the interpreter grades: the outcome is the same
// (tests/demo/test_swe_agent.cpp runs both).

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cascade_rl/cascade/environment.hpp>
#include <cascade_rl/core/error.hpp>

#if CASCADE_DEMO_WITH_SANDBOX
#include <cascade_rl/verify/workspace.hpp>
#endif

#include "program_verifier.hpp"
#include "tasks.hpp"

namespace demo {

// The hidden test of a specification: reads program.txt, runs it on every unit-test
// input with the interpreter's semantics (interpreter.hpp: one step per instruction and
// per loop test, at most 200; |x| over one million stops the run), prints
// "passed N of M" and exits 0 when all M pass.
inline std::string swe_hidden_test(const specification& spec) {
  // Appended piece by piece: g++ 12 warns falsely (-Wrestrict) on "(" + std::string.
  std::string cases;
  const auto expected = expected_outputs(spec);
  for (std::size_t k = 0; k < expected.size(); ++k) {
    cases += '(';
    cases += std::to_string(test_inputs[k]);
    cases += ", ";
    cases += std::to_string(expected[k]);
    cases += "), ";
  }
  return "import sys\n"
         "words = open('program.txt').read().split()\n"
         "class Stop(Exception):\n"
         "    pass\n"
         "def parse(i, nested):\n"
         "    body = []\n"
         "    while i < len(words):\n"
         "        w = words[i]\n"
         "        i += 1\n"
         "        if w == 'end':\n"
         "            if nested:\n"
         "                return body, i\n"
         "            raise Stop\n"
         "        if w in ('inc', 'dec', 'dbl'):\n"
         "            body.append((w, 0, None))\n"
         "        elif w in ('add', 'sub', 'rep'):\n"
         "            if i == len(words) or words[i] not in '0123456789' or len(words[i]) != 1:\n"
         "                raise Stop\n"
         "            arg = int(words[i])\n"
         "            i += 1\n"
         "            inner = None\n"
         "            if w == 'rep':\n"
         "                inner, i = parse(i, True)\n"
         "            body.append((w, arg, inner))\n"
         "        elif w == 'wnz':\n"
         "            inner, i = parse(i, True)\n"
         "            body.append((w, 0, inner))\n"
         "        else:\n"
         "            raise Stop\n"
         "    if nested:\n"
         "        raise Stop\n"
         "    return body, i\n"
         "def tick(state):\n"
         "    state[1] += 1\n"
         "    if state[1] > 200:\n"
         "        raise Stop\n"
         "def run(body, state):\n"
         "    for op, arg, inner in body:\n"
         "        tick(state)\n"
         "        if op == 'inc': state[0] += 1\n"
         "        elif op == 'dec': state[0] -= 1\n"
         "        elif op == 'dbl': state[0] *= 2\n"
         "        elif op == 'add': state[0] += arg\n"
         "        elif op == 'sub': state[0] -= arg\n"
         "        elif op == 'rep':\n"
         "            for _ in range(arg):\n"
         "                run(inner, state)\n"
         "        elif op == 'wnz':\n"
         "            while state[0] != 0:\n"
         "                tick(state)\n"
         "                run(inner, state)\n"
         "        if state[0] > 1000000 or state[0] < -1000000:\n"
         "            raise Stop\n"
         "def passes(program, x, want):\n"
         "    state = [x, 0]\n"
         "    try:\n"
         "        run(program, state)\n"
         "    except Stop:\n"
         "        return False\n"
         "    return state[0] == want\n"
         "cases = [" + cases + "]\n"
         "try:\n"
         "    program = parse(0, False)[0]\n"
         "    passed = sum(1 for x, y in cases if passes(program, x, y))\n"
         "except (Stop, RecursionError):\n"
         "    passed = 0\n"
         "print('passed %d of %d' % (passed, len(cases)))\n"
         "sys.exit(0 if passed == len(cases) else 1)\n";
}

// What every episode of a run shares: where the tasks' repositories are (written on
// first use, under a temporary directory removed with this object, or by the next host
// when the process was killed), the sandbox, and what grading cost.
class swe_agent_host {
 public:
  explicit swe_agent_host(std::shared_ptr<const program_verifier> programs) : programs_(std::move(programs)) {
    if (!sandboxed()) return;
    remove_orphans();
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("cascade_demo_swe." + std::to_string(::getpid()) + ".XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) cr::detail::fail("swe_agent_host", "cannot make a temporary directory");
    root_ = pattern;
  }
  swe_agent_host(const swe_agent_host&) = delete;
  swe_agent_host& operator=(const swe_agent_host&) = delete;
  ~swe_agent_host() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }

  [[nodiscard]] bool sandboxed() const {
#if CASCADE_DEMO_WITH_SANDBOX
    return programs_ && programs_->sandbox() != nullptr;
#else
    return false;
#endif
  }
  [[nodiscard]] std::string description() const { return description_for(sandboxed()); }
  // What a host over a verifier that is (or is not) sandboxed does, without making one.
  [[nodiscard]] static std::string description_for(bool sandboxed) {
    return sandboxed ? "a verify::workspace per episode; graded by python3 in the sandbox"
                     : "the file in memory; graded by the bounded interpreter";
  }

  // Where the repositories are written (empty without the sandbox).
  [[nodiscard]] const std::filesystem::path& root() const { return root_; }

  // The repository of a task (its prompt's reference is program.txt), written once.
  [[nodiscard]] std::filesystem::path repository(const cr::prompt& p) const {
    const std::lock_guard lock(mutex_);
    const std::filesystem::path dir = root_ / std::to_string(p.id);
    if (written_.emplace(p.id, p.reference).second) {
      std::filesystem::create_directories(dir);
      std::ofstream(dir / "program.txt", std::ios::binary) << p.reference;
    } else if (written_.at(p.id) != p.reference) {
      cr::detail::fail("swe_agent_host", "two SWE tasks share prompt id " + std::to_string(p.id));
    }
    return dir;
  }

#if CASCADE_DEMO_WITH_SANDBOX
  [[nodiscard]] const cascade_rl::verify::sandbox& box() const { return *programs_->sandbox(); }
#endif

  // Grades so far: how many, how many ran in the sandbox, their seconds (wall, summed).
  void count_grade(bool in_sandbox, double seconds) const {
    grades_ += 1;
    sandbox_grades_ += in_sandbox;
    nanoseconds_ += static_cast<std::int64_t>(seconds * 1e9);
  }
  [[nodiscard]] std::size_t grades() const { return grades_; }
  [[nodiscard]] std::size_t sandbox_grades() const { return sandbox_grades_; }
  [[nodiscard]] double grade_seconds() const { return static_cast<double>(nanoseconds_.load()) * 1e-9; }

 private:
  // The repositories of hosts whose process is gone (a trainer killed mid-run never ran
  // the destructor): cascade_demo_swe.<pid>.* of this user where no process <pid> lives.
  static void remove_orphans() {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), error)) {
      const std::string name = entry.path().filename().string();
      const std::string prefix = "cascade_demo_swe.";
      if (name.rfind(prefix, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      struct stat info {};
      if (pid <= 0 || ::lstat(entry.path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::getuid())
        continue;
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask
      std::filesystem::remove_all(entry.path(), error);
    }
  }

  std::shared_ptr<const program_verifier> programs_;
  std::filesystem::path root_;
  mutable std::mutex mutex_;
  mutable std::map<std::int64_t, std::string> written_;
  mutable std::atomic<std::size_t> grades_{0}, sandbox_grades_{0};
  mutable std::atomic<std::int64_t> nanoseconds_{0};
};

// One episode (a cascade_rl Environment).
class swe_agent {
 public:
  explicit swe_agent(std::shared_ptr<const swe_agent_host> host) : host_(std::move(host)) {}

  std::string reset(const cr::prompt& p) {
    const auto spec = swe_spec(p);
    if (!spec) cr::detail::fail("swe_agent.reset", "prompt " + std::to_string(p.id) + " is not an SWE task");
    spec_ = *spec;
#if CASCADE_DEMO_WITH_SANDBOX
    if (host_->sandboxed()) {
      namespace v = cascade_rl::verify;
      workspace_.emplace(host_->box(), host_->repository(p), v::workspace_options{.episode_budget = std::chrono::seconds(30)});
      return {};
    }
#endif
    lines_ = swe_file_of(p.reference);
    return {};
  }

  cr::environment_step step(std::string_view action) {
    if (action == "submit") return {.observation = {}, .done = true};
    if (action == "show") return {.observation = swe_show(file())};
    if (action == "test")
      return {.observation = swe_tests_passed(file(), spec_, swe_visible_tests) == swe_visible_tests ? "pass" : "fail"};
    const auto hunk = parse_swe_hunk(action);
    swe_file lines = file();
    if (!hunk || !apply_swe_hunk(lines, *hunk)) return {.observation = "no"};
#if CASCADE_DEMO_WITH_SANDBOX
    if (workspace_) {
      const std::string line = std::to_string(hunk->line);
      const std::string diff = "--- a/program.txt\n+++ b/program.txt\n@@ -" + line + " +" + line + " @@\n-" +
                               hunk->old_text + "\n+" + hunk->new_text + "\n";
      const auto applied = workspace_->apply(diff);
      if (!applied.ok) cr::detail::fail("swe_agent.step", "a checked hunk did not apply: " + applied.error);
      return {.observation = "ok"};
    }
#endif
    lines_ = std::move(lines);
    return {.observation = "ok"};
  }

  double outcome() {
    const auto start = std::chrono::steady_clock::now();
    const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
#if CASCADE_DEMO_WITH_SANDBOX
    if (workspace_) {
      namespace v = cascade_rl::verify;
      const v::workspace_grade g =
          workspace_->grade({{.path = "tests/test_hidden.py", .contents = swe_hidden_test(spec_)}},
                            {"python3", "-I", "-S", "tests/test_hidden.py"});
      host_->count_grade(true, seconds());
      return g.report.tests ? passed_fraction(*g.report.tests) : 0.0;
    }
#endif
    const int passed = swe_tests_passed(lines_, spec_, std::size(test_inputs));
    host_->count_grade(false, seconds());
    return static_cast<double>(passed) / static_cast<double>(std::size(test_inputs));
  }

 private:
#if CASCADE_DEMO_WITH_SANDBOX
  // "passed N of M" of a hidden test run that ended by itself (exit 0 or 1), else 0.
  static double passed_fraction(const cascade_rl::verify::run_result& r) {
    int passed = 0, of = 0;
    const bool ended = r.reason == cascade_rl::verify::termination::exited && (r.exit_code == 0 || r.exit_code == 1);
    if (!ended || std::sscanf(r.stdout_text.c_str(), "passed %d of %d", &passed, &of) != 2 ||
        of != static_cast<int>(std::size(test_inputs)) || passed < 0 || passed > of)
      return 0.0;
    return static_cast<double>(passed) / static_cast<double>(of);
  }
#endif

  // program.txt as the episode left it so far.
  [[nodiscard]] swe_file file() const {
#if CASCADE_DEMO_WITH_SANDBOX
    if (workspace_) {
      const auto text = workspace_->scratch().read("program.txt");
      return text ? swe_file_of(*text) : swe_file{};
    }
#endif
    return lines_;
  }

  std::shared_ptr<const swe_agent_host> host_;
  specification spec_;
  swe_file lines_;
#if CASCADE_DEMO_WITH_SANDBOX
  std::optional<cascade_rl::verify::workspace> workspace_;
#endif
};

// Makes an episode's environment (called from the stage's worker threads).
struct swe_agent_factory {
  std::shared_ptr<const swe_agent_host> host;
  swe_agent operator()(const cr::prompt&, std::size_t) const { return swe_agent(host); }
};

static_assert(cr::Environment<swe_agent>);
static_assert(cr::EnvironmentFactory<swe_agent_factory>);

}  // namespace demo
