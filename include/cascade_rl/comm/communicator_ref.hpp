#pragma once
// communicator_ref: a non-owning, type-erased reference to any Communicator (local,
// MPI, NCCL's host side, a test double), so that code above comm/ (the cascade runner,
// its stages, a Policy) holds one type whatever the transport. Default: the
// single-process communicator.
//
// Why type erasure: the runner, every stage and a policy hold this one type instead of
// each being a template on the communicator's type. It costs an indirect call per
// collective, nothing beside the collective itself.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>

#include "cascade_rl/comm/communicator.hpp"
#include "cascade_rl/comm/local_communicator.hpp"

namespace cascade_rl {

namespace detail {

inline local_communicator& shared_local_communicator() {
  static local_communicator comm;  // stateless
  return comm;
}

template <class T>
using reduce_fn = void (*)(void*, std::span<T>, reduce_op);

template <class T>
struct move_fns {
  void (*all_gather)(void*, std::span<const T>, std::span<T>);
  void (*broadcast)(void*, std::span<T>, int);
};

struct communicator_table {
  int (*rank)(const void*);
  int (*size)(const void*);
  void (*barrier)(void*);
  std::tuple<reduce_fn<float>, reduce_fn<double>, reduce_fn<std::int64_t>, reduce_fn<std::uint64_t>>
      reduce;
  std::tuple<move_fns<float>, move_fns<double>, move_fns<std::int64_t>, move_fns<std::uint64_t>,
             move_fns<std::int32_t>, move_fns<std::uint8_t>, move_fns<std::byte>>
      moves;
};

template <class C, class T>
constexpr reduce_fn<T> reduce_of() {
  return [](void* c, std::span<T> values, reduce_op op) {
    static_cast<C*>(c)->all_reduce(values, op);
  };
}

template <class C, class T>
constexpr move_fns<T> moves_of() {
  return {
      [](void* c, std::span<const T> mine, std::span<T> all) {
        static_cast<C*>(c)->all_gather(mine, all);
      },
      [](void* c, std::span<T> values, int root) { static_cast<C*>(c)->broadcast(values, root); }};
}

template <class C>
inline constexpr communicator_table table_for{
    [](const void* c) { return static_cast<int>(static_cast<const C*>(c)->rank()); },
    [](const void* c) { return static_cast<int>(static_cast<const C*>(c)->size()); },
    [](void* c) { static_cast<C*>(c)->barrier(); },
    {reduce_of<C, float>(), reduce_of<C, double>(), reduce_of<C, std::int64_t>(),
     reduce_of<C, std::uint64_t>()},
    {moves_of<C, float>(), moves_of<C, double>(), moves_of<C, std::int64_t>(),
     moves_of<C, std::uint64_t>(), moves_of<C, std::int32_t>(), moves_of<C, std::uint8_t>(),
     moves_of<C, std::byte>()}};

}  // namespace detail

// A reference to a communicator the caller keeps alive (copying it copies the
// reference). It is itself a Communicator, so whatever takes a Communicator takes it
// (the reductions of distributed/, exact_sum). Default-constructed: the single-process
// communicator.
class communicator_ref {
 public:
  communicator_ref() : communicator_ref(detail::shared_local_communicator()) {}

  template <Communicator C>
    requires(!std::same_as<std::remove_cv_t<C>, communicator_ref>)
  communicator_ref(C& comm)  // NOLINT(google-explicit-constructor): any communicator will do
      : self_(&comm), table_(&detail::table_for<C>) {}

  [[nodiscard]] int rank() const { return table_->rank(self_); }
  [[nodiscard]] int size() const { return table_->size(self_); }
  void barrier() { table_->barrier(self_); }

  template <reducible_value T>
  void all_reduce(std::span<T> values, reduce_op op) {
    std::get<detail::reduce_fn<T>>(table_->reduce)(self_, values, op);
  }
  template <transferable_value T>
  void all_gather(std::span<const T> mine, std::span<T> all) {
    std::get<detail::move_fns<T>>(table_->moves).all_gather(self_, mine, all);
  }
  template <transferable_value T>
  void broadcast(std::span<T> values, int root) {
    std::get<detail::move_fns<T>>(table_->moves).broadcast(self_, values, root);
  }

 private:
  void* self_;
  const detail::communicator_table* table_;
};

static_assert(Communicator<communicator_ref>);

}  // namespace cascade_rl
