#pragma once
// The seccomp filter of sandboxed programs, built once per sandbox with libseccomp and
// exported as a classic BPF program that the sandbox's init loads (a plain system
// call: no library code runs between clone and exec).
//
// Everything is allowed but a deny-list. A denied call is answered by the sandbox's
// init through a seccomp user notification: the call fails with EPERM, init records its
// number, and with syscall_denial::end_run kills the run. (Where the kernel has no user
// notification the same calls fail with EPERM unreported.) A program cannot answer its
// own notifications: seccomp() with SECCOMP_FILTER_FLAG_NEW_LISTENER is on the list,
// and a filter it stacks without a listener can only deny more. System calls of another
// architecture (i386's int 0x80) kill the program (SIGSYS); x32 numbers get the same
// rules as x86-64 ones. clone3 fails with ENOSYS, unreported, so that the C library
// falls back to clone, whose flags the filter can read. Writeback and page-cache advice
// (skipped_syscalls) return 0 without running, so that they cannot reach the host's files.
//
// Built with CASCADE_RL_VERIFY_SECCOMP=1 (CMake sets it when libseccomp is found and
// links it); without it there is no filter and the sandbox reports it missing.

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/core/error.hpp"

#ifndef CASCADE_RL_VERIFY_SECCOMP
#define CASCADE_RL_VERIFY_SECCOMP 0
#endif
#if CASCADE_RL_VERIFY_SECCOMP
#include <seccomp.h>
#endif

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

namespace cascade_rl::verify::detail {

using filter_program = std::vector<sock_filter>;

// Denied whatever their arguments.
[[nodiscard]] inline const std::vector<std::string_view>& default_denied_syscalls() {
  static const std::vector<std::string_view> names = {
      // other processes' memory and registers
      "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
      // mounts, namespaces, root changes
      "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
      "fspick", "mount_setattr", "unshare", "setns",
      // the kernel itself
      "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module", "delete_module", "bpf",
      "perf_event_open", "iopl", "ioperm", "modify_ldt", "syslog", "acct", "swapon", "swapoff", "quotactl",
      "quotactl_fd", "lookup_dcookie", "uselib", "nfsservctl", "_sysctl", "vhangup",
      // the key store
      "keyctl", "add_key", "request_key",
      // attack surface that untrusted programs do not need
      "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
      // file handles (open any inode of a file system), fanotify
      "open_by_handle_at", "name_to_handle_at", "fanotify_init",
      // the clock
      "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
  };
  return names;
}

// Denied with some arguments only (each kept in sync with add_conditional_rules).
[[nodiscard]] inline const std::vector<std::string_view>& conditionally_denied_syscalls() {
  static const std::vector<std::string_view> names = {
      "clone",        // with any CLONE_NEW* flag (a new namespace)
      "socket",       // AF_PACKET; AF_INET/AF_INET6 with SOCK_RAW or SOCK_PACKET (and allowed_socket_families)
      "personality",  // anything but the query (0xffffffff) and PER_LINUX (0)
      "seccomp",      // with SECCOMP_FILTER_FLAG_NEW_LISTENER
  };
  return names;
}

// Calls that reach host-wide state through files the view shares with the host, answered
// 0 without running (unreported): writeback (sync and syncfs reach every file system;
// fsync, fdatasync, sync_file_range and msync on a read-only host file force its
// writeback) and page-cache advice (posix_fadvise(DONTNEED) and madvise's MADV_COLD /
// MADV_PAGEOUT evict or age the host's cached pages of a shared file). Each is harmless
// to skip for the program: everything it may write is on tmpfs (scratch, /tmp, /dev/shm),
// where writeback does nothing, and advice may be ignored. madvise's other advice runs.
[[nodiscard]] inline const std::vector<std::string_view>& skipped_syscalls() {
  static const std::vector<std::string_view> names = {
      "sync", "syncfs", "fsync", "fdatasync", "sync_file_range", "sync_file_range2", "msync",
      "fadvise64", "fadvise64_64", "arm_fadvise64_64",
  };
  return names;
}
#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
inline constexpr int skipped_madvise_advice[] = {MADV_COLD, MADV_PAGEOUT};

// Socket families by allow-list: socket() and socketpair() of any family but these fail
// with EAFNOSUPPORT, unreported, as on a kernel built without them (the C library's
// resolver probes AF_NETLINK and goes on without it). AF_VSOCK reaches the host through
// no namespace, AF_NETLINK's uevents are the host's, AF_PACKET (refused and reported, as
// a deny-list call) sees the namespace's devices, and the rest are attack surface.
inline constexpr int allowed_socket_families[] = {AF_UNIX, AF_INET, AF_INET6};
// Families below this are refused one by one, the rest (and any value with high bits
// set) by one comparison; AF_MAX is 46 on Linux 6.x.
inline constexpr int socket_family_bound = 64;

inline constexpr unsigned long namespace_clone_flags[] = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                                          CLONE_NEWUSER, CLONE_NEWPID,   CLONE_NEWNET};

[[nodiscard]] constexpr bool have_seccomp_library() { return CASCADE_RL_VERIFY_SECCOMP != 0; }

// The number of a system call on this machine's architecture, or -1.
[[nodiscard]] inline int syscall_number(const std::string& name) {
#if CASCADE_RL_VERIFY_SECCOMP
  const int nr = ::seccomp_syscall_resolve_name(name.c_str());
  return nr < 0 ? -1 : nr;
#else
  (void)name;
  return -1;
#endif
}

// The name of a system call number as a notification reports it.
[[nodiscard]] inline std::string syscall_name(int nr) {
#if CASCADE_RL_VERIFY_SECCOMP
#if defined(__x86_64__)
  const std::uint32_t arch = (nr & 0x40000000) ? SCMP_ARCH_X32 : SCMP_ARCH_NATIVE;
#else
  const std::uint32_t arch = SCMP_ARCH_NATIVE;
#endif
  if (char* name = ::seccomp_syscall_resolve_num_arch(arch, nr)) {
    std::string out(name);
    std::free(name);
    return out;
  }
#endif
  return "syscall " + std::to_string(nr);
}

#if CASCADE_RL_VERIFY_SECCOMP
namespace seccomp_build {

struct context_deleter {
  void operator()(void* ctx) const { ::seccomp_release(ctx); }
};

inline void check(int rc, const std::string& what) {
  if (rc < 0) cascade_rl::detail::fail("sandbox_options.syscall_filter", what + ": " + std::strerror(-rc));
}

// An argument comparison (what libseccomp's SCMP_A0() and friends build, as a C compound
// literal, which is not C++).
inline scmp_arg_cmp arg(unsigned index, scmp_compare op, scmp_datum_t a, scmp_datum_t b = 0) {
  return scmp_arg_cmp{index, op, a, b};
}

inline void add_conditional_rules(scmp_filter_ctx ctx, std::uint32_t deny) {
  const int clone_nr = ::seccomp_syscall_resolve_name("clone");
  for (const unsigned long flag : namespace_clone_flags)
    check(::seccomp_rule_add(ctx, deny, clone_nr, 1, arg(0, SCMP_CMP_MASKED_EQ, flag, flag)), "clone rule");
  check(::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), ::seccomp_syscall_resolve_name("clone3"), 0), "clone3 rule");

  const int socket_nr = ::seccomp_syscall_resolve_name("socket");
  check(::seccomp_rule_add(ctx, deny, socket_nr, 1, arg(0, SCMP_CMP_EQ, AF_PACKET)), "socket rule");
  for (const int nr : {socket_nr, ::seccomp_syscall_resolve_name("socketpair")}) {
    const auto refuse = SCMP_ACT_ERRNO(EAFNOSUPPORT);
    for (int family = 0; family < socket_family_bound; ++family) {
      bool allowed = nr == socket_nr && family == AF_PACKET;  // the reported rule above
      for (const int ok : allowed_socket_families) allowed = allowed || family == ok;
      if (!allowed)
        check(::seccomp_rule_add(ctx, refuse, nr, 1, arg(0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(family))),
              "socket family rule");
    }
    check(::seccomp_rule_add(ctx, refuse, nr, 1, arg(0, SCMP_CMP_GE, socket_family_bound)), "socket family rule");
  }
  for (const int family : {AF_INET, AF_INET6})
    for (const int type : {SOCK_RAW, SOCK_PACKET})
      check(::seccomp_rule_add(ctx, deny, socket_nr, 2, arg(0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
                               arg(1, SCMP_CMP_MASKED_EQ, 0xf, static_cast<scmp_datum_t>(type))),
            "socket rule");

  // personality(x) for x other than 0 and 0xffffffff, i.e. x with a set bit i and a clear
  // bit i+1 (mod 32) for some i: one masked comparison per i (the masks leave out the
  // upper half of the register, as the kernel does: persona is an unsigned int).
  const int personality_nr = ::seccomp_syscall_resolve_name("personality");
  for (unsigned i = 0; i < 32; ++i) {
    const std::uint32_t bit = 1u << i, next = 1u << ((i + 1) % 32);
    check(::seccomp_rule_add(ctx, deny, personality_nr, 1, arg(0, SCMP_CMP_MASKED_EQ, bit | next, bit)),
          "personality rule");
  }
  const int seccomp_nr = ::seccomp_syscall_resolve_name("seccomp");
  check(::seccomp_rule_add(ctx, deny, seccomp_nr, 1,
                           arg(1, SCMP_CMP_MASKED_EQ, SECCOMP_FILTER_FLAG_NEW_LISTENER, SECCOMP_FILTER_FLAG_NEW_LISTENER)),
        "seccomp rule");
}

}  // namespace seccomp_build
#endif

// The filter as BPF: the default lists plus `extra` names; denied calls notify (init
// answers EPERM) or, with notify false, fail with EPERM directly. Throws
// cascade_rl::error for an unknown extra name; nullptr without libseccomp.
[[nodiscard]] inline std::shared_ptr<const filter_program> build_syscall_filter(const std::vector<std::string>& extra,
                                                                                bool notify) {
#if CASCADE_RL_VERIFY_SECCOMP
  using namespace seccomp_build;
  const std::unique_ptr<void, context_deleter> ctx(::seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) cascade_rl::detail::fail("sandbox_options.syscall_filter", "seccomp_init failed");
  check(::seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "bad-architecture action");
#if defined(__x86_64__)
  if (const int rc = ::seccomp_arch_add(ctx.get(), SCMP_ARCH_X32); rc < 0 && rc != -EEXIST) check(rc, "x32");
#endif
  const std::uint32_t deny = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EPERM);
  for (const std::string_view name : default_denied_syscalls()) {
    const int nr = ::seccomp_syscall_resolve_name(std::string(name).c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // unknown to this libseccomp
    check(::seccomp_rule_add(ctx.get(), deny, nr, 0), "rule for " + std::string(name));
  }
  add_conditional_rules(ctx.get(), deny);
  for (const std::string_view name : skipped_syscalls()) {
    const std::string n(name);
    const int nr = ::seccomp_syscall_resolve_name(n.c_str());
    // Unknown here, or denied by the caller's extra list (which then wins).
    if (nr == __NR_SCMP_ERROR || std::find(extra.begin(), extra.end(), n) != extra.end()) continue;
    check(::seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(0), nr, 0), "rule for " + n);
  }
  const int madvise_nr = ::seccomp_syscall_resolve_name("madvise");
  const bool madvise_denied = std::find(extra.begin(), extra.end(), "madvise") != extra.end();
  for (const int advice : skipped_madvise_advice)
    if (!madvise_denied)
      check(::seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(0), madvise_nr, 1,
                               arg(2, SCMP_CMP_EQ, static_cast<scmp_datum_t>(advice))),
            "madvise rule");
  for (const std::string& name : extra) {
    const int nr = ::seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR)
      cascade_rl::detail::fail("sandbox_options.syscall_filter.extra_denied",
                               "'" + name + "' is not a system call libseccomp knows");
    // Conditional rules of the default list are subsumed by an unconditional one.
    check(::seccomp_rule_add(ctx.get(), deny, nr, 0), "rule for extra_denied '" + name + "'");
  }
  const int fd = ::memfd_create("cascade_rl_seccomp", MFD_CLOEXEC);
  if (fd < 0) cascade_rl::detail::fail("sandbox_options.syscall_filter", std::string("memfd_create: ") + std::strerror(errno));
  auto program = std::make_shared<filter_program>();
  const int rc = ::seccomp_export_bpf(ctx.get(), fd);
  struct stat st {};
  if (rc == 0 && ::fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size % static_cast<off_t>(sizeof(sock_filter)) == 0) {
    program->resize(static_cast<std::size_t>(st.st_size) / sizeof(sock_filter));
    const auto bytes = static_cast<ssize_t>(program->size() * sizeof(sock_filter));
    if (::pread(fd, program->data(), static_cast<std::size_t>(bytes), 0) != bytes) program->clear();
  }
  ::close(fd);
  if (program->empty() || program->size() > BPF_MAXINSNS)
    cascade_rl::detail::fail("sandbox_options.syscall_filter", "exporting the seccomp filter failed");
  return program;
#else
  (void)extra;
  (void)notify;
  return nullptr;
#endif
}

}  // namespace cascade_rl::verify::detail
