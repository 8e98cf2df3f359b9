#pragma once
// The one order of every floating-point sum over tokens (DESIGN principle 3), chosen to
// be cheap on SIMD lanes and on GPU warps, so that every executor can give the same bits:
//
//   1. blocks: [0, n) is cut into blocks of reduce_block_size terms;
//   2. lanes: inside a block, lane j (j < 32) adds the block's terms j, j + 32, j + 64,
//      ... in that order, starting from +0.0;
//   3. tree: the 32 lane sums are folded by lane[j] += lane[j + w] for w = 16, 8, 4, 2, 1
//      (j < w), the order of a warp's shuffle-down reduction; lane[0] is the block sum;
//   4. the block sums are added in block order, starting from +0.0.
//
// On a CPU the 32 lanes are a few vector registers of independent accumulators (no add
// latency chain); on a GPU one warp reads a block coalesced and reduces it with
// shuffles in the same tree. The order depends on n alone: never on threads, vector
// width or micro-batching of the normaliser. A masked term adds +0.0, which changes no
// sum (a sum starting at +0.0 is never -0.0, and x + 0.0 == x otherwise).

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::detail {

// Terms per block.
inline constexpr std::size_t reduce_block_size = 4096;
// Interleaved lanes per block (a warp).
inline constexpr std::size_t reduce_lanes = 32;

static_assert(reduce_block_size % reduce_lanes == 0);

// Step 3: folds lane sums (lanes[0..32)) into lanes[0] by the fixed tree, with `add`.
template <class T, class Add>
CASCADE_RL_HD T fold_lanes(T* lanes, Add add) {
  for (std::size_t width = reduce_lanes / 2; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j) lanes[j] = add(lanes[j], lanes[j + width]);
  return lanes[0];
}

struct plus {
  template <class T>
  CASCADE_RL_HD T operator()(const T& a, const T& b) const { return a + b; }
};

// Steps 2 and 3 for terms term(i), i in [first, last), last - first <= reduce_block_size:
// the plain statement of a block's sum, for executors that take a block per work item.
template <class Term>
CASCADE_RL_HD double canonical_block_sum(std::size_t first, std::size_t last, Term&& term) {
  double lanes[reduce_lanes] = {};
  for (std::size_t i = first; i < last; ++i) lanes[(i - first) % reduce_lanes] += term(i);
  return fold_lanes(lanes, plus{});
}

}  // namespace cascade_rl::detail
