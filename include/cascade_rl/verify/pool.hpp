#pragma once
// Many sandboxed runs in parallel on a bounded number of worker threads (the calling
// thread being one of them). Results are in the order of the commands, whatever the
// scheduling; if runs throw (a sandbox setup failure), the first command's error is
// rethrown after all workers have finished.

#include <cstddef>
#include <span>
#include <vector>

#include "cascade_rl/cascade/worker_pool.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/sandbox.hpp"

namespace cascade_rl::verify {

class verify_pool {
 public:
  verify_pool(sandbox box, std::size_t workers) : box_(std::move(box)), workers_(workers) {
    if (workers == 0) cascade_rl::detail::fail("workers", "is 0");
  }

  [[nodiscard]] const sandbox& box() const { return box_; }
  [[nodiscard]] std::size_t workers() const { return workers_; }

  [[nodiscard]] std::vector<run_result> run_all(std::span<const command> commands) const {
    std::vector<run_result> results(commands.size());
    cascade_rl::detail::run_on_workers(commands.size(), workers_,
                                       [&](std::size_t i) { results[i] = box_.run(commands[i]); });
    return results;
  }

 private:
  sandbox box_;
  std::size_t workers_;
};

}  // namespace cascade_rl::verify
