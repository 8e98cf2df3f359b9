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

// Blocks a thread reduces in lockstep: token i of each of them in turn. Each block
// still sees its own indices in order (the same bits as one block at a time), but the
// blocks' accumulators are independent chains, so a floating-point add's latency no
// longer bounds a whole block's time.
inline constexpr std::size_t reduce_interleave = 4;

// Reduces accumulate(acc, i) over i in [0, n), with combine(total, partial) joining
// block results in block order. `identity` must be neutral for combine.
template <class Policy, class Acc, class Accumulate, class Combine>
Acc blocked_reduce(const Policy& policy, std::size_t n, const Acc& identity,
                   Accumulate&& accumulate, Combine&& combine) {
  constexpr std::size_t block = reduce_block_size;
  constexpr std::size_t lanes = reduce_interleave;
  const std::size_t blocks = (n + block - 1) / block;
  const std::size_t full_blocks = n / block;
  std::vector<Acc> partial(blocks, identity);
  // Whole groups of `lanes` full blocks in lockstep, then the rest one block at a time.
  const std::size_t groups = full_blocks / lanes;
  const std::size_t tasks = groups + (blocks - groups * lanes);
  for_each_index(policy, tasks, [&](std::size_t task) {
    if (task < groups) {
      const std::size_t first = task * lanes * block;
      Acc acc[lanes];
      for (std::size_t k = 0; k < lanes; ++k) acc[k] = identity;
      for (std::size_t i = 0; i < block; ++i)
        for (std::size_t k = 0; k < lanes; ++k) accumulate(acc[k], first + k * block + i);
      for (std::size_t k = 0; k < lanes; ++k) partial[task * lanes + k] = acc[k];
      return;
    }
    const std::size_t b = groups * lanes + (task - groups);
    const std::size_t first = b * block;
    const std::size_t last = first + block < n ? first + block : n;
    Acc& acc = partial[b];
    for (std::size_t i = first; i < last; ++i) accumulate(acc, i);
  }, /*min_parallel=*/2);
  Acc total = identity;
  for (const Acc& p : partial) combine(total, p);
  return total;
}

// Tokens whose terms chunked_blocked_sum computes in one go before adding them.
inline constexpr std::size_t sum_chunk = 256;
// Blocks chunked_blocked_sum adds in lockstep (independent chains the CPU overlaps).
inline constexpr std::size_t sum_lanes = 8;

template <class State>
struct sum_and_state {
  double sum = 0;
  State state{};
};

// blocked_reduce's sum (each block's terms added in index order from 0.0, the blocks'
// sums added in block order; the same bits for any policy and thread count) for terms
// that cost more than the add. It runs in two phases per chunk of a block:
//   terms(state, first, last, out) writes term i to out[i - first] for i in
//     [first, last), in index order, and may fold side results of the block
//     into `state` (in index order: one state per block, carried across its chunks);
//     this loop has no dependence from one index to the next, so it can vectorise;
//   then the terms of sum_lanes blocks are added in lockstep, one running sum per
//     block, which keeps every block's own order.
// A single in-order chain would otherwise cost one add latency per term. `combine`
// joins block states in block order.
template <class Policy, class State, class Terms, class Combine>
sum_and_state<State> chunked_blocked_sum(const Policy& policy, std::size_t n,
                                         const State& identity, Terms&& terms,
                                         Combine&& combine) {
  constexpr std::size_t block = reduce_block_size;
  constexpr std::size_t lanes = sum_lanes;
  constexpr std::size_t chunk = sum_chunk;
  static_assert(block % chunk == 0);
  using partial_t = sum_and_state<State>;
  const std::size_t blocks = (n + block - 1) / block;
  const std::size_t groups = (n / block) / lanes;
  const std::size_t tasks = groups + (blocks - groups * lanes);
  std::vector<partial_t> partial(blocks, partial_t{0.0, identity});
  for_each_index(policy, tasks, [&](std::size_t task) {
    alignas(64) double terms_of[chunk * lanes];
    if (task < groups) {
      const std::size_t first = task * lanes * block;
      State state[lanes];
      double sum[lanes];
      for (std::size_t k = 0; k < lanes; ++k) {
        state[k] = identity;
        sum[k] = 0.0;
      }
      for (std::size_t offset = 0; offset < block; offset += chunk) {
        for (std::size_t k = 0; k < lanes; ++k) {
          const std::size_t begin = first + k * block + offset;
          terms(state[k], begin, begin + chunk, terms_of + k * chunk);
        }
        for (std::size_t i = 0; i < chunk; ++i)
          for (std::size_t k = 0; k < lanes; ++k) sum[k] += terms_of[k * chunk + i];
      }
      for (std::size_t k = 0; k < lanes; ++k)
        partial[task * lanes + k] = partial_t{sum[k], state[k]};
      return;
    }
    const std::size_t b = groups * lanes + (task - groups);
    const std::size_t last = (b + 1) * block < n ? (b + 1) * block : n;
    partial_t& result = partial[b];
    for (std::size_t begin = b * block; begin < last; begin += chunk) {
      const std::size_t end = begin + chunk < last ? begin + chunk : last;
      terms(result.state, begin, end, terms_of);
      for (std::size_t i = 0; i < end - begin; ++i) result.sum += terms_of[i];
    }
  }, /*min_parallel=*/2);
  partial_t total{0.0, identity};
  for (const partial_t& p : partial) {
    total.sum += p.sum;
    combine(total.state, p.state);
  }
  return total;
}

// Sum of term(i) over [0, n) in double, with blocked_reduce's determinism.
template <class Policy, class Term>
double blocked_sum(const Policy& policy, std::size_t n, Term&& term) {
  struct no_state {};
  return chunked_blocked_sum(
             policy, n, no_state{},
             [&](no_state&, std::size_t first, std::size_t last, double* out) {
               for (std::size_t i = first; i < last; ++i) out[i - first] = term(i);
             },
             [](no_state&, const no_state&) {})
      .sum;
}

}  // namespace cascade_rl::detail
