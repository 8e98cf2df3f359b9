#pragma once
// What the engine needs to run a cascade data-parallel, and what a Policy uses to take
// part (the runner and the stages hold a communicator_ref, comm/communicator_ref.hpp):
//   shard_of             the contiguous block [begin, end) of n items rank r works on
//                        (whole prompts, so a prompt's group never straddles ranks)
//   prompt_seed          the seed of prompt j of a generation request, independent of
//                        how the step's prompts were split over ranks
//   exact_sum            order-independent sums (64-bit fixed point) for a policy's
//                        gradient, so 1 and N ranks give the same bits
//   sum_in_rank_order    one double per rank, added in rank order (metrics)
//   data_parallel_stage  a stage that shards its work by context.comm
//
// The data-parallel contract (see runner.hpp and the README):
//   - every rank runs the same cascade with the same seed on a replica of the policy;
//   - a step's prompts are drawn on every rank from the shared generator; rank r
//     generates and scores shard_of(prompts, r, R) of them; group statistics,
//     advantages, normalisers, metrics and evaluation scores are computed from the
//     whole batch (gathered in rank order, counts as integers), so every token's
//     dL/dlogp is bit for bit the single-process one;
//   - policy.apply_gradient(local_batch, local_dlogp, lr) is called on every rank, also
//     with an empty batch: the policy sums its parameter gradient over ranks (the
//     library's dlogp is already divided by the global normaliser, so the sum over
//     ranks is the single-process gradient) and then steps its optimizer;
//   - generate(prompts, request) must draw prompt j's responses from
//     prompt_seed(request, j) (or anything that depends only on request.seed and
//     request.first_prompt + j) for a data-parallel run to equal a single-process one.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/comm/communicator_ref.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

// The block of n items (prompts) that rank `rank` of `size` works on: contiguous, in
// rank order, sizes differing by at most one.
struct shard_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] std::size_t size() const { return end - begin; }
  [[nodiscard]] bool empty() const { return end == begin; }
};

[[nodiscard]] inline shard_range shard_of(std::size_t n, int rank, int size) {
  const auto r = static_cast<std::size_t>(rank);
  const auto s = static_cast<std::size_t>(size);
  return {n * r / s, n * (r + 1) / s};
}

namespace detail {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace detail

// The seed of prompt j (0-based within `prompts`) of a generate call: a function of
// request.seed and the prompt's position in the whole step (request.first_prompt + j)
// only, so a rank generating a shard samples what one process generating the whole
// step samples.
[[nodiscard]] inline std::uint64_t prompt_seed(const generation_request& request, std::size_t j) {
  return detail::splitmix64(request.seed ^
                            detail::splitmix64(static_cast<std::uint64_t>(request.first_prompt + j)));
}

// Sums that do not depend on their order: each added value is rounded to a multiple of
// 2^-fraction_bits and accumulated as a 64-bit integer, and the all-reduce sums
// integers, which is exact. A policy that accumulates its parameter gradient here gets
// the same bits on 1 or N ranks, whatever MPI's or NCCL's reduction order. The price:
// an absolute resolution of 2^-fraction_bits (about 2.3e-10 with the default 32), and a
// range of |value| and |sum| below 2^(62 - fraction_bits) (about 1e9); out-of-range
// values and non-finite ones throw cascade_rl::error naming the index. A plain float
// all-reduce (comm.all_reduce(grad, reduce_op::sum)) is the usual choice for large
// models: correct, but only equal to the single-process gradient up to rounding.
class exact_sum {
 public:
  explicit exact_sum(std::size_t n = 0, int fraction_bits = 32)
      : units_(n, 0), scale_(std::ldexp(1.0, fraction_bits)),
        limit_(std::ldexp(1.0, 62)) {
    if (fraction_bits < 0 || fraction_bits > 60)
      detail::fail("fraction_bits", "must lie in [0, 60], got " + std::to_string(fraction_bits));
  }

  [[nodiscard]] std::size_t size() const { return units_.size(); }
  void clear() { std::fill(units_.begin(), units_.end(), 0); }

  void add(std::size_t i, double value) {
    const double scaled = std::nearbyint(value * scale_);
    if (!(std::fabs(scaled) < limit_))
      detail::fail_at("exact_sum value", i,
                      std::isfinite(value) ? "is out of range: " + std::to_string(value)
                                           : std::string("is not finite"));
    std::int64_t& u = units_.at(i);
    const auto v = static_cast<std::int64_t>(scaled);
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max() / 2;  // headroom for ranks
    if ((v > 0 && u > top - v) || (v < 0 && u < -top - v))
      detail::fail_at("exact_sum", i, "overflowed its 63-bit range");
    u += v;
  }

  // Sums over ranks (exact; every rank gets the same bits).
  template <Communicator C>
  void all_reduce(C& comm) {
    comm.all_reduce(std::span<std::int64_t>(units_), reduce_op::sum);
  }

  [[nodiscard]] double operator[](std::size_t i) const { return static_cast<double>(units_[i]) / scale_; }

 private:
  std::vector<std::int64_t> units_;
  double scale_;
  double limit_;
};

// One value per rank, added in rank order: every rank gets the same bits, and one rank
// gets its own value unchanged.
template <Communicator C>
[[nodiscard]] double sum_in_rank_order(C& comm, double local) {
  std::vector<double> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const double>(&local, 1), std::span<double>(all));
  double sum = all[0];
  for (std::size_t r = 1; r < all.size(); ++r) sum += all[r];
  return sum;
}

template <Communicator C>
[[nodiscard]] std::uint64_t sum_counts(C& comm, std::uint64_t local) {
  comm.all_reduce(std::span<std::uint64_t>(&local, 1), reduce_op::sum);
  return local;
}

// A stage that shards its steps and evaluations by step_context::comm and takes part
// in the same collectives on every rank. The runner refuses to run a stage without it
// on more than one rank (it would run the whole step on every rank).
template <class S>
concept data_parallel_stage = requires { requires S::data_parallel; };

}  // namespace cascade_rl
