#pragma once
// Execution policies: the first argument of every algorithm. Host overloads take
// exec::seq or exec::par; the CUDA executor (exec::cuda) lives in kernels/.
//
// Every host algorithm gives the same bits under seq and under par with any thread
// count: reductions run over fixed-size blocks whose partial results are combined in
// block order (see parallel.hpp), so the thread count never changes the arithmetic.

#include <concepts>
#include <type_traits>

namespace cascade_rl::exec {

struct sequenced_policy {};

struct parallel_policy {
  // Number of host threads; 0 means the OpenMP (or hardware) default.
  int threads = 0;

  [[nodiscard]] constexpr parallel_policy with_threads(int n) const { return {n}; }
};

inline constexpr sequenced_policy seq{};
inline constexpr parallel_policy par{};

template <class P>
concept host_policy =
    std::same_as<std::remove_cvref_t<P>, sequenced_policy> ||
    std::same_as<std::remove_cvref_t<P>, parallel_policy>;

}  // namespace cascade_rl::exec
