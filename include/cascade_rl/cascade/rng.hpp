#pragma once
// The engine's randomness: one explicitly seeded generator whose state is saved in
// every checkpoint, and bounded draws written out here rather than through
// std::uniform_int_distribution, whose algorithm the standard leaves to the library
// (and whose objects may cache state): a checkpoint then resumes the same stream.

#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

using rng_type = std::mt19937_64;

namespace detail {

// Uniform integer in [0, n), n > 0, by rejection (no modulo bias).
inline std::uint64_t uniform_index(rng_type& rng, std::uint64_t n) {
  const std::uint64_t limit = rng_type::max() - rng_type::max() % n;
  for (;;) {
    const std::uint64_t x = rng();
    if (x < limit) return x % n;
  }
}

// Uniform double in [0, 1) from the top 53 bits.
inline double uniform01(rng_type& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Fisher-Yates with uniform_index.
template <class T>
void shuffle(std::vector<T>& values, rng_type& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_index(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

inline std::string save_rng(const rng_type& rng) {
  std::ostringstream out;
  out << rng;
  return out.str();
}

inline rng_type load_rng(const std::string& text, std::string_view what) {
  std::istringstream in(text);
  rng_type rng;
  in >> rng;
  if (in.fail()) fail(what, "is not a saved generator state");
  return rng;
}

}  // namespace detail
}  // namespace cascade_rl
