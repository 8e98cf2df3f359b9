#pragma once
// On-policy distillation's token advantage (teacher log-prob minus student log-prob) on
// the portable path.

#include "cascade_rl/cuda/portable/common.hpp"

namespace cascade_rl::cuda::portable::detail {

template <class T>
struct distillation_functor {
  const T* teacher;
  const T* student;
  device_token_layout layout;
  T* advantages;
  CASCADE_RL_HD void operator()(std::size_t t) const {
    advantages[t] = distillation_advantage(teacher[t], student[t], layout.valid(t));
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

template <class ExecPolicy, class T>
void distillation_advantages(ExecPolicy&& exec, const T* teacher_logp, const T* student_logp,
                             const device_token_layout& layout, T* advantages) {
  detail::for_each_index(exec, layout.tokens,
                         detail::distillation_functor<T>{teacher_logp, student_logp, layout, advantages});
}

}  // namespace cascade_rl::cuda::portable
