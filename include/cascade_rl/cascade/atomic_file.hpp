#pragma once
// Files that are either fully written or absent: write to a temporary name, flush and
// fsync it, rename it over the final name (atomic on POSIX file systems), then fsync the
// directory so that the rename itself survives a crash. A reader therefore sees the old
// file or the new one, never half of one.

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl::detail {

// `kind` names what the file is for the user ("checkpoint file", "schedule file").
[[noreturn]] inline void fail_io(const std::filesystem::path& path, std::string_view what,
                                 std::string_view kind = "checkpoint file") {
  fail(std::string(kind) + " '" + path.string() + "'",
       std::string(what) + (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
}

// fsync of a file or directory by path.
inline void sync_path(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail_io(path, "cannot be opened to sync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail_io(path, "cannot be synced");
}

inline void sync_parent(const std::filesystem::path& path) {
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : ".";
  sync_path(parent);
}

// Writes `contents` to `path` atomically. On failure nothing is left at `path` that was
// not there before, and the temporary file is removed.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                                  std::string_view kind = "checkpoint file") {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  errno = 0;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io(temporary, "cannot be created", kind);
  std::size_t written = 0;
  while (written < contents.size()) {
    const ::ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      std::filesystem::remove(temporary);
      fail_io(temporary, "cannot be written", kind);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    std::filesystem::remove(temporary);
    fail_io(temporary, "cannot be synced", kind);
  }
  ::close(fd);
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary);
    fail(std::string(kind) + " '" + path.string() + "'", "cannot be renamed into place: " + ec.message());
  }
  sync_parent(path);
}

// Renames a fully written file or directory into place and makes the rename durable.
inline void commit_path(const std::filesystem::path& temporary, const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(path)) std::filesystem::remove_all(path);
  std::filesystem::rename(temporary, path, ec);
  if (ec)
    fail("checkpoint path '" + path.string() + "'", "cannot be renamed into place: " + ec.message());
  sync_parent(path);
}

// Reads and parses a JSON file; a missing, truncated or malformed file is an error
// naming it.
inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("checkpoint file '" + path.string() + "'", "cannot be opened");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint file '" + path.string() + "'",
         std::string("is malformed or truncated JSON: ") + e.what());
  }
}

inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("checkpoint file '" + path.string() + "'", "cannot be opened");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace cascade_rl::detail
