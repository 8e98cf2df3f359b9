#pragma once
// What an algorithm writes into: any contiguous, sized range of float or double that can be
// written (a std::vector, std::array, std::span, a C array, a tensor's data through a span),
// taken without casts. The algorithms deduce their value type from it, so that their named
// inputs (loss_inputs.hpp) can be written as a braced list at the call site:
//
//   std::vector<float> grad(tokens);
//   reinforce_loss(exec::seq, layout, {.log_probs = lp, .advantages = adv}, grad, normalizer);
//
// A range that is not contiguous (std::list, std::deque, a filtering view) or holds
// something else is refused at compile time: the concept names which condition failed.

#include <concepts>
#include <ranges>
#include <span>
#include <type_traits>

namespace cascade_rl {

template <class R>
concept contiguous_output = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    std::floating_point<std::ranges::range_value_t<R>> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

// The value type of an output (float or double). Used in the type of an algorithm's inputs,
// where it keeps the inputs out of template argument deduction: the output alone decides.
template <contiguous_output R>
using output_value_t = std::ranges::range_value_t<R>;

template <contiguous_output R>
std::span<output_value_t<R>> output_span(R&& out) {
  return {std::ranges::data(out), std::ranges::size(out)};
}

}  // namespace cascade_rl
