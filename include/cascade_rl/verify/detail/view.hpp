#pragma once
// The file view of a run, as the caller prepares it for init (sandbox_child.hpp's
// build_view applies it): a fresh tmpfs root holding only
//   - the system paths (the interpreters, compilers and their libraries: /usr and the
//     top-level /bin, /sbin, /lib* directories, or the links to /usr that a merged-/usr
//     system has there), read-only;
//   - a small /etc: the dynamic linker's cache and configuration, alternatives and the
//     time zone from the host, read-only, and passwd, group, hosts and hostname written
//     for the run (its own user only);
//   - a private /dev: null, zero, full, random and urandom bound from the host, a devpts
//     instance of its own (a handful of ptys, counted apart from the host's), /dev/ptmx
//     a link into it, a small /dev/shm;
//   - /proc of the run's PID namespace (hidepid=2);
//   - a private, small /tmp;
//   - the paths the caller lists (sandbox_options::read_only_paths), read-only;
//   - the scratch directory at its host path, writable.
// Nothing else of the host's file system is reachable: the host's root is detached.
// A host directory is seen through a read-only overlay of its own where the kernel
// allows it (`overlay`): the same files, other inodes, so that a program's file locks
// (flock, fcntl) and inotify watches on them never reach the host's. A directory with
// mounts below it (which an overlay would not show) and a single file are bound.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/detail/sandbox_child.hpp"

namespace cascade_rl::verify::detail {

// Bytes and inodes of the run's private /tmp and /dev/shm (programs get TMPDIR=scratch;
// these are for the few that hard-code the paths). Their pages are memory of the run.
constexpr const char* small_tmpfs_options = "size=1m,nr_inodes=256,mode=1777";
// ptys of the run's own devpts instance (its max= is the instance's, not the host's).
constexpr const char* devpts_options = "newinstance,ptmxmode=0666,mode=0620,max=16";

// The mount points of this process's mount namespace (/proc/self/mountinfo's fifth
// field, its octal escapes decoded).
inline std::vector<std::string> mount_points() {
  std::vector<std::string> points;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    if (!(fields >> id >> parent >> device >> root >> point)) continue;
    std::string decoded;
    for (std::size_t i = 0; i < point.size(); ++i) {
      if (point[i] == '\\' && i + 3 < point.size()) {
        decoded += static_cast<char>(std::stoi(point.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        decoded += point[i];
      }
    }
    points.push_back(std::move(decoded));
  }
  return points;
}

// overlayfs's lowerdir option: the directory, then the empty layer (a colon separates
// layers; a colon or backslash in the path is escaped with a backslash).
inline std::string overlay_lowerdir(const std::string& directory) {
  std::string out;
  for (const char c : directory) {
    if (c == ':' || c == '\\') out += '\\';
    out += c;
  }
  return out + ":" + overlay_empty_layer_before_pivot;
}

class file_view {
 public:
  struct entry {
    std::int32_t kind = 0;
    std::string source{}, target{}, data{};
    bool optional = false, writable = false;
  };

  // `overlay`: host directories are seen through overlays (see above).
  explicit file_view(bool overlay = false) : overlay_(overlay) {
    if (overlay_) mount_points_ = mount_points();
  }

  // A host path read-only at the same path: a symbolic link is recreated as one (merged
  // /usr), a directory is overlaid or bound, a file bound; `optional`: a missing path is
  // skipped, else it is refused (argument names the option it came from).
  // `follow`: a link is followed instead (a caller's path, placed where it points).
  void add_host_path(const std::filesystem::path& path, bool optional, const std::string& argument,
                     bool follow = false) {
    struct stat st {};
    if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
      if (optional) return;
      cascade_rl::detail::fail(argument, "'" + path.string() + "' does not exist");
    }
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const auto link = std::filesystem::read_symlink(path, ec);
      if (!ec) entries_.push_back({view_symlink, {}, path.string(), link.string()});
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      entries_.push_back({view_bind_file, path.string(), path.string(), {}, optional, false});
      return;
    }
    // The path as the kernel resolves it, for the mount table's comparison.
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::canonical(path, ec);
    if (overlay_ && !ec && !has_mounts_below(resolved.string()))
      entries_.push_back({view_overlay_directory, path.string(), path.string(), overlay_lowerdir(path.string()),
                          optional, false});
    else
      entries_.push_back({view_bind_directory, path.string(), path.string(), {}, optional, false});
  }
  void add(entry e) { entries_.push_back(std::move(e)); }
  [[nodiscard]] std::size_t size() const { return entries_.size(); }
  [[nodiscard]] std::size_t count(std::int32_t kind) const {
    std::size_t n = 0;
    for (const entry& e : entries_) n += e.kind == kind;
    return n;
  }

  // The entries as init reads them; valid while this object is unchanged.
  [[nodiscard]] std::vector<view_entry> raw() const {
    std::vector<view_entry> out;
    for (const entry& e : entries_)
      out.push_back({e.kind, e.source.empty() ? nullptr : e.source.c_str(), e.target.c_str(), e.data.c_str(),
                     e.optional, e.writable});
    return out;
  }

 private:
  [[nodiscard]] bool has_mounts_below(const std::string& directory) const {
    const std::string prefix = directory == "/" ? "/" : directory + "/";
    for (const std::string& point : mount_points_)
      if (point.size() > prefix.size() && point.compare(0, prefix.size(), prefix) == 0) return true;
    return false;
  }

  bool overlay_ = false;
  std::vector<std::string> mount_points_;
  std::vector<entry> entries_;
};

// What every run of a sandbox sees (the per-run part, add_run_entries, comes last).
inline file_view base_view(const std::vector<std::filesystem::path>& system_paths,
                           const std::vector<std::string>& etc_files,
                           const std::vector<std::filesystem::path>& read_only_paths, bool proc, bool overlay) {
  file_view view(overlay);
  for (const auto& p : system_paths) view.add_host_path(p, true, "sandbox_options.system_paths");
  for (const auto& name : etc_files) view.add_host_path(std::filesystem::path("/etc") / name, true, "sandbox_options.etc_files");
  view.add({view_write_file, {}, "/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"});
  view.add({view_write_file, {}, "/etc/hostname", "sandbox\n"});
  for (const char* device : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"})
    view.add({view_bind_file, device, device, {}, true, false});
  view.add({view_devpts, {}, "/dev/pts", devpts_options});
  view.add({view_symlink, {}, "/dev/ptmx", "pts/ptmx"});
  view.add({view_symlink, {}, "/dev/fd", "/proc/self/fd"});
  view.add({view_symlink, {}, "/dev/stdin", "/proc/self/fd/0"});
  view.add({view_symlink, {}, "/dev/stdout", "/proc/self/fd/1"});
  view.add({view_symlink, {}, "/dev/stderr", "/proc/self/fd/2"});
  view.add({view_tmpfs, {}, "/dev/shm", small_tmpfs_options, false, true});
  if (proc) view.add({view_proc, {}, "/proc", {}});
  view.add({view_tmpfs, {}, "/tmp", small_tmpfs_options, false, true});
  for (const auto& p : read_only_paths) {
    if (!p.is_absolute()) cascade_rl::detail::fail("sandbox_options.read_only_paths", "'" + p.string() + "' is not absolute");
    view.add_host_path(p.lexically_normal(), false, "sandbox_options.read_only_paths", true);
  }
  return view;
}

// The run's own entries: its user in passwd and group, and the scratch directory.
inline void add_run_entries(file_view& view, const std::string& scratch, std::uint32_t uid, std::uint32_t gid) {
  const std::string u = std::to_string(uid), g = std::to_string(gid);
  view.add({view_write_file, {}, "/etc/passwd",
            "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:" + u + ":" + g + ":sandbox:" + scratch +
                ":/usr/sbin/nologin\n"});
  view.add({view_write_file, {}, "/etc/group", "root:x:0:\nsandbox:x:" + g + ":\n"});
  view.add({view_bind_directory, scratch, scratch, {}, false, true});
}

}  // namespace cascade_rl::verify::detail
