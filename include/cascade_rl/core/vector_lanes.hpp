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

// One stage of transpose_lanes: each pair of vectors (j, j + H) exchanges blocks of H
// lanes.
template <std::size_t H, class V, std::size_t W>
inline void transpose_stage(V (&v)[W]) {
  using word = word_of<std::remove_cvref_t<decltype(v[0][0])>>;
  typedef word indices __attribute__((vector_size(sizeof(V))));
  indices low, high;
  for (std::size_t l = 0; l < W; ++l) {
    low[l] = (l & H) == 0 ? l : W + l - H;
    high[l] = (l & H) == 0 ? l + H : W + l;
  }
  for (std::size_t j = 0; j < W; ++j)
    if ((j & H) == 0) {
      const V a = v[j];
      const V b = v[j + H];
      v[j] = __builtin_shuffle(a, b, low);
      v[j + H] = __builtin_shuffle(a, b, high);
    }
  if constexpr (H > 1) transpose_stage<H / 2>(v);
}

// Transposes W vectors of W lanes in registers (W a power of two): lane l of vector j
// becomes lane j of vector l, in log2(W) stages of shuffles (GCC picks the target's
// unpack and permute instructions). Moves bits only.
template <class V, std::size_t W>
inline void transpose_lanes(V (&v)[W]) {
  static_assert(W >= 2 && (W & (W - 1)) == 0 && sizeof(V) / sizeof(v[0][0]) == W);
  transpose_stage<W / 2>(v);
}

}  // namespace cascade_rl::detail
