#pragma once
// The token pass of every loss on the portable path, as the host core's
// detail::weighted_token_losses runs it: the aggregation weights, one Thrust work item per
// block of detail::reduce_block_size tokens summed in the canonical order
// (core/canonical_sum.hpp), then the block results joined in block order.

#include "cascade_rl/cuda/portable/common.hpp"

namespace cascade_rl::cuda::portable::detail {

// grad_out[t] = c_t (0 on masked tokens), as detail::write_aggregation_weights does.
template <class T>
struct sequence_weights_rule {
  loss_normalizer normalizer;
  T* grad_out;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    const T c = static_cast<T>(aggregation_weight<T>(loss_aggregation::seq_mean_token_mean,
                                                     normalizer, valid_tokens_of(layout, s)));
    fill_valid_tokens(layout, s, c, grad_out);
  }
};

template <class T>
struct token_weights_functor {
  device_token_layout layout;
  T weight;
  T* grad_out;
  CASCADE_RL_HD void operator()(std::size_t t) const { grad_out[t] = layout.valid(t) ? weight : T(0); }
};

// One block of detail::reduce_block_size tokens, as detail::weighted_token_losses does:
// every floating-point sum of the tally (the loss, approx_kl) in the canonical order of
// core/canonical_sum.hpp, a tally per lane (token t in lane t mod 32) folded by the tree.
template <class T, class Term>
struct token_block_functor {
  device_token_layout layout;
  Term term;
  T* grad_out;
  loss_tally* partials;
  CASCADE_RL_HD void operator()(std::size_t b) const {
    const std::size_t first = b * cascade_rl::detail::reduce_block_size;
    const std::size_t last = min_of(first + cascade_rl::detail::reduce_block_size, layout.tokens);
    loss_tally lanes[cascade_rl::detail::reduce_lanes];
    for (std::size_t t = first; t < last; ++t) {
      if (!layout.valid(t)) {
        grad_out[t] = T(0);
        term.on_masked(t);
        continue;
      }
      loss_tally& acc = lanes[(t - first) % cascade_rl::detail::reduce_lanes];
      const double c = static_cast<double>(grad_out[t]);
      ++acc.metrics.valid_tokens;
      const terms::token_loss l = term(t, acc);
      acc.loss += math::product_rn(c, l.value);  // rounded alone, as on the host
      grad_out[t] = static_cast<T>(c * l.grad);
    }
    partials[b] = cascade_rl::detail::fold_lanes(lanes, add_tallies{});
  }
};

// partials[blocks] = the block results joined in block order.
struct combine_functor {
  loss_tally* partials;
  std::size_t blocks;
  CASCADE_RL_HD void operator()(std::size_t) const {
    loss_tally total;
    for (std::size_t b = 0; b < blocks; ++b) total = add_tallies{}(total, partials[b]);
    partials[blocks] = total;
  }
};

template <class T, class ExecPolicy, class Term>
void reduce_tokens(ExecPolicy&& exec, const device_token_layout& layout, Term term,
                   T* grad_out, loss_aggregation mode, const loss_normalizer& normalizer,
                   loss_tally* scratch) {
  if (mode == loss_aggregation::seq_mean_token_mean) {
    for_each_sequence(exec, layout, sequence_weights_rule<T>{normalizer, grad_out});
  } else {
    const T c = static_cast<T>(aggregation_weight<T>(mode, normalizer, 0));
    for_each_index(exec, layout.tokens, token_weights_functor<T>{layout, c, grad_out});
  }
  const std::size_t blocks = reduce_blocks(layout.tokens);
  for_each_index(exec, blocks, token_block_functor<T, Term>{layout, term, grad_out, scratch});
  for_each_index(exec, 1, combine_functor{scratch, blocks});
}

}  // namespace cascade_rl::cuda::portable::detail
