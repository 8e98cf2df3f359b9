#pragma once
// A CPU emulator for the CUDA kernels of kernels/cascade_rl/cuda, so that the tests
// written for a GPU (tests/cuda/test_executors.cu) run where there is none.
//
// Every thread of a block is a fiber on the calling thread (its own stack; the switch
// is context_switch.cpp, x86-64); the blocks of a grid run one after another. A fiber
// runs until it reaches a collective: a warp
// shuffle or ballot (a barrier of the 32 lanes of its warp) or __syncthreads (a barrier
// of the block); the scheduler then runs the others until every thread the collective
// waits for has arrived. What is undefined behaviour on a GPU is reported instead of
// being emulated somehow, and the launch fails with cudaErrorLaunchFailure:
//   - a full-mask collective reached by only some lanes of the warp (the others have
//     exited or wait at another collective): divergence;
//   - lanes of one warp at different collectives (a __shfl_xor_sync meeting a
//     __shfl_down_sync), or a width that is not a power of two up to 32;
//   - __syncthreads after some threads of the block have exited;
//   - a misaligned __ldg (x86 loads it; the GPU faults).
// Races: between two collectives a thread runs alone, so the hardware's interleavings
// are not all tried; the order the scheduler resumes threads in can be changed instead
// (CASCADE_RL_EMULATOR_ORDER = forward, the default; reverse; shuffle, a new permutation
// every pass, seeded by CASCADE_RL_EMULATOR_SEED), and a kernel whose results change
// with it reads memory that another thread writes without a barrier between.
// Other differences from a GPU: device math is the host's libm, and every stream
// operation completes before the call returns.

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// The built-in variables, set by the scheduler before it resumes a fiber.
inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

namespace cascade_rl_cuda_emulator {

inline constexpr unsigned warp_size = 32;

// A barrier of the lanes of one warp or of the threads of a block. `what` names the
// collective its current round is for; every participant must call the same one.
struct barrier {
  unsigned arrived = 0;
  std::uint64_t generation = 0;
  const char* what = nullptr;
};

// Saves the callee-saved registers and the stack pointer of the running context in
// *save and resumes the context whose stack pointer is `load` (context_switch.cpp).
extern "C" void cascade_rl_emulator_switch(void** save, void* load);

struct fiber {
  void* context = nullptr;  // the saved stack pointer while the fiber is not running
  unsigned char* stack = nullptr;
  uint3 index{};
  unsigned linear = 0;  // threadIdx flattened, x fastest
  bool finished = false;
  const barrier* waiting_on = nullptr;  // runnable again once its generation moves on
  std::uint64_t waiting_generation = 0;
};

struct block_run {
  std::function<void()> body;
  unsigned threads = 0;
  std::vector<fiber> fibers;
  std::vector<std::unique_ptr<unsigned char[]>> stacks;
  std::vector<unsigned> warp_live;           // lanes of each warp not yet finished
  std::vector<unsigned> warp_lanes;          // lanes each warp was launched with
  std::vector<barrier> warp_barriers;
  // Two sets of 32 slots per warp, one value per lane: a collective writes the set of its
  // barrier generation's parity, so a lane that leaves the barrier first and enters the
  // next collective cannot overwrite a value another lane has yet to read.
  std::vector<std::uint64_t> exchange;
  unsigned block_live = 0;
  barrier block_barrier;
  unsigned current = 0;
  void* scheduler = nullptr;
  const void* scheduler_stack = nullptr;  // for AddressSanitizer, learned at a fiber's start
  std::size_t scheduler_stack_bytes = 0;
  std::string error;
};

inline constexpr std::size_t fiber_stack_bytes = 64 * 1024;

enum class schedule_order { forward, reverse, shuffle };

inline schedule_order order_from_environment() {
  const char* order = std::getenv("CASCADE_RL_EMULATOR_ORDER");
  if (order == nullptr || std::strcmp(order, "forward") == 0) return schedule_order::forward;
  if (std::strcmp(order, "reverse") == 0) return schedule_order::reverse;
  if (std::strcmp(order, "shuffle") == 0) return schedule_order::shuffle;
  std::fprintf(stderr, "CASCADE_RL_EMULATOR_ORDER=%s: expected forward, reverse or shuffle\n", order);
  std::abort();
}

// The order of every launch from now on (tests that need one set it).
inline schedule_order& order() {
  static schedule_order current = order_from_environment();
  return current;
}

inline std::mt19937_64& shuffle_source() {
  static std::mt19937_64 source = [] {
    const char* seed = std::getenv("CASCADE_RL_EMULATOR_SEED");
    return std::mt19937_64(seed == nullptr ? 1 : std::strtoull(seed, nullptr, 10));
  }();
  return source;
}

// The block being run, null outside a launch.
inline block_run*& active() {
  static block_run* run = nullptr;
  return run;
}

inline std::string& last_launch_error() {
  static std::string message;
  return message;
}

inline fiber& self() { return active()->fibers[active()->current]; }

// The two switches. Under AddressSanitizer each tells it which stack runs next, so that
// it checks the kernels' memory accesses (their out-of-bounds reads and writes included)
// and does not take the change of stack for an overflow.
inline void switch_to_fiber(block_run& run, fiber& f) {
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f.stack, fiber_stack_bytes);
#endif
  cascade_rl_emulator_switch(&run.scheduler, f.context);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

// `for_good`: the fiber has finished or failed and is never resumed.
inline void switch_to_scheduler(block_run& run, fiber& me, bool for_good) {
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(for_good ? nullptr : &fake_stack, run.scheduler_stack, run.scheduler_stack_bytes);
#else
  (void)for_good;
#endif
  cascade_rl_emulator_switch(&me.context, run.scheduler);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, &run.scheduler_stack, &run.scheduler_stack_bytes);
#endif
}

// Thrown through the kernel's frames by fail(), caught in fiber_main: unwinding frees
// what those frames own (the message itself) before the fiber is left for good.
struct launch_failure {};

// Records the first undefined behaviour of the launch and ends the fiber.
[[noreturn]] inline void fail(const std::string& message) {
  block_run& run = *active();
  if (run.error.empty())
    run.error = message + " (block " + std::to_string(blockIdx.x) + ", thread " +
                std::to_string(threadIdx.x) + ")";
  throw launch_failure{};
}

inline void wait_for(const barrier& b, std::uint64_t generation) {
  fiber& me = self();
  me.waiting_on = &b;
  me.waiting_generation = generation;
  switch_to_scheduler(*active(), me, false);
}

// Arrive at `b`, which `expected` threads must reach, and return once all have.
inline void arrive(barrier& b, unsigned expected, const char* what) {
  if (b.arrived == 0) {
    b.what = what;
  } else if (b.what != what && std::strcmp(b.what, what) != 0) {
    fail(std::string("lanes meet at different collectives: ") + b.what + " and " + what);
  }
  const std::uint64_t generation = b.generation;
  if (++b.arrived == expected) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  wait_for(b, generation);
}

inline void warp_barrier(unsigned mask, const char* what) {
  block_run& run = *active();
  const unsigned warp = self().linear / warp_size;
  const unsigned lanes = run.warp_lanes[warp];
  const unsigned all = lanes == warp_size ? 0xffffffffu : (1u << lanes) - 1u;
  if (mask != all) fail(std::string(what) + " with a mask that is not the whole warp");
  if (run.warp_live[warp] != lanes)
    fail("divergence: " + std::string(what) + " with the full mask after a lane of the warp has exited");
  arrive(run.warp_barriers[warp], lanes, what);
}

// The first of the 32 exchange slots of the current lane's warp for this collective.
inline std::size_t exchange_base() {
  block_run& run = *active();
  const unsigned warp = self().linear / warp_size;
  const std::size_t set = run.warp_barriers[warp].generation & 1;
  return (set * run.warp_lanes.size() + warp) * warp_size;
}

// The value `source(lane)` of the warp's lanes passed, for every lane.
template <class T, class Source>
T exchange(unsigned mask, const T& value, const char* what, Source source) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
  block_run& run = *active();
  const std::size_t base = exchange_base();
  std::uint64_t word = 0;
  std::memcpy(&word, &value, sizeof(T));
  run.exchange[base + self().linear % warp_size] = word;
  warp_barrier(mask, what);
  T out;
  std::memcpy(&out, &run.exchange[base + source(self().linear % warp_size)], sizeof(T));
  return out;
}

inline void check_width(int width, const char* what) {
  if (width <= 0 || width > static_cast<int>(warp_size) || (width & (width - 1)) != 0)
    fail(std::string(what) + " with width " + std::to_string(width) + " (a power of two up to 32)");
}

[[noreturn]] inline void fiber_main() {
  block_run& run = *active();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &run.scheduler_stack, &run.scheduler_stack_bytes);
#endif
  try {
    run.body();
    fiber& me = self();
    me.finished = true;
    const unsigned warp = me.linear / warp_size;
    --run.warp_live[warp];
    --run.block_live;
    if (run.warp_barriers[warp].arrived > 0)
      fail(std::string("divergence: a lane exited while others of its warp wait at ") +
           run.warp_barriers[warp].what);
    if (run.block_barrier.arrived > 0) fail("divergence: a thread exited while others wait at __syncthreads");
  } catch (const launch_failure&) {
    // run.error says what; the scheduler resumes nobody of this launch again.
  }
  switch_to_scheduler(run, self(), true);
  __builtin_unreachable();  // a finished fiber is never resumed
}

// The stack pointer of a context that, switched to, starts fiber_main on `stack`: below
// an entry for the return into fiber_main, zeros for the six registers the switch pops.
inline void* start_context(unsigned char* stack) {
#if defined(__SANITIZE_ADDRESS__)
  // A finished fiber never returns from fiber_main, whose frame's redzones stay poisoned.
  ASAN_UNPOISON_MEMORY_REGION(stack, fiber_stack_bytes);
#endif
  auto top = reinterpret_cast<std::uintptr_t>(stack + fiber_stack_bytes) & ~std::uintptr_t{15};
  auto* slots = reinterpret_cast<void**>(top - 16);  // 16-aligned: fiber_main starts as if called
  slots[0] = reinterpret_cast<void*>(&fiber_main);
  slots[1] = nullptr;
  for (int r = 1; r <= 6; ++r) slots[-r] = nullptr;
  return slots - 6;
}

// Runs every block of the grid; returns the first undefined behaviour found, or "".
inline std::string run_grid(dim3 grid, dim3 block, std::function<void()> body) {
  block_run run;
  run.body = std::move(body);
  run.threads = block.x * block.y * block.z;
  if (run.threads == 0 || run.threads > 1024) return "a block of " + std::to_string(run.threads) + " threads";
  const unsigned warps = (run.threads + warp_size - 1) / warp_size;
  run.fibers.resize(run.threads);
  run.stacks.resize(run.threads);
  for (auto& stack : run.stacks) stack = std::make_unique_for_overwrite<unsigned char[]>(fiber_stack_bytes);
  active() = &run;
  gridDim = grid;
  blockDim = block;
  std::string error;
  for (unsigned bz = 0; bz < grid.z && error.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && error.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && error.empty(); ++bx) {
        blockIdx = uint3{bx, by, bz};
        run.warp_live.assign(warps, 0);
        run.warp_lanes.assign(warps, 0);
        run.warp_barriers.assign(warps, barrier{});
        run.exchange.assign(2 * static_cast<std::size_t>(warps) * warp_size, 0);
        run.block_live = run.threads;
        run.block_barrier = barrier{};
        for (unsigned t = 0; t < run.threads; ++t) {
          fiber& f = run.fibers[t];
          f = fiber{};
          f.linear = t;
          f.index = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          ++run.warp_live[t / warp_size];
          ++run.warp_lanes[t / warp_size];
          f.stack = run.stacks[t].get();
          f.context = start_context(f.stack);
        }
        std::vector<unsigned> pass(run.threads);
        std::iota(pass.begin(), pass.end(), 0u);
        if (order() == schedule_order::reverse) std::reverse(pass.begin(), pass.end());
        unsigned finished = 0;
        while (finished < run.threads && run.error.empty()) {
          if (order() == schedule_order::shuffle) std::shuffle(pass.begin(), pass.end(), shuffle_source());
          bool progressed = false;
          finished = 0;
          for (const unsigned t : pass) {
            if (!run.error.empty()) break;
            fiber& f = run.fibers[t];
            if (f.finished) {
              ++finished;
              continue;
            }
            if (f.waiting_on != nullptr && f.waiting_on->generation == f.waiting_generation) continue;
            f.waiting_on = nullptr;
            run.current = t;
            threadIdx = f.index;
            switch_to_fiber(run, f);
            progressed = true;
          }
          if (!progressed && finished < run.threads && run.error.empty())
            run.error = "deadlock in block " + std::to_string(bx) +
                        ": threads wait at a collective that the others never reach";
        }
        error = run.error;
      }
  active() = nullptr;
  return error;
}

// The launch of detail::launch (kernels/cascade_rl/cuda/detail/device.cuh) without nvcc.
template <class... Params>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, Params... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) {
    last_launch_error() = "an empty grid";
    return cudaErrorInvalidConfiguration;
  }
  last_launch_error() = run_grid(grid, block, [&] { kernel(args...); });
  return last_launch_error().empty() ? cudaSuccess : cudaErrorLaunchFailure;
}

}  // namespace cascade_rl_cuda_emulator

// ---- the device intrinsics the kernels use ------------------------------------------

template <class T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
  cascade_rl_cuda_emulator::check_width(width, "__shfl_sync");
  return cascade_rl_cuda_emulator::exchange(mask, value, "__shfl_sync", [&](unsigned lane) {
    const unsigned w = static_cast<unsigned>(width);
    return lane / w * w + static_cast<unsigned>(source_lane) % w;
  });
}

template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  cascade_rl_cuda_emulator::check_width(width, "__shfl_down_sync");
  return cascade_rl_cuda_emulator::exchange(mask, value, "__shfl_down_sync", [&](unsigned lane) {
    const unsigned w = static_cast<unsigned>(width);
    return lane % w + delta < w ? lane + delta : lane;  // past the segment: its own value
  });
}

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  cascade_rl_cuda_emulator::check_width(width, "__shfl_xor_sync");
  return cascade_rl_cuda_emulator::exchange(mask, value, "__shfl_xor_sync", [&](unsigned lane) {
    const unsigned w = static_cast<unsigned>(width);
    const unsigned source = lane ^ static_cast<unsigned>(lane_mask);
    return source < (lane / w + 1) * w ? source : lane;  // a later segment: its own value
  });
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  using namespace cascade_rl_cuda_emulator;
  block_run& run = *active();
  const unsigned lanes = run.warp_lanes[self().linear / warp_size];
  const std::size_t base = exchange_base();
  run.exchange[base + self().linear % warp_size] = predicate != 0 ? 1 : 0;
  warp_barrier(mask, "__ballot_sync");
  unsigned bits = 0;
  for (unsigned lane = 0; lane < lanes; ++lane)
    if (run.exchange[base + lane] != 0) bits |= 1u << lane;
  return bits;
}

inline void __syncthreads() {
  using namespace cascade_rl_cuda_emulator;
  block_run& run = *active();
  if (run.block_live != run.threads) fail("__syncthreads after threads of the block have exited");
  arrive(run.block_barrier, run.threads, "__syncthreads");
}

inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }

// A load the GPU makes in one access faults when misaligned; x86 would not notice.
template <class T>
T __ldg(const T* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0)
    cascade_rl_cuda_emulator::fail("misaligned __ldg of " + std::to_string(sizeof(T)) + " bytes");
  return *p;
}

// Fibers run one at a time: the read-modify-write is atomic as it stands.
template <class T>
T atomicMin(T* address, T value) {
  const T old = *address;
  if (value < old) *address = value;
  return old;
}
