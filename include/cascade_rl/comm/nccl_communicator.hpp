#pragma once
// NCCL: a move-only RAII communicator (RAFT comms style) with an explicit owning flag,
// a CUDA stream on every device collective, and bounded waits.
//
//   device collectives  all_reduce(send, recv, count, op, stream), all_gather, broadcast
//                       on device pointers: enqueue on `stream` and return;
//   sync_stream(stream) waits for the stream, polling ncclCommGetAsyncError; on an
//                       asynchronous NCCL error or after options.timeout it calls
//                       ncclCommAbort (the only way to release a kernel stuck waiting
//                       for a dead peer) and throws nccl_error / comm_timeout;
//   host collectives    the Communicator concept on host spans: staged through a device
//                       buffer on the communicator's own stream, then sync_stream.
//
// The communicator is created non-blocking (ncclConfig_t::blocking = 0), so that
// initialisation too is polled under the timeout rather than blocking in NCCL's
// bootstrap when a peer never arrives. from_mpi() bootstraps the unique id over an
// mpi_communicator (itself timeout-bounded).
//
// Check macros name the failing call, file and line:
//   CASCADE_RL_CUDA_CHECK(call), CASCADE_RL_NCCL_CHECK(call)                 throw
//   CASCADE_RL_CUDA_CHECK_NO_THROW(call), CASCADE_RL_NCCL_CHECK_NO_THROW(call) print to
//   stderr and return whether the call succeeded (destructors, cleanup paths).
//
// One rank per process (create, from): an owning communicator finalises and destroys
// itself. Several ranks driven by one thread (ncclCommInitAll) must be finalised
// together in an NCCL group: wrap them non-owning and finalise them yourself.
//
// Compiles with a host compiler against the CUDA runtime headers; needs libnccl and
// libcudart at link time and a GPU at run time.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/comm/owned_handle.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

class cuda_error : public comm_error {
 public:
  cuda_error(const std::string& message, cudaError_t code) : comm_error(message), code_(code) {}
  [[nodiscard]] cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

class nccl_error : public comm_error {
 public:
  nccl_error(const std::string& message, ncclResult_t code) : comm_error(message), code_(code) {}
  [[nodiscard]] ncclResult_t code() const { return code_; }

 private:
  ncclResult_t code_;
};

namespace detail {

inline std::string call_site(const char* call, const char* file, int line) {
  return std::string("cascade_rl: ") + call + " failed at " + file + ":" + std::to_string(line);
}

inline std::string cuda_message(cudaError_t code, const char* call, const char* file, int line) {
  return call_site(call, file, line) + ": " + cudaGetErrorName(code) + ": " +
         cudaGetErrorString(code);
}

inline std::string nccl_message(ncclResult_t code, const char* call, const char* file, int line) {
  std::string message = call_site(call, file, line) + ": " + ncclGetErrorString(code);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') message.append(" (").append(last).append(")");
  return message;
}

inline void cuda_check(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw cuda_error(cuda_message(code, call, file, line), code);
}

// ncclInProgress is not a failure: a non-blocking communicator is still working.
inline void nccl_check(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess && code != ncclInProgress)
    throw nccl_error(nccl_message(code, call, file, line), code);
}

inline bool cuda_check_no_throw(cudaError_t code, const char* call, const char* file,
                                int line) noexcept {
  if (code == cudaSuccess) return true;
  std::fprintf(stderr, "%s (ignored: no-throw context)\n",
               cuda_message(code, call, file, line).c_str());
  return false;
}

inline bool nccl_check_no_throw(ncclResult_t code, const char* call, const char* file,
                                int line) noexcept {
  if (code == ncclSuccess || code == ncclInProgress) return true;
  std::fprintf(stderr, "%s (ignored: no-throw context)\n",
               nccl_message(code, call, file, line).c_str());
  return false;
}

template <transferable_value T>
constexpr ncclDataType_t nccl_datatype() {
  if constexpr (std::same_as<T, float>) return ncclFloat32;
  else if constexpr (std::same_as<T, double>) return ncclFloat64;
  else if constexpr (std::same_as<T, std::int64_t>) return ncclInt64;
  else if constexpr (std::same_as<T, std::uint64_t>) return ncclUint64;
  else if constexpr (std::same_as<T, std::int32_t>) return ncclInt32;
  else return ncclUint8;  // uint8 and std::byte
}

constexpr ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace detail

#define CASCADE_RL_CUDA_CHECK(call) ::cascade_rl::detail::cuda_check((call), #call, __FILE__, __LINE__)
#define CASCADE_RL_NCCL_CHECK(call) ::cascade_rl::detail::nccl_check((call), #call, __FILE__, __LINE__)
#define CASCADE_RL_CUDA_CHECK_NO_THROW(call) \
  ::cascade_rl::detail::cuda_check_no_throw((call), #call, __FILE__, __LINE__)
#define CASCADE_RL_NCCL_CHECK_NO_THROW(call) \
  ::cascade_rl::detail::nccl_check_no_throw((call), #call, __FILE__, __LINE__)

struct nccl_options {
  // Initialisation, a non-blocking call, or sync_stream not complete after this long
  // aborts the communicator and throws comm_timeout.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

// A moved-from communicator holds no communicator (native() is null) and refuses every
// collective.
class nccl_communicator {
 public:
  // Wraps an existing communicator on `device`. With owning = true it is finalised and
  // destroyed on destruction. The host collectives run on a stream this object creates.
  // A timeout or asynchronous error aborts `comm` even when not owning (nothing else
  // releases a stuck kernel); its owner must then not destroy it.
  nccl_communicator(ncclComm_t comm, int device, bool owning, const nccl_options& options = {})
      : device_(device), options_(options) {
    CASCADE_RL_CUDA_CHECK(cudaSetDevice(device_));
    CASCADE_RL_NCCL_CHECK(ncclCommCount(comm, &size_));
    CASCADE_RL_NCCL_CHECK(ncclCommUserRank(comm, &rank_));
    cudaStream_t stream = nullptr;
    CASCADE_RL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_ = owned_stream(stream, /*owning=*/true, {device_});
    // Last: a constructor that throws leaves `comm` to the caller.
    comm_ = owned_comm(comm, owning, {device_, options_.timeout});
  }

  // Creates (owning) rank `rank` of `size` from a unique id all ranks share, on `device`.
  [[nodiscard]] static nccl_communicator create(const ncclUniqueId& id, int rank, int size,
                                                int device, const nccl_options& options = {}) {
    CASCADE_RL_CUDA_CHECK(cudaSetDevice(device));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    CASCADE_RL_NCCL_CHECK(ncclCommInitRankConfig(&comm, size, id, rank, &config));
    try {
      settle(comm, options.timeout, "ncclCommInitRankConfig");
    } catch (...) {
      if (comm != nullptr) CASCADE_RL_NCCL_CHECK_NO_THROW(ncclCommAbort(comm));
      throw;
    }
    return nccl_communicator(comm, device, /*owning=*/true, options);
  }

  // Bootstraps over MPI (or any Communicator): rank 0 makes the unique id and broadcasts
  // it; each rank joins with its rank in `bootstrap` on `device`.
  template <Communicator C>
  [[nodiscard]] static nccl_communicator from(C& bootstrap, int device,
                                              const nccl_options& options = {}) {
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) CASCADE_RL_NCCL_CHECK(ncclGetUniqueId(&id));
    bootstrap.broadcast(std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof id), 0);
    return create(id, bootstrap.rank(), bootstrap.size(), device, options);
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] bool owning() const { return comm_.owning(); }
  [[nodiscard]] bool aborted() const { return comm_.abandoned(); }
  [[nodiscard]] ncclComm_t native() const { return comm_.get(); }
  [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }

  // ---- device collectives: enqueue on `stream`, return; sync_stream(stream) waits ----

  template <reducible_value T>
  void all_reduce(const T* send, T* recv, std::size_t count, reduce_op op, cudaStream_t stream) {
    require_usable("all_reduce");
    enqueued("ncclAllReduce", ncclAllReduce(send, recv, count, detail::nccl_datatype<T>(),
                                            detail::nccl_op(op), comm_.get(), stream));
  }

  // recv holds size() * count values: rank r's at recv + r * count.
  template <transferable_value T>
  void all_gather(const T* send, T* recv, std::size_t count, cudaStream_t stream) {
    require_usable("all_gather");
    enqueued("ncclAllGather",
             ncclAllGather(send, recv, count, detail::nccl_datatype<T>(), comm_.get(), stream));
  }

  template <transferable_value T>
  void broadcast(const T* send, T* recv, std::size_t count, int root, cudaStream_t stream) {
    detail::require_root(root, size_);
    require_usable("broadcast");
    enqueued("ncclBroadcast", ncclBroadcast(send, recv, count, detail::nccl_datatype<T>(), root,
                                            comm_.get(), stream));
  }

  // Waits for `stream`; aborts the communicator and throws on an asynchronous NCCL
  // error, a CUDA error, or when options.timeout passes.
  void sync_stream(cudaStream_t stream) {
    require_usable("sync_stream");
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (int polls = 0;; ++polls) {
      const cudaError_t state = cudaStreamQuery(stream);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) {
        abort_communicator();
        throw cuda_error(where("sync_stream") + detail::cuda_message(state, "cudaStreamQuery",
                                                                     __FILE__, __LINE__) +
                             "; communicator aborted",
                         state);
      }
      ncclResult_t async = ncclSuccess;
      CASCADE_RL_NCCL_CHECK(ncclCommGetAsyncError(comm_.get(), &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_communicator();
        throw nccl_error(where("sync_stream") + "asynchronous NCCL error: " +
                             ncclGetErrorString(async) + "; communicator aborted",
                         async);
      }
      if (clock::now() - start > options_.timeout) {
        abort_communicator();
        throw comm_timeout(where("sync_stream") + "the stream did not complete within " +
                           std::to_string(std::chrono::duration<double>(options_.timeout).count()) +
                           " s (a peer died or stalled); communicator aborted (ncclCommAbort)");
      }
      if (polls > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // ---- host collectives: the Communicator concept, blocking ----

  template <reducible_value T>
  void all_reduce(std::span<T> values, reduce_op op) {
    if (values.empty()) return barrier();
    T* device = staging<T>(values.size());
    to_device(device, values.data(), values.size());
    all_reduce(device, device, values.size(), op, stream_.get());
    to_host(values.data(), device, values.size());
  }

  template <transferable_value T>
  void all_gather(std::span<const T> mine, std::span<T> all) {
    detail::require_gather_size(all.size(), mine.size(), size_);
    if (mine.empty()) return barrier();
    T* device = staging<T>(all.size());
    T* slot = device + static_cast<std::size_t>(rank_) * mine.size();
    to_device(slot, mine.data(), mine.size());
    all_gather(slot, device, mine.size(), stream_.get());
    to_host(all.data(), device, all.size());
  }

  template <transferable_value T>
  void broadcast(std::span<T> values, int root) {
    detail::require_root(root, size_);
    if (values.empty()) return barrier();
    T* device = staging<T>(values.size());
    if (rank_ == root) to_device(device, values.data(), values.size());
    broadcast(device, device, values.size(), root, stream_.get());
    to_host(values.data(), device, values.size());
  }

  void barrier() {
    std::int64_t* device = staging<std::int64_t>(1);
    CASCADE_RL_CUDA_CHECK(cudaMemsetAsync(device, 0, sizeof(std::int64_t), stream_.get()));
    all_reduce(device, device, 1, reduce_op::sum, stream_.get());
    sync_stream(stream_.get());
  }

 private:
  // What an owning communicator does at the end, on its device: ncclCommFinalize (which
  // flushes pending work) then ncclCommDestroy, or ncclCommAbort when the finalisation
  // fails or does not complete within the timeout.
  struct finalize_comm {
    using handle = ncclComm_t;
    int device = 0;
    std::chrono::milliseconds timeout{};
    static ncclComm_t null() noexcept { return nullptr; }
    void operator()(ncclComm_t& comm) const noexcept {
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaSetDevice(device));
      bool finalized = CASCADE_RL_NCCL_CHECK_NO_THROW(ncclCommFinalize(comm));
      if (finalized) {
        try {
          settle(comm, timeout, "ncclCommFinalize");
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s (aborting the communicator)\n", e.what());
          finalized = false;
        }
      }
      if (finalized)
        CASCADE_RL_NCCL_CHECK_NO_THROW(ncclCommDestroy(comm));
      else
        CASCADE_RL_NCCL_CHECK_NO_THROW(ncclCommAbort(comm));
    }
  };
  struct destroy_stream {
    using handle = cudaStream_t;
    int device = 0;
    static cudaStream_t null() noexcept { return nullptr; }
    void operator()(cudaStream_t& stream) const noexcept {
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaSetDevice(device));
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaStreamDestroy(stream));
    }
  };
  struct free_device_memory {
    using handle = void*;
    int device = 0;
    static void* null() noexcept { return nullptr; }
    void operator()(void*& memory) const noexcept {
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaSetDevice(device));
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaFree(memory));
    }
  };
  using owned_comm = detail::owned_handle<finalize_comm>;
  using owned_stream = detail::owned_handle<destroy_stream>;
  using owned_memory = detail::owned_handle<free_device_memory>;

  // Polls a non-blocking communicator until its pending operation leaves ncclInProgress.
  static void settle(ncclComm_t comm, std::chrono::milliseconds timeout, const char* call) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (;;) {
      ncclResult_t state = ncclInProgress;
      CASCADE_RL_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        throw nccl_error(std::string("cascade_rl: ") + call + " failed: " +
                             ncclGetErrorString(state),
                         state);
      if (clock::now() - start > timeout)
        throw comm_timeout(std::string("cascade_rl: ") + call + " did not complete within " +
                           std::to_string(std::chrono::duration<double>(timeout).count()) +
                           " s (a peer never joined or stalled)");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  std::string where(std::string_view operation) const {
    return "cascade_rl: nccl rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           ": " + std::string(operation) + ": ";
  }

  void require_usable(std::string_view operation) const {
    if (comm_.empty())
      throw comm_error("cascade_rl: nccl_communicator::" + std::string(operation) +
                       " on a moved-from communicator");
    if (comm_.abandoned())
      throw comm_error(where(operation) + "refused: the communicator was aborted after an error");
  }

  // Checks an enqueue's result; a non-blocking communicator may report ncclInProgress,
  // which must settle before the next NCCL call.
  void enqueued(const char* call, ncclResult_t result) {
    if (result != ncclSuccess && result != ncclInProgress) {
      abort_communicator();
      throw nccl_error(where(call) + ncclGetErrorString(result) + "; communicator aborted", result);
    }
    if (result == ncclInProgress) {
      try {
        settle(comm_.get(), options_.timeout, call);
      } catch (...) {
        abort_communicator();
        throw;
      }
    }
  }

  // ncclCommAbort releases the communicator: it is abandoned, never finalised.
  void abort_communicator() noexcept {
    if (!comm_.empty() && !comm_.abandoned()) {
      CASCADE_RL_NCCL_CHECK_NO_THROW(ncclCommAbort(comm_.get()));
      comm_.abandon();
    }
  }

  template <class T>
  T* staging(std::size_t count) {
    require_usable("staging");
    CASCADE_RL_CUDA_CHECK(cudaSetDevice(device_));
    const std::size_t bytes = count * sizeof(T);
    if (bytes > staging_bytes_) {
      if (!staging_.empty()) CASCADE_RL_CUDA_CHECK(cudaFree(staging_.get()));
      staging_.detach();  // freed just above, with a check that throws
      staging_bytes_ = 0;
      void* memory = nullptr;
      CASCADE_RL_CUDA_CHECK(cudaMalloc(&memory, bytes));
      staging_ = owned_memory(memory, /*owning=*/true, {device_});
      staging_bytes_ = bytes;
    }
    return static_cast<T*>(staging_.get());
  }

  template <class T>
  void to_device(T* device, const T* host, std::size_t count) {
    CASCADE_RL_CUDA_CHECK(
        cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream_.get()));
  }

  template <class T>
  void to_host(T* host, const T* device, std::size_t count) {
    CASCADE_RL_CUDA_CHECK(
        cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream_.get()));
    sync_stream(stream_.get());
  }

  int device_ = 0;
  int rank_ = 0;
  int size_ = 0;
  nccl_options options_{};
  // Declared in the reverse of the order they are released in (members are destroyed
  // last first): the communicator, then the staging buffer, then the stream.
  owned_stream stream_;
  owned_memory staging_;
  std::size_t staging_bytes_ = 0;
  owned_comm comm_;
};

static_assert(Communicator<nccl_communicator>);

}  // namespace cascade_rl
