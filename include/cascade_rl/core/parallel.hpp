#pragma once
// The loops every host algorithm is built from:
//   for_each_index:       independent work per index (elementwise maps, per-sequence work);
//   chunked_blocked_sum:  a floating-point sum in the canonical order of canonical_sum.hpp
//                         (blocks, 32 interleaved lanes, a fixed tree, blocks in order),
//                         with side results per block; blocked_sum is its plain form;
//   blocked_reduce:       an exact reduction (counts, flags) over the same blocks.
//
// Each block is one task, its result independent of the thread that ran it, and the
// block results are joined in block order on one thread, so seq and par give identical
// bits for any number of threads. Bodies must not throw: validate before entering a loop.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/core/exec.hpp"

namespace cascade_rl::detail {

// Below this many indices a parallel loop runs on the calling thread: starting a
// parallel region costs more than the work.
inline constexpr std::size_t parallel_threshold = 2048;

template <exec::parallel_host_policy Policy>
int thread_count(const Policy& policy) {
  return policy.threads > 0 ? policy.threads : policy.default_threads();
}

// `min_parallel`: below this many indices the loop stays on the calling thread. The
// default suits cheap bodies; callers whose body is a whole block or sequence pass less.
template <class Body>
void for_each_index(exec::sequenced_policy, std::size_t n, Body&& body,
                    std::size_t /*min_parallel*/ = parallel_threshold) {
  for (std::size_t i = 0; i < n; ++i) body(i);
}

template <exec::parallel_host_policy Policy, class Body>
void for_each_index(const Policy& policy, std::size_t n, Body&& body,
                    std::size_t min_parallel = parallel_threshold) {
  const int threads = thread_count(policy);
  if (threads <= 1 || n < min_parallel || n < 2) {
    for (std::size_t i = 0; i < n; ++i) body(i);
    return;
  }
  policy.run_parallel(n, threads, body);
}

// Blocks a thread reduces in lockstep: token i of each of them in turn. Each block
// still sees its own indices in order (the same bits as one block at a time), but the
// blocks' accumulators are independent chains, so a floating-point add's latency no
// longer bounds a whole block's time.
inline constexpr std::size_t reduce_interleave = 4;

// Reduces accumulate(acc, i) over i in [0, n), with combine(total, partial) joining
// block results in block order. `identity` must be neutral for combine. For exact
// accumulations (integers, flags): a floating-point sum takes chunked_blocked_sum, whose
// order is the canonical one.
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

// How many i in [0, n) satisfy pred(i): an exact count, whatever the blocks.
template <class Policy, class Predicate>
std::size_t count_where(const Policy& policy, std::size_t n, Predicate&& pred) {
  return blocked_reduce(
      policy, n, std::size_t{0}, [&](std::size_t& acc, std::size_t i) { acc += pred(i) ? 1 : 0; },
      [](std::size_t& total, std::size_t part) { total += part; });
}

// Terms chunked_blocked_sum computes in one go before adding them into the lanes.
inline constexpr std::size_t sum_chunk = 256;
static_assert(reduce_block_size % sum_chunk == 0 && sum_chunk % reduce_lanes == 0);

template <class State, std::size_t Channels = 1>
struct sum_and_state {
  std::array<double, Channels> sums{};  // one canonical sum per channel
  State state{};
};

// The canonical sums (canonical_sum.hpp) of Channels streams of terms that cost more
// than the add, with side results per block. It runs in two phases per chunk of a block:
//   terms(state, first, last, out) writes term i of channel c to
//     out[c * sum_chunk + i - first] for i in [first, last), in index order, and may
//     fold side results of the block into `state` (exact ones: counts, flags; in index
//     order, one state per block, carried across its chunks); this loop has no
//     dependence from one index to the next, so it can vectorise;
//   then the chunk's terms are added into the block's 32 lane sums per channel (term i
//     into lane i mod 32: chunks start at multiples of 32), independent chains a vector
//     unit adds side by side.
// `combine` joins block states in block order; the block sums are added in block order.
// `active` < Channels: only channels [0, active) carry terms (`terms` writes those alone);
// the others are not read and their sums are +0.0, the canonical sum of zeros, so a
// caller whose unused channels hold zeros gets the same bits for a fraction of the work.
template <std::size_t Channels = 1, class Policy, class State, class Terms, class Combine>
sum_and_state<State, Channels> chunked_blocked_sum(const Policy& policy, std::size_t n,
                                                   const State& identity, Terms&& terms,
                                                   Combine&& combine,
                                                   std::size_t active = Channels) {
  constexpr std::size_t block = reduce_block_size;
  constexpr std::size_t chunk = sum_chunk;
  constexpr std::size_t lanes = reduce_lanes;
  using partial_t = sum_and_state<State, Channels>;
  const std::size_t blocks = (n + block - 1) / block;
  if (active > Channels) active = Channels;
  std::vector<partial_t> partial(blocks, partial_t{{}, identity});
  for_each_index(policy, blocks, [&](std::size_t b) {
    alignas(64) double terms_of[Channels * chunk];
    alignas(64) double lane[Channels][lanes] = {};
    partial_t& result = partial[b];
    const std::size_t last = (b + 1) * block < n ? (b + 1) * block : n;
    for (std::size_t begin = b * block; begin < last; begin += chunk) {
      const std::size_t count = begin + chunk < last ? chunk : last - begin;
      terms(result.state, begin, begin + count, terms_of);
      const std::size_t rows = count / lanes;
      for (std::size_t c = 0; c < active; ++c) {
        const double* in = terms_of + c * chunk;
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < lanes; ++j) lane[c][j] += in[r * lanes + j];
        for (std::size_t j = 0; j < count % lanes; ++j) lane[c][j] += in[rows * lanes + j];
      }
    }
    for (std::size_t c = 0; c < active; ++c) result.sums[c] = fold_lanes(lane[c], plus{});
  }, /*min_parallel=*/2);
  partial_t total{{}, identity};
  for (const partial_t& p : partial) {
    for (std::size_t c = 0; c < Channels; ++c) total.sums[c] += p.sums[c];
    combine(total.state, p.state);
  }
  return total;
}

// Sum of term(i) over [0, n) in double, in the canonical order.
template <class Policy, class Term>
double blocked_sum(const Policy& policy, std::size_t n, Term&& term) {
  struct no_state {};
  return chunked_blocked_sum(
             policy, n, no_state{},
             [&](no_state&, std::size_t first, std::size_t last, double* out) {
               for (std::size_t i = first; i < last; ++i) out[i - first] = term(i);
             },
             [](no_state&, const no_state&) {})
      .sums[0];
}

}  // namespace cascade_rl::detail
