#pragma once
// Checkpoint directories. Layout:
//   latest                  name of the newest complete checkpoint (written atomically)
//   ckpt-00000012/          one checkpoint: state.json (the cascade's state) and
//                           policy (whatever Policy::save writes there)
//   teachers/teacher-<id>   teacher snapshots, each written once and shared by every
//                           checkpoint that refers to it
// A checkpoint is assembled under <name>.partial and renamed into place when complete,
// and only then does `latest` move to it: a crash leaves the previous checkpoint as
// the latest, plus a .partial directory that is ignored and cleared later.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/atomic_file.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

namespace detail {

inline constexpr const char* checkpoint_format = "cascade_rl.checkpoint";
inline constexpr int checkpoint_version = 1;

inline std::string checkpoint_name(std::uint64_t sequence) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08llu", static_cast<unsigned long long>(sequence));
  return name;
}

inline std::string teacher_file(std::uint64_t id) { return "teacher-" + std::to_string(id); }

// fsync of what a policy wrote: a file, or a directory tree.
inline void sync_tree(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path))
      if (entry.is_regular_file()) sync_path(entry.path());
  }
  if (std::filesystem::exists(path)) sync_path(path);
}

// Writes a snapshot through the policy under a temporary name, then renames it.
template <Checkpointable P>
void save_snapshot_atomically(const P& policy, const snapshot_t<P>& snapshot,
                              const std::filesystem::path& path) {
  std::filesystem::path temporary = path;
  temporary += ".partial";
  std::filesystem::remove_all(temporary);
  try {
    policy.save(snapshot, temporary);
    sync_tree(temporary);
  } catch (...) {
    std::filesystem::remove_all(temporary);
    throw;
  }
  commit_path(temporary, path);
}

inline std::vector<std::string> complete_checkpoints(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  if (!std::filesystem::is_directory(dir)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.starts_with("ckpt-") && !name.ends_with(".partial"))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Removes checkpoints beyond the newest `keep`, leftover .partial directories, and
// teacher files no remaining checkpoint refers to.
inline void prune_checkpoints(const std::filesystem::path& dir, std::size_t keep) {
  std::vector<std::string> names = complete_checkpoints(dir);
  while (names.size() > keep) {
    std::filesystem::remove_all(dir / names.front());
    names.erase(names.begin());
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().ends_with(".partial")) std::filesystem::remove_all(entry.path());
  std::set<std::string> referenced;
  for (const auto& name : names) {
    try {
      const nlohmann::json state = read_json_file(dir / name / "state.json");
      for (const auto& t : state.at("teachers")) referenced.insert(t.at("file").get<std::string>());
    } catch (...) {
      return;  // cannot tell what is referenced: keep every teacher file
    }
  }
  const std::filesystem::path teachers = dir / "teachers";
  if (!std::filesystem::is_directory(teachers)) return;
  std::vector<std::filesystem::path> unused;
  for (const auto& entry : std::filesystem::directory_iterator(teachers))
    if (!referenced.contains(entry.path().filename().string())) unused.push_back(entry.path());
  for (const auto& path : unused) std::filesystem::remove_all(path);
}

}  // namespace detail

// Writes checkpoint number `sequence`: new teacher snapshots, the policy, `state` (to
// which the teacher table is added), then moves `latest`, then prunes to `keep`.
template <Checkpointable P>
void write_checkpoint(const std::filesystem::path& dir, std::uint64_t sequence, const P& policy,
                      const teacher_registry<snapshot_t<P>>& teachers, nlohmann::json state,
                      std::size_t keep) {
  std::filesystem::create_directories(dir / "teachers");
  nlohmann::json table = nlohmann::json::array();
  for (const auto& [domain, entry] : teachers.entries()) {
    const std::string file = detail::teacher_file(entry.id);
    const std::filesystem::path path = dir / "teachers" / file;
    if (!std::filesystem::exists(path)) detail::save_snapshot_atomically(policy, *entry.snapshot, path);
    table.push_back({{"domain", domain},
                     {"file", file},
                     {"id", entry.id},
                     {"score", entry.score},
                     {"origin", entry.origin == teacher_origin::assigned ? "assigned" : "captured"},
                     {"source", entry.source}});
  }
  state["format"] = detail::checkpoint_format;
  state["version"] = detail::checkpoint_version;
  state["teachers"] = std::move(table);
  state["next_teacher_id"] = teachers.next_id();
  state["policy"] = "policy";

  const std::string name = detail::checkpoint_name(sequence);
  std::filesystem::path partial = dir / name;
  partial += ".partial";
  std::filesystem::remove_all(partial);
  std::filesystem::create_directories(partial);
  try {
    policy.save(policy.snapshot(), partial / "policy");
    detail::sync_tree(partial / "policy");
    detail::write_file_atomically(partial / "state.json", state.dump(1));
    detail::sync_path(partial);
  } catch (...) {
    std::filesystem::remove_all(partial);
    throw;
  }
  detail::commit_path(partial, dir / name);
  detail::write_file_atomically(dir / "latest", name + "\n");
  detail::prune_checkpoints(dir, std::max<std::size_t>(keep, 1));
}

template <class Snapshot>
struct loaded_checkpoint {
  std::filesystem::path path;
  nlohmann::json state;
  Snapshot policy;
  teacher_registry<Snapshot> teachers;
};

// Reads the checkpoint `latest` names, or nullopt when the directory has none. Nothing
// is applied: the caller commits what it read once everything has been read.
template <Checkpointable P>
std::optional<loaded_checkpoint<snapshot_t<P>>> read_latest_checkpoint(const std::filesystem::path& dir,
                                                                       const P& policy) {
  using snapshot = snapshot_t<P>;
  const std::filesystem::path latest = dir / "latest";
  if (!std::filesystem::exists(latest)) return std::nullopt;
  std::string name = detail::read_text_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (!name.starts_with("ckpt-") || name.find('/') != std::string::npos)
    detail::fail("checkpoint file '" + latest.string() + "'", "does not name a checkpoint: '" + name + "'");
  const std::filesystem::path path = dir / name;
  nlohmann::json state = detail::read_json_file(path / "state.json");
  const auto field = [&](const char* f) { return "checkpoint '" + path.string() + "' state." + f; };
  if (!state.is_object() || state.value("format", std::string()) != detail::checkpoint_format)
    detail::fail(field("format"), "is missing or not a cascade_rl checkpoint");
  if (state.value("version", 0) != detail::checkpoint_version)
    detail::fail(field("version"), "is not " + std::to_string(detail::checkpoint_version));

  teacher_registry<snapshot> teachers;
  try {
    std::map<std::uint64_t, std::shared_ptr<const snapshot>> by_id;
    for (const auto& t : state.at("teachers")) {
      const auto id = t.at("id").get<std::uint64_t>();
      if (!by_id.contains(id))
        by_id[id] = std::make_shared<const snapshot>(policy.load(dir / "teachers" / t.at("file").get<std::string>()));
      teacher_entry<snapshot> entry{by_id[id], t.at("score").get<double>(),
                                    t.at("origin").get<std::string>() == "assigned" ? teacher_origin::assigned
                                                                                    : teacher_origin::captured,
                                    t.at("source").get<std::string>(), id};
      teachers.put(t.at("domain").get<std::string>(), std::move(entry));
    }
    teachers.set_next_id(std::max(teachers.next_id(), state.at("next_teacher_id").get<std::uint64_t>()));
  } catch (const nlohmann::json::exception& e) {
    detail::fail(field("teachers"), std::string("is malformed: ") + e.what());
  }
  snapshot policy_snapshot = policy.load(path / state.value("policy", std::string("policy")));
  return loaded_checkpoint<snapshot>{path, std::move(state), std::move(policy_snapshot), std::move(teachers)};
}

}  // namespace cascade_rl
