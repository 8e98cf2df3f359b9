#pragma once
// Removes a directory tree that a sandboxed program wrote (a host-directory scratch),
// with a fixed number of descriptors and time linear in its entries, whatever its depth.
// A recursive walk holds one descriptor per level and builds paths as long as the tree
// is deep: a 16000-deep chain of directories (issue 34) ran the trainer out of
// descriptors and left the tree on the host. Here every directory met below the top is
// first moved up into the top (renameat2, no replacing), then emptied and removed:
// each directory is moved once and each entry removed once, and at most three
// descriptors are open. Directories are made accessible (0700) before they are entered,
// since a program may leave them without permissions. Meant for a tree no process is
// changing any more (the run's processes are gone).

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>

#include "cascade_rl/verify/detail/namespaces.hpp"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

namespace cascade_rl::verify::detail {

// Unlinks every entry of the directory `dir` (a descriptor it leaves open), moving each
// non-empty subdirectory into `top` under a fresh name instead; returns false when an
// entry can be neither removed nor moved. Sets `moved` when it moved one.
inline bool empty_one_level(int dir, int top, std::uint64_t& serial, bool& moved) {
  const int listing = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (listing < 0) return false;
  DIR* stream = ::fdopendir(listing);
  if (stream == nullptr) {
    ::close(listing);
    return false;
  }
  ::rewinddir(stream);  // a duplicate shares the directory's offset with earlier listings
  bool ok = true;
  while (const dirent* e = ::readdir(stream)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      ok = false;
      continue;
    }
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) == 0) continue;  // an empty directory
    if (dir == top) continue;  // non-empty, already in the top: its turn comes
    ::fchmodat(dir, name.c_str(), 0700, 0);  // moving a directory writes its "..": its owner needs w
    bool placed = false;
    while (!placed) {
      const std::string fresh = ".cascade_rl_removing_" + std::to_string(serial++);
      if (::renameat2(dir, name.c_str(), top, fresh.c_str(), RENAME_NOREPLACE) == 0) placed = true;
      else if (errno != EEXIST) break;
    }
    ok = ok && placed;
    moved = moved || placed;
  }
  ::closedir(stream);
  return ok;
}

// Removes `path` and everything below it; false when something is left.
inline bool remove_tree(const std::filesystem::path& path) {
  const fd_guard top(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (top.get() < 0) return errno == ENOENT;
  ::fchmod(top.get(), 0700);
  std::uint64_t serial = 0;
  // Passes over the top until it is empty: each empties the top's own entries (files,
  // empty directories) and, for each directory in it, moves that directory's
  // subdirectories up into the top, removes its other entries and then the directory.
  for (bool progress = true; progress;) {
    progress = false;
    bool moved = false;
    if (!empty_one_level(top.get(), top.get(), serial, moved)) return false;
    const int listing = ::fcntl(top.get(), F_DUPFD_CLOEXEC, 0);
    DIR* stream = listing >= 0 ? ::fdopendir(listing) : nullptr;
    if (stream == nullptr) {
      if (listing >= 0) ::close(listing);
      return false;
    }
    ::rewinddir(stream);  // the duplicate shares the top's offset, which the last listing left at the end
    while (const dirent* e = ::readdir(stream)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      ::fchmodat(top.get(), name.c_str(), 0700, 0);
      const fd_guard sub(::openat(top.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.get() < 0) continue;  // gone, or not a directory: the next pass unlinks it
      if (!empty_one_level(sub.get(), top.get(), serial, moved)) {
        ::closedir(stream);
        return false;
      }
      if (::unlinkat(top.get(), name.c_str(), AT_REMOVEDIR) == 0) progress = true;
    }
    ::closedir(stream);
    progress = progress || moved;
  }
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

}  // namespace cascade_rl::verify::detail
