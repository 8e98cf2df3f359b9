#pragma once
// Log-probs and entropy from logits, and their backward pass, on the portable path: one
// Thrust work item per row, in the host's order (terms/log_sum_exp.hpp,
// terms/log_softmax_gradient.hpp).

#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/log_softmax_gradient.hpp"
#include "cascade_rl/terms/log_sum_exp.hpp"

namespace cascade_rl::cuda::portable::detail {

// What both passes read: the logits (row r: `vocab` values at logits + r * row_stride),
// the rows' labels and the inverse temperature.
template <class T>
struct logit_rows {
  const T* logits;
  std::size_t row_stride;
  std::size_t vocab;
  const std::int64_t* labels;
  float inverse_temperature;

  // The log-sum-exp state of the row at x, in the order of terms/log_sum_exp.hpp (the
  // host's bits): the forward and the backward pass fold it the same way.
  CASCADE_RL_HD terms::lse_state state_of(const T* x) const {
    terms::lse_state st;
    for (std::size_t v = 0; v < vocab; v += terms::lse_chunk)
      terms::lse_fold_chunk_serial(st, x + v, min_of(terms::lse_chunk, vocab - v),
                                   inverse_temperature);
    return st;
  }
};

// log_probs_from_logits: one thread per row.
template <class T>
struct log_probs_functor {
  logit_rows<T> in;
  float* log_probs;
  float* entropy;  // null: not wanted
  CASCADE_RL_HD void operator()(std::size_t row) const {
    const T* x = in.logits + row * in.row_stride;
    const terms::lse_state st = in.state_of(x);
    const std::int64_t label = in.labels[row];
    const bool in_range = label >= 0 && static_cast<std::size_t>(label) < in.vocab;
    const float label_logit = in_range ? static_cast<float>(x[label]) * in.inverse_temperature
                                       : math::detail::quiet_nan_f;
    log_probs[row] = terms::log_prob_of(st, label_logit);
    if (entropy != nullptr) entropy[row] = terms::entropy_of(st);
  }
};

// log_probs_backward: one thread per row, the row's state in the forward's order, then
// each logit's gradient (terms/log_softmax_gradient.hpp). A label outside [0, vocab)
// matches no logit; entropy_seeds may be null.
template <class T>
struct log_probs_backward_functor {
  logit_rows<T> in;
  const float* log_prob_seeds;
  const float* entropy_seeds;
  float* grad_logits;
  CASCADE_RL_HD void operator()(std::size_t row) const {
    const T* x = in.logits + row * in.row_stride;
    const terms::softmax_row softmax = terms::softmax_row_of(in.state_of(x));
    const double g = log_prob_seeds[row];
    const double h = entropy_seeds == nullptr ? 0.0 : static_cast<double>(entropy_seeds[row]);
    const std::int64_t label = in.labels[row];
    float* out = grad_logits + row * in.row_stride;
    for (std::size_t v = 0; v < in.vocab; ++v)
      out[v] = terms::logit_gradient(static_cast<float>(x[v]) * in.inverse_temperature,
                                     label >= 0 && static_cast<std::size_t>(label) == v, softmax, g,
                                     h, in.inverse_temperature);
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// logits: `rows` rows of `vocab` values, row r at logits + r * row_stride. Writes the
// log-probability of labels[r] (NaN for a label outside [0, vocab)) and, when entropy
// is not null, the entropy of the row's softmax; both of logits * inverse_temperature.
template <class ExecPolicy, class T>
void log_probs_from_logits(ExecPolicy&& exec, const T* logits, std::size_t rows,
                           std::size_t vocab, std::size_t row_stride, const std::int64_t* labels,
                           float* log_probs, float* entropy, float inverse_temperature = 1.0f) {
  const detail::logit_rows<T> in{logits, row_stride, vocab, labels, inverse_temperature};
  detail::for_each_index(exec, rows, detail::log_probs_functor<T>{in, log_probs, entropy});
}

// dL/dlogits from the seeds dL/dlogp and dL/dH per row (entropy_seeds may be null):
// grad_logits laid out like the logits, columns [0, vocab) of each row written.
template <class ExecPolicy, class T>
void log_probs_backward(ExecPolicy&& exec, const T* logits, std::size_t rows, std::size_t vocab,
                        std::size_t row_stride, const std::int64_t* labels,
                        const float* log_prob_seeds, const float* entropy_seeds, float* grad_logits,
                        float inverse_temperature = 1.0f) {
  const detail::logit_rows<T> in{logits, row_stride, vocab, labels, inverse_temperature};
  detail::for_each_index(
      exec, rows,
      detail::log_probs_backward_functor<T>{in, log_prob_seeds, entropy_seeds, grad_logits});
}

}  // namespace cascade_rl::cuda::portable
