#pragma once
// Many sandboxed runs in parallel on a bounded number of worker threads (the calling
// thread being one of them). Results are in the order of the commands, whatever the
// scheduling; if runs throw (a sandbox setup failure), the first command's error is
// rethrown after all workers have finished.
//
// The pool is given the memory it may use, and the runs it allows at once never have
// memory caps (limits::memory_bytes, each run's own cgroup) that sum to more: a pool
// whose workers at the sandbox's cap would not fit is refused when it is made, and a
// command with a larger cap of its own waits until enough of the budget is free (or is
// refused, when its cap alone exceeds the budget). Workspaces opened from the pool
// (workspace.hpp) hold their scratch's bytes of the same budget while they live, and
// their runs take their caps from it as the pool's own do.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/cascade/worker_pool.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/sandbox.hpp"

namespace cascade_rl::verify {

namespace detail {

// Bytes of a budget handed out and returned by the runs, and held for longer by live
// workspaces (their scratch's pages; workspace.hpp).
class memory_budget {
 public:
  explicit memory_budget(std::uint64_t bytes) : total_(bytes), free_(bytes) {}
  void acquire(std::uint64_t bytes) {
    std::unique_lock lock(mutex_);
    returned_.wait(lock, [&] { return free_ >= bytes; });
    free_ -= bytes;
  }
  void release(std::uint64_t bytes) {
    { const std::lock_guard lock(mutex_); free_ += bytes; }
    returned_.notify_all();
  }
  // Holds `bytes` until unhold, if every hold together still leaves `leave` bytes for a
  // run (so that runs never wait on holds for ever); false, holding nothing, if not.
  // Waits only for runs to return what they use.
  bool hold(std::uint64_t bytes, std::uint64_t leave) {
    std::unique_lock lock(mutex_);
    if (held_ + bytes + leave > total_) return false;
    held_ += bytes;
    returned_.wait(lock, [&] { return free_ >= bytes; });
    free_ -= bytes;
    return true;
  }
  void unhold(std::uint64_t bytes) {
    {
      const std::lock_guard lock(mutex_);
      held_ -= bytes;
      free_ += bytes;
    }
    returned_.notify_all();
  }
  [[nodiscard]] std::uint64_t held() const {
    const std::lock_guard lock(mutex_);
    return held_;
  }
  [[nodiscard]] std::uint64_t total() const { return total_; }

 private:
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  const std::uint64_t total_;
  std::uint64_t free_, held_ = 0;
};

}  // namespace detail

class verify_pool {
 public:
  // `memory_bytes`: the memory the pool's runs may hold at once, all together.
  verify_pool(sandbox box, std::size_t workers, std::uint64_t memory_bytes)
      : box_(std::move(box)), workers_(workers), memory_bytes_(memory_bytes),
        budget_(std::make_shared<detail::memory_budget>(memory_bytes)) {
    if (workers == 0) cascade_rl::detail::fail("workers", "is 0");
    const std::size_t bound = box_.options().max_concurrent_runs;
    const std::uint64_t at_once = bound != 0 && bound < workers ? bound : workers;
    const std::uint64_t cap = box_.options().limits.memory_bytes;
    if (cap > memory_bytes || at_once > memory_bytes / cap)
      cascade_rl::detail::fail("memory_bytes",
                               std::to_string(memory_bytes) + " bytes cannot hold " + std::to_string(at_once) +
                                   " runs at once at the sandbox's memory cap of " + std::to_string(cap) +
                                   " bytes (limits.memory_bytes): give the pool more memory, fewer workers, "
                                   "or its runs a lower cap");
  }

  [[nodiscard]] const sandbox& box() const { return box_; }
  [[nodiscard]] std::size_t workers() const { return workers_; }
  [[nodiscard]] std::uint64_t memory_bytes() const { return memory_bytes_; }
  // What the pool's runs and live workspaces (open_workspace) hold of memory_bytes.
  [[nodiscard]] const std::shared_ptr<detail::memory_budget>& budget() const { return budget_; }

  [[nodiscard]] std::vector<run_result> run_all(std::span<const command> commands) const {
    const auto cap_of = [&](const command& c) {
      return c.limits ? c.limits->memory_bytes : box_.options().limits.memory_bytes;
    };
    for (std::size_t i = 0; i < commands.size(); ++i)
      if (cap_of(commands[i]) > memory_bytes_)
        cascade_rl::detail::fail_at("commands", i,
                                    "limits.memory_bytes " + std::to_string(cap_of(commands[i])) +
                                        " exceeds the pool's memory_bytes " + std::to_string(memory_bytes_));
    detail::memory_budget& budget = *budget_;
    std::vector<run_result> results(commands.size());
    cascade_rl::detail::run_on_workers(commands.size(), workers_, [&](std::size_t i) {
      const std::uint64_t cap = cap_of(commands[i]);
      budget.acquire(cap);
      struct give_back {
        detail::memory_budget& budget;
        std::uint64_t cap;
        ~give_back() { budget.release(cap); }
      } release{budget, cap};
      results[i] = box_.run(commands[i]);
    });
    return results;
  }

 private:
  sandbox box_;
  std::size_t workers_;
  std::uint64_t memory_bytes_;
  std::shared_ptr<detail::memory_budget> budget_;  // shared by every run_all and workspace
};

}  // namespace cascade_rl::verify
