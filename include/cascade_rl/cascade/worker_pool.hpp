#pragma once
// A bounded pool for reward verification: task(i) for every i in [0, n) on at most
// `workers` threads (std::jthread, the calling thread being one of them). Results go to
// per-index slots, so they do not depend on scheduling. If tasks throw, the exception
// of the smallest index is rethrown after every thread has joined.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace cascade_rl::detail {

template <class Task>
void run_on_workers(std::size_t n, std::size_t workers, Task&& task) {
  std::atomic<std::size_t> next{0};
  std::mutex error_mutex;
  std::size_t error_index = std::numeric_limits<std::size_t>::max();
  std::exception_ptr error;
  const auto drain = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        task(i);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (i < error_index) {
          error_index = i;
          error = std::current_exception();
        }
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    const std::size_t extra = std::min(workers, n) > 1 ? std::min(workers, n) - 1 : 0;
    threads.reserve(extra);
    for (std::size_t t = 0; t < extra; ++t) threads.emplace_back(drain);
    drain();
  }  // jthreads join here
  if (error) std::rethrow_exception(error);
}

}  // namespace cascade_rl::detail
