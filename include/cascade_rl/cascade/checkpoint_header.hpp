#pragma once
// The keys checkpoint.hpp writes into a checkpoint's state.json beside the run's state
// (run_state.hpp): what the file is, the teacher table and where the policy lies,
// described once (config_fields below) for the writer and the reader.
//   {"format": "cascade_rl.checkpoint", "version": 1, "policy": "policy",
//    "teachers": [{"domain", "file", "id", "score", "origin", "source"}, ...],
//    "next_teacher_id": n, ...the run's keys}

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/enum_names.hpp"
#include "cascade_rl/cascade/stage_config_fields.hpp"
#include "cascade_rl/cascade/stage_config_json.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"

namespace cascade_rl {

template <>
struct enum_names<teacher_origin> {
  static constexpr std::array<std::pair<teacher_origin, std::string_view>, 2> table{
      {{teacher_origin::captured, "captured"}, {teacher_origin::assigned, "assigned"}}};
};

// One row of the teacher table: a domain's teacher and the snapshot file holding it
// (teachers/<file>, shared by the domains one capture serves: same id, same file).
struct teacher_record {
  std::string domain{};
  std::string file{};
  std::uint64_t id = 0;
  double score = 0.0;
  teacher_origin origin = teacher_origin::captured;
  std::string source{};
};

struct checkpoint_header {
  std::string format{};
  std::int64_t version = 0;
  std::vector<teacher_record> teachers{};
  std::uint64_t next_teacher_id = 0;
  std::string policy{};  // the policy's file or directory, relative to the checkpoint
};

namespace detail {

template <>
struct config_fields<teacher_record> {
  using T = teacher_record;
  static constexpr bool every_field_required = true;
  static constexpr std::tuple list{
      config_field{"domain", &T::domain}, config_field{"file", &T::file},
      config_field{"id", &T::id},         config_field{"score", &T::score},
      config_field{"origin", &T::origin}, config_field{"source", &T::source}};
};

template <>
struct config_fields<checkpoint_header> {
  using T = checkpoint_header;
  static constexpr bool every_field_required = true;
  static constexpr std::tuple list{
      config_field{"format", &T::format}, config_field{"version", &T::version},
      config_field{"teachers", &T::teachers}, config_field{"next_teacher_id", &T::next_teacher_id},
      config_field{"policy", &T::policy}};
};

static_assert(lists_every_member<teacher_record> && lists_every_member<checkpoint_header>,
              "a checkpoint header struct gained a member: list it in config_fields "
              "(checkpoint_header.hpp)");

// The header's keys: the ones a reader of the run's state leaves to the header.
inline const std::vector<std::string>& checkpoint_header_keys() {
  static const std::vector<std::string> keys = field_keys<checkpoint_header>();
  return keys;
}

// state.json's header part; `j` also holds the run's keys, which are not looked at.
inline checkpoint_header checkpoint_header_from_json(const nlohmann::json& j,
                                                     const std::string& path) {
  if (!j.is_object()) config_json::wrong_type(j, path, "an object");
  nlohmann::json own = nlohmann::json::object();
  for (const std::string& key : checkpoint_header_keys())
    if (const auto it = j.find(key); it != j.end()) own[key] = *it;
  checkpoint_header header;
  config_json::read(own, header, path);
  return header;
}

// Adds the header's keys to `state` (an object holding the run's keys).
inline void add_checkpoint_header(nlohmann::json& state, const checkpoint_header& header) {
  const nlohmann::ordered_json written = config_json::write(header, "checkpoint header");
  for (auto it = written.begin(); it != written.end(); ++it) state[it.key()] = nlohmann::json(*it);
}

}  // namespace detail
}  // namespace cascade_rl
