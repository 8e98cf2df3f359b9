// owned_handle, the move and lifetime rules the MPI and NCCL communicators share: a
// handle is released once, only when owned and not abandoned, on destruction or when a
// move assigns over it; a moved-from holder is empty. Checked here with a counting
// release, since the communicators' own moves need MPI ranks or a GPU.

#include <gtest/gtest.h>

#include <type_traits>
#include <utility>
#include <vector>

#include "cascade_rl/comm/owned_handle.hpp"

namespace {

// Records every handle it releases, tagged with the release's own state.
struct recorded {
  int handle;
  int tag;
  bool operator==(const recorded&) const = default;
};
std::vector<recorded> released;

struct record_release {
  using handle = int;
  int tag = 0;
  static int null() noexcept { return -1; }
  void operator()(int& h) const noexcept { released.push_back({h, tag}); }
};
using holder = cascade_rl::detail::owned_handle<record_release>;

static_assert(!std::is_copy_constructible_v<holder>);
static_assert(!std::is_copy_assignable_v<holder>);
static_assert(std::is_nothrow_move_constructible_v<holder>);
static_assert(std::is_nothrow_move_assignable_v<holder>);

class OwnedHandle : public ::testing::Test {
 protected:
  void SetUp() override { released.clear(); }
};

TEST_F(OwnedHandle, ReleasesAnOwnedHandleOnceWithItsOwnRelease) {
  {
    holder h(7, /*owning=*/true, {.tag = 3});
    EXPECT_EQ(h.get(), 7);
    EXPECT_TRUE(h.owning());
    EXPECT_FALSE(h.empty());
  }
  EXPECT_EQ(released, (std::vector<recorded>{{7, 3}}));
}

TEST_F(OwnedHandle, LeavesABorrowedOrAbandonedHandle) {
  { holder borrowed(1, /*owning=*/false); }
  {
    holder abandoned(2, /*owning=*/true);
    abandoned.abandon();
    EXPECT_TRUE(abandoned.abandoned());
    EXPECT_EQ(abandoned.get(), 2);  // still readable
  }
  { holder empty; }
  EXPECT_TRUE(released.empty());
}

TEST_F(OwnedHandle, MovingHandsOverTheHandleAndLeavesTheSourceEmpty) {
  holder source(5, /*owning=*/true, {.tag = 9});
  source.abandon();
  holder moved(std::move(source));
  EXPECT_TRUE(source.empty());  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_FALSE(source.owning());
  EXPECT_FALSE(source.abandoned());
  EXPECT_EQ(moved.get(), 5);
  EXPECT_TRUE(moved.owning());
  EXPECT_TRUE(moved.abandoned());  // the flags travel with the handle

  holder owned(6, /*owning=*/true, {.tag = 2});
  holder target(std::move(owned));
  target = holder(8, /*owning=*/true, {.tag = 4});  // releases 6 with its own release
  EXPECT_EQ(released, (std::vector<recorded>{{6, 2}}));
  holder& self = target;
  target = std::move(self);  // a no-op
  EXPECT_EQ(target.get(), 8);
  EXPECT_EQ(released.size(), 1u);
}

TEST_F(OwnedHandle, DetachLetsGoWithoutReleasing) {
  {
    holder h(4, /*owning=*/true);
    EXPECT_EQ(h.detach(), 4);
    EXPECT_TRUE(h.empty());
    EXPECT_FALSE(h.owning());
  }
  EXPECT_TRUE(released.empty());
}

}  // namespace
