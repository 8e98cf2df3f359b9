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
// Each checkpoint carries `checksums` (written last, before the rename): the size and
// FNV-1a 64 hash of state.json, of every file of its policy and of every teacher file it
// refers to. A checkpoint whose files do not match (torn by a file system that lost
// writes, truncated, bit-rotted, edited) is never loaded: reading falls back to the
// newest older checkpoint that verifies, and fails only when none does.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/atomic_file.hpp"
#include "cascade_rl/cascade/checkpoint_header.hpp"
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

inline constexpr const char* checksums_file = "checksums";
inline constexpr const char* checksums_format = "cascade_rl.checksums";

// FNV-1a, 64 bits, of a file's bytes: detects truncation and corruption (not an
// adversary: it is not a cryptographic hash).
inline std::uint64_t fnv1a64_of_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("checkpoint file '" + path.string() + "'", "cannot be opened to checksum");
  std::uint64_t h = 0xcbf29ce484222325ull;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(buffer[i]);
      h *= 0x100000001b3ull;
    }
  }
  if (in.bad()) fail("checkpoint file '" + path.string() + "'", "cannot be read to checksum");
  return h;
}

inline std::string hex64(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

// Adds `path` (a file, or every regular file of a directory tree) to `files`, keyed by
// its path relative to `base` with '/' separators.
inline void add_checksums(nlohmann::json& files, const std::filesystem::path& base,
                          const std::filesystem::path& path) {
  const auto add = [&](const std::filesystem::path& file) {
    files[file.lexically_relative(base).generic_string()] = {
        {"size", static_cast<std::uint64_t>(std::filesystem::file_size(file))},
        {"fnv1a64", hex64(fnv1a64_of_file(file))}};
  };
  if (std::filesystem::is_directory(path)) {
    std::vector<std::filesystem::path> entries;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path))
      if (entry.is_regular_file()) entries.push_back(entry.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) add(e);
  } else {
    add(path);
  }
}

// Writes <checkpoint>/checksums for state.json, the policy and the teacher files that
// state.json names (in <checkpoint>/../teachers).
inline void seal_checkpoint(const std::filesystem::path& checkpoint) {
  const nlohmann::json state = read_json_file(checkpoint / "state.json");
  if (!state.is_object()) fail("checkpoint '" + checkpoint.string() + "' state", "is not a JSON object");
  nlohmann::json files = nlohmann::json::object();
  add_checksums(files, checkpoint, checkpoint / "state.json");
  try {
    add_checksums(files, checkpoint, checkpoint / state.value("policy", std::string("policy")));
    if (state.contains("teachers"))
      for (const auto& t : state.at("teachers"))
        add_checksums(files, checkpoint, checkpoint / ".." / "teachers" / t.at("file").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint '" + checkpoint.string() + "' state", std::string("is malformed: ") + e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    fail("checkpoint '" + checkpoint.string() + "'", std::string("names a file that cannot be read: ") + e.what());
  }
  write_file_atomically(checkpoint / checksums_file,
                        nlohmann::json{{"format", checksums_format}, {"files", std::move(files)}}.dump(1));
}

// Empty when every file `checksums` lists has its recorded size and hash (and state.json
// is among them); otherwise why not.
inline std::string verify_checkpoint(const std::filesystem::path& checkpoint) {
  const std::filesystem::path list = checkpoint / checksums_file;
  if (!std::filesystem::is_regular_file(list)) return "has no checksums file";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text_file(list));
    if (manifest.value("format", std::string()) != checksums_format) return "its checksums file is not one";
    const nlohmann::json& files = manifest.at("files");
    if (!files.is_object() || !files.contains("state.json")) return "its checksums file does not cover state.json";
    for (const auto& [name, sum] : files.items()) {
      const std::filesystem::path file = checkpoint / name;
      std::error_code ec;
      const auto size = std::filesystem::file_size(file, ec);
      if (ec) return "'" + name + "' is missing";
      if (size != sum.at("size").get<std::uint64_t>())
        return "'" + name + "' has " + std::to_string(size) + " bytes, not " +
               std::to_string(sum.at("size").get<std::uint64_t>()) + " (torn or truncated)";
      if (hex64(fnv1a64_of_file(file)) != sum.at("fnv1a64").get<std::string>())
        return "'" + name + "' does not match its checksum (corrupted)";
    }
  } catch (const nlohmann::json::exception& e) {
    return std::string("its checksums file is malformed: ") + e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

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
  checkpoint_header header{.format = detail::checkpoint_format,
                           .version = detail::checkpoint_version,
                           .next_teacher_id = teachers.next_id(),
                           .policy = "policy"};
  for (const auto& [domain, entry] : teachers.entries()) {
    const std::string file = detail::teacher_file(entry.id);
    const std::filesystem::path path = dir / "teachers" / file;
    if (!std::filesystem::exists(path)) detail::save_snapshot_atomically(policy, *entry.snapshot, path);
    header.teachers.push_back({domain, file, entry.id, entry.score, entry.origin, entry.source});
  }
  detail::add_checkpoint_header(state, header);

  const std::string name = detail::checkpoint_name(sequence);
  std::filesystem::path partial = dir / name;
  partial += ".partial";
  std::filesystem::remove_all(partial);
  std::filesystem::create_directories(partial);
  try {
    policy.save(policy.snapshot(), partial / header.policy);
    detail::sync_tree(partial / header.policy);
    detail::write_file_atomically(partial / "state.json", state.dump(1));
    detail::seal_checkpoint(partial);
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
  std::vector<std::string> skipped{};  // newer checkpoints that failed their checksums, and why
};

// Reads the checkpoint `latest` names, or nullopt when the directory has none. A
// checkpoint that fails its checksums is skipped (never parsed) for the newest older one
// that verifies (reported on stderr and in `skipped`); none verifying is an error.
// Nothing is applied: the caller commits what it read once everything has been read.
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
  std::vector<std::string> candidates{name};
  {
    std::vector<std::string> older = detail::complete_checkpoints(dir);
    for (auto it = older.rbegin(); it != older.rend(); ++it)
      if (*it < name) candidates.push_back(*it);
  }
  std::vector<std::string> skipped;
  std::filesystem::path path;
  for (const auto& candidate : candidates) {
    const std::string why = detail::verify_checkpoint(dir / candidate);
    if (why.empty()) {
      path = dir / candidate;
      break;
    }
    skipped.push_back("checkpoint '" + (dir / candidate).string() + "': " + why);
  }
  if (path.empty())
    detail::fail("checkpoint '" + (dir / name).string() + "'",
                 "fails its checksums and no older checkpoint verifies: " + skipped.front());
  for (const auto& s : skipped)
    std::fprintf(stderr, "cascade_rl: skipping %s; resuming from '%s'\n", s.c_str(), path.string().c_str());
  nlohmann::json state = detail::read_json_file(path / "state.json");
  const std::string field = "checkpoint '" + path.string() + "' state";
  const checkpoint_header header = detail::checkpoint_header_from_json(state, field);
  if (header.format != detail::checkpoint_format)
    detail::fail(field + ".format", "is '" + header.format + "', not a cascade_rl checkpoint");
  if (header.version != detail::checkpoint_version)
    detail::fail(field + ".version", "is " + std::to_string(header.version) + ", not " +
                                         std::to_string(detail::checkpoint_version));

  teacher_registry<snapshot> teachers;
  std::map<std::uint64_t, std::shared_ptr<const snapshot>> by_id;
  for (const teacher_record& t : header.teachers) {
    if (!by_id.contains(t.id))
      by_id[t.id] = std::make_shared<const snapshot>(policy.load(dir / "teachers" / t.file));
    teachers.put(t.domain, teacher_entry<snapshot>{by_id[t.id], t.score, t.origin, t.source, t.id});
  }
  teachers.set_next_id(std::max(teachers.next_id(), header.next_teacher_id));
  snapshot policy_snapshot = policy.load(path / header.policy);
  return loaded_checkpoint<snapshot>{path, std::move(state), std::move(policy_snapshot), std::move(teachers),
                                    std::move(skipped)};
}

}  // namespace cascade_rl
