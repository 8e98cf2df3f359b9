#pragma once
// owned_handle<Release>: the one copy of the move and lifetime rules of a transport's
// handle (an MPI communicator, an NCCL communicator, a CUDA stream or buffer), so that
// the communicators holding them need no move constructor, move assignment or
// destructor of their own:
//   - move-only; a moved-from holder holds the null handle and owns nothing;
//   - released once, by Release, on destruction or when a move assigns over it, and
//     only when owning (a borrowed handle stays with its owner);
//   - abandon(): never release it, because it was torn down another way (NCCL's
//     abort) or may still be in use (a collective pending after an MPI failure, left
//     to MPI_Abort).
//
// Release provides the handle type, its null value and the release call:
//   struct free_thing {
//     using handle = thing_t;
//     static thing_t null() noexcept;
//     void operator()(thing_t& h) const noexcept;  // reports failures, never throws
//   };
// A Release with state (the device a buffer lives on) moves with its handle.

#include <concepts>
#include <type_traits>
#include <utility>

namespace cascade_rl::detail {

template <class R>
concept handle_release = std::is_nothrow_move_constructible_v<R> &&
                         std::is_nothrow_move_assignable_v<R> &&
                         requires(const R& release, typename R::handle& h) {
                           { R::null() } noexcept -> std::convertible_to<typename R::handle>;
                           { release(h) } noexcept;
                         };

template <handle_release Release>
class owned_handle {
 public:
  using handle = typename Release::handle;

  owned_handle() = default;
  owned_handle(handle h, bool owning, Release release = {}) noexcept
      : handle_(h), owning_(owning), release_(std::move(release)) {}

  owned_handle(const owned_handle&) = delete;
  owned_handle& operator=(const owned_handle&) = delete;
  owned_handle(owned_handle&& other) noexcept
      : handle_(std::exchange(other.handle_, Release::null())),
        owning_(std::exchange(other.owning_, false)),
        abandoned_(std::exchange(other.abandoned_, false)),
        release_(std::move(other.release_)) {}
  owned_handle& operator=(owned_handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Release::null());
      owning_ = std::exchange(other.owning_, false);
      abandoned_ = std::exchange(other.abandoned_, false);
      release_ = std::move(other.release_);
    }
    return *this;
  }
  ~owned_handle() { reset(); }

  [[nodiscard]] handle get() const noexcept { return handle_; }
  [[nodiscard]] bool empty() const noexcept { return handle_ == Release::null(); }
  [[nodiscard]] bool owning() const noexcept { return owning_; }
  [[nodiscard]] bool abandoned() const noexcept { return abandoned_; }

  // From now on the handle is never released (see the top of this file); get() still
  // returns it.
  void abandon() noexcept { abandoned_ = true; }

  // Lets go of the handle without releasing it (the caller has released it itself,
  // with a check that may throw) and returns it.
  handle detach() noexcept {
    owning_ = false;
    abandoned_ = false;
    return std::exchange(handle_, Release::null());
  }

 private:
  void reset() noexcept {
    if (owning_ && !abandoned_ && !empty()) release_(handle_);
    handle_ = Release::null();
    owning_ = false;
    abandoned_ = false;
  }

  handle handle_ = Release::null();
  bool owning_ = false;
  bool abandoned_ = false;
  Release release_{};
};

}  // namespace cascade_rl::detail
