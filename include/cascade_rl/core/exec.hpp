#pragma once
// Execution policies: the first argument of every algorithm. Host overloads take
// exec::seq, exec::par or exec::omp (core/exec_openmp.hpp); the CUDA executor
// (exec::cuda) lives in kernels/.
//
// Every host algorithm gives the same bits under each of them with any thread count:
// reductions run over fixed-size blocks whose partial results are combined in block
// order (see parallel.hpp), so the threads never change the arithmetic.
//
// Why exec::par and exec::omp are two policies: the body of an inline function must
// not depend on whether its translation unit was compiled with -fopenmp. If exec::par
// switched to OpenMP under `#if defined(_OPENMP)`, a program with one file built with
// -fopenmp and another without would hold two different definitions of the same inline
// function (an ODR violation: the linker keeps one of them, chosen silently). So
// exec::par always runs on std::thread, and OpenMP's thread pool is a policy of its
// own, declared in a header that only an OpenMP translation unit can include.

#include <concepts>
#include <cstddef>
#include <thread>
#include <type_traits>
#include <vector>

namespace cascade_rl::exec {

struct sequenced_policy {};

// Host threads started for the loop and joined before it returns (one contiguous chunk
// of the indices each, the calling thread taking the first).
struct parallel_policy {
  // Number of host threads; 0 means std::thread::hardware_concurrency().
  int threads = 0;

  [[nodiscard]] constexpr parallel_policy with_threads(int n) const { return {n}; }

  [[nodiscard]] static int default_threads() {
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware == 0 ? 1 : static_cast<int>(hardware);
  }

  // Runs body(i) for every i in [0, n) on `threads` threads (threads >= 2, n >= 2).
  template <class Body>
  static void run_parallel(std::size_t n, int threads, Body& body) {
    std::vector<std::thread> workers;
    const std::size_t chunk = (n + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
    for (int t = 1; t < threads; ++t) {
      const std::size_t first = static_cast<std::size_t>(t) * chunk;
      const std::size_t last = first + chunk < n ? first + chunk : n;
      if (first >= last) break;
      workers.emplace_back([&body, first, last] {
        for (std::size_t i = first; i < last; ++i) body(i);
      });
    }
    for (std::size_t i = 0; i < chunk && i < n; ++i) body(i);
    for (auto& worker : workers) worker.join();
  }
};

inline constexpr sequenced_policy seq{};
inline constexpr parallel_policy par{};

// A policy that runs independent indices on host threads: a thread count (0: its
// default) and the loop itself. exec::par and exec::omp are the two the library ships.
template <class P>
concept parallel_host_policy = requires(const std::remove_cvref_t<P>& p, std::size_t n, int threads,
                                        void (*body)(std::size_t)) {
  { p.threads } -> std::convertible_to<int>;
  { p.default_threads() } -> std::convertible_to<int>;
  p.run_parallel(n, threads, body);
};

template <class P>
concept host_policy =
    std::same_as<std::remove_cvref_t<P>, sequenced_policy> || parallel_host_policy<P>;

}  // namespace cascade_rl::exec
