#pragma once
// What a rollout batch keeps of a multi-turn episode (agentic stages): one episode is one
// response, its tokens the turns' actions (loss mask 1, the sampler's log-probs) and the
// environment's observations (loss mask 0), in order. The summary says where each turn
// starts, what the turn earned, and why the episode ended.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cascade_rl {

// Every episode ends for exactly one of these, reported per episode.
enum class end_reason : std::uint8_t {
  done,               // the environment said so
  max_turns,          // the turn limit was reached
  context_full,       // no room left in the context budget for another action
  turn_truncated,     // an action hit its per-turn token budget (never shown to the environment)
  timeout,            // the episode's time budget ran out (a step overran it)
  environment_error,  // the environment threw, or answered with what is not text
};

[[nodiscard]] constexpr std::string_view name_of(end_reason reason) {
  switch (reason) {
    case end_reason::done: return "done";
    case end_reason::max_turns: return "max_turns";
    case end_reason::context_full: return "context_full";
    case end_reason::turn_truncated: return "turn_truncated";
    case end_reason::timeout: return "timeout";
    case end_reason::environment_error: return "environment_error";
  }
  return "unknown";
}

inline constexpr std::size_t end_reason_count = 6;

struct episode_summary {
  // Token offsets within the response: turn k's action is [action_begin[k],
  // observation_begin[k]), its observation [observation_begin[k], action_begin[k + 1])
  // (the response's end for the last turn).
  std::vector<std::int64_t> action_begin{};
  std::vector<std::int64_t> observation_begin{};
  std::vector<double> turn_rewards{};  // one per turn (0 where the environment gave none)
  double outcome = 0.0;                // the environment's final outcome (the reward)
  end_reason reason = end_reason::done;
  std::string error{};                 // environment_error / timeout: what happened

  [[nodiscard]] std::size_t turns() const { return action_begin.size(); }
};

}  // namespace cascade_rl
