#pragma once
// Runs a batch of multi-turn episodes turn by turn: one batched continue_generation call
// per turn for every live episode, the environments' steps on a bounded set of worker
// threads (each under the episode's time budget), observations rendered by the policy
// and capped, and every episode ending with an explicit end_reason. The result is an
// ordinary rollout batch (one response per episode: actions with loss mask 1 and the
// sampler's log-probs, observations with mask 0) with the episodes' summaries, and each
// episode's outcome as its reward.
//
// What an environment's failure costs: only its own episode. A step that throws, that
// answers with what is not text, or that overruns the time budget ends that episode
// (environment_error / timeout, the message kept); every other episode of the batch
// goes on. A step past the budget is abandoned on its thread (deadline_call.hpp) and its
// environment is never touched again. Neither it nor a failed environment is asked for
// an outcome: their episodes get reward 0.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/deadline_call.hpp"
#include "cascade_rl/cascade/environment.hpp"
#include "cascade_rl/cascade/episode_summary.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/turn_policy.hpp"
#include "cascade_rl/cascade/worker_pool.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

struct episode_options {
  std::size_t max_turns = 8;
  std::size_t context_budget = 4096;      // tokens of the whole context, prompt included
  std::size_t max_turn_tokens = 512;      // tokens one action may add
  std::size_t observation_token_cap = 1024;    // an observation's tokens past this are cut
  std::size_t observation_text_cap = 1 << 16;  // bytes of an observation read at most
  // The time the episode's environment may spend in its steps, summed over the turns
  // (not the batch's wall time, which waits for the slowest episode); 0: no limit.
  std::chrono::milliseconds episode_time_budget{0};
  std::size_t workers = 1;                // environment steps at once
};

inline void validate_episode_options(const episode_options& o) {
  const auto positive = [](std::size_t v, const char* name) {
    if (v == 0) detail::fail(std::string("episode_options.") + name, "must be positive");
  };
  positive(o.max_turns, "max_turns");
  positive(o.context_budget, "context_budget");
  positive(o.max_turn_tokens, "max_turn_tokens");
  positive(o.observation_token_cap, "observation_token_cap");
  positive(o.observation_text_cap, "observation_text_cap");
  positive(o.workers, "workers");
  if (o.episode_time_budget.count() < 0)
    detail::fail("episode_options.episode_time_budget", "must not be negative");
}

struct episode_batch {
  rollout_batch batch{};        // batch.episodes holds one summary per response
  std::vector<float> rewards{};  // each episode's outcome
};

namespace detail {

// Whether `text` can be shown as an observation: UTF-8 by its byte structure (a lead
// byte, then as many continuation bytes as it announces) and no NUL byte.
inline bool is_text(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0) return false;
    const std::size_t extra = c < 0x80            ? 0
                              : (c >> 5) == 0x06 ? 1
                              : (c >> 4) == 0x0E ? 2
                              : (c >> 3) == 0x1E ? 3
                                                 : 4;  // a stray continuation byte
    if (extra == 4 || text.size() - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    i += extra + 1;
  }
  return true;
}

// The first `cap` bytes of `text`, cut back to a character boundary.
inline std::string_view cap_text(std::string_view text, std::size_t cap) {
  if (text.size() <= cap) return text;
  std::size_t cut = cap;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

template <class Env>
struct live_episode {
  std::shared_ptr<Env> env;  // shared: an abandoned step's thread keeps it alive
  std::vector<std::int32_t> context;
  std::size_t prompt_tokens = 0;
  std::vector<std::uint8_t> mask;  // response tokens only
  std::vector<float> log_probs;
  std::string actions_text;
  episode_summary summary;
  bool ended = false;
  std::chrono::steady_clock::duration time_left{};  // of the episode's step budget

  void end(end_reason reason, std::string error = {}) {
    ended = true;
    summary.reason = reason;
    summary.error = std::move(error);
  }
  [[nodiscard]] std::int64_t response_length() const {
    return static_cast<std::int64_t>(context.size() - prompt_tokens);
  }
  void append(std::span<const std::int32_t> tokens, std::span<const float> log_probs_of,
              std::uint8_t in_loss) {
    context.insert(context.end(), tokens.begin(), tokens.end());
    mask.insert(mask.end(), tokens.size(), in_loss);
    if (log_probs_of.empty())
      log_probs.insert(log_probs.end(), tokens.size(), 0.0f);
    else
      log_probs.insert(log_probs.end(), log_probs_of.begin(), log_probs_of.end());
  }
};

// What one step produced, or why it did not.
struct step_outcome {
  std::optional<environment_step> step;
  end_reason failure = end_reason::environment_error;
  std::string error;
};

}  // namespace detail

// group_size episodes per prompt, episode e of prompt g numbered first_episode +
// g * group_size + e (a data-parallel rank passes its shard's first episode, so every
// episode has its single-process number); the turn seeds depend only on (seed, episode
// number, turn), and the factory is given the episode's number.
template <TurnPolicy P, EnvironmentFactory F>
episode_batch run_episodes(P& policy, const F& make_environment, std::span<const prompt> prompts,
                           std::size_t group_size, const sampling_params& sampling,
                           const episode_options& options, std::uint64_t seed,
                           std::size_t first_episode = 0) {
  using Env = environment_of<F>;
  validate_episode_options(options);
  if (group_size == 0) detail::fail("group_size", "must be positive");
  const std::size_t n = prompts.size() * group_size;
  std::vector<detail::live_episode<Env>> episodes(n);
  const bool timed = options.episode_time_budget.count() > 0;

  // Environments made and reset on the workers; a factory or reset that throws ends
  // that episode before its first turn.
  detail::run_on_workers(n, options.workers, [&](std::size_t i) {
    auto& e = episodes[i];
    const prompt& input = prompts[i / group_size];
    e.context = policy.render_prompt(input);
    e.prompt_tokens = e.context.size();
    e.time_left = options.episode_time_budget;
    std::string first;
    try {
      e.env = std::make_shared<Env>(make_environment(input, first_episode + i));
      first = e.env->reset(input);
    } catch (const std::exception& error) {
      e.end(end_reason::environment_error, std::string("reset: ") + error.what());
      return;
    }
    if (!detail::is_text(first)) {
      e.end(end_reason::environment_error, "reset: the first observation is not text");
      return;
    }
    if (!first.empty()) {
      auto tokens = policy.render_observation(e.context, detail::cap_text(first, options.observation_text_cap));
      if (tokens.size() > options.observation_token_cap) tokens.resize(options.observation_token_cap);
      e.append(tokens, {}, 0);
    }
    if (e.context.size() >= options.context_budget) e.end(end_reason::context_full);
  });

  for (std::size_t turn = 0; turn < options.max_turns; ++turn) {
    std::vector<std::size_t> live;
    std::vector<turn_request> requests;
    for (std::size_t i = 0; i < n; ++i) {
      auto& e = episodes[i];
      if (e.ended) continue;
      live.push_back(i);
      requests.push_back(
          {.context = e.context,
           .max_tokens = std::min(options.max_turn_tokens, options.context_budget - e.context.size()),
           .seed = detail::splitmix64(seed ^ detail::splitmix64(((first_episode + i) << 20) ^ turn))});
    }
    if (live.empty()) break;
    std::vector<turn_output> actions =
        policy.continue_generation(std::span<const turn_request>(requests), sampling);
    if (actions.size() != live.size())
      detail::fail("policy.continue_generation result",
                   "holds " + std::to_string(actions.size()) + " actions for " +
                       std::to_string(live.size()) + " requests");
    std::vector<std::size_t> stepping;  // positions in `live` whose action goes to a step
    for (std::size_t k = 0; k < live.size(); ++k) {
      auto& e = episodes[live[k]];
      const turn_output& a = actions[k];
      if (a.log_probs.size() != a.tokens.size() || a.tokens.size() > requests[k].max_tokens)
        detail::fail_at("policy.continue_generation result", k,
                        "has " + std::to_string(a.tokens.size()) + " tokens and " +
                            std::to_string(a.log_probs.size()) + " log-probs for a budget of " +
                            std::to_string(requests[k].max_tokens) + " tokens");
      e.summary.action_begin.push_back(e.response_length());
      e.append(a.tokens, a.log_probs, 1);
      e.summary.observation_begin.push_back(e.response_length());
      e.summary.turn_rewards.push_back(0.0);
      e.actions_text += a.text;
      if (a.finish == finish_reason::truncated)
        e.end(end_reason::turn_truncated);
      else
        stepping.push_back(k);
    }

    std::vector<detail::step_outcome> outcomes(stepping.size());
    detail::run_on_workers(stepping.size(), options.workers, [&](std::size_t k) {
      auto& e = episodes[live[stepping[k]]];
      auto env = e.env;
      std::string action = actions[stepping[k]].text;
      detail::step_outcome& out = outcomes[k];
      try {
        if (!timed) {
          out.step = env->step(action);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        out.step = detail::call_before<environment_step>(
            start + e.time_left, [env, action = std::move(action)] { return env->step(action); });
        e.time_left -= std::chrono::steady_clock::now() - start;
        if (!out.step) {
          out.failure = end_reason::timeout;
          out.error = "step " + std::to_string(turn) + " overran the episode's time budget";
        }
      } catch (const std::exception& error) {
        out.step.reset();
        out.error = "step " + std::to_string(turn) + ": " + error.what();
      }
    });

    for (std::size_t k = 0; k < stepping.size(); ++k) {
      auto& e = episodes[live[stepping[k]]];
      detail::step_outcome& out = outcomes[k];
      if (!out.step) {
        e.end(out.failure, std::move(out.error));
        continue;
      }
      const environment_step& step = *out.step;
      e.summary.turn_rewards.back() = step.reward;
      const std::string_view shown = detail::cap_text(step.observation, options.observation_text_cap);
      if (!detail::is_text(shown)) {
        e.end(end_reason::environment_error,
              "step " + std::to_string(turn) + ": the observation is not text");
        continue;
      }
      if (!shown.empty() && !step.done) {
        auto tokens = policy.render_observation(e.context, shown);
        const std::size_t room = options.context_budget - std::min(options.context_budget, e.context.size());
        tokens.resize(std::min({tokens.size(), options.observation_token_cap, room}));
        e.append(tokens, {}, 0);
      }
      if (step.done)
        e.end(end_reason::done);
      else if (e.context.size() >= options.context_budget)
        e.end(end_reason::context_full);
    }
  }
  for (auto& e : episodes)
    if (!e.ended) e.end(end_reason::max_turns);

  // Outcomes while the environments are alive (the grader's own time, not the
  // episode's). Not asked of an abandoned environment (timeout: its step may still be
  // running) nor of one that failed (its state is unknown, and a reward read from it
  // would not be earned): those episodes get 0.
  std::vector<float> rewards(n, 0.0f);
  detail::run_on_workers(n, options.workers, [&](std::size_t i) {
    auto& e = episodes[i];
    const end_reason reason = e.summary.reason;
    if (reason != end_reason::timeout && reason != end_reason::environment_error) {
      try {
        e.summary.outcome = e.env->outcome();
        rewards[i] = static_cast<float>(e.summary.outcome);
      } catch (const std::exception& error) {
        e.summary.reason = end_reason::environment_error;
        e.summary.error = std::string("outcome: ") + error.what();
      }
    }
    e.env.reset();
  });

  episode_batch out;
  out.rewards = std::move(rewards);
  for (std::size_t g = 0; g < prompts.size(); ++g) {
    out.batch.add_prompt(prompts[g]);
    for (std::size_t k = 0; k < group_size; ++k) {
      auto& e = episodes[g * group_size + k];
      const std::span<const std::int32_t> response =
          std::span<const std::int32_t>(e.context).subspan(e.prompt_tokens);
      const bool cut = e.summary.reason == end_reason::turn_truncated ||
                       e.summary.reason == end_reason::context_full;
      out.batch.add_response(response, e.log_probs,
                             cut ? finish_reason::truncated : finish_reason::stopped,
                             std::move(e.actions_text));
      out.batch.loss_mask.insert(out.batch.loss_mask.end(), e.mask.begin(), e.mask.end());
      out.batch.episodes.push_back(std::move(e.summary));
    }
  }
  return out;
}

}  // namespace cascade_rl
