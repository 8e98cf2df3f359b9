#pragma once
// Verification of the code domain: the programs are run on their unit tests.
// With python3 available, every program of a verification batch is translated to a
// Python function and the batch runs as one python3 process in cascade_rl::verify's
// sandbox (a fresh process per batch: startup, isolation and all, which is what makes
// these domains' verification expensive, as sandboxed execution is in real code RL).
// Without python3 (or without the verify component) the bounded interpreter of
// interpreter.hpp runs them in process; a sandbox run that fails is also redone by the
// interpreter, so scores never depend on which path ran.
//
// The translation keeps the interpreter's semantics exactly (one step per instruction
// and per loop test, the step bound, the overflow bound), so both paths give the same
// scores bit for bit; the sandbox path also runs the interpreter and counts any
// disagreement (tests/demo/test_program_verifier.cpp checks that there is none).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#if CASCADE_DEMO_WITH_SANDBOX
#include <cascade_rl/verify/sandbox.hpp>
#endif

#include "interpreter.hpp"
#include "tasks.hpp"

namespace demo {

namespace detail {

inline void python_block(const program& p, int depth, std::size_t max_steps, std::string& out) {
  const std::string pad(static_cast<std::size_t>(4 * depth), ' ');
  const std::string bound = std::to_string(max_steps);
  const auto line = [&](const std::string& text) {
    out += pad;
    out += text;
    out += '\n';
  };
  const auto step = [&](const std::string& inner_pad) {
    out += inner_pad + "s += 1\n";
    out += inner_pad + "if s > " + bound + ": return None\n";
  };
  if (p.empty()) line("pass");
  for (const instruction& ins : p) {
    step(pad);
    switch (ins.code) {
      case instruction::op::inc: line("x += 1"); break;
      case instruction::op::dec: line("x -= 1"); break;
      case instruction::op::dbl: line("x *= 2"); break;
      case instruction::op::add: line("x += " + std::to_string(ins.argument)); break;
      case instruction::op::sub: line("x -= " + std::to_string(ins.argument)); break;
      case instruction::op::rep:
        line("for _ in range(" + std::to_string(ins.argument) + "):");
        python_block(ins.body, depth + 1, max_steps, out);
        break;
      case instruction::op::wnz:
        line("while x != 0:");
        step(pad + "    ");
        python_block(ins.body, depth + 1, max_steps, out);
        break;
    }
    line("if x > 1000000 or x < -1000000: return None");
  }
}

}  // namespace detail

// def f<index>(x): the program, returning its result, or None where the interpreter
// stops it (step bound, overflow). The step counter is a global of the harness.
inline std::string python_function(const program& p, std::size_t index, std::size_t max_steps = 200) {
  std::string out = "def f" + std::to_string(index) + "(x):\n    global s\n    s = 0\n";
  detail::python_block(p, 1, max_steps, out);
  out += "    return x\n";
  return out;
}

// A script that runs every job on the unit tests and prints, per job, one line: the
// number of tests passed and the nanoseconds it took.
inline std::string python_harness(std::span<const program_job> jobs, std::size_t max_steps = 200) {
  std::string script = "import time\ns = 0\n";
  for (std::size_t j = 0; j < jobs.size(); ++j) script += python_function(jobs[j].code, j, max_steps);
  script += "inputs = (";
  for (std::int64_t x : test_inputs) script += std::to_string(x) + ", ";
  script += ")\njobs = [\n";
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    script += "    (f" + std::to_string(j) + ", (";
    for (std::int64_t y : jobs[j].expected) script += std::to_string(y) + ", ";
    script += ")),\n";
  }
  script +=
      "]\nout = []\n"
      "for f, want in jobs:\n"
      "    t = time.perf_counter_ns()\n"
      "    n = sum(1 for x, y in zip(inputs, want) if f(x) == y)\n"
      "    out.append('%d %d' % (n, time.perf_counter_ns() - t))\n"
      "print('\\n'.join(out))\n";
  return script;
}

// What verifying a batch of jobs gave.
struct program_results {
  std::vector<int> passed;        // tests passed, per job
  std::vector<double> latency;    // seconds until the job's result was known: its own run
                                  // time in the interpreter, the whole run's in the sandbox
  double wall_seconds = 0.0;
  bool sandboxed = false;
};

class program_verifier {
 public:
  // python3 in the sandbox when `use_python` and it works (a probe run), else the
  // interpreter; `description` says which and why.
  explicit program_verifier(bool use_python = true) {
#if CASCADE_DEMO_WITH_SANDBOX
    if (!use_python) {
      description_ = "the bounded interpreter (python3 not asked for)";
      return;
    }
    try {
      namespace v = cascade_rl::verify;
      using namespace std::chrono_literals;
      v::sandbox_options options;
      options.limits.wall_time = 30s;  // generous: a loaded machine starts python slowly
      options.limits.cpu_time = 20s;
      // Programs are the demo's own translations of a tiny language: missing isolation
      // is reported, not fatal.
      options.on_missing_isolation = v::missing_isolation::warn;
      box_ = std::make_unique<v::sandbox>(options);
      const v::run_result probe = box_->run({.argv = {"python3", "-I", "-S", "-c", "print(6 * 7)"}});
      if (!probe.succeeded() || probe.stdout_text != "42\n") {
        description_ = "the bounded interpreter (python3 did not run in the sandbox: " +
                       std::string(v::to_string(probe.reason)) +
                       (probe.error.empty() ? std::string() : ", " + probe.error) + ")";
        box_.reset();
        return;
      }
      description_ = "python3 in cascade_rl::verify's sandbox, one process per verification batch";
    } catch (const std::exception& e) {
      box_.reset();
      description_ = std::string("the bounded interpreter (no sandbox: ") + e.what() + ")";
    }
#else
    (void)use_python;
    description_ = "the bounded interpreter (this build has no cascade_rl::verify)";
#endif
  }

  [[nodiscard]] bool sandboxed() const {
#if CASCADE_DEMO_WITH_SANDBOX
    return box_ != nullptr;
#else
    return false;
#endif
  }
  [[nodiscard]] const std::string& description() const { return description_; }
#if CASCADE_DEMO_WITH_SANDBOX
  // The sandbox python3 ran in (null: the interpreter verifies); the SWE agent's
  // workspaces are made in it (swe_agent.hpp).
  [[nodiscard]] const cascade_rl::verify::sandbox* sandbox() const { return box_.get(); }
#endif
  [[nodiscard]] std::size_t sandbox_runs() const { return runs_; }
  [[nodiscard]] std::size_t sandbox_failures() const { return failures_; }
  [[nodiscard]] std::size_t disagreements() const { return disagreements_; }
  [[nodiscard]] std::size_t programs() const { return programs_; }

  // Thread-safe.
  [[nodiscard]] program_results verify(std::span<const program_job> jobs) const {
    const auto start = std::chrono::steady_clock::now();
    program_results r = interpret(jobs);
    programs_ += jobs.size();
#if CASCADE_DEMO_WITH_SANDBOX
    if (box_ && !jobs.empty()) {
      const auto run_start = std::chrono::steady_clock::now();
      const auto run = box_->run({.argv = {"python3", "-I", "-S", "-"}, .stdin_data = python_harness(jobs)});
      ++runs_;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      std::vector<int> passed;
      if (run.succeeded() && !run.stdout_truncated) {
        std::istringstream lines(run.stdout_text);
        int n = 0;
        long long ns = 0;
        while (lines >> n >> ns) passed.push_back(n);
      }
      if (passed.size() == jobs.size()) {
        for (std::size_t j = 0; j < jobs.size(); ++j) disagreements_ += passed[j] != r.passed[j];
        r.passed = std::move(passed);
        r.latency.assign(jobs.size(), seconds);
        r.sandboxed = true;
      } else {
        ++failures_;  // the interpreter's results stand
      }
    }
#endif
    r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

  // The interpreter alone, each job timed.
  [[nodiscard]] static program_results interpret(std::span<const program_job> jobs) {
    program_results r;
    for (const program_job& job : jobs) {
      const auto t = std::chrono::steady_clock::now();
      r.passed.push_back(tests_passed(job.code, job.expected));
      r.latency.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    return r;
  }

 private:
#if CASCADE_DEMO_WITH_SANDBOX
  std::unique_ptr<cascade_rl::verify::sandbox> box_;
#endif
  std::string description_;
  mutable std::atomic<std::size_t> runs_{0}, failures_{0}, disagreements_{0}, programs_{0};
};

}  // namespace demo
