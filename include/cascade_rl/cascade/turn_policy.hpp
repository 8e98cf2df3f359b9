#pragma once
// What a policy needs to take part in episodes: continue generating from a context of
// token ids under a per-turn token budget (one batched call for every live episode), and
// turn text into tokens given the context. The policy renders the prompt and every
// observation itself, boundary tokens included (a chat template's turn markers), and
// the driver never re-tokenises what was generated: the trainer scores exactly the ids
// the sampler produced, so no template drift can open between them.

#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/cascade/prompt.hpp"

namespace cascade_rl {

// One live episode's request: its whole context so far (prompt, actions, observations)
// and how many tokens this turn may add.
struct turn_request {
  std::span<const std::int32_t> context{};
  std::size_t max_tokens = 0;
  std::uint64_t seed = 0;  // this episode's draw for this turn
};

// The action: its token ids, the sampler's log-prob of each, its text (what the
// environment reads), and whether it ended by itself or at max_tokens.
struct turn_output {
  std::vector<std::int32_t> tokens{};
  std::vector<float> log_probs{};
  std::string text{};
  finish_reason finish = finish_reason::stopped;
};

template <class P>
concept continues_generation = requires(P& p, std::span<const turn_request> requests,
                                        const sampling_params& sampling) {
  { p.continue_generation(requests, sampling) } -> std::same_as<std::vector<turn_output>>;
};

// render_prompt: the prompt's tokens (the start of every context); render_observation:
// the tokens that carry an observation's text into the context after `context`.
template <class P>
concept renders_text = requires(const P& cp, const prompt& input,
                                std::span<const std::int32_t> context, std::string_view text) {
  { cp.render_prompt(input) } -> std::same_as<std::vector<std::int32_t>>;
  { cp.render_observation(context, text) } -> std::same_as<std::vector<std::int32_t>>;
};

template <class P>
concept TurnPolicy = continues_generation<P> && renders_text<P>;

}  // namespace cascade_rl
