#pragma once
// The two loops every host algorithm is built from:
//   for_each_index:  independent work per index (elementwise maps, per-sequence work);
//   blocked_reduce:  a reduction whose result does not depend on the thread count.
//
// blocked_reduce splits [0, n) into blocks of a fixed size, reduces each block
// sequentially, then combines the block results in block order on one thread. The
// same blocks are used under exec::seq, so seq and par give identical bits for any
// number of threads. Bodies must not throw: validate before entering a loop.

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "cascade_rl/core/exec.hpp"

namespace cascade_rl::detail {

// Elements per reduction block. Large enough that the partial-result vector is small,
// small enough that a few hundred thousand elements still spread over many threads.
inline constexpr std::size_t reduce_block_size = 4096;

// Below this many indices a parallel loop runs on the calling thread: starting a
// parallel region costs more than the work.
inline constexpr std::size_t parallel_threshold = 2048;

inline int thread_count(const exec::parallel_policy& policy) {
  if (policy.threads > 0) return policy.threads;
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
#endif
}

// `min_parallel`: below this many indices the loop stays on the calling thread. The
// default suits cheap bodies; callers whose body is a whole block or sequence pass less.
template <class Body>
void for_each_index(exec::sequenced_policy, std::size_t n, Body&& body,
                    std::size_t /*min_parallel*/ = parallel_threshold) {
  for (std::size_t i = 0; i < n; ++i) body(i);
}

template <class Body>
void for_each_index(const exec::parallel_policy& policy, std::size_t n, Body&& body,
                    std::size_t min_parallel = parallel_threshold) {
  const int threads = thread_count(policy);
  if (threads <= 1 || n < min_parallel || n < 2) {
    for (std::size_t i = 0; i < n; ++i) body(i);
    return;
  }
#if defined(_OPENMP)
  const auto count = static_cast<std::int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < count; ++i) body(static_cast<std::size_t>(i));
#else
  // Without OpenMP: one contiguous chunk per thread.
  std::vector<std::thread> workers;
  const std::size_t chunk = (n + threads - 1) / threads;
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
#endif
}

// Reduces accumulate(acc, i) over i in [0, n), with combine(total, partial) joining
// block results in block order. `identity` must be neutral for combine.
template <class Policy, class Acc, class Accumulate, class Combine>
Acc blocked_reduce(const Policy& policy, std::size_t n, const Acc& identity,
                   Accumulate&& accumulate, Combine&& combine) {
  const std::size_t blocks = (n + reduce_block_size - 1) / reduce_block_size;
  std::vector<Acc> partial(blocks, identity);
  for_each_index(policy, blocks, [&](std::size_t b) {
    const std::size_t first = b * reduce_block_size;
    const std::size_t last = first + reduce_block_size < n ? first + reduce_block_size : n;
    Acc& acc = partial[b];
    for (std::size_t i = first; i < last; ++i) accumulate(acc, i);
  }, /*min_parallel=*/2);
  Acc total = identity;
  for (const Acc& p : partial) combine(total, p);
  return total;
}

// Sum of term(i) over [0, n) in double, with blocked_reduce's determinism.
template <class Policy, class Term>
double blocked_sum(const Policy& policy, std::size_t n, Term&& term) {
  return blocked_reduce(
      policy, n, 0.0, [&](double& acc, std::size_t i) { acc += term(i); },
      [](double& total, double part) { total += part; });
}

}  // namespace cascade_rl::detail
