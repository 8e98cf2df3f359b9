#pragma once
// Calling something that may hang (an environment's step) with a deadline. The call
// runs on a thread of its own; past the deadline the caller stops waiting and that
// thread is left to finish by itself. Whatever the call touches must then stay alive
// without the caller: pass it in by shared_ptr, captured in `call`, and never touch it
// again after a timeout. A thread cannot be killed safely; an environment that must not
// outlive its episode bounds its own calls (the sandbox's run caps do).

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

namespace cascade_rl::detail {

// call() before `deadline`: its result, nullopt past the deadline; an exception the
// call threw is rethrown here.
template <class R, class Call>
std::optional<R> call_before(std::chrono::steady_clock::time_point deadline, Call call) {
  auto task = std::make_shared<std::packaged_task<R()>>(std::move(call));
  std::future<R> result = task->get_future();
  std::thread runner([task] { (*task)(); });
  if (result.wait_until(deadline) == std::future_status::timeout) {
    runner.detach();
    return std::nullopt;
  }
  runner.join();
  return result.get();
}

}  // namespace cascade_rl::detail
