#pragma once
// The Stage concept: what the cascade runner needs from a stage, and the context it
// hands to each step. grpo_stage and mopd_stage are the ready-made ones; any type with
// these members can join a cascade.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"

namespace cascade_rl {

template <class Snapshot>
struct step_context {
  std::size_t step = 0;  // 0-based within the stage
  double lr = 0.0;       // the stage schedule's lr for this step
  rng_type& rng;         // the cascade's generator (checkpointed)
  const teacher_registry<Snapshot>& teachers;
  // The ranks sharing this step (data_parallel.hpp); a single process by default. A
  // data_parallel_stage works on its shard and reduces over it.
  communicator_ref comm{};
};

// The members that do not depend on the policy type (checked by make_cascade).
template <class S>
concept stage_shape = requires(S& s, const S& cs, const nlohmann::json& state) {
  { cs.config() } -> std::convertible_to<const stage_config&>;
  cs.validate();  // throws cascade_rl::error on a bad configuration
  { cs.state() } -> std::same_as<nlohmann::json>;
  s.load_state(state);  // all or nothing
};

// step: one step (generation, rewards, update) on the policy; evaluate: the scores of
// the stage's evaluation sets, sampling from `seed`.
template <class S, class P>
concept Stage = Policy<P> && stage_shape<S> &&
                requires(S& s, P& p, step_context<snapshot_t<P>>& context, std::uint64_t seed) {
                  { s.step(p, context) } -> std::same_as<step_metrics>;
                  { s.evaluate(p, seed) } -> std::same_as<std::vector<domain_score>>;
                };

// Optional member: evaluate(p, seed, comm), the data-parallel evaluation (each rank
// scores its shard of every evaluation set; every rank returns the same scores).
template <class S, class P>
concept evaluates_across_ranks = requires(S& s, P& p, std::uint64_t seed, communicator_ref comm) {
  { s.evaluate(p, seed, comm) } -> std::same_as<std::vector<domain_score>>;
};

// Optional member: the domains whose teachers must exist when the stage starts (MOPD).
template <class S>
concept needs_teachers = requires(const S& cs) {
  { cs.required_teachers() } -> std::convertible_to<std::vector<std::string>>;
};

}  // namespace cascade_rl
