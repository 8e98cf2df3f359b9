// Issue 34: what a program can do to the host through the files its view shares with
// it (system paths, etc_files, read_only_paths). The data is the host's own, read-only;
// its locks, watches, cached pages and writeback must stay the host's. Each test runs
// the attack, asserts that it fails and that the host is unaffected, then runs it again
// with the defence off, to show the attack is real.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "verify/support.hpp"

namespace {

using namespace verify_test;

// The directory the caller lists in read_only_paths, as a trainer's data or checkpoint
// directory would be, and a file in it of `bytes` bytes, on disk (its cached pages clean).
using listed_directory = host_directory;
std::filesystem::path file_of(const listed_directory& dir, const std::string& name, std::size_t bytes = 1) {
  return dir.put(name, std::string(bytes, 'x'), true);
}

// A descriptor closed at scope exit.
struct descriptor {
  int fd = -1;
  explicit descriptor(int f) : fd(f) {}
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  ~descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// The program: tries the host's locks on `held` (flock and a POSIX read lock while the
// host holds both exclusively), takes `taken` exclusively for 0.8 s while watching the
// directory with inotify, and prints what it got.
const std::string lock_and_watch = R"(
import ctypes, fcntl, os, select, struct, sys, time
d = sys.argv[1]
held = open(d + '/held')
try:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB); print('flock granted')
except OSError:
    print('flock refused')
try:
    fcntl.fcntl(held, fcntl.F_SETLK, struct.pack('hhqqi', fcntl.F_RDLCK, 0, 0, 0, 0)); print('posix granted')
except OSError:
    print('posix refused')
taken = open(d + '/taken')
fcntl.flock(taken, fcntl.LOCK_EX)
libc = ctypes.CDLL(None, use_errno=True)
watches = libc.inotify_init1(os.O_NONBLOCK)
# IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE: what the host's writes raise
print('watch', libc.inotify_add_watch(watches, d.encode(), 0x10a) > 0)
events, end = 0, time.monotonic() + 0.8
while time.monotonic() < end:
    if select.select([watches], [], [], 0.05)[0]:
        events += len(os.read(watches, 65536))
print('event bytes', events)
)";

struct lock_attack_outcome {
  std::string program_output;
  int host_tries = 0, host_refusals = 0, host_files_written = 0;
};

// Runs lock_and_watch on `dir` while the host holds `held`'s locks, tries to lock
// `taken` every 5 ms and writes a new file into the directory every 10 ms (a checkpoint
// appearing).
lock_attack_outcome run_lock_attack(const v::sandbox& box, const listed_directory& dir) {
  lock_attack_outcome out;
  const descriptor held(::open(file_of(dir, "held").c_str(), O_RDWR | O_CLOEXEC));
  const descriptor taken(::open(file_of(dir, "taken").c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(::flock(held.fd, LOCK_EX | LOCK_NB), 0) << std::strerror(errno);
  struct flock write_lock {};
  write_lock.l_type = F_WRLCK;
  write_lock.l_whence = SEEK_SET;
  EXPECT_EQ(::fcntl(held.fd, F_SETLK, &write_lock), 0) << std::strerror(errno);
  std::atomic<bool> done{false};
  std::thread host([&] {
    while (!done) {
      ++out.host_tries;
      if (::flock(taken.fd, LOCK_EX | LOCK_NB) == 0) ::flock(taken.fd, LOCK_UN);
      else ++out.host_refusals;
      if (out.host_tries % 2 == 0) (void)file_of(dir, "checkpoint_" + std::to_string(out.host_files_written++));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto r = box.run({.argv = {"python3", "-I", "-c", lock_and_watch, dir.path().string()}});
  done = true;
  host.join();
  EXPECT_TRUE(r.succeeded()) << v::to_string(r.reason) << " " << r.stderr_text;
  out.program_output = r.stdout_text;
  return out;
}

v::sandbox_options listing(const host_check& host, const listed_directory& dir) {
  v::sandbox_options options = test_options(cpu_bound_limits());
  options.scratch_parent = host.scratch_parent();
  options.read_only_paths = {dir.path()};
  return options;
}

TEST(SharedFiles, LocksAndWatchesThroughTheViewNeverReachTheHosts) {
  const host_check host;
  const listed_directory dir;
  ASSERT_FALSE(dir.path().empty());
  v::sandbox_options options = listing(host, dir);
  const v::sandbox box(options);
  if (!box.isolation().overlay_view || !python_available())
    GTEST_SKIP() << "no overlays in the file view, or no python3: " << box.isolation().describe();

  // Through the view's overlay the files are other inodes: the program's locks are its
  // own (granted beside the host's), the host's locking goes on, and the host's writes
  // into the directory raise no event the program sees.
  const lock_attack_outcome contained = run_lock_attack(box, dir);
  EXPECT_EQ(contained.program_output, "flock granted\nposix granted\nwatch True\nevent bytes 0\n");
  EXPECT_GT(contained.host_tries, 10);
  EXPECT_EQ(contained.host_refusals, 0) << "the host's flock was refused while the program held its own";
  EXPECT_GT(contained.host_files_written, 5);
  EXPECT_EQ(joined(host.leftovers()), "");

  // Bound instead of overlaid (the default before issue 34's overlays), the same program
  // is refused the host's locks, blocks the host's, and watches its writes.
  options.overlay_view = false;
  const lock_attack_outcome bound = run_lock_attack(v::sandbox(options), dir);
  EXPECT_EQ(bound.program_output.substr(0, bound.program_output.find("event bytes")),
            "flock refused\nposix refused\nwatch True\n");
  EXPECT_EQ(bound.program_output.find("event bytes 0\n"), std::string::npos) << bound.program_output;
  EXPECT_GT(bound.host_refusals, 0);
}

// A host service's Unix socket file, world-writable, in a listed directory: through the
// overlay the file is another inode, which no socket is bound to.
TEST(SharedFiles, AHostsUnixSocketInAListedDirectoryCannotBeReached) {
  const host_check host;
  const listed_directory dir;
  ASSERT_FALSE(dir.path().empty());
  v::sandbox_options options = listing(host, dir);
  const v::sandbox box(options);
  if (!box.isolation().overlay_view || !python_available())
    GTEST_SKIP() << "no overlays in the file view, or no python3: " << box.isolation().describe();
  const std::filesystem::path socket_path = dir.path() / "service.sock";
  const descriptor service(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.string().size(), sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(service.fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(service.fd, 4), 0);
  ::chmod(socket_path.c_str(), 0777);
  const v::command connect = python(
      "import socket, sys\nc = socket.socket(socket.AF_UNIX)\ntry:\n    c.connect(sys.argv[1]); print('connected')\n"
      "except OSError as e:\n    print('errno', e.errno)\n");
  v::command attack = connect;
  attack.argv.push_back(socket_path.string());
  const auto r = box.run(attack);
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "errno " + std::to_string(ECONNREFUSED) + "\n");
  // Bound, the same program reaches the service.
  options.overlay_view = false;
  EXPECT_EQ(v::sandbox(options).run(attack).stdout_text, "connected\n");
  EXPECT_EQ(joined(host.leftovers()), "");
}

// hidden_paths still hide a directory inside an overlaid one.
TEST(SharedFiles, AHiddenPathInsideAListedDirectoryStaysHidden) {
  const host_check host;
  const listed_directory dir;
  ASSERT_FALSE(dir.path().empty());
  (void)dir.put("open/data.txt", "open\n");
  (void)dir.put("secret/answers.txt", "hidden\n");
  v::sandbox_options options = listing(host, dir);
  options.hidden_paths.push_back(dir.path() / "secret");
  const v::sandbox box(options);
  if (!box.isolation().overlay_view) GTEST_SKIP() << "no overlays in the file view: " << box.isolation().describe();
  const auto r = box.run({.argv = {"sh", "-c", "cd " + dir.path().string() +
                                                   " && cat open/data.txt && ls -A secret && echo listed"}});
  EXPECT_EQ(r.stdout_text, "open\nlisted\n") << r.stderr_text;
}

// How many of `path`'s pages are in the page cache (mincore on a mapping that is never
// touched, so that it pins nothing).
std::size_t cached_pages(const std::filesystem::path& path, std::size_t bytes) {
  const descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd.fd, 0);
  if (map == MAP_FAILED) return 0;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  std::size_t n = 0;
  if (::mincore(map, bytes, resident.data()) == 0)
    for (const unsigned char r : resident) n += r & 1;
  ::munmap(map, bytes);
  return n;
}

// Reads the whole file, so that its pages are cached.
void read_whole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(1 << 16);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
  }
}

// The program: evicts a host file's cached pages (posix_fadvise DONTNEED, madvise
// PAGEOUT) and forces writeback (fsync, fdatasync, syncfs, msync, sync), printing each
// call's result.
const std::string evict_and_sync = R"(
import ctypes, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); print('fadvise 0')
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
at = ctypes.c_void_p(libc.mmap(None, ctypes.c_size_t(size), 1, 1, fd, ctypes.c_long(0)))  # PROT_READ, MAP_SHARED
print('madvise', libc.madvise(at, ctypes.c_size_t(size), 21))  # MADV_PAGEOUT
print('msync', libc.msync(at, ctypes.c_size_t(size), 4))  # MS_SYNC
os.fsync(fd); os.fdatasync(fd); os.sync(); print('sync 0')
)";

TEST(SharedFiles, AProgramCannotEvictOrFlushTheHostsPages) {
  const host_check host;
  const listed_directory dir;
  ASSERT_FALSE(dir.path().empty());
  v::sandbox_options options = listing(host, dir);
  const v::sandbox box(options);
  if (!box.filters_syscalls() || !box.isolation().minimal_view || !python_available())
    GTEST_SKIP() << "no syscall filter, file view or python3: " << box.isolation().describe();
  constexpr std::size_t bytes = 4 << 20;
  const std::filesystem::path data = file_of(dir, "data.bin", bytes);
  const std::size_t pages = bytes / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

  read_whole(data);
  ASSERT_EQ(cached_pages(data, bytes), pages);
  const auto r = box.run({.argv = {"python3", "-I", "-c", evict_and_sync, data.string()}});
  ASSERT_TRUE(r.succeeded()) << v::to_string(r.reason) << " " << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "fadvise 0\nmadvise 0\nmsync 0\nsync 0\n");
  EXPECT_TRUE(r.denied_syscalls.empty()) << "skipped calls are not denials: " << r.denied_syscalls.front();
  // Every page still cached (a few may go to memory pressure on a busy machine).
  EXPECT_GE(cached_pages(data, bytes), pages - pages / 16) << "of " << pages;
  EXPECT_EQ(joined(host.leftovers()), "");

  // Without the filter the same program empties the host's cache of that file.
  options.syscall_filter.enabled = false;
  read_whole(data);
  const auto unfiltered = v::sandbox(options).run({.argv = {"python3", "-I", "-c", evict_and_sync, data.string()}});
  ASSERT_TRUE(unfiltered.succeeded()) << unfiltered.stderr_text;
  EXPECT_LT(cached_pages(data, bytes), pages / 4) << "of " << pages;
}

}  // namespace
