#pragma once
// The Communicator concept: what the cascade runner needs from a process group to
// make a data-parallel step equal a single-process one (global token and sequence
// counts, metrics, rewards of groups spread over ranks, snapshots sent to every rank).
//
// A communicator C provides, on host memory, blocking until the data is in place:
//   c.rank(), c.size()                      this process and the group size
//   c.all_reduce(span<T> values, op)        in place, op = sum, max or min, for the
//                                           reducible types float, double, int64, uint64
//   c.all_gather(span<const T> mine,        all[r * n + i] = mine_of_rank_r[i]
//                span<T> all)               (all.size() == size() * mine.size())
//   c.broadcast(span<T> values, root)       in place, from rank `root`
//   c.barrier()
// all_gather and broadcast also move int32, uint8 and std::byte (snapshots, ids).
//
// As in MPI and NCCL, every rank calls the same collectives in the same order with the
// same counts. A communicator that cannot complete a collective (a peer died, threw or
// stalled) throws comm_error instead of waiting forever; see mpi_communicator.hpp and
// nccl_communicator.hpp for the bounds.
//
// Floating-point sums across ranks are not promised to be bitwise reproducible (MPI
// and NCCL choose their reduction order): counts travel as integers, and values that
// must be exact (rewards of a group) are gathered, not summed
// (distributed/sequences_across_ranks.hpp).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

enum class reduce_op { sum, max, min };

[[nodiscard]] constexpr std::string_view to_string(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
  }
  return "unknown";
}

// A collective that failed or did not complete: a peer died, threw, stalled, or the
// transport reported an error. Unlike cascade_rl::error (refused input), the
// communicator is usually unusable afterwards and the job should end.
class comm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective did not complete within the communicator's timeout.
class comm_timeout : public comm_error {
 public:
  using comm_error::comm_error;
};

template <class T>
concept reducible_value = std::same_as<T, float> || std::same_as<T, double> ||
                          std::same_as<T, std::int64_t> || std::same_as<T, std::uint64_t>;

template <class T>
concept transferable_value = reducible_value<T> || std::same_as<T, std::int32_t> ||
                             std::same_as<T, std::uint8_t> || std::same_as<T, std::byte>;

template <transferable_value T>
[[nodiscard]] constexpr std::string_view value_type_name() {
  if constexpr (std::same_as<T, float>) return "float";
  else if constexpr (std::same_as<T, double>) return "double";
  else if constexpr (std::same_as<T, std::int64_t>) return "int64";
  else if constexpr (std::same_as<T, std::uint64_t>) return "uint64";
  else if constexpr (std::same_as<T, std::int32_t>) return "int32";
  else if constexpr (std::same_as<T, std::uint8_t>) return "uint8";
  else return "byte";
}

namespace detail {

// Every all_reduce, all_gather and broadcast the concept requires, one per value type.
template <class C, class T>
concept reduces = requires(C& c, std::span<T> values, reduce_op op) { c.all_reduce(values, op); };

template <class C, class T>
concept moves = requires(C& c, std::span<T> values, std::span<const T> mine, int root) {
  c.all_gather(mine, values);
  c.broadcast(values, root);
};

}  // namespace detail

template <class C>
concept Communicator =
    requires(C& c, const C& cc) {
      { cc.rank() } -> std::convertible_to<int>;
      { cc.size() } -> std::convertible_to<int>;
      c.barrier();
    } &&
    detail::reduces<C, float> && detail::reduces<C, double> &&
    detail::reduces<C, std::int64_t> && detail::reduces<C, std::uint64_t> &&
    detail::moves<C, float> && detail::moves<C, double> && detail::moves<C, std::int64_t> &&
    detail::moves<C, std::uint64_t> && detail::moves<C, std::int32_t> &&
    detail::moves<C, std::uint8_t> && detail::moves<C, std::byte>;

namespace detail {

// The argument checks every communicator makes before communicating. They depend only
// on arguments that all ranks agree on, so every rank refuses the same call.
inline void require_gather_size(std::size_t all, std::size_t mine, int size) {
  if (all != mine * static_cast<std::size_t>(size))
    fail("all", "has " + std::to_string(all) + " entries, expected " +
                    std::to_string(mine * static_cast<std::size_t>(size)) + " (size() = " +
                    std::to_string(size) + " times mine.size() = " + std::to_string(mine) + ")");
}

inline void require_root(int root, int size) {
  if (root < 0 || root >= size)
    fail("root", "is " + std::to_string(root) + ", expected a rank in [0, " +
                     std::to_string(size) + ")");
}

}  // namespace detail
}  // namespace cascade_rl
