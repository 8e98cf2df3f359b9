#pragma once
// Building blocks of the CUDA kernels: deterministic team reductions (a fixed
// butterfly within a warp, then warp results combined in warp order), temporary-storage
// carving, the device report, and the owning buffer of the convenience layer.

#include <cuda_runtime.h>

#include <cuda/std/cmath>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"

namespace cascade_rl::cuda::detail {

inline constexpr unsigned full_warp = 0xffffffffu;

// Every kernel is a template (`template <int = 0>` where nothing else is a parameter): a
// non-template __global__ function defined in a header (it cannot be inline) would be
// defined in every translation unit that includes it, and two such units would not link.

// __shfl_xor_sync of any trivially copyable value, word by word.
template <class V>
__device__ inline V shuffle_xor(const V& v, int mask, int width) {
  static_assert(sizeof(V) % 4 == 0, "shuffled values are whole 32-bit words");
  constexpr int words = sizeof(V) / 4;
  unsigned w[words];
  memcpy(w, &v, sizeof(V));
#pragma unroll
  for (int k = 0; k < words; ++k) w[k] = __shfl_xor_sync(full_warp, w[k], mask, width);
  V out;
  memcpy(&out, w, sizeof(V));
  return out;
}

// Reduces v over aligned teams of W lanes (W a power of two <= 32). Every lane of the
// warp must call it (no divergent early exit); every lane of a team gets the result.
template <int W, class V, class Op>
__device__ inline V team_reduce(V v, Op op) {
#pragma unroll
  for (int offset = W / 2; offset > 0; offset /= 2) v = op(v, shuffle_xor(v, offset, W));
  return v;
}

// The largest value a block_reduce may carry, in bytes.
inline constexpr int block_reduce_bytes = 64;

// Reduces v over the whole block (blockDim.x a multiple of 32): the warp butterfly, then
// the warp results in warp order. Every thread gets the result; `shared` holds 32 values.
template <class V, class Op>
__device__ inline V block_reduce(V v, Op op, unsigned char* shared) {
  static_assert(sizeof(V) <= block_reduce_bytes);
  v = team_reduce<32>(v, op);
  V* partial = reinterpret_cast<V*>(shared);
  const unsigned warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) partial[warp] = v;
  __syncthreads();
  V total = partial[0];
  for (unsigned k = 1; k < blockDim.x / 32; ++k) total = op(total, partial[k]);
  __syncthreads();
  return total;
}

struct add_op {
  template <class V>
  __device__ V operator()(const V& a, const V& b) const { return a + b; }
};
struct min_op {
  template <class V>
  __device__ V operator()(const V& a, const V& b) const { return b < a ? b : a; }
};
struct max_op {
  template <class V>
  __device__ V operator()(const V& a, const V& b) const { return a < b ? b : a; }
};

__device__ inline void report_min(unsigned long long* slot, std::size_t index) {
  if (slot != nullptr) atomicMin(slot, static_cast<unsigned long long>(index));
}

// A NaN or infinite `value` at `index`, into a first_nonfinite slot (see device_report).
template <class V>
__device__ inline void report_nonfinite(unsigned long long* slot, std::size_t index, V value) {
  report_min(slot, device_report::nonfinite_entry(index, ::cuda::std::isinf(value)));
}

// The tokens [first, last) of sequence s, for a kernel with a team per sequence. A broken
// range (offsets that decrease, run past layout.tokens, or do not start at 0 and end at
// layout.tokens) is reported (call from one lane) and comes back empty.
__device__ inline void sequence_range(const device_token_layout& layout, std::size_t s, bool leader,
                                      device_report* report, std::size_t& first, std::size_t& last) {
  first = layout.begin(s);
  last = layout.end(s);
  const bool broken = last < first || last > layout.tokens || (s == 0 && first != 0) ||
                      (s + 1 == layout.sequences && last != layout.tokens);
  if (broken) {
    if (leader) report_min(&report->first_bad_offset, s == 0 && first != 0 ? 0 : s + 1);
    first = last = 0;
  }
}

// The sequences [first, last) of group g, for a kernel with a thread per group. Broken
// offsets (not increasing, past groups.sequences, or not starting at 0) are reported and
// give false: the thread has nothing to do.
__device__ inline bool group_range(const device_group_layout& groups, std::size_t g,
                                   device_report* report, std::size_t& first, std::size_t& last) {
  first = groups.begin(g);
  last = groups.end(g);
  if (last <= first || last > groups.sequences || (g == 0 && first != 0)) {
    report_min(&report->first_bad_offset, g == 0 && first != 0 ? 0 : g + 1);
    return false;
  }
  return true;
}

// A group's scores [first, last), for a per-sequence estimator with a thread per group: a
// group of one is reported under singleton_rule::error (first_singleton), each NaN or
// infinite score under nonfinite_rule::error (first_nonfinite[0]). Returns whether one is.
template <class T>
__device__ bool scan_group_scores(const T* scores, std::size_t g, std::size_t first,
                                  std::size_t last, singleton_rule singleton,
                                  nonfinite_rule nonfinite, device_report* report) {
  if (last - first == 1 && singleton == singleton_rule::error)
    report_min(&report->first_singleton, g);
  bool found = false;
  for (std::size_t s = first; s < last; ++s)
    if (!::cuda::std::isfinite(scores[s])) {
      if (nonfinite == nonfinite_rule::error)
        report_nonfinite(&report->first_nonfinite[0], s, scores[s]);
      found = true;
    }
  return found;
}

// Launches `kernel` on grid x block in `stream` and returns the launch's status. Every
// launch goes through here: without nvcc (the cuda_emulated test, tests/cuda/emulator)
// the kernel runs on the CPU instead.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
#if defined(__CUDACC__)
  kernel<<<grid, block, 0, stream>>>(static_cast<Params>(std::forward<Args>(args))...);
  return cudaGetLastError();
#elif defined(CASCADE_RL_CUDA_EMULATOR)
  (void)stream;
  return ::cascade_rl_cuda_emulator::launch(kernel, grid, block, static_cast<Params>(std::forward<Args>(args))...);
#else
  static_assert(sizeof...(Params) < 0, "kernels/cascade_rl/cuda/*.cuh are compiled by nvcc");
#endif
}

// f(i) for i in [0, n), one thread each; for the portable functors on the device.
template <class F>
__global__ void for_each_kernel(std::size_t n, F f) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) f(i);
}

inline unsigned blocks_for(std::size_t n, unsigned per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// Carves one temporary-storage allocation into aligned pieces (CUB's pattern): the first
// call with a null base only sums the sizes.
class temp_carver {
 public:
  explicit temp_carver(void* base) : base_(static_cast<unsigned char*>(base)) {}
  template <class V>
  V* take(std::size_t count) {
    const std::size_t offset = used_;
    used_ += (count * sizeof(V) + alignment - 1) / alignment * alignment;
    return base_ == nullptr ? nullptr : reinterpret_cast<V*>(base_ + offset);
  }
  [[nodiscard]] std::size_t bytes() const { return used_ == 0 ? alignment : used_; }

 private:
  static constexpr std::size_t alignment = 256;
  unsigned char* base_;
  std::size_t used_ = 0;
};

inline cudaError_t reset_report(device_report* report, cudaStream_t stream) {
  return cudaMemsetAsync(report, 0xff, sizeof(device_report), stream);
}

// CUB's two phases, in one place for every CUB-style call. A call carves its temporary
// storage with a temp_carver (the device_report first), then begins with
//   if (const call_start start = begin_call(...); !start.proceed) return start.status;
// which answers the size query (null d_temp_storage), refuses storage smaller than the
// query said, and resets the report.
struct call_start {
  cudaError_t status;
  bool proceed;  // false: return `status` (the size query answered, or an error)
};

inline call_start begin_call(void* d_temp_storage, std::size_t& temp_storage_bytes, const temp_carver& carve,
                             device_report* report, cudaStream_t stream) {
  if (d_temp_storage == nullptr) {
    temp_storage_bytes = carve.bytes();
    return {cudaSuccess, false};
  }
  if (temp_storage_bytes < carve.bytes()) return {cudaErrorInvalidValue, false};
  const cudaError_t status = reset_report(report, stream);
  return {status, status == cudaSuccess};
}

// begin_call for a call whose temporary storage is the report alone; sets `report`.
inline call_start begin_report_call(void* d_temp_storage, std::size_t& temp_storage_bytes, device_report*& report,
                                    cudaStream_t stream) {
  temp_carver carve(d_temp_storage);
  report = carve.take<device_report>(1);
  return begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
}

// The whole of a call whose temporary storage is the report alone and whose work is one
// kernel with a thread per item, the report its last parameter: begin_report_call, then
// (when there are items) the launch in blocks of Tuning::thread_item_block_threads.
template <class Tuning, class... Params, class... Args>
cudaError_t report_call_per_item(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                 cudaStream_t stream, std::size_t items,
                                 void (*kernel)(Params...), Args&&... args) {
  device_report* report = nullptr;
  if (const call_start start =
          begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (items == 0) return cudaSuccess;
  constexpr unsigned threads = Tuning::thread_item_block_threads;
  return launch(kernel, blocks_for(items, threads), threads, stream, std::forward<Args>(args)...,
                report);
}

// Stream-ordered device memory owned by the convenience layer.
class device_buffer {
 public:
  device_buffer(std::size_t bytes, cudaStream_t stream) : stream_(stream), bytes_(bytes) {
    if (bytes > 0) check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync");
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() {
    if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  }
  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
  std::size_t bytes_;
};

template <class V>
V copy_to_host(const V* device, cudaStream_t stream) {
  V host{};
  check(cudaMemcpyAsync(&host, device, sizeof(V), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host;
}

// Runs a CUB-style call run(d_temp_storage, temp_storage_bytes) with owned temporary
// storage (a size query, then the call), waits for the stream and returns the
// device_report at the start of the storage.
template <class Run>
device_report run_and_report(cudaStream_t stream, Run run) {
  std::size_t bytes = 0;
  check(run(nullptr, bytes), "size query");
  device_buffer temp(bytes, stream);
  check(run(temp.data(), bytes), "kernel launch");
  return copy_to_host(static_cast<const device_report*>(temp.data()), stream);
}

template <class R>
struct report_and_result {
  device_report report;
  R result;
};

// run_and_report for a call that also writes one R to device memory: run(d_temp_storage,
// temp_storage_bytes, d_result), with d_result after the temporary storage in the same
// allocation.
template <class R, class Run>
report_and_result<R> run_and_report_result(cudaStream_t stream, Run run) {
  std::size_t bytes = 0;
  check(run(nullptr, bytes, static_cast<R*>(nullptr)), "size query");
  const std::size_t result_offset = (bytes + alignof(R) - 1) / alignof(R) * alignof(R);
  device_buffer temp(result_offset + sizeof(R), stream);
  auto* result = reinterpret_cast<R*>(static_cast<unsigned char*>(temp.data()) + result_offset);
  check(run(temp.data(), bytes, result), "kernel launch");
  return {copy_to_host(static_cast<const device_report*>(temp.data()), stream), copy_to_host(result, stream)};
}

// Throws cascade_rl::error for what a kernel reported, naming the argument as the host
// core would: `arguments` names the first_nonfinite slots in validation order.
inline void throw_if_reported(const device_report& r, std::span<const char* const> arguments,
                              const char* singleton_message = nullptr) {
  if (r.first_bad_offset != device_report::none)
    cascade_rl::detail::fail_at("offsets", static_cast<std::size_t>(r.first_bad_offset),
            "breaks the layout (not increasing, or past the end of the data)");
  int k = 0;
  for (const char* name : arguments) {
    const unsigned long long entry = r.first_nonfinite[k++];
    if (entry != device_report::none)
      cascade_rl::detail::fail_at(name, device_report::nonfinite_index(entry),
                                  device_report::nonfinite_is_infinite(entry) ? "is infinite" : "is NaN");
  }
  if (r.first_singleton != device_report::none && singleton_message != nullptr)
    cascade_rl::detail::fail_at("groups", static_cast<std::size_t>(r.first_singleton), singleton_message);
  if (r.first_bad_label != device_report::none)
    cascade_rl::detail::fail_at("labels", static_cast<std::size_t>(r.first_bad_label), "is outside [0, vocab)");
}

inline void throw_if_reported(const device_report& r, std::initializer_list<const char*> arguments,
                              const char* singleton_message = nullptr) {
  throw_if_reported(r, std::span<const char* const>(arguments.begin(), arguments.size()),
                    singleton_message);
}

}  // namespace cascade_rl::cuda::detail
