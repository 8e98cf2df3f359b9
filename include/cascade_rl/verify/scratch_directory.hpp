#pragma once
// A private scratch directory: made with mkdtemp (mode 0700), filled by the caller,
// handed to the sandbox uid before a run, removed with everything in it on
// destruction. Paths written into it must be relative and stay inside it.

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl::verify {

// A file to place in the scratch directory before a run.
struct file {
  std::string path;  // relative, e.g. "main.py" or "src/lib.cpp"
  std::string contents{};
  bool executable = false;
};

namespace detail {

// `relative` as a path inside `root`, refusing absolute paths and "..".
inline std::filesystem::path inside(const std::filesystem::path& root, std::string_view relative,
                                    std::string_view argument) {
  const std::filesystem::path rel = std::filesystem::path(relative).lexically_normal();
  if (relative.empty() || rel.is_absolute() || rel.empty() || *rel.begin() == ".." ||
      rel.string().find('\0') != std::string::npos)
    cascade_rl::detail::fail(argument, "'" + std::string(relative) +
                                           "' is not a relative path inside the scratch directory");
  for (const auto& part : rel)
    if (part == "..")
      cascade_rl::detail::fail(argument, "'" + std::string(relative) + "' leaves the scratch directory");
  return root / rel;
}

}  // namespace detail

class scratch_directory {
 public:
  explicit scratch_directory(const std::filesystem::path& parent) {
    std::string pattern = (parent / "cascade_rl_verify_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      cascade_rl::detail::fail("sandbox_options.scratch_parent",
                               "cannot make a directory in '" + parent.string() +
                                   "': " + std::strerror(errno));
    path_ = pattern;
  }
  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;
  scratch_directory(scratch_directory&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  scratch_directory& operator=(scratch_directory&& other) noexcept {
    if (this != &other) {
      remove();
      path_ = std::exchange(other.path_, {});
    }
    return *this;
  }
  ~scratch_directory() { remove(); }

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  // Writes `f` (making its parent directories); returns the absolute path.
  std::filesystem::path write(const file& f) const {
    const std::filesystem::path target = detail::inside(path_, f.path, "file.path");
    std::filesystem::create_directories(target.parent_path());
    if (std::filesystem::is_symlink(target)) std::filesystem::remove(target);
    {
      std::ofstream out(target, std::ios::binary | std::ios::trunc);
      out.write(f.contents.data(), static_cast<std::streamsize>(f.contents.size()));
      if (!out) cascade_rl::detail::fail("file.path", "cannot write '" + target.string() + "'");
    }
    std::filesystem::permissions(target,
                                 f.executable ? std::filesystem::perms(0755) : std::filesystem::perms(0644));
    return target;
  }

  // Reads a file the program left behind (nullopt if there is none).
  [[nodiscard]] std::optional<std::string> read(std::string_view relative) const {
    const std::filesystem::path target = detail::inside(path_, relative, "relative");
    // The program may have planted links: read only what resolves inside the directory.
    std::error_code ec;
    const auto real = std::filesystem::canonical(target, ec);
    const auto root = std::filesystem::canonical(path_, ec);
    if (ec || std::filesystem::is_symlink(target) || !std::filesystem::is_regular_file(real) ||
        real.lexically_relative(root).empty() || *real.lexically_relative(root).begin() == "..")
      return std::nullopt;
    std::ifstream in(real, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Copies a directory tree (regular files and directories; symbolic links are copied
  // as links) into the scratch directory, e.g. a repository for a patch-and-test run.
  void copy_tree(const std::filesystem::path& source) const {
    std::filesystem::copy(source, path_,
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::copy_symlinks |
                              std::filesystem::copy_options::overwrite_existing);
  }

  // Gives the directory and everything in it to uid:gid (the sandbox user).
  void hand_over(std::uint32_t uid, std::uint32_t gid) const {
    const auto own = [&](const std::filesystem::path& p) {
      if (::lchown(p.c_str(), uid, gid) != 0)
        cascade_rl::detail::fail("scratch_directory", "cannot chown '" + p.string() +
                                                           "': " + std::strerror(errno));
    };
    own(path_);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path_)) own(entry.path());
  }

 private:
  void remove() noexcept {
    if (path_.empty()) return;
    std::error_code ignored;
    // A program may have left read-only directories: make them writable first.
    for (auto it = std::filesystem::recursive_directory_iterator(
             path_, std::filesystem::directory_options::skip_permission_denied, ignored);
         !ignored && it != std::filesystem::recursive_directory_iterator(); it.increment(ignored))
      if (it->is_directory(ignored) && !it->is_symlink(ignored))
        std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                     std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path_, ignored);
    path_.clear();
  }

  std::filesystem::path path_;
};

}  // namespace cascade_rl::verify
