#pragma once
// Bit work on the lanes of GNU vectors (and on plain floats and doubles) for the host's
// explicitly vectorised loops (the log-sum-exp of log_probs.hpp, GRPO's group tile) and
// for the terms those loops share with the device (terms/log_sum_exp.hpp).
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

}  // namespace cascade_rl::detail
