#pragma once
// Which arguments a view type (a layout) may keep a span of. An lvalue container and a
// borrowed range (std::span) outlive the statement that passes them; a temporary
// container (`padded_offsets(4, 8)`, a braced std::vector) is destroyed at its end, so a
// view built from it dangles. Layouts delete the constructors that would take one.

#include <ranges>

namespace cascade_rl::detail {

template <class R>
concept temporary_container = std::ranges::range<R> && !std::ranges::borrowed_range<R>;

}  // namespace cascade_rl::detail
