#pragma once
// The environment of an agentic stage, as concepts checked at the call site. An
// environment lives for one episode: reset from the prompt, then one step per action,
// then the outcome, asked while whatever it holds (a sandboxed workspace) is still
// alive, before it is destroyed. A factory makes one per episode and may be called from
// several worker threads at once.

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>

#include "cascade_rl/cascade/prompt.hpp"

namespace cascade_rl {

// What a step returns: the observation the policy reads next (text: the policy turns
// it into tokens given the context), the turn's reward, and whether the episode is over.
struct environment_step {
  std::string observation{};
  double reward = 0.0;
  bool done = false;
};

// reset: the first observation (may be empty: the prompt alone opens the episode).
template <class E>
concept resets_from_prompt = requires(E& e, const prompt& p) {
  { e.reset(p) } -> std::convertible_to<std::string>;
};

// step: the environment's answer to the action's text.
template <class E>
concept steps_on_actions = requires(E& e, std::string_view action) {
  { e.step(action) } -> std::same_as<environment_step>;
};

// outcome: the episode's reward, decided while the environment is still alive (a
// grader runs the hidden tests in a fresh copy of the workspace here).
template <class E>
concept reports_outcome = requires(E& e) {
  { e.outcome() } -> std::convertible_to<double>;
};

template <class E>
concept Environment = std::movable<E> && resets_from_prompt<E> && steps_on_actions<E> &&
                      reports_outcome<E>;

// make(prompt, episode): a fresh environment for episode `episode` (its index in the
// batch) of that prompt; const and callable from several threads at once.
template <class F>
concept EnvironmentFactory = requires(const F& f, const prompt& p, std::size_t episode) {
  { f(p, episode) } -> Environment;
};

template <class F>
using environment_of = decltype(std::declval<const F&>()(std::declval<const prompt&>(),
                                                          std::size_t{}));

}  // namespace cascade_rl
