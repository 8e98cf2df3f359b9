#pragma once
// Where a cascade run stands: everything a checkpoint holds besides the policy and the
// teachers (checkpoint.hpp writes those), as one struct described once. Its field list
// (config_fields<run_state> below) is what the checkpoint writer, the reader, resume
// and the comparison walk, as stage_config_fields.hpp is for configs: a member added to
// run_state and not listed fails to compile, so it cannot be left out of checkpoints.
//
// In state.json (format version 1):
//   {"stages": [...], "position": {"stage", "step", "global_step", "baseline_done",
//    "stage_stopped"}, "stop": {"best", "since_improvement"}, "stopped_early": [...],
//    "rng": "<generator state>", "forgetting": {...}, "sequence": n, "stage_state": ...}
// Reading is strict both ways: an unknown key and a missing one are refused by path
// ("checkpoint '...' state.position.step: is missing").

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/forgetting_matrix.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/stage_config_difference.hpp"
#include "cascade_rl/cascade/stage_config_fields.hpp"
#include "cascade_rl/cascade/stage_config_json.hpp"

namespace cascade_rl {

// Which stage and step the run is at.
struct run_position {
  std::size_t stage = 0;        // index of the stage running (== stages: finished)
  std::size_t step = 0;         // steps done in that stage
  std::size_t global_step = 0;  // steps done in the run
  bool baseline_done = false;   // the "before" evaluation row exists
  bool stage_stopped = false;   // the stage met its stop criteria early
};

// The stop criteria's memory inside the current stage.
struct stop_progress {
  std::optional<double> best{};       // best mean evaluation score so far
  std::size_t since_improvement = 0;  // evaluations since it improved
};

struct run_state {
  std::vector<std::string> stages{};  // the cascade's stage names (a checkpoint of
                                      // another cascade is refused by them)
  run_position position{};
  stop_progress stop{};
  std::vector<std::string> stopped_early{};  // stages ended by their stop criteria
  rng_type rng{};                            // the cascade's generator (seeds, shuffles)
  forgetting_matrix forgetting{};
  std::uint64_t sequence = 0;    // checkpoints written so far
  nlohmann::json stage_state{};  // the current stage's own state (its prompt
                                 // source); null once every stage is done
};

namespace detail {

template <>
struct config_fields<run_position> {
  using T = run_position;
  static constexpr bool every_field_required = true;
  static constexpr std::tuple list{config_field{"stage", &T::stage}, config_field{"step", &T::step},
                                   config_field{"global_step", &T::global_step},
                                   config_field{"baseline_done", &T::baseline_done},
                                   config_field{"stage_stopped", &T::stage_stopped}};
};

template <>
struct config_fields<stop_progress> {
  using T = stop_progress;
  static constexpr bool every_field_required = true;
  static constexpr std::tuple list{config_field{"best", &T::best},
                                   config_field{"since_improvement", &T::since_improvement}};
};

template <>
struct config_fields<run_state> {
  using T = run_state;
  static constexpr bool every_field_required = true;
  static constexpr std::tuple list{
      config_field{"stages", &T::stages},     config_field{"position", &T::position},
      config_field{"stop", &T::stop},         config_field{"stopped_early", &T::stopped_early},
      config_field{"rng", &T::rng},           config_field{"forgetting", &T::forgetting},
      config_field{"sequence", &T::sequence}, config_field{"stage_state", &T::stage_state}};
};

static_assert(lists_every_member<run_position> && lists_every_member<stop_progress> &&
                  lists_every_member<run_state>,
              "run_state gained a member: list it in config_fields (run_state.hpp) so that "
              "checkpoints carry it");

namespace config_json {

// The generator as the standard's text form of its state (operator<< / >>).
template <>
struct json_codec<rng_type> {
  static void read(const json& j, rng_type& out, const std::string& path) {
    if (!j.is_string()) wrong_type(j, path, "a saved generator state (a string)");
    out = load_rng(j.get<std::string>(), path);
  }
  static ordered_json write(const rng_type& rng, const std::string&) { return save_rng(rng); }
};

template <>
struct json_codec<forgetting_matrix> {
  static void read(const json& j, forgetting_matrix& out, const std::string& path) {
    within(path, [&] { out = forgetting_matrix::from_json(j); });
  }
  static ordered_json write(const forgetting_matrix& m, const std::string&) {
    return ordered_json(m.to_json());
  }
};

// A stage's own state: whatever JSON its state() gave, handed back to load_state().
template <>
struct json_codec<nlohmann::json> {
  static void read(const json& j, nlohmann::json& out, const std::string&) { out = j; }
  static ordered_json write(const nlohmann::json& j, const std::string&) { return ordered_json(j); }
};

}  // namespace config_json
}  // namespace detail

// The state as it goes into state.json (run_state.hpp's header says the layout).
[[nodiscard]] inline nlohmann::json run_state_to_json(const run_state& state) {
  return nlohmann::json(detail::config_json::write(state, ""));
}

// Reads `j` (an object holding at least run_state's keys; `ignored` lists the others it
// may hold, which checkpoint.hpp writes beside them); errors name `path` + the key.
[[nodiscard]] inline run_state run_state_from_json(const nlohmann::json& j, const std::string& path,
                                                   const std::vector<std::string>& ignored = {}) {
  nlohmann::json own = j;
  if (own.is_object())
    for (const std::string& key : ignored) own.erase(key);
  run_state state;
  detail::config_json::read(own, state, path);
  return state;
}

// The path of the first field where a and b differ ("position.step", "rng"), or "" when
// they are equal.
[[nodiscard]] inline std::string run_state_difference(const run_state& a, const run_state& b) {
  return detail::config_difference(a, b, "");
}

}  // namespace cascade_rl
