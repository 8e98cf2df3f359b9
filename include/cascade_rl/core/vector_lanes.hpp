#pragma once
// Bit work on the lanes of GNU vectors (and on plain floats and doubles), and their
// transpose, for the host's explicitly vectorised loops (the log-sum-exp of
// log_probs.hpp, GRPO's group tile) and for the terms those loops share with the device
// (terms/log_sum_exp.hpp).
//
// GNU vectors go through these helpers by reference only: a vector passed or returned
// by value has a calling convention that depends on -march (GCC's -Wpsabi), and an
// inline function not inlined in two translation units built with different flags
// would then be called with the wrong one.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if !defined(__CUDA_ARCH__) && defined(__SSE2__)
#include <immintrin.h>
#endif

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::detail {

// The bytes of one vector register of the target. The explicit GNU vectors of the host
// loops are made this wide: GCC 12 lowers a vector wider than the registers badly (its
// compares and selects become scalar code), while the lanes' arithmetic and order, and
// so the bits, do not depend on the width.
#if defined(__AVX512F__)
inline constexpr std::size_t register_bytes = 64;
#elif defined(__AVX__)
inline constexpr std::size_t register_bytes = 32;
#else
inline constexpr std::size_t register_bytes = 16;
#endif

// Unrolls the loop that follows, on GCC and clang: GCC -O2 leaves a loop over a tile's few
// vectors rolled, and an array of vectors indexed by its counter then lives on the stack
// (every accumulation a store and a reload). nvcc's front end does not know the pragma,
// and its device pass never compiles these loops.
#if defined(__CUDACC__)
#define CASCADE_RL_UNROLL_LANES
#else
#define CASCADE_RL_UNROLL_LANES _Pragma("GCC unroll 16")
#endif

// The unsigned integer as wide as a float or a double.
template <class E>
using word_of = std::conditional_t<sizeof(E) == sizeof(std::uint32_t), std::uint32_t, std::uint64_t>;

// math::product_unfused lane by lane: clears the last significand bit of each rounded
// product. The bit operation between the multiply and the add that follows keeps any
// compiler from fusing them, whatever -march or -ffp-contract say, so the bits do not
// depend on the build. A float or a double (host and device), or a GNU vector of either
// (host).
CASCADE_RL_HD inline void clear_last_bit(float& product) {
  product = math::detail::float_from(math::detail::bits_of(product) & ~std::uint32_t{1});
}
CASCADE_RL_HD inline void clear_last_bit(double& product) {
  product = math::detail::double_from(math::detail::bits_of(product) & ~std::uint64_t{1});
}
template <class V>
  requires(!std::is_floating_point_v<V>)
inline void clear_last_bit(V& product) {
  using word = word_of<std::remove_cvref_t<decltype(product[0])>>;
  typedef word words __attribute__((vector_size(sizeof(V))));
  words bits;
  std::memcpy(&bits, &product, sizeof bits);
  bits &= ~word{1};
  std::memcpy(&product, &bits, sizeof bits);
}

// math::sqrt lane by lane, on a double (host and device) or a GNU vector of doubles (host):
// the x86 vector square root where there is one (IEEE's correctly rounded sqrt, so the same
// bits as one lane at a time). 256 bits at most: GCC 12's _mm512_sqrt_pd trips
// -Wmaybe-uninitialized inside its own header.
CASCADE_RL_HD inline void sqrt_lanes(double& x) { x = math::sqrt(x); }
template <class V>
  requires(!std::is_floating_point_v<V>)
inline void sqrt_lanes(V& x) {
  constexpr std::size_t W = sizeof(V) / sizeof(x[0]);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(x[0])>, double>);
  double lanes[W];
  std::memcpy(lanes, &x, sizeof x);
  std::size_t k = 0;
#if !defined(__CUDA_ARCH__) && defined(__AVX__)  // nvcc's device pass has no <immintrin.h>
  for (; k + 4 <= W; k += 4)
    _mm256_storeu_pd(lanes + k, _mm256_sqrt_pd(_mm256_loadu_pd(lanes + k)));
#endif
#if !defined(__CUDA_ARCH__) && defined(__SSE2__)
  for (; k + 2 <= W; k += 2) _mm_storeu_pd(lanes + k, _mm_sqrt_pd(_mm_loadu_pd(lanes + k)));
#endif
  // The rest one lane at a time: GCC does not vectorise a libm sqrt that may set errno.
  for (; k < W; ++k) lanes[k] = math::sqrt(lanes[k]);
  std::memcpy(&x, lanes, sizeof x);
}

// One exchange of transpose_lanes on a pair (a, b) of W-lane vectors at block size H:
// low lane l is a[l] where bit H of l is clear, else b[l - H]; high lane l is a[l + H]
// or b[l]. __builtin_shufflevector (GCC 12 and clang) takes the lane indices as
// constants, written out here for W = 2, 4 and 8 (nvcc's front end drops a pack
// expansion inside the builtin).
template <std::size_t H, class V>
inline void exchange_blocks(const V& a, const V& b, V& low, V& high) {
  constexpr std::size_t W = sizeof(V) / sizeof(a[0]);
  static_assert(W == 2 || W == 4 || W == 8);
  if constexpr (W == 2) {
    low = __builtin_shufflevector(a, b, 0, 2);
    high = __builtin_shufflevector(a, b, 1, 3);
  } else if constexpr (W == 4 && H == 2) {
    low = __builtin_shufflevector(a, b, 0, 1, 4, 5);
    high = __builtin_shufflevector(a, b, 2, 3, 6, 7);
  } else if constexpr (W == 4) {
    low = __builtin_shufflevector(a, b, 0, 4, 2, 6);
    high = __builtin_shufflevector(a, b, 1, 5, 3, 7);
  } else if constexpr (H == 4) {
    low = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11);
    high = __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
  } else if constexpr (H == 2) {
    low = __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13);
    high = __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
  } else {
    low = __builtin_shufflevector(a, b, 0, 8, 2, 10, 4, 12, 6, 14);
    high = __builtin_shufflevector(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
  }
}

// Pair (J, J + H) of transpose_lanes' stage H, when J is the low one of its pair.
template <std::size_t H, std::size_t J, class V, std::size_t W>
inline void exchange_pair(V (&v)[W]) {
  if constexpr ((J & H) == 0) {
    const V a = v[J];
    const V b = v[J + H];
    exchange_blocks<H>(a, b, v[J], v[J + H]);
  }
}

// One stage of transpose_lanes: each pair of vectors (j, j + H) exchanges blocks of H lanes.
// The pairs are a fold over constant indices, not a loop: GCC -O2 leaves a loop of eight
// rolled, and its vectors then go through the stack.
template <std::size_t H, class V, std::size_t W, std::size_t... J>
inline void transpose_stage(V (&v)[W], std::index_sequence<J...> pairs) {
  (exchange_pair<H, J>(v), ...);
  if constexpr (H > 1) transpose_stage<H / 2>(v, pairs);
}

// Transposes W vectors of W lanes in registers (W = 2, 4 or 8): lane l of vector j
// becomes lane j of vector l, in log2(W) stages of shuffles (the compiler picks the
// target's unpack and permute instructions). Moves bits only.
template <class V, std::size_t W>
inline void transpose_lanes(V (&v)[W]) {
  static_assert(W >= 2 && (W & (W - 1)) == 0 && sizeof(V) / sizeof(v[0][0]) == W);
  transpose_stage<W / 2>(v, std::make_index_sequence<W>{});
}

}  // namespace cascade_rl::detail
