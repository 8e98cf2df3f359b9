#pragma once
// Bit work on the lanes of GNU vectors (and on plain floats and doubles) for the host's
// explicitly vectorised loops: the log-sum-exp of log_probs.hpp, GRPO's group tile.
//
// GNU vectors go through these helpers by reference only: a vector passed or returned
// by value has a calling convention that depends on -march (GCC's -Wpsabi), and an
// inline function not inlined in two translation units built with different flags
// would then be called with the wrong one.

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cascade_rl::detail {

// The unsigned integer as wide as a float or a double.
template <class E>
using word_of = std::conditional_t<sizeof(E) == sizeof(std::uint32_t), std::uint32_t, std::uint64_t>;

// math::product_unfused lane by lane: clears the last significand bit of each rounded
// product. The bit operation between the multiply and the add that follows keeps any
// compiler from fusing them, whatever -march or -ffp-contract say, so the bits do not
// depend on the build. V: float, double, or a GNU vector of either.
template <class V>
inline void clear_last_bit(V& product) {
  if constexpr (std::is_floating_point_v<V>) {
    word_of<V> bits;
    std::memcpy(&bits, &product, sizeof bits);
    bits &= ~word_of<V>{1};
    std::memcpy(&product, &bits, sizeof bits);
  } else {
    using word = word_of<std::remove_cvref_t<decltype(product[0])>>;
    typedef word words __attribute__((vector_size(sizeof(V))));
    words bits;
    std::memcpy(&bits, &product, sizeof bits);
    bits &= ~word{1};
    std::memcpy(&product, &bits, sizeof bits);
  }
}

}  // namespace cascade_rl::detail
