#pragma once
// A private scratch directory for one run, or for several that share files (compile,
// then test). Two kinds:
//  - on tmpfs (what sandbox::make_scratch gives where the system allows it): a tmpfs of
//    limits.scratch_bytes and limits.scratch_inodes, mounted in a mount namespace of
//    its own that only the sandbox's runs enter. Writing past either cap fails with
//    ENOSPC. On the host, path() is an empty directory (the mount point) and nothing is
//    mounted in the caller's namespace; this process reads and writes the files through
//    a descriptor of the tmpfs's root (host_path()). The tmpfs is freed with the last
//    descriptor, so it cannot outlive this object, or the process if it crashes.
//  - a host directory (the public constructor, and the fallback where there is no
//    tmpfs scratch): made with mkdtemp (mode 0700); its total size is not capped.
// Either way everything is removed on destruction. Paths given to write and read must
// be relative and stay inside; neither follows a symbolic link the program may have
// planted.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/detail/namespaces.hpp"
#include "cascade_rl/verify/detail/remove_tree.hpp"

namespace cascade_rl::verify {

// A file to place in the scratch directory before a run.
struct file {
  std::string path;  // relative, e.g. "main.py" or "src/lib.cpp"
  std::string contents{};
  bool executable = false;
};

// The scratch directory's use (tmpfs only: a host directory reports zeros).
struct scratch_usage {
  std::uint64_t bytes_used = 0, bytes_total = 0;
  std::uint64_t inodes_used = 0, inodes_total = 0;
  bool full = false;  // no byte or no inode left
};

namespace detail {

// `relative` normalised, refusing absolute paths and "..".
inline std::filesystem::path relative_inside(std::string_view relative, std::string_view argument) {
  const std::filesystem::path rel = std::filesystem::path(relative).lexically_normal();
  if (relative.empty() || rel.is_absolute() || rel.empty() || *rel.begin() == ".." || rel == "." ||
      std::string_view(relative).find('\0') != std::string_view::npos)
    cascade_rl::detail::fail(argument, "'" + std::string(relative) +
                                           "' is not a relative path inside the scratch directory");
  for (const auto& part : rel)
    if (part == "..")
      cascade_rl::detail::fail(argument, "'" + std::string(relative) + "' leaves the scratch directory");
  return rel;
}

// `relative` as a path inside `root`, refusing absolute paths and "..".
inline std::filesystem::path inside(const std::filesystem::path& root, std::string_view relative,
                                    std::string_view argument) {
  return root / relative_inside(relative, argument);
}

// How the sandbox asks for a tmpfs scratch.
struct tmpfs_request {
  std::uint64_t bytes = 0, inodes = 0;
  std::uint32_t uid = 0, gid = 0;  // owner of the tmpfs's root, as the runs see it
  int userns_fd = -1;              // caller not root: the sandbox's user namespace
  bool chown_writes = false;       // caller root: what this process writes goes to uid:gid
};

}  // namespace detail

class scratch_directory {
 public:
  // A host directory under `parent`.
  explicit scratch_directory(const std::filesystem::path& parent) : path_(make_directory(parent)) {
    root_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root_.get() < 0) {
      const int e = errno;
      ::rmdir(path_.c_str());
      cascade_rl::detail::fail("scratch_directory", "cannot open '" + path_.string() + "': " + std::strerror(e));
    }
  }

  // A tmpfs mounted on an empty directory under `parent`, in a mount namespace of its own.
  scratch_directory(const std::filesystem::path& parent, const detail::tmpfs_request& request)
      : path_(make_directory(parent)) {
    const std::string options = "size=" + std::to_string(request.bytes) + ",nr_inodes=" +
                                std::to_string(request.inodes) + ",mode=0700,uid=" + std::to_string(request.uid) +
                                ",gid=" + std::to_string(request.gid);
    detail::holder_plan plan;
    plan.userns_fd = request.userns_fd;
    plan.tmpfs_path = path_.c_str();
    plan.tmpfs_options = options.c_str();
    detail::held_namespaces held = detail::hold_namespaces(plan, 0);
    if (!held.error.empty()) {
      ::rmdir(path_.c_str());
      cascade_rl::detail::fail("sandbox", "cannot make a tmpfs scratch directory at '" + path_.string() +
                                              "': " + held.error);
    }
    root_ = std::move(held.root);
    mount_ns_ = std::move(held.mount);
    if (request.chown_writes) owner_ = std::pair{request.uid, request.gid};
  }

  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;
  scratch_directory(scratch_directory&& other) noexcept
      : path_(std::exchange(other.path_, {})),
        root_(std::move(other.root_)),
        mount_ns_(std::move(other.mount_ns_)),
        owner_(other.owner_),
        identity_(std::move(other.identity_)) {}
  scratch_directory& operator=(scratch_directory&& other) noexcept {
    if (this != &other) {
      remove();
      path_ = std::exchange(other.path_, {});
      root_ = std::move(other.root_);
      mount_ns_ = std::move(other.mount_ns_);
      owner_ = other.owner_;
      identity_ = std::move(other.identity_);
    }
    return *this;
  }
  ~scratch_directory() { remove(); }

  // Where the programs see it: their working directory, HOME and TMPDIR.
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] bool on_tmpfs() const { return mount_ns_.get() >= 0; }
  // Where this process reaches the files with ordinary path operations: path() for a
  // host directory, /proc/self/fd/<root> for a tmpfs (valid in this process only, while
  // this object lives; symbolic links in it resolve against this process's root, so
  // prefer write, read and copy_tree once a program has run there).
  [[nodiscard]] std::filesystem::path host_path() const {
    return on_tmpfs() ? std::filesystem::path("/proc/self/fd/" + std::to_string(root_.get())) : path_;
  }
  // The tmpfs's mount namespace (-1 for a host directory); runs enter a copy of it.
  [[nodiscard]] int mount_namespace() const { return mount_ns_.get(); }

  // Writes `f` (making its parent directories), replacing whatever was at that path;
  // returns the path through which this process sees it (see host_path()).
  std::filesystem::path write(const file& f) const {
    const std::filesystem::path rel = detail::relative_inside(f.path, "file.path");
    const detail::fd_guard dir = open_directory(rel.parent_path(), true);
    if (dir.get() < 0) fail_on(f.path, "cannot make its directory");
    const std::string name = rel.filename().string();
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT) fail_on(f.path, "cannot replace it");
    const detail::fd_guard out(::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                        f.executable ? 0755 : 0644));
    if (out.get() < 0) fail_on(f.path, "cannot create it");
    write_all(out.get(), f.contents, f.path);
    ::fchmod(out.get(), f.executable ? 0755 : 0644);  // whatever the umask
    give(out.get());
    return host_path() / rel;
  }

  // Removes the file or link at `relative`, through no symbolic link on the way; false
  // when there was none.
  bool erase(std::string_view relative) const {
    const std::filesystem::path rel = detail::relative_inside(relative, "relative");
    const detail::fd_guard dir = open_directory(rel.parent_path(), false);
    return dir.get() >= 0 && ::unlinkat(dir.get(), rel.filename().c_str(), 0) == 0;
  }

  // Reads a regular file the program left behind (nullopt if there is none, or if the
  // path goes through a symbolic link).
  [[nodiscard]] std::optional<std::string> read(std::string_view relative) const {
    const std::filesystem::path rel = detail::relative_inside(relative, "relative");
    const detail::fd_guard dir = open_directory(rel.parent_path(), false);
    if (dir.get() < 0) return std::nullopt;
    const detail::fd_guard in(
        ::openat(dir.get(), rel.filename().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (in.get() < 0 || ::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    std::string out;
    char buffer[65536];
    for (ssize_t n; (n = ::read(in.get(), buffer, sizeof buffer)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return std::nullopt;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }

  // Copies a directory tree (regular files with their permissions, directories, and
  // symbolic links as links) into the scratch directory, e.g. a repository for a
  // patch-and-test run.
  void copy_tree(const std::filesystem::path& source) const {
    const detail::fd_guard top(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
    copy_into(top.get(), source, "");
  }

  // Gives the directory and everything in it to uid:gid (the sandbox user), and what
  // this process writes through this object from now on. Entries it cannot reach (a
  // program may nest directories deeper than descriptors allow) keep their owner.
  void hand_over(std::uint32_t uid, std::uint32_t gid) const {
    if (::fchown(root_.get(), uid, gid) != 0)
      cascade_rl::detail::fail("scratch_directory", "cannot chown '" + path_.string() + "': " + std::strerror(errno));
    std::error_code ec;
    const std::filesystem::path top = host_path();
    for (auto it = std::filesystem::recursive_directory_iterator(
             top, std::filesystem::directory_options::skip_permission_denied, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      (void)::lchown(it->path().c_str(), uid, gid);
    owner_ = std::pair{uid, gid};
  }
  [[nodiscard]] bool owned_by(std::uint32_t uid, std::uint32_t gid) const {
    return owner_ && owner_->first == uid && owner_->second == gid;
  }

  // The uid (and gid of the same number) that runs in this directory have when the
  // caller is root (detail/identities.hpp): given by the sandbox when it makes the
  // directory, or at its first run in it; held until this object is destroyed.
  [[nodiscard]] std::optional<std::uint32_t> identity() const {
    return identity_ ? std::optional<std::uint32_t>(*identity_) : std::nullopt;
  }
  void set_identity(std::shared_ptr<const std::uint32_t> id) const { identity_ = std::move(id); }

  [[nodiscard]] scratch_usage usage() const {
    scratch_usage u;
    struct statfs s {};
    if (!on_tmpfs() || ::fstatfs(root_.get(), &s) != 0) return u;
    const auto block = static_cast<std::uint64_t>(s.f_bsize);
    u.bytes_total = static_cast<std::uint64_t>(s.f_blocks) * block;
    u.bytes_used = static_cast<std::uint64_t>(s.f_blocks - s.f_bfree) * block;
    u.inodes_total = static_cast<std::uint64_t>(s.f_files);
    u.inodes_used = static_cast<std::uint64_t>(s.f_files - s.f_ffree);
    u.full = s.f_bfree == 0 || s.f_ffree == 0;
    return u;
  }

 private:
  static std::filesystem::path make_directory(const std::filesystem::path& parent) {
    std::string pattern = (parent / "cascade_rl_verify_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      cascade_rl::detail::fail("sandbox_options.scratch_parent",
                               "cannot make a directory in '" + parent.string() + "': " + std::strerror(errno));
    return pattern;
  }

  [[noreturn]] void fail_on(std::string_view relative, std::string_view what) const {
    cascade_rl::detail::fail("file.path", "'" + std::string(relative) + "' in '" + path_.string() + "': " +
                                              std::string(what) + ": " + std::strerror(errno));
  }

  void give(int fd) const {
    if (owner_) (void)::fchown(fd, owner_->first, owner_->second);
  }

  // The directory `rel` below the root, without following symbolic links; made (with
  // its parents) when `create`. -1 if it cannot be.
  [[nodiscard]] detail::fd_guard open_directory(const std::filesystem::path& rel, bool create) const {
    detail::fd_guard current(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
    for (const auto& part : rel) {
      if (current.get() < 0) break;
      const std::string name = part.string();
      if (create && ::mkdirat(current.get(), name.c_str(), 0755) == 0 && owner_)
        (void)::fchownat(current.get(), name.c_str(), owner_->first, owner_->second, AT_SYMLINK_NOFOLLOW);
      current.reset(::openat(current.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    return current;
  }

  void write_all(int fd, std::string_view data, std::string_view relative) const {
    for (std::size_t done = 0; done < data.size();) {
      const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_on(relative, errno == ENOSPC ? "the scratch directory is full" : "cannot write it");
      done += static_cast<std::size_t>(n);
    }
  }

  void copy_into(int dir, const std::filesystem::path& source, const std::string& shown) const {
    for (const auto& entry : std::filesystem::directory_iterator(source)) {
      const std::string name = entry.path().filename().string();
      const std::string rel = shown.empty() ? name : shown + "/" + name;
      const auto status = entry.symlink_status();
      if (std::filesystem::is_directory(status)) {
        if (::mkdirat(dir, name.c_str(), 0755) != 0 && errno != EEXIST) fail_on(rel, "cannot make it");
        if (owner_) (void)::fchownat(dir, name.c_str(), owner_->first, owner_->second, AT_SYMLINK_NOFOLLOW);
        const detail::fd_guard sub(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.get() < 0) fail_on(rel, "cannot open it");
        copy_into(sub.get(), entry.path(), rel);
        continue;
      }
      if (!std::filesystem::is_regular_file(status) && !std::filesystem::is_symlink(status)) continue;
      if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) fail_on(rel, "cannot replace it");
      if (std::filesystem::is_symlink(status)) {
        if (::symlinkat(std::filesystem::read_symlink(entry.path()).c_str(), dir, name.c_str()) != 0)
          fail_on(rel, "cannot make the link");
        if (owner_) (void)::fchownat(dir, name.c_str(), owner_->first, owner_->second, AT_SYMLINK_NOFOLLOW);
        continue;
      }
      const auto mode = static_cast<mode_t>(status.permissions() & std::filesystem::perms::all);
      const detail::fd_guard out(::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
      if (out.get() < 0) fail_on(rel, "cannot create it");
      std::ifstream in(entry.path(), std::ios::binary);
      char buffer[65536];
      while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
        write_all(out.get(), std::string_view(buffer, static_cast<std::size_t>(in.gcount())), rel);
        if (!in) break;
      }
      if (in.bad()) fail_on(rel, "cannot read the source");
      ::fchmod(out.get(), mode);
      give(out.get());
    }
  }

  void remove() noexcept {
    if (path_.empty()) return;
    const bool tmpfs = on_tmpfs();
    root_.reset();
    mount_ns_.reset();  // the tmpfs goes with its last descriptor
    // A host directory holds whatever the program left (any depth, no permissions):
    // removed with a few descriptors and time linear in its entries.
    if (!tmpfs || ::rmdir(path_.c_str()) != 0) (void)detail::remove_tree(path_);
    path_.clear();
  }

  std::filesystem::path path_;
  detail::fd_guard root_{}, mount_ns_{};
  mutable std::optional<std::pair<std::uint32_t, std::uint32_t>> owner_{};
  mutable std::shared_ptr<const std::uint32_t> identity_{};  // released after remove()
};

}  // namespace cascade_rl::verify
