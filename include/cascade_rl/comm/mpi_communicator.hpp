#pragma once
// MPI: the session (MPI_Init / MPI_Finalize, and what happens when a rank fails) and a
// communicator whose blocking collectives are bounded by a timeout.
//
// Why a timeout: MPI gives no bound on a collective that a peer never enters. A rank
// that stalls, or that throws and unwinds into MPI_Finalize while the others wait in
// an all-reduce, hangs the whole job. mpi_communicator therefore starts each
// collective non-blocking (MPI_Iallreduce, ...) and polls it; when it has not
// completed after options.timeout it throws comm_timeout naming the rank, the
// operation and its sequence number. A started collective cannot be cancelled, so the
// communicator is unusable afterwards: end the job (mpi_session does so, see below).
//
// Why a session: with MPI's default error handler a failing call aborts the job with
// a code and no context, and a rank leaving with an exception either hangs in
// MPI_Finalize or dies without saying why. mpi_session
//   - ends the job with MPI_Abort and a message naming the rank and the reason when an
//     exception leaves its scope or a communicator failed (never MPI_Finalize then);
//   - offers abort(reason) for a catch block, which prints what() first;
//   - reports a launcher's SIGTERM: when a rank dies, Open MPI's mpiexec stops the
//     other ranks with SIGTERM within about a second; each then prints which
//     collective it was waiting in, so the user sees every rank's state, not only the
//     launcher's "process rank 1 exited on signal 9".
//
//   int main(int argc, char** argv) {
//     cascade_rl::mpi_session mpi(argc, argv);
//     auto comm = cascade_rl::mpi_communicator::world({.timeout = std::chrono::minutes(10)});
//     try { train(comm); } catch (const std::exception& e) { mpi.abort(e.what()); }
//   }
//
// Communicators set MPI_ERRORS_RETURN on the MPI communicator they own, so MPI errors
// become comm_error with MPI's own error string and the name of the failing call.

// Only MPI's C API is used: skip the deprecated C++ bindings (and their warnings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/comm/owned_handle.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

namespace detail {

// What this process is doing, for the SIGTERM report: two buffers, the active one
// chosen by an atomic index, so the handler never reads a half-written line.
struct mpi_activity {
  char prefix[96] = "cascade_rl: ";
  char text[2][192] = {"not yet in a collective", "not yet in a collective"};
  std::atomic<int> active{0};
  std::atomic<bool> failed{false};  // a communicator failed: the session must abort
  struct sigaction previous_term {};
  bool handler_installed = false;

  void set(const char* line) {
    const int next = 1 - active.load(std::memory_order_relaxed);
    std::snprintf(text[next], sizeof text[next], "%s", line);
    active.store(next, std::memory_order_release);
  }
};

inline mpi_activity& activity() {
  static mpi_activity state;
  return state;
}

inline void write_all(const char* text) {
  std::size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Async-signal-safe: writes preformatted text, restores the previous action, re-raises.
inline void report_sigterm(int signal) {
  mpi_activity& state = activity();
  write_all(state.prefix);
  write_all("stopped by SIGTERM while ");
  write_all(state.text[state.active.load(std::memory_order_acquire)]);
  write_all(" (an MPI launcher sends SIGTERM to the other ranks when one rank fails; "
            "its message names that rank)\n");
  ::sigaction(SIGTERM, &state.previous_term, nullptr);
  ::raise(signal);
}

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

inline std::string rank_prefix(int rank, int size) {
  return "cascade_rl: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": ";
}

template <transferable_value T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::same_as<T, float>) return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
  else if constexpr (std::same_as<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::same_as<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::same_as<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::same_as<T, std::uint8_t>) return MPI_UINT8_T;
  else return MPI_BYTE;
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
  }
  return MPI_SUM;
}

inline int mpi_count(std::size_t count, std::string_view argument) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    fail(argument, "has " + std::to_string(count) +
                       " entries; MPI counts are int, split the collective");
  return static_cast<int>(count);
}

}  // namespace detail

// Throws comm_error naming the call and MPI's error string unless it returned MPI_SUCCESS
// (only useful where MPI_ERRORS_RETURN is set; with MPI's default handler MPI aborts).
#define CASCADE_RL_MPI_CHECK(call)                                                        \
  do {                                                                                    \
    const int cascade_rl_mpi_status_ = (call);                                           \
    if (cascade_rl_mpi_status_ != MPI_SUCCESS)                                            \
      throw ::cascade_rl::comm_error(std::string("cascade_rl: ") + #call + " failed at " + \
                                     __FILE__ + ":" + std::to_string(__LINE__) + ": " +    \
                                     ::cascade_rl::detail::mpi_error_string(              \
                                         cascade_rl_mpi_status_));                        \
  } while (0)

struct mpi_session_options {
  // Thread support requested from MPI_Init_thread; collectives are called from one thread.
  int thread_level = MPI_THREAD_FUNNELED;
  // Print which collective this rank was in when a launcher's SIGTERM stops it.
  bool report_sigterm = true;
};

// MPI_Init on construction (unless MPI is already initialised: then it neither
// initialises nor finalises), MPI_Finalize on a clean exit, MPI_Abort with a message
// otherwise. Neither copyable nor movable: one per process, in main.
class mpi_session {
 public:
  mpi_session(int& argc, char**& argv, const mpi_session_options& options = {}) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(&argc, &argv, options.thread_level, &provided) != MPI_SUCCESS)
        throw comm_error("cascade_rl: MPI_Init_thread failed");
      owning_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    detail::mpi_activity& state = detail::activity();
    std::snprintf(state.prefix, sizeof state.prefix, "%s",
                  detail::rank_prefix(rank_, size_).c_str());
    if (options.report_sigterm && !state.handler_installed) {
      struct sigaction action {};
      action.sa_handler = &detail::report_sigterm;
      sigemptyset(&action.sa_mask);
      state.handler_installed = ::sigaction(SIGTERM, &action, &state.previous_term) == 0;
    }
  }

  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;

  ~mpi_session() {
    detail::mpi_activity& state = detail::activity();
    if (std::uncaught_exceptions() > 0)
      abort("an exception is leaving the MPI session's scope (catch it and call "
            "mpi_session::abort(e.what()) to see its message); MPI_Finalize would wait for "
            "ranks still in a collective");
    if (state.failed.load())
      abort("a collective failed earlier (see the error above); MPI_Finalize would wait for "
            "ranks still in a collective");
    if (state.handler_installed) {
      ::sigaction(SIGTERM, &state.previous_term, nullptr);
      state.handler_installed = false;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owning_ && !finalized) MPI_Finalize();
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }

  // Prints "cascade_rl: rank r of n: <reason>; aborting all ranks" and ends the job.
  [[noreturn]] static void abort(std::string_view reason, int code = 1) noexcept {
    const std::string prefix = detail::activity().prefix;
    // Messages of this library's errors already start with the prefix.
    const bool prefixed = reason.substr(0, prefix.size()) == prefix;
    const std::string line = (prefixed ? "" : prefix) + std::string(reason) +
                             "; aborting all ranks (MPI_Abort)\n";
    detail::write_all(line.c_str());
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  bool owning_ = false;
};

struct mpi_options {
  // A collective not complete after this long throws comm_timeout. Generous by default
  // (a peer may be generating rollouts for minutes); tests set seconds.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

// A move-only communicator over an MPI communicator, owning it (MPI_Comm_free on
// destruction) or not, with timeout-bounded collectives. See the top of this file. A
// moved-from communicator holds MPI_COMM_NULL (usable() is false) and refuses every
// collective.
class mpi_communicator {
 public:
  // Wraps `comm`. With owning = true it is freed on destruction. The error handler of
  // `comm` is set to MPI_ERRORS_RETURN only when owning (a borrowed one keeps its own).
  mpi_communicator(MPI_Comm comm, bool owning, const mpi_options& options = {})
      : options_(options) {
    CASCADE_RL_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    CASCADE_RL_MPI_CHECK(MPI_Comm_size(comm, &size_));
    if (owning) CASCADE_RL_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    comm_ = owned_comm(comm, owning);  // last: a constructor that throws frees nothing
  }

  // A private duplicate of `parent` (so our traffic never matches the caller's), owned.
  [[nodiscard]] static mpi_communicator duplicate(MPI_Comm parent, const mpi_options& options = {}) {
    int rank = 0, size = 1;
    CASCADE_RL_MPI_CHECK(MPI_Comm_rank(parent, &rank));
    CASCADE_RL_MPI_CHECK(MPI_Comm_size(parent, &size));
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request request = MPI_REQUEST_NULL;
    CASCADE_RL_MPI_CHECK(MPI_Comm_idup(parent, &dup, &request));
    wait_bounded(request, options.timeout, detail::rank_prefix(rank, size) + "MPI_Comm_idup");
    return mpi_communicator(dup, /*owning=*/true, options);
  }

  [[nodiscard]] static mpi_communicator world(const mpi_options& options = {}) {
    return duplicate(MPI_COMM_WORLD, options);
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] MPI_Comm native() const { return comm_.get(); }
  [[nodiscard]] bool owning() const { return comm_.owning(); }
  [[nodiscard]] const mpi_options& options() const { return options_; }
  // False after a collective failed or timed out: every later call throws.
  [[nodiscard]] bool usable() const { return failure_.empty() && !comm_.empty(); }

  template <reducible_value T>
  void all_reduce(std::span<T> values, reduce_op op) {
    const int count = detail::mpi_count(values.size(), "values");
    run(
        "all_reduce", std::string(to_string(op)) + " of " + describe<T>(values.size()),
        [&](MPI_Request* request) {
          return MPI_Iallreduce(MPI_IN_PLACE, values.data(), count, detail::mpi_datatype<T>(),
                                detail::mpi_op(op), comm_.get(), request);
        },
        "MPI_Iallreduce");
  }

  template <transferable_value T>
  void all_gather(std::span<const T> mine, std::span<T> all) {
    detail::require_gather_size(all.size(), mine.size(), size_);
    const int count = detail::mpi_count(mine.size(), "mine");
    detail::mpi_count(all.size(), "all");
    run("all_gather", describe<T>(mine.size()) + " per rank",
        [&](MPI_Request* request) {
          // MPI takes a non-const send buffer in older bindings; it is only read.
          return MPI_Iallgather(const_cast<T*>(mine.data()), count, detail::mpi_datatype<T>(),
                                all.data(), count, detail::mpi_datatype<T>(), comm_.get(), request);
        }, "MPI_Iallgather");
  }

  template <transferable_value T>
  void broadcast(std::span<T> values, int root) {
    detail::require_root(root, size_);
    const int count = detail::mpi_count(values.size(), "values");
    run(
        "broadcast", describe<T>(values.size()) + " from rank " + std::to_string(root),
        [&](MPI_Request* request) {
          return MPI_Ibcast(values.data(), count, detail::mpi_datatype<T>(), root, comm_.get(),
                            request);
        },
        "MPI_Ibcast");
  }

  void barrier() {
    run(
        "barrier", "", [&](MPI_Request* request) { return MPI_Ibarrier(comm_.get(), request); },
        "MPI_Ibarrier");
  }

  // Waits for `request` for at most `timeout`, polling (spin first, then sleeps of up
  // to 1 ms so oversubscribed ranks leave the core to the peer they wait for).
  // Throws comm_timeout or comm_error whose message starts with `what`.
  static void wait_bounded(MPI_Request& request, std::chrono::milliseconds timeout,
                           const std::string& what) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto pause = std::chrono::microseconds(1);
    for (int polls = 0;; ++polls) {
      int done = 0;
      const int status = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (status != MPI_SUCCESS) {
        detail::activity().failed.store(true);
        throw comm_error(what + ": MPI_Test failed: " + detail::mpi_error_string(status));
      }
      if (done) return;
      const auto waited = clock::now() - start;
      if (waited > timeout) {
        detail::activity().failed.store(true);
        throw comm_timeout(
            what + " did not complete within " +
            std::to_string(std::chrono::duration<double>(timeout).count()) +
            " s: another rank died, threw, stalled, or entered a different collective. A "
            "started MPI collective cannot be cancelled: end the job (mpi_session aborts it)");
      }
      if (polls < 100) continue;
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::milliseconds(1)) pause *= 2;
    }
  }

 private:
  // What an owning communicator does at the end: MPI_Comm_free, unless MPI is already
  // finalised (the handle is then gone with it).
  struct free_comm {
    using handle = MPI_Comm;
    static MPI_Comm null() noexcept { return MPI_COMM_NULL; }
    void operator()(MPI_Comm& comm) const noexcept {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&comm);
    }
  };
  using owned_comm = detail::owned_handle<free_comm>;

  template <class T>
  static std::string describe(std::size_t count) {
    return std::to_string(count) + " " + std::string(value_type_name<T>());
  }

  void require_usable(std::string_view operation) const {
    if (comm_.empty())
      throw comm_error("cascade_rl: mpi_communicator::" + std::string(operation) +
                       " on a moved-from communicator");
    if (!failure_.empty())
      throw comm_error(detail::rank_prefix(rank_, size_) + std::string(operation) +
                       " refused: this communicator failed earlier (" + failure_ + ")");
  }

  // Starts a collective with `start(&request)` and waits for it within the timeout.
  template <class Start>
  void run(std::string_view operation, const std::string& detail_text, Start&& start,
           const char* call) {
    require_usable(operation);
    const std::uint64_t sequence = ++sequence_;
    const std::string what = detail::rank_prefix(rank_, size_) + "mpi " + std::string(operation) +
                             " #" + std::to_string(sequence) +
                             (detail_text.empty() ? "" : " (" + detail_text + ")");
    detail::activity().set(("waiting in " + what.substr(what.find("mpi "))).c_str());
    MPI_Request request = MPI_REQUEST_NULL;
    try {
      const int status = start(&request);
      if (status != MPI_SUCCESS) {
        detail::activity().failed.store(true);
        throw comm_error(what + ": " + call + " failed: " + detail::mpi_error_string(status));
      }
      wait_bounded(request, options_.timeout, what);
    } catch (const comm_error& e) {
      failure_ = e.what();
      comm_.abandon();  // a collective may still be pending on it: leave it to MPI_Abort
      throw;
    }
    detail::activity().set(("outside collectives (last completed: " +
                            what.substr(what.find("mpi ")) + ")").c_str());
  }

  owned_comm comm_;
  int rank_ = 0;
  int size_ = 0;
  mpi_options options_{};
  std::uint64_t sequence_ = 0;
  std::string failure_;
};

static_assert(Communicator<mpi_communicator>);

}  // namespace cascade_rl
