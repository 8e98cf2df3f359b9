#pragma once
// The plug-in points of the engine, as concepts checked at the call site. Each is a
// conjunction of small named requirements, so that a type lacking one member fails
// with a note naming that requirement and the expression it could not form, e.g.
//   note: the required expression 'p.apply_gradient(batch, dlogp, lr)' is invalid
// under "constraints not satisfied ... applies_gradient<P>".
//
// Customisation is by members the concepts check; nothing derives from a base class.

#include <concepts>
#include <cstddef>
#include <filesystem>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/core/group_layout.hpp"

namespace cascade_rl {

// ---- Policy ------------------------------------------------------------------------

// generate: group_size responses per prompt, with behaviour log-probs and finish
// reasons, every random draw taken from request.seed.
template <class P>
concept generates_rollouts = requires(P& p, std::span<const prompt> prompts,
                                      const generation_request& request) {
  { p.generate(prompts, request) } -> std::same_as<rollout_batch>;
};

// log_probs: the log-probability of every token of `batch` under the current
// parameters, written to out[t] (one per token). Teachers, PPO's current log-probs and
// MOPD's student log-probs are all this call.
template <class P>
concept scores_tokens = requires(const P& cp, const rollout_batch& batch, std::span<float> out) {
  cp.log_probs(batch, out);
};

// apply_gradient: seed the backward pass with dL/dlogp (one per token of `batch`) and
// take one optimizer step with learning rate lr.
template <class P>
concept applies_gradient = requires(P& p, const rollout_batch& batch,
                                    std::span<const float> dlogp, double lr) {
  p.apply_gradient(batch, dlogp, lr);
};

template <class P>
concept has_snapshot_type = requires { typename P::snapshot_type; };

// snapshot / restore: a frozen, copyable copy of everything the policy needs to
// continue exactly (parameters and optimizer state), and putting one back.
template <class P>
concept takes_snapshots = has_snapshot_type<P> && std::copyable<typename P::snapshot_type> &&
                          requires(P& p, const P& cp, const typename P::snapshot_type& s) {
                            { cp.snapshot() } -> std::same_as<typename P::snapshot_type>;
                            p.restore(s);
                          };

template <class P>
concept Policy = generates_rollouts<P> && scores_tokens<P> && applies_gradient<P> &&
                 takes_snapshots<P>;

template <class P>
using snapshot_t = typename P::snapshot_type;

// A teacher scores tokens. MOPD keeps teachers as policy snapshots, so a policy whose
// snapshots score tokens (a frozen copy that can run a forward pass) supports MOPD.
template <class T>
concept Teacher = scores_tokens<T>;

// save / load: write a snapshot to a path (a file or a directory the policy creates)
// and read it back. Needed for checkpoints; the engine makes the write atomic by
// renaming what the policy wrote.
template <class P>
concept Checkpointable = Policy<P> && requires(const P& cp, const typename P::snapshot_type& s,
                                               const std::filesystem::path& path) {
  cp.save(s, path);
  { cp.load(path) } -> std::same_as<typename P::snapshot_type>;
};

// ---- Reward ------------------------------------------------------------------------

// What a per-response reward sees.
struct response_view {
  const prompt& input;
  std::span<const std::int32_t> tokens{};
  std::string_view text{};
  finish_reason finish = finish_reason::stopped;
  std::size_t index = 0;  // response index in the batch
};

// A scalar per response; called concurrently from the reward worker pool, so it must
// be safe to call from several threads (a const call on shared read-only data is).
template <class R>
concept per_response_reward = requires(const R& r, const response_view& response) {
  { r(response) } -> std::convertible_to<double>;
};

// Scores a whole batch at once (a reward model, a remote verifier): out holds one
// reward per response.
template <class R>
concept batched_reward = requires(const R& r, const rollout_batch& batch, std::span<float> out) {
  r.score_batch(batch, out);
};

template <class R>
concept Reward = per_response_reward<R> || batched_reward<R>;

// ---- AdvantageEstimator ------------------------------------------------------------

// Per-sequence advantages from per-sequence rewards and the group layout.
template <class E>
concept AdvantageEstimator = requires(const E& e, std::span<const float> rewards,
                                      const group_layout& groups, std::span<float> advantages) {
  e(rewards, groups, advantages);
};

// ---- PromptSource ------------------------------------------------------------------

// Where a stage's prompts come from: next(n, rng) gives n indices, at(i) the prompt,
// record(i, solved) tells the curriculum whether every response to prompt i was right,
// state / load_state save and restore its position for checkpoints.
template <class S>
concept PromptSource = requires(S& s, const S& cs, std::size_t n, rng_type& rng, std::size_t i,
                                bool solved, const nlohmann::json& state) {
  { s.next(n, rng) } -> std::same_as<std::vector<std::size_t>>;
  { cs.at(i) } -> std::convertible_to<const prompt&>;
  { cs.size() } -> std::convertible_to<std::size_t>;
  s.record(i, solved);
  { cs.state() } -> std::same_as<nlohmann::json>;
  s.load_state(state);
};

}  // namespace cascade_rl
