#pragma once
// What the algorithms read and write: any contiguous, sized range (a std::vector,
// std::array, std::span, a C array, a tensor's data through a span), taken without casts.
//
//   contiguous_output   a writable range of float or double. An algorithm that writes
//                       one takes its value type from it, and reads its inputs as
//                       std::span<const output_value_t<Out>>: the inputs then stay out of
//                       template argument deduction (a std::vector binds to the span, and
//                       named inputs can be a braced list at the call site, loss_inputs.hpp):
//
//     std::vector<float> grad(tokens);
//     reinforce_loss(exec::seq, layout, {.log_probs = lp, .advantages = adv}, grad, normalizer);
//
//   contiguous_input    a range of float or double an algorithm takes its value type from
//                       when it writes no floating-point output (group statistics, filters).
//   contiguous_writable_range  a writable range of any type (the gather of any
//                       per-sequence array).
//
// A range that is not contiguous (std::list, std::deque, a filtering view), a const output
// or another value type is refused at compile time; the compiler's note names the concept
// and the condition that failed.

#include <concepts>
#include <ranges>
#include <span>
#include <type_traits>

namespace cascade_rl {

template <class R>
concept contiguous_sized_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

template <class R>
concept contiguous_writable_range =
    contiguous_sized_range<R> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

template <class R>
concept contiguous_output =
    contiguous_writable_range<R> && std::floating_point<std::ranges::range_value_t<R>>;

template <class R>
concept contiguous_input =
    contiguous_sized_range<R> && std::floating_point<std::ranges::range_value_t<R>>;

// The value type of an output (float or double). Used in the type of an algorithm's inputs,
// where it keeps them out of template argument deduction: the output alone decides.
template <contiguous_output R>
using output_value_t = std::ranges::range_value_t<R>;

// The span an algorithm works on.
template <contiguous_writable_range R>
std::span<std::ranges::range_value_t<R>> output_span(R&& out) {
  return {std::ranges::data(out), std::ranges::size(out)};
}

template <contiguous_sized_range R>
std::span<const std::ranges::range_value_t<R>> input_span(const R& in) {
  return {std::ranges::data(in), std::ranges::size(in)};
}

}  // namespace cascade_rl
