#pragma once
// exec::omp: the host algorithms on OpenMP's thread pool. Same bits as exec::seq and
// exec::par (the blocks and their order do not depend on the threads); cheaper to start
// than exec::par's std::threads, which matters for small batches and many calls per step.
//
// Only translation units compiled with OpenMP (-fopenmp; CMake: link cascade_rl::openmp)
// may include this header: see exec.hpp for why exec::par does not switch to OpenMP by
// itself.

#if !defined(_OPENMP)
#error "cascade_rl/core/exec_openmp.hpp needs OpenMP: compile with -fopenmp (CMake: link cascade_rl::openmp), or use exec::par"
#endif

#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/exec.hpp"

namespace cascade_rl::exec {

struct openmp_policy {
  // Number of OpenMP threads; 0 means omp_get_max_threads() (OMP_NUM_THREADS).
  int threads = 0;

  [[nodiscard]] constexpr openmp_policy with_threads(int n) const { return {n}; }

  [[nodiscard]] static int default_threads() { return omp_get_max_threads(); }

  // Runs body(i) for every i in [0, n) as one static OpenMP loop on `threads` threads.
  template <class Body>
  static void run_parallel(std::size_t n, int threads, Body& body) {
    const auto count = static_cast<std::int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < count; ++i) body(static_cast<std::size_t>(i));
  }
};

inline constexpr openmp_policy omp{};

static_assert(parallel_host_policy<openmp_policy>);

}  // namespace cascade_rl::exec
